"""TableReader: point lookups and iteration over one SST file.

Opening a table reads and checks the footer, the properties, the index, the filter and the
range-del block (always checksum-verified; any damage is a ``CorruptionError`` naming the file
and offset).  The decoded index ``(keys, neg_seqs, offsets, sizes)`` and the filter stay on the
reader for its lifetime.  Opened with ``cache_index_and_filter_blocks`` and a block cache, they
are also *charged* to it: inserted at high priority and pinned by the reader's handles (so never
evicted while the table is open, and released by ``close``), as RocksDB does with that option
and pinning; without it (RocksDB's default) they are charged to no cache, and
:attr:`TableReader.memory_outside_cache` estimates what they hold.

Data blocks are read on demand with one ``pread`` each and checked.  In the cache, under
its block key (the table's range of keys, :meth:`antkv.memory.cache.Cache.new_block_keys`, at the
block's position in the index: an ``int``) at low
priority, a block is kept in one of two forms:

* *searchable* (:func:`~antkv.sst.block.searchable_block`: the raw contents with their layout
  found once) -- what a point lookup that missed the cache leaves: lookups search the bytes
  directly (:func:`~antkv.sst.block.search_searchable`) without decoding the block;
* *decoded* -- the parallel tuples ``(keys, neg_seqs, kinds, values)``, decoded ONCE by an
  iterator; lookups then ``bisect`` and iterators ``zip`` slices of the tuples, all in C (a
  searchable block an iterator reaches is decoded then).

:attr:`TableReader.point` holds what the fused point read (:meth:`antkv.db.read_api.ReadAPI.get`)
needs of a table in one tuple, so that it can probe the filter, search the index and find the
cached block without a call: under the clock policy a list with one item per data block, the
block's cache entry while it is cached, else None (the entry's *home*, :mod:`antkv.memory.clock`,
which the cache empties when the entry leaves it), and the cache shard of each block.

Index invariant (see ``builder.py``): entries of block ``i`` <= index key ``i`` < entries of
block ``i + 1``.  A lookup therefore bisects the index for the first index key >= the target
and then bisects that one block; an iterator starts in the block found the same way.

A reader is immutable after ``open`` and safe to share between threads.
"""

from __future__ import annotations

import errno
from bisect import bisect_left, bisect_right
from itertools import chain, starmap
from operator import le, lt
from typing import Iterator

from ..base.dbformat import DELETION, RANGE_DELETION, VALUE_POINTER
from ..errors import CorruptionError, DBClosedError
from ..errors import IOError as AntIOError
from ..memtable.rangedel import EMPTY, FragmentedRangeTombstones, fragment
from .block import SEARCHABLE_FIELDS, decode_block, search_block, search_searchable, searchable_block
from .bloom import decode_filter
from .bloom import may_contain as bloom_may_contain
from .format import BLOCK_HANDLE, BLOCK_TRAILER_SIZE, FOOTER_SIZE, BlockRun, check_block, decode_footer, read_block
from .properties import TableProperties, decode_properties
from ..vlog.pointer import decode_pointer

# A scan's first blocks in a table go through the block cache; after that it reads ahead
# READAHEAD bytes per pread and leaves the cache alone, so one long scan neither evicts the hot
# set nor pays a cache insert and a system call per 4 KiB block.
SCAN_CACHED_BLOCKS = 64
READAHEAD = 256 * 1024
_ENTRY_CHARGE = 120  # approximate bytes of Python objects per decoded entry
_BLOCK_CHARGE = 200
# A searchable block in the cache beyond its contents: its trailer, the bytes object, the
# tuple of its layout, the cache entry, its key and the hash table's slot (measured with
# tracemalloc over a cache of 8,800 blocks of 16-byte keys)
SEARCHABLE_CHARGE = 470


def _closed_file(n: int, offset: int) -> bytes:
    """The positional read of a table without an open file: a read fails as on a closed
    descriptor (:meth:`TableReader.read_checked` then reports the table closed)."""
    raise OSError(errno.EBADF, "table file is closed")


def _block_charge(size: int, n: int) -> int:
    return size + _ENTRY_CHARGE * n + _BLOCK_CHARGE


class TableReader:
    """An open table.  Create with :meth:`open`."""

    def __init__(self) -> None:  # use TableReader.open
        self._file = None
        self._cache = None
        self._handles: list = []
        self._cache_id: int | None = None  # set once the index is loaded and the table cached
        self._key_base = 0  # block i of the table is cached under _key_base + i
        self._cached: list | None = None  # under the clock policy, item i: block i's cache entry or None
        self._fragments: FragmentedRangeTombstones | None = None  # built on first use
        self.memory_outside_cache = 0  # set by open
        # (filter bits, filter blocks, k, index keys, block offsets, block sizes, cache id, the
        # cache shard of each block, the cache entry of each block or None) for the fused point
        # read; None when it must take find():
        # a table with range tombstones, no cache or a cache whose hits lock, or a closed table
        self.point: tuple | None = None
        # (the file's positional read, whether to verify checksums, the path): what the fused
        # point read needs to read a block that missed the cache as load_searchable does, in its
        # own frame; a positional read's short read or bare OSError goes to read_checked
        self.block_source: tuple = (_closed_file, True, "")

    @classmethod
    def open(
        cls, fs, path: str, file_number: int, *, cache=None, verify_checksums: bool = True,
        cache_index_and_filter_blocks: bool = False,
    ) -> "TableReader":
        """Open the table at ``path``; CorruptionError if any metadata block is damaged.
        ``cache_index_and_filter_blocks``: charge the index and filter to ``cache`` (module
        docstring)."""
        self = cls()
        f = fs.open_random(path)
        try:
            self._init(f, path, file_number, cache, verify_checksums, cache_index_and_filter_blocks)
        except BaseException:
            self._file = f
            self.close()
            raise
        return self

    def _init(self, f, path: str, file_number: int, cache, verify: bool, cache_meta: bool) -> None:
        self._file = f
        self.path = path
        self.file_number = file_number
        self._verify = verify
        self.block_source = (f.positional_read(verify), verify, path)
        self._cache = cache
        self.file_size = size = f.size()
        if size < FOOTER_SIZE:
            raise CorruptionError(f"file of {size} bytes is too short to be a table", path, 0)
        footer_offset = size - FOOTER_SIZE
        handles = decode_footer(f.read(footer_offset, FOOTER_SIZE), footer_offset, path)
        self._filter_handle, rangedel_handle, self._index_handle, props_handle = handles

        buf, n = read_block(f, *props_handle, True, path)
        self.properties: TableProperties = decode_properties(buf, n, path, props_handle[0])
        self.properties.file_size = size
        self.range_tombstones: list[tuple[bytes, bytes, int]] = self._load_range_tombstones(rangedel_handle)

        self._index = index = self._load_index()
        self.filter = filt = self._load_filter()
        props = self.properties
        if props.num_data_blocks != len(index[0]) or props.num_range_deletions != len(self.range_tombstones):
            raise CorruptionError("properties disagree with the index or range-del block", path, props_handle[0])
        index_charge, filter_charge = self._index_charge(index), len(filt[0]) + _BLOCK_CHARGE
        if cache is not None:
            self._cache_id = cid = cache.new_id()
            self._key_base = base = cache.new_block_keys(len(index[2]))
            if cache.lock_free_hits and not self.range_tombstones:
                bits, m, k = filt
                # the shard of each data block's cache key, found once: a point read routes a
                # block to its shard without hashing the key (one pointer per block, charged)
                shards, mask = cache.shards, cache.mask
                block_shards = [shards[hash(base + i) & mask] for i in range(len(index[2]))]
                self._cached = cached = [None] * len(block_shards)
                index_charge += 16 * len(block_shards)
                self.point = (bits, m >> 9, k, index[0], index[2], index[3], base, block_shards, cached)
        if cache is not None and cache_meta:
            self._handles.append(cache.insert((self._cache_id, self._index_handle[0]), index, index_charge, "high"))
            self._handles.append(cache.insert((self._cache_id, self._filter_handle[0]), filt, filter_charge, "high"))
        else:  # the bytes of the index and filter charged to no cache (RocksDB's estimate-table-readers-mem)
            self.memory_outside_cache = index_charge + filter_charge


    # --- metadata blocks ---

    def _load_range_tombstones(self, handle: tuple[int, int]) -> list[tuple[bytes, bytes, int]]:
        buf, n = read_block(self._file, *handle, True, self.path)
        keys, negs, kinds, ends = decode_block(buf, n, self.path, handle[0])
        out = list(zip(keys, ends, map(abs, negs)))
        if any(k != RANGE_DELETION for k in kinds) or not all(b < e for b, e, _ in out):
            raise CorruptionError("bad range tombstone", self.path, handle[0])
        order = list(zip(keys, negs))
        if not all(map(le, order, order[1:])):
            raise CorruptionError("range tombstones out of order", self.path, handle[0])
        return out

    def _load_index(self) -> tuple[list, list, list, list]:
        off, size = self._index_handle
        path = self.path
        buf, n = read_block(self._file, off, size, True, path)
        keys, negs, _, handles = decode_block(buf, n, path, off)
        if any(len(h) != BLOCK_HANDLE.size for h in handles):
            raise CorruptionError("bad block handle in index", path, off)
        pairs = list(BLOCK_HANDLE.iter_unpack(b"".join(handles)))
        offsets = [p[0] for p in pairs]
        sizes = [p[1] for p in pairs]
        # data blocks are contiguous from offset 0 up to the filter block
        expected = 0
        for o, s in pairs:
            if o != expected:
                raise CorruptionError("index block handles are not contiguous", path, off)
            expected = o + s + BLOCK_TRAILER_SIZE
        if expected != self._filter_handle[0]:
            raise CorruptionError("index does not cover the data blocks", path, off)
        order = list(zip(keys, negs))
        if not all(map(lt, order, order[1:])):
            raise CorruptionError("index keys out of order", path, off)
        return keys, negs, offsets, sizes

    def _load_filter(self) -> tuple[bytes, int, int]:
        off, size = self._filter_handle
        buf, n = read_block(self._file, off, size, True, self.path)
        return decode_filter(buf, n, self.path, off)

    @staticmethod
    def _index_charge(index) -> int:
        return _block_charge(sum(map(len, index[0])), len(index[0]))

    def index(self):
        """The decoded index ``(keys, neg_seqs, offsets, sizes)`` (one entry per data block)."""
        if self._file is None:
            raise DBClosedError(f"table {self.path} is closed")
        return self._index

    def fragments(self) -> FragmentedRangeTombstones:
        """The table's range tombstones, fragmented (once per open table)."""
        frags = self._fragments
        if frags is None:
            frags = self._fragments = fragment(self.range_tombstones) if self.range_tombstones else EMPTY
        return frags

    # --- data blocks ---

    def read_checked(self, offset: int, size: int) -> tuple[bytes, int]:
        """The block at ``(offset, size)`` read with one ``pread`` and checked (see
        :func:`~antkv.sst.format.read_block`); a failure is reported as :meth:`read_failed`
        does."""
        f = self._file
        if f is None:
            raise DBClosedError(f"table {self.path} is closed")
        try:
            return check_block(f.read(offset, size + BLOCK_TRAILER_SIZE), offset, size, self._verify, self.path)
        except (AntIOError, CorruptionError) as e:
            self.read_failed(e)

    def read_failed(self, e: Exception):
        """A read failed: if the table was closed meanwhile (the database closed under a running
        scan or get: its descriptor is gone, or was even reused), that is what to report."""
        if self._file is None:
            raise DBClosedError(f"table {self.path} is closed") from e
        raise e

    def load_searchable(self, i: int, offset: int, size: int) -> tuple:
        """Data block ``i``, at ``offset`` of ``size`` bytes (its index entry), read from the file
        with one ``pread``, checked, in searchable form
        (:func:`~antkv.sst.block.searchable_block`) and put in the cache: a point read's cache
        miss (the caller has counted it).  The fused point read
        (:meth:`antkv.db.read_api.ReadAPI.get`) does the same inline, through
        :attr:`block_source`.  REQUIRES: a cache."""
        f = self._file
        if f is None:
            raise DBClosedError(f"table {self.path} is closed")
        try:  # _read, inline
            buf, size = check_block(f.read(offset, size + BLOCK_TRAILER_SIZE), offset, size, self._verify, self.path)
        except (AntIOError, CorruptionError) as e:
            self.read_failed(e)
        block = searchable_block(buf, size, self.path, offset)
        self._cache.put_block(self._key_base + i, block, size + SEARCHABLE_CHARGE, self._cached, i)
        return block

    def _data_block(self, i: int):
        """The decoded data block ``i`` (through the cache when there is one)."""
        _, _, offsets, sizes = self._index
        offset, size = offsets[i], sizes[i]
        cache = self._cache
        if cache is None:
            return decode_block(*self.read_checked(offset, size), self.path, offset)
        key = self._key_base + i
        block = cache.get(key)
        if block is None or len(block) != 4:
            return self._decode_to_cache(key, block, offset, size)
        return block

    def _decode_to_cache(self, key: int, raw, offset: int, size: int):
        """Decode the block at ``offset`` -- ``raw`` a searchable block from the cache, or read
        from the file when None -- and leave the decoded form in the cache under ``key``."""
        buf, n = self.read_checked(offset, size) if raw is None else raw[:2]
        block = decode_block(buf, n, self.path, offset)
        self._cache.put_block(key, block, _block_charge(n, len(block[0])), self._cached, key - self._key_base)
        return block

    def _scan_blocks(self, order: range) -> Iterator[tuple[list, list, list, list]]:
        """The decoded blocks at index positions ``order`` (ascending or descending, step 1):
        the first :data:`SCAN_CACHED_BLOCKS` through the cache, the rest read ahead in runs of
        about :data:`READAHEAD` bytes and decoded without touching the cache."""
        if self._file is None:  # index(), inline
            raise DBClosedError(f"table {self.path} is closed")
        _, _, offsets, sizes = self._index
        cache = self._cache
        if cache is None:
            for i in order[:SCAN_CACHED_BLOCKS]:
                yield self._data_block(i)
        else:
            # the _data_block of a cached block, inline: a cursor's seek + a few next visit a
            # few blocks each, and this frame is all a cached block costs on the way
            get, base = cache.get, self._key_base
            for i in order[:SCAN_CACHED_BLOCKS]:
                key = base + i
                block = get(key)
                if block is None or len(block) != 4:
                    block = self._decode_to_cache(key, block, offsets[i], sizes[i])
                yield block
        rest = order[SCAN_CACHED_BLOCKS:]
        if not rest:
            return
        step = rest.step
        path, verify = self.path, self._verify
        pos, stop = rest.start, rest.stop
        while pos != stop:
            # a run of blocks [lo, hi] in file order, about READAHEAD bytes
            if step > 0:
                lo = hi = pos
                while hi + 1 != stop and offsets[hi + 1] + sizes[hi + 1] - offsets[lo] <= READAHEAD:
                    hi += 1
                run, pos = range(lo, hi + 1), hi + 1
            else:
                lo = hi = pos
                while lo - 1 != stop and offsets[hi] + sizes[hi] - offsets[lo - 1] <= READAHEAD:
                    lo -= 1
                run, pos = range(hi, lo - 1, -1), lo - 1
            if self._file is None:
                raise DBClosedError(f"table {self.path} is closed")
            try:
                region = BlockRun(self._file, offsets[lo], offsets[hi] + sizes[hi] + BLOCK_TRAILER_SIZE)
                blocks = [read_block(region, offsets[i], sizes[i], verify, path) for i in run]
            except (AntIOError, CorruptionError) as e:
                self.read_failed(e)
            for i, (buf, n) in zip(run, blocks):
                yield decode_block(buf, n, path, offsets[i])

    # --- lookups ---

    def may_contain(self, user_key: bytes) -> bool:
        """False only if the table certainly holds no point entry for ``user_key``."""
        return bloom_may_contain(self.filter, user_key)

    def get(self, user_key: bytes, read_seq: int) -> tuple[int, int, bytes] | None:
        """``(seq, kind, value)`` of the newest entry of ``user_key`` with seq <= read_seq."""
        if self._file is None:
            raise DBClosedError(f"table {self.path} is closed")
        if not bloom_may_contain(self.filter, user_key):
            return None
        return self.find(user_key, -read_seq)

    def find(self, user_key: bytes, neg_read: int) -> tuple[int, int, bytes] | None:
        """``(seq, kind, value)`` of the first entry >= ``(user_key, neg_read)`` if its user key
        is ``user_key`` (the newest version with seq <= ``-neg_read``), else None.

        The point-read path: it does not consult the bloom filter (callers probe ``filter``
        first, with :func:`antkv.sst.bloom.may_contain`).
        """
        if self._file is None:
            raise DBClosedError(f"table {self.path} is closed")
        ikeys, inegs, offsets, sizes = self._index
        # The first index key >= (user_key, neg_read) names the only block that can hold the
        # answer: were the first entry >= the target in the next block instead, that block's
        # index key would lie between the target and the entry, so the entry's user key would
        # differ from user_key (see the index invariant in the module docstring).
        i = bisect_left(ikeys, user_key)
        n = len(ikeys)
        if i == n:
            return None
        if ikeys[i] == user_key:
            i = bisect_left(inegs, neg_read, i, bisect_right(ikeys, user_key, i))
            if i == n:
                return None
        offset = offsets[i]
        cache = self._cache
        if cache is None:
            buf, size = self.read_checked(offset, sizes[i])
            return search_block(buf, size, user_key, neg_read, self.path, offset)
        block = cache.get(self._key_base + i)
        if block is None:
            block = self.load_searchable(i, offset, sizes[i])
        return self.search_cached(block, i, user_key, neg_read)

    def search_cached(self, block: tuple, i: int, user_key: bytes, neg_read: int) -> tuple[int, int, bytes] | None:
        """:meth:`find` in data block ``i`` once it is fetched from the cache (either form)."""
        if len(block) == SEARCHABLE_FIELDS:
            # point reads keep blocks raw and search the bytes; a decoded block costs ~2.5x the
            # memory, and promoting blocks on a second touch made random reads over a table
            # near the cache size thrash (decode, evict, read again)
            return search_searchable(block, user_key, neg_read, self.path, self._index[2][i])
        keys, negs, kinds, values = block
        j = bisect_left(keys, user_key)
        if j == len(keys) or keys[j] != user_key:
            return None
        j = bisect_left(negs, neg_read, j, bisect_right(keys, user_key, j))
        if j < len(keys) and keys[j] == user_key:
            return -negs[j], kinds[j], values[j]
        return None

    def columns(self, lo: bytes | None = None, hi: bytes | None = None) -> tuple[list, list, list, list]:
        """The point entries with user keys in ``[lo, hi)`` (None = unbounded) as columns
        ``(keys, neg_seqs, kinds, values)`` in internal order, for a compaction: the blocks that
        can hold them are read with one ``pread`` and checked, bypassing the block cache (a
        compaction's reads would only evict hot blocks)."""
        ikeys, _, offsets, sizes = self.index()
        keys: list = []
        negs: list = []
        kinds: list = []
        values: list = []
        # block i holds entries <= index key i < entries of block i + 1
        first = 0 if lo is None else bisect_left(ikeys, lo)
        last = len(offsets) - 1 if hi is None else min(bisect_left(ikeys, hi), len(offsets) - 1)
        if first > last:
            return keys, negs, kinds, values
        path, verify = self.path, self._verify
        region = BlockRun(self._file, offsets[first], offsets[last] + sizes[last] + BLOCK_TRAILER_SIZE)
        for off, size in zip(offsets[first : last + 1], sizes[first : last + 1]):
            k, q, t, v = decode_block(*read_block(region, off, size, verify, path), path, off)
            keys += k
            negs += q
            kinds += t
            values += v
        i = 0 if lo is None else bisect_left(keys, lo)
        j = len(keys) if hi is None else bisect_left(keys, hi)
        if i or j < len(keys):
            keys, negs, kinds, values = keys[i:j], negs[i:j], kinds[i:j], values[i:j]
        return keys, negs, kinds, values

    def blocks_forward(self, start: bytes | None = None) -> Iterator[tuple[list, list, list, list]]:
        """Decoded data blocks (shared: never mutate them) from the one holding the first entry
        whose user key >= ``start``, that first one cut to begin there; empty ones skipped."""
        ikeys, _, offsets, sizes = self.index()
        b = 0 if start is None else bisect_left(ikeys, start)
        for i, block in zip(range(b, len(ikeys)), self._scan_blocks(range(b, len(ikeys)))):
            if i == b and start is not None:
                j = bisect_left(block[0], start)
                if j:
                    keys, negs, kinds, values = block
                    block = keys[j:], negs[j:], kinds[j:], values[j:]
            if block[0]:
                yield block

    def blocks_backward(self, start: bytes | None = None, exclusive: bool = False) -> Iterator[tuple]:
        """Decoded data blocks (shared: never mutate them), last first, from the one holding the
        last entry whose user key <= ``start`` (< with ``exclusive``), that one cut to end
        there; empty ones skipped.  Each block is in ascending order."""
        ikeys, _, offsets, sizes = self.index()
        nblocks = len(ikeys)
        if start is None:
            b = nblocks - 1
        else:  # blocks before b hold only keys < start (<= start when not exclusive)
            b = min((bisect_left if exclusive else bisect_right)(ikeys, start), nblocks - 1)
        for i, block in zip(range(b, -1, -1), self._scan_blocks(range(b, -1, -1))):
            if i == b and start is not None:
                keys, negs, kinds, values = block
                j = bisect_left(keys, start) if exclusive else bisect_right(keys, start)
                if j < len(keys):
                    block = keys[:j], negs[:j], kinds[:j], values[:j]
            if block[0]:
                yield block

    def iter_forward(self, start: bytes | None = None) -> Iterator[tuple[bytes, int, int, bytes]]:
        """Entry tuples in internal order from the first whose user key >= ``start``: each
        block's ``zip``, chained in C (no Python frame per entry; per block, only the frame of
        :meth:`_scan_blocks`)."""
        if self._file is None:  # index(), inline
            raise DBClosedError(f"table {self.path} is closed")
        ikeys, _, offsets, sizes = self._index
        nblocks = len(ikeys)
        if start is None:
            return chain.from_iterable(starmap(zip, self._scan_blocks(range(nblocks))))
        b = bisect_left(ikeys, start)
        if b == nblocks:
            return iter(())
        # a seek: the block holding ``start`` is read now, cut there (the cursor reads its
        # first entry at once anyway), and the blocks after it are left to _scan_blocks
        keys, negs, kinds, values = self._data_block(b)
        j = bisect_left(keys, start)
        first = zip(keys[j:], negs[j:], kinds[j:], values[j:]) if j else zip(keys, negs, kinds, values)
        if b + 1 == nblocks:
            return first
        return chain(first, chain.from_iterable(starmap(zip, self._scan_blocks(range(b + 1, nblocks)))))

    def iter_backward(self, start: bytes | None = None) -> Iterator[tuple[bytes, int, int, bytes]]:
        """Entry tuples in reverse internal order from the last whose user key <= ``start``."""
        ikeys, _, offsets, sizes = self.index()
        nblocks = len(ikeys)
        b = nblocks - 1 if start is None else min(bisect_right(ikeys, start), nblocks - 1)
        order = range(b, -1, -1)
        for i, (keys, negs, kinds, values) in zip(order, self._scan_blocks(order)):
            if i == b and start is not None:
                j = bisect_right(keys, start)
                if j < len(keys):
                    keys, negs, kinds, values = keys[:j], negs[:j], kinds[:j], values[:j]
            yield from zip(reversed(keys), reversed(negs), reversed(kinds), reversed(values))

    # --- whole-table checks ---

    def verify(self) -> int:
        """Read and check every block from the file; the number of point entries.

        Checks every checksum, that entries are in strict internal order within and across
        blocks, that each index key separates its block from the next, and the entry count.
        """
        if self._file is None:
            raise DBClosedError(f"table {self.path} is closed")
        ikeys, inegs, offsets, sizes = self._load_index()
        self._load_filter()
        count = 0
        prev = None
        for i, (off, size) in enumerate(zip(offsets, sizes)):
            buf, n = read_block(self._file, off, size, True, self.path)
            keys, negs, _, _ = decode_block(buf, n, self.path, off)
            order = list(zip(keys, negs))
            sep = (ikeys[i], inegs[i])
            if (
                not order
                or (prev is not None and not prev < order[0])
                or not all(map(lt, order, order[1:]))
                or not order[-1] <= sep
            ):
                raise CorruptionError("data block entries out of order", self.path, off)
            prev = sep
            count += len(order)
        if count != self.properties.num_entries:
            raise CorruptionError(
                f"table holds {count} entries, its properties say {self.properties.num_entries}", self.path, None
            )
        return count

    def readable_blocks(self) -> Iterator[tuple[int, tuple[list, list, list, list] | CorruptionError]]:
        """For repair: every data block in file order, read and checked on its own, as
        ``(offset, (keys, neg_seqs, kinds, values))``, or ``(offset, error)`` for a block that
        cannot be read (a checksum or decoding failure); one bad block does not stop the rest."""
        if self._file is None:
            raise DBClosedError(f"table {self.path} is closed")
        _, _, offsets, sizes = self._index
        for off, size in zip(offsets, sizes):
            try:
                buf, n = read_block(self._file, off, size, True, self.path)
                yield off, decode_block(buf, n, self.path, off)
            except (CorruptionError, AntIOError) as e:
                yield off, e if isinstance(e, CorruptionError) else CorruptionError(str(e), self.path, off)

    def close(self) -> None:
        """Close the file and take this table's blocks out of the cache: the index and filter
        it pinned, and every data block it cached.  Its ``cache_id`` is never used again, so a
        block left behind could only wait for eviction; in a cache shared by many databases
        (a Spark worker's working copies) the blocks of deleted tables and closed copies would
        otherwise fill it to its capacity whatever the live data."""
        self.point = None
        self.block_source = (_closed_file, True, self.path)  # before the descriptor is closed
        f, self._file = self._file, None
        handles, self._handles = self._handles, []
        cache = self._cache
        for h in handles:
            cache.release(h, erase_if_last_ref=True)
        if cache is not None and self._cache_id is not None and f is not None:
            erase, base = cache.erase, self._key_base
            for i in range(len(self._index[2])):
                erase(base + i)
        if f is not None:
            f.close()

    def __repr__(self) -> str:
        return f"TableReader({self.path!r}, file_number={self.file_number})"


def dump_table(fs, path: str) -> Iterator[str]:
    """Human-readable lines describing the table at ``path`` (for ``antkv dump-sst``)."""
    reader = TableReader.open(fs, path, 0)
    try:
        p = reader.properties
        yield f"table {path}: {reader.file_size} bytes, format version {p.format_version}"
        for name, value in sorted(vars(p).items()):
            yield f"  property {name} = {value!r}"
        ikeys, inegs, offsets, sizes = reader.index()
        bits, m, k = reader.filter
        yield f"filter: {m} bits, {k} probes"
        yield f"range tombstones: {len(reader.range_tombstones)}"
        for begin, end, seq in reader.range_tombstones:
            yield f"  [{begin!r}, {end!r}) @{seq}"
        yield f"data blocks: {len(ikeys)}"
        for i, (key, neg, off, size) in enumerate(zip(ikeys, inegs, offsets, sizes)):
            yield f"block {i} at offset {off}, {size} bytes, index key {key!r} @{-neg}"
            keys, negs, kinds, values = reader._data_block(i)
            for key, neg, kind, value in zip(keys, negs, kinds, values):
                if kind == VALUE_POINTER:
                    fnum, voff, vsize = decode_pointer(value, f"{path} block at offset {off}")
                    yield f"  {key!r} @{-neg} PUT -> value log {fnum:06d}.vlog offset {voff} size {vsize}"
                elif kind == DELETION:
                    yield f"  {key!r} @{-neg} DELETE"
                else:
                    shown = value if len(value) <= 64 else value[:64] + b"..."
                    yield f"  {key!r} @{-neg} PUT {shown!r}"
    finally:
        reader.close()

