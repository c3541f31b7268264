"""TableBuilder: writes one SST file from entries given in internal-key order.

The builder buffers the entries of the current data block in parallel lists; when the block's
estimated size (keys + values + column bytes, before prefix compression) reaches ``block_size``
it is encoded (``block.py``), compressed if asked, checksummed and appended.  Its index entry is written once the next block's first key is known, so the index
key can be a short *separator* (LevelDB's FindShortestSeparator): a user key ``s`` with
``last <= s < next`` for the last key of the block and the first key of the next one, paired
with ``MAX_SEQUENCE`` -- or, when nothing shorter exists (or both keys are the same user key,
whose versions span the two blocks), the block's exact last internal key.  So for every block
``i``: every entry of block ``i`` <= index key ``i`` < every entry of block ``i + 1`` (in
internal order); the last index key is the table's exact last internal key.

``finish`` appends the filter, range-del, index and properties blocks and the footer (layout in
``format.py``).  The builder never syncs or closes the file: its owner does.
"""

from __future__ import annotations

from bisect import bisect_left
from itertools import accumulate, islice, repeat
from operator import add, lt

from ..base.compression import COMPRESSION_NONE
from ..base.dbformat import DELETION, EXPIRING, MAX_KIND, MAX_SEQUENCE, MERGE, RANGE_DELETION, VALUE, VALUE_POINTER
from ..errors import InvalidArgumentError
from .block import encode_block, encode_entries, shared_prefix_len
from .bloom import build_filter, key_digests
from .format import (
    BLOCK_HANDLE,
    BLOCK_TRAILER_SIZE,
    compression_name,
    compression_type,
    encode_footer,
    write_block,
)
from .properties import TableProperties, encode_properties

_POINT_KIND_SET = frozenset((DELETION, VALUE, VALUE_POINTER, EXPIRING, MERGE))
_BYTES_ONLY = frozenset((bytes,))
_FIRST_WINDOW = 64  # add_sorted's first window of entries (widened until a block ends in it)
_WINDOW_BLOCKS = 16  # add_sorted's windows hold about this many blocks' entries
_ENTRY_OVERHEAD = 8  # estimated column bytes per entry (ends, seq, kind)
_BLOCK_OVERHEAD = 9 + BLOCK_TRAILER_SIZE


def _as_bytes(x, what: str) -> bytes:
    if isinstance(x, (bytes, bytearray, memoryview)):
        return bytes(x)
    raise TypeError(f"{what} must be bytes, not {type(x).__name__}")


def separator(last_key: bytes, last_seq: int, next_key: bytes) -> tuple[bytes, int]:
    """A short index key ``(user key, seq)`` between a block's last entry and the next block.

    REQUIRES: ``(last_key, -last_seq) < (next_key, -next_seq)`` for the next block's first entry.
    """
    if last_key != next_key:
        p = shared_prefix_len(last_key, next_key)
        if p + 1 < len(last_key):
            c = last_key[p]
            if c < 0xFF and c + 1 < next_key[p]:
                return last_key[:p] + bytes((c + 1,)), MAX_SEQUENCE
    return last_key, last_seq


class TableBuilder:
    """Builds one table.  Not thread-safe: one thread adds, then finishes or abandons."""

    def __init__(
        self,
        file,
        *,
        file_number: int,
        block_size: int = 4096,
        bloom_bits_per_key: int = 10,
        compression: str | None = None,
    ):
        if not isinstance(block_size, int) or not isinstance(bloom_bits_per_key, int):
            raise TypeError("block_size and bloom_bits_per_key must be int")
        if block_size < 1:
            raise InvalidArgumentError(f"block_size must be >= 1, got {block_size}")
        if bloom_bits_per_key < 0:
            raise InvalidArgumentError(f"bloom_bits_per_key must be >= 0, got {bloom_bits_per_key}")
        self.file = file
        self.file_number = file_number
        self._flushed_entries = 0
        self._block_size = block_size
        self._bloom_bits = bloom_bits_per_key
        self._ctype = compression_type(compression)
        self._done = False
        # the current data block, as parallel lists
        self._keys: list[bytes] = []
        self._seqs: list[int] = []
        self._kinds: list[int] = []
        self._values: list[bytes] = []
        self._block_bytes = 0
        self._accounted = 0  # entries at the front of the current block add_sorted accounted
        # the last entry added
        self._last_key = b""  # with _last_seq above MAX_SEQUENCE, any first entry is in order
        self._last_seq = MAX_SEQUENCE + 1
        # index entries; the last flushed block's entry waits for the next block's first key
        self._index_keys: list[bytes] = []
        self._index_seqs: list[int] = []
        self._index_handles: list[bytes] = []
        self._pending: tuple[bytes, int, int, int] | None = None
        self._digests: list[bytes] = []  # bloom hash digests (bloom.key_digests) of the keys so far
        self._kind_counts = [0] * (MAX_KIND + 1)  # per kind
        self._smallest_key: bytes | None = None
        self._min_seq = MAX_SEQUENCE + 1
        self._max_seq = -1
        self._raw_key_size = 0
        self._raw_value_size = 0
        self._data_size = 0
        self._tombstones: list[tuple[bytes, int, bytes]] = []

    # --- adding ---

    def add(self, user_key: bytes, seq: int, kind: int, value: bytes) -> None:
        """Append a point entry.  REQUIRES: strictly after the last one in internal order.

        The hot path only checks the order and buffers the entry; kinds, sequence ranges,
        counts and bloom hashes are checked and computed per block, in C loops.
        """
        if user_key.__class__ is not bytes or value.__class__ is not bytes:
            user_key, value = _as_bytes(user_key, "key"), _as_bytes(value, "value")
        last = self._last_key
        if user_key < last or (user_key == last and seq >= self._last_seq):
            self._reject_order(user_key, seq)
        self._last_key = user_key
        self._last_seq = seq
        self._keys.append(user_key)
        self._seqs.append(seq)
        self._kinds.append(kind)
        self._values.append(value)
        self._block_bytes += len(user_key) + len(value) + _ENTRY_OVERHEAD
        if self._block_bytes >= self._block_size:
            self._flush_block()

    def add_sorted(self, keys: list[bytes], rows: list[tuple[int, int, bytes]]) -> None:
        """Append entries given as user keys, strictly increasing, and their ``(seq, kind,
        value)`` rows (a flush's and a compaction's fast path: a memtable's versions are such
        rows already).

        Blocks are cut exactly where :meth:`add` would cut them (once the running estimate
        reaches ``block_size``), found with ``accumulate`` and ``bisect`` over a window of
        entries instead of a Python call per entry.  REQUIRES: the current block is empty,
        ``keys[0]`` sorts after the last entry added, and every row is a 3-tuple.  Entries are
        checked window by window: on an error, blocks before the bad window may have been
        written (abandon the builder).

        The work runs window by window (the complete blocks of ~``_WINDOW_BLOCKS`` blocks'
        worth of entries), never in passes over the whole batch: key, row and value objects
        usually lie scattered in memory (allocated in arrival order, read in key order), so
        each pass over a whole table costs a cache miss per object, while a window's objects
        stay in the CPU cache across the passes made over it.  The checks and the accounting
        (kinds, sequence numbers, sizes, bloom digests) run once per window, not per block:
        with ~4 entries per 4 KiB block (1 KiB values) their per-call cost was most of a
        flush's.  For the same reason rows are split into columns per window (``zip(*rows)``),
        not up front.
        """
        self._add_sorted(keys, rows, None)

    def add_sorted_values(self, keys: list[bytes], values: list[bytes], seq: int, kinds: int | list[int]) -> None:
        """:meth:`add_sorted` of the rows ``(seq, kinds[i], values[i])`` -- or ``(seq, kinds,
        values[i])`` for an int ``kinds`` --, without making them (an external table's entries:
        one sequence number for all)."""
        if type(kinds) is not int and len(kinds) != len(values):
            raise InvalidArgumentError("add_sorted_values: as many kinds as values needed")
        self._add_sorted(keys, values, (seq, kinds))

    def _add_sorted(self, keys: list[bytes], rows: list, columns: tuple | None) -> None:
        """:meth:`add_sorted`; with ``columns`` ``(seq, kinds)``, :meth:`add_sorted_values`'s
        (``rows`` are then the values)."""
        n = len(keys)
        if not n:
            return
        if self._done:
            raise InvalidArgumentError("table builder already finished or abandoned")
        if len(rows) != n:
            raise InvalidArgumentError("add_sorted: as many rows as keys needed")
        if self._keys:
            raise InvalidArgumentError("add_sorted needs an empty current block")
        block_size = self._block_size
        start = 0
        window = _FIRST_WINDOW
        while True:
            # the running sizes of the next `window` entries and the blocks that end inside
            # it (if none does, widen it); this pass also brings the entries into cache
            ks = keys[start : start + window]
            if columns is None:
                try:
                    seqs, kinds, vs = zip(*rows[start : start + window])
                except (TypeError, ValueError):
                    raise TypeError("add_sorted: rows must be (seq, kind, value) tuples") from None
            else:
                vs = rows[start : start + window]
                seqs = (columns[0],) * len(vs)
                kinds = (columns[1],) * len(vs) if type(columns[1]) is int else columns[1][start : start + window]
            sizes = list(accumulate(map(add, map(add, map(len, ks), map(len, vs)), repeat(_ENTRY_OVERHEAD))))
            last = len(sizes)
            ends = []  # the end (exclusive, in the window) of each complete block
            base, i = 0, 0
            while True:
                j = bisect_left(sizes, base + block_size, i)
                if j == last:
                    break
                ends.append(j + 1)
                base, i = sizes[j], j + 1
            tail = start + last == n  # the window reaches the end: what follows the blocks stays
            if not ends and not tail:
                window *= 2
                continue
            m = last if tail else ends[-1]  # entries handled in this window
            seqs, kinds, vs = seqs[:m], kinds[:m], vs[:m]
            ks = ks[:m] if m < len(ks) else ks
            self._check_sorted(ks, vs, seqs[0])
            raw_keys = sum(map(len, ks))
            self._account(ks, seqs, kinds, vs, raw_keys, sizes[m - 1] - raw_keys - m * _ENTRY_OVERHEAD, True)
            self._last_key, self._last_seq = ks[-1], seqs[-1]
            b = 0
            for e in ends:
                self._write_data_block(ks[b:e], seqs[b:e], kinds[b:e], vs[b:e])
                b = e
            if b < m:  # the tail stays in the current block (as lists: add() appends), accounted
                self._keys, self._seqs, self._kinds, self._values = ks[b:], list(seqs[b:]), list(kinds[b:]), list(vs[b:])
                self._block_bytes = sizes[m - 1] - (sizes[b - 1] if b else 0)
                self._accounted = m - b
                return
            start += m
            if start == n:
                return
            per_block = m // len(ends)  # the next blocks are likely about as long
            window = per_block * _WINDOW_BLOCKS + (per_block >> 2) + 2

    def _check_sorted(self, keys: list[bytes], values: list[bytes], first_seq: int) -> None:
        """add_sorted's checks of one block's keys and values (``keys`` non-empty)."""
        if not set(map(type, keys)) | set(map(type, values)) <= _BYTES_ONLY:
            raise TypeError("keys and values must be bytes")
        first, last = keys[0], self._last_key
        if first < last or (first == last and first_seq >= self._last_seq):
            self._reject_order(first, first_seq)
        if len(keys) > 1 and not all(map(lt, keys, islice(keys, 1, None))):
            raise InvalidArgumentError("add_sorted: user keys must be strictly increasing")

    def _set_done(self) -> None:
        self._done = True
        self.add = self._add_when_done  # shadows the method: the hot path stays check-free

    def _add_when_done(self, user_key: bytes, seq: int, kind: int, value: bytes) -> None:
        raise InvalidArgumentError("table builder already finished or abandoned")

    def _reject_order(self, user_key: bytes, seq: int) -> None:
        if self._done:
            raise InvalidArgumentError("table builder already finished or abandoned")
        if not isinstance(seq, int):
            raise TypeError(f"seq must be int, not {type(seq).__name__}")
        raise InvalidArgumentError(
            f"table entries out of order: {user_key!r}@{seq} after {self._last_key!r}@{self._last_seq}"
        )

    @property
    def num_entries(self) -> int:
        """Point entries added so far."""
        return self._flushed_entries + len(self._keys)

    @property
    def num_buffered(self) -> int:
        """Point entries in the current block, not written yet (:meth:`add_sorted` needs none)."""
        return len(self._keys)

    @property
    def num_value_pointers(self) -> int:
        """Value pointers among the entries add_sorted added (and those add added, once their
        block was written)."""
        return self._kind_counts[VALUE_POINTER]

    @property
    def num_expiring(self) -> int:
        """Expiring entries (which may wrap value pointers), counted as num_value_pointers is."""
        return self._kind_counts[EXPIRING]

    def add_range_tombstone(self, begin: bytes, end: bytes, seq: int) -> None:
        """Record the range tombstone ``[begin, end)@seq`` (in any order)."""
        begin = _as_bytes(begin, "begin")
        end = _as_bytes(end, "end")
        if self._done:
            raise InvalidArgumentError("table builder already finished or abandoned")
        if not isinstance(seq, int):
            raise TypeError("seq must be int")
        if not begin < end:
            raise InvalidArgumentError(f"empty range tombstone [{begin!r}, {end!r})")
        if not 0 <= seq <= MAX_SEQUENCE:
            raise InvalidArgumentError(f"sequence number {seq} out of range")
        self._tombstones.append((begin, seq, end))

    def estimated_file_size(self) -> int:
        """Bytes written so far plus the current block's estimated size."""
        return self.file.size + self._block_bytes

    # --- blocks ---

    def _flush_block(self) -> None:
        """Write the current block (entries buffered by :meth:`add`, or add_sorted's tail)."""
        keys, seqs, kinds, values = self._keys, self._seqs, self._kinds, self._values
        if self._done:
            raise InvalidArgumentError("table builder already finished or abandoned")
        a = self._accounted
        if a < len(keys):
            if a:
                keys, seqs, kinds, values = keys[a:], seqs[a:], kinds[a:], values[a:]
            self._account(keys, seqs, kinds, values, sum(map(len, keys)), sum(map(len, values)), False)
            keys, seqs, kinds, values = self._keys, self._seqs, self._kinds, self._values
        self._write_data_block(keys, seqs, kinds, values)
        self._keys, self._seqs, self._kinds, self._values = [], [], [], []
        self._block_bytes = 0
        self._accounted = 0

    def _account(self, keys, seqs, kinds, values, key_bytes: int, value_bytes: int, distinct: bool) -> None:
        """Check point entries' kinds and sequence numbers; add them to the table's counts and
        to its filter's digests (``distinct``: no user key repeats among ``keys``)."""
        kind_set = set(kinds)
        if not kind_set <= _POINT_KIND_SET:
            raise InvalidArgumentError(f"kinds {sorted(kind_set - _POINT_KIND_SET)} are not point entry kinds")
        lo, hi = min(seqs), max(seqs)
        if lo < 0 or hi > MAX_SEQUENCE:
            raise InvalidArgumentError(f"sequence number {lo if lo < 0 else hi} out of range")
        if lo < self._min_seq:
            self._min_seq = lo
        if hi > self._max_seq:
            self._max_seq = hi
        if DELETION in kind_set:
            self._kind_counts[DELETION] += kinds.count(DELETION)
        if VALUE_POINTER in kind_set:
            self._kind_counts[VALUE_POINTER] += kinds.count(VALUE_POINTER)
        if EXPIRING in kind_set:
            self._kind_counts[EXPIRING] += kinds.count(EXPIRING)
        if MERGE in kind_set:
            self._kind_counts[MERGE] += kinds.count(MERGE)
        self._raw_key_size += key_bytes
        self._raw_value_size += value_bytes
        if self._bloom_bits:
            self._digests.append(key_digests(keys if distinct else dict.fromkeys(keys)))

    def _write_data_block(self, keys: list[bytes], seqs: list[int], kinds: list[int], values: list[bytes]) -> None:
        """Encode and write one data block of (already accounted) entries; its index entry
        waits for the next block's first key."""
        if self._pending is not None:
            self._add_index_entry(keys[0])
        elif self._smallest_key is None:
            self._smallest_key = keys[0]
        offset, size = write_block(self.file, encode_block(keys, seqs, kinds, values), self._ctype)
        self._flushed_entries += len(keys)
        self._data_size += size + BLOCK_TRAILER_SIZE
        self._pending = (keys[-1], seqs[-1], offset, size)

    def _add_index_entry(self, next_key: bytes | None) -> None:
        last_key, last_seq, offset, size = self._pending
        if next_key is None:
            key, seq = last_key, last_seq
        else:
            key, seq = separator(last_key, last_seq, next_key)
        self._index_keys.append(key)
        self._index_seqs.append(seq)
        self._index_handles.append(BLOCK_HANDLE.pack(offset, size))
        self._pending = None

    def finish(self, blob_refs: dict[int, int] | None = None) -> TableProperties:
        """Write the remaining blocks and the footer; the properties of the finished table."""
        if self._done:
            raise InvalidArgumentError("table builder already finished or abandoned")
        if self._keys:
            self._flush_block()
        if self._pending is not None:
            self._add_index_entry(None)
        self._set_done()
        file = self.file
        filter_handle = write_block(file, build_filter(b"".join(self._digests), self._bloom_bits), COMPRESSION_NONE)
        filter_size = filter_handle[1] + BLOCK_TRAILER_SIZE

        tombstones = sorted(self._tombstones, key=lambda t: (t[0], -t[1], t[2]))
        rangedel = encode_entries([(b, s, RANGE_DELETION, e) for b, s, e in tombstones])
        rangedel_handle = write_block(file, rangedel, self._ctype)

        n = len(self._index_keys)
        index = encode_block(self._index_keys, self._index_seqs, [VALUE] * n, self._index_handles)
        index_handle = write_block(file, index, self._ctype)

        props = self._properties(tombstones, blob_refs or {})
        props.filter_size = filter_size
        props.index_size = index_handle[1] + BLOCK_TRAILER_SIZE
        props_handle = write_block(file, encode_properties(props), COMPRESSION_NONE)
        file.append(encode_footer([filter_handle, rangedel_handle, index_handle, props_handle]))
        props.file_size = file.size
        self._digests = []
        return props

    def _properties(self, tombstones: list[tuple[bytes, int, bytes]], blob_refs: dict[int, int]) -> TableProperties:
        smallest, exclusive = self._smallest_key, False
        largest = self._last_key if self._flushed_entries else None
        min_seq, max_seq = self._min_seq, self._max_seq
        if tombstones:
            first_begin = tombstones[0][0]
            if smallest is None or first_begin < smallest:
                smallest = first_begin
            last_end = max(t[2] for t in tombstones)
            if largest is None or last_end > largest:
                largest, exclusive = last_end, True
            seqs = [t[1] for t in tombstones]
            min_seq = min(min_seq, min(seqs))
            max_seq = max(max_seq, max(seqs))
        if max_seq < 0:
            min_seq = max_seq = 0
        counts = self._kind_counts
        return TableProperties(
            num_entries=self.num_entries,
            num_deletions=counts[DELETION],
            num_range_deletions=len(tombstones),
            num_value_pointers=counts[VALUE_POINTER],
            num_expiring=counts[EXPIRING],
            num_merges=counts[MERGE],
            smallest_key=smallest,
            largest_key=largest,
            largest_is_exclusive=exclusive,
            smallest_seq=min_seq,
            largest_seq=max_seq,
            raw_key_size=self._raw_key_size,
            raw_value_size=self._raw_value_size,
            data_size=self._data_size,
            num_data_blocks=len(self._index_keys),
            compression=compression_name(self._ctype),
            blob_refs=dict(blob_refs),
        )

    def abandon(self) -> None:
        """Stop building; the file (owned by the caller) is left as is, to be deleted."""
        self._set_done()
        self._keys, self._seqs, self._kinds, self._values = [], [], [], []
        self._digests = []
        self._tombstones = []
