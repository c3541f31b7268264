"""The read API of a database: point reads, scans, cursors, snapshots, the mapping protocol.

:class:`ReadAPI` is the part of :class:`~antkv.db.DB` that reads.  How a read travels: take the
current *super version* (mutable memtable, immutable memtables, table version: replaced
atomically, never mutated, so read without a lock) and a read sequence number (the snapshot's,
or the last published one); search newest to oldest, stopping at the first version or covering
range tombstone (:meth:`ReadAPI.get` searches in its own frame, scans through
:mod:`antkv.read`).  Reads take no lock but the snapshot list's.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Iterator

from ..base.dbformat import DELETION, EXPIRING, MAX_KIND, MERGE, VALUE, VALUE_POINTER
from ..base.expiry import live_inner, now_ms
from ..base.merge_operator import missing_operator
from ..errors import CorruptionError, InvalidArgumentError
from ..errors import IOError as AntIOError
from ..read.iterators import DBIterator
from ..read.scan_arguments import scan_range, yielded_shape
from ..read.key_versions import KeyVersion, key_versions
from ..read.point_get import table_get_covered
from ..read.read_view import ReadView
from ..read.sizes import approximate_size
from ..read.snapshot import ReadPin, Snapshot
from ..record.batch import as_bytes
from ..sst.block import searchable_block
from ..sst.bloom import DIGEST_HEAD, LANE_MASK, PROBE_TABLE, digest, may_contain_probe
from ..sst.format import BLOCK_TRAILER_SIZE, check_block
from ..sst.reader import SEARCHABLE_CHARGE
from .state import DBState


_PRESENCE = object()
"""The ``default`` of a :meth:`ReadAPI.get` that asks only whether the key is present
(:meth:`ReadAPI.key_may_exist`): the read resolves no value pointer and merges no operands."""


class ReadAPI(DBState):
    """Part of :class:`~antkv.db.DB`: reading (calls only :class:`~antkv.db.state.DBState`)."""

    def _entry_value(self, key: bytes, kind: int, value: bytes, sv, read_seq: int, default):
        """The value a point read returns for the newest visible entry of ``key`` when its kind
        is not VALUE (a DELETION never gets here): a value pointer resolved, an expiring entry
        unwrapped (``default`` once expired), or the key's operands merged onto its base.
        With ``default`` :data:`_PRESENCE` (:meth:`key_may_exist`) it reads no value: True
        where the entry reads as present."""
        if default is _PRESENCE:
            return True if kind != EXPIRING or live_inner(value, now_ms(self.options.clock)) else default
        if kind == VALUE_POINTER:
            return self._vlog_reader.get(value)
        if kind == MERGE:
            if self.options.merge_operator is None:
                raise missing_operator(f"database {self.path}")
            merged = ReadView(self, sv, read_seq).merged_value(key)
            return default if merged is None else merged
        live = live_inner(value, now_ms(self.options.clock))
        if live is None:
            return default
        return self._vlog_reader.get(live[1]) if live[0] == VALUE_POINTER else live[1]

    def _read_seq(self, snapshot) -> int:
        if snapshot is None:
            return self._last_seq
        if not isinstance(snapshot, Snapshot):
            raise TypeError(f"snapshot must be an antkv Snapshot, not {type(snapshot).__name__}")
        if not snapshot.readable_by(self):
            raise InvalidArgumentError("snapshot is released or belongs to another database")
        return snapshot.sequence

    def get(self, key, default=None, *, snapshot=None):
        """The value of ``key``, or ``default`` (None) when it is absent; for a list of keys,
        the list of their values (rocksdict's list ``get``; :meth:`multi_get`).

        One Python frame for the whole read, the common case inline (a second frame for the
        tables, its result tuple and a list of candidate tables cost a read of a cached block
        5% of its instructions).  The
        tables are probed newest first: the L0 tables whose range holds the key (every L0 table
        when their ranges all overlap: a check of each range would almost never rule one out,
        see :class:`antkv.manifest.version_set.Version`), then at most one table per sorted
        level.  For each, inline, what four functions would do one call each:

        1. the bloom probe (:func:`antkv.sst.bloom.may_contain_probe`, on the key's hash
           computed once);
        2. the index search (the first index key >= the key names the only block that can
           hold it);
        3. the block cache hit, without a lock (the clock policy's hit:
           :mod:`antkv.memory.clock`; the entry found by index in the table's list of its
           blocks' entries, which every insert of one of its blocks fills), or on a miss the
           block read, checked and cached as :meth:`TableReader.load_searchable` does
           (through the reader's ``block_source``, the
           file's positional read: a read of a table closed meanwhile fails, and
           :meth:`TableReader.read_failed` reports it as closed; a short read or a bare
           ``OSError`` is read again by :meth:`TableReader.read_checked`, which reports what the
           file's own read finds);
        4. the search of a cached fixed-width block (``bytes.find`` on its key column, the
           layout cached with the block: :func:`antkv.sst.block.searchable_block`), when the
           newest version of the key is visible.

        The newest version of the key, when the key is in the table, is in the first block
        whose index key is >= the key, so when the fast search finds it visible it is the
        answer, whatever that index key is.  Anything else takes the general path, which gives
        the same answers: a block fetched but decoded or of variable-width keys, or whose newest
        version is not the one visible, is searched by :meth:`TableReader.search_cached` (the
        block is not looked up twice, so the cache counts one hit or one miss per block a read
        touches); when the block's index key equals the key, the key's versions may go on in
        the next blocks (or, the index key being a separator, start there), and
        :meth:`TableReader.find` picks the block (its lookup counts the block a second time:
        rare, a read at an older snapshot of a key that ends a block); a cache whose hits lock
        (the LRU policy) or no cache go to :meth:`TableReader.find` too; range tombstones in a
        table hand the whole search to :func:`antkv.read.point_get.table_get_covered`.
        """
        if type(key) is not bytes:
            if type(key) is list:
                return self._get_list(key, default, snapshot)
            key = as_bytes(key, "key")
        if self._closed:
            self._check_open()
        read_seq = self._last_seq if snapshot is None else self._read_seq(snapshot)
        sv = self._sv
        mem = sv.mem
        # (most gets of a database that is not being written: one empty memtable, passed over
        # without hashing the key or iterating)
        if mem.versions or mem.range_dels or sv.imms:
            for mem in sv.memtables:  # newest first; the first memtable with an answer ends the search
                versions = mem.versions
                e = versions.get(key) if versions else None
                if e is None and not mem.range_dels:
                    continue  # (the key in no memtable)
                if e is not None and e[0] > read_seq:
                    e = mem.get(key, read_seq)
                    if e is None and mem.pruned and snapshot is None:
                        self._await_published()
                        return self.get(key, default)
                tomb = mem.fragments().max_covering_seq(key, read_seq) if mem.range_dels else 0
                if e is not None:
                    if tomb > e[0] or e[1] == DELETION:
                        return default
                    if e[1] != VALUE:
                        return self._entry_value(key, e[1], e[2], sv, read_seq, default)
                    return e[2]
                if tomb:
                    return default
        # --- the tables ---
        # key_probe(key), inline: the key's hash, once for every filter probed
        d = digest(key)
        x, a, b = DIGEST_HEAD(d)
        pe, pf = PROBE_TABLE[a & LANE_MASK], PROBE_TABLE[b & LANE_MASK]
        klen = len(key) or -1  # a key column's width is never -1: an empty key takes the general search
        version = sv.version
        candidates = version.l0_tables  # checked against the key's range below, unless all overlap
        for _level, files, largest in version.sorted_levels:
            i = bisect_left(largest, key)
            if i == len(files):
                continue
            f = files[i]
            if f.largest_exclusive and f.largest == key:
                i += 1
                if i == len(files):
                    continue
                f = files[i]
            if f.smallest <= key:  # (find_file, inline)
                candidates += (f,)  # (onto no L0 table: the 1-tuple itself, nothing copied)
        check = version.l0_ranges_apart  # False: every L0 table is probed (see above)
        for f in candidates:
            if check and not f.smallest <= key <= f.largest:
                continue
            p = f.point  # the reader's point-read form and the reader, once the table is open
            if p is None:
                r = f.reader or self._open_table(f)
                p = f.point
                if p is None:  # a reader without the form
                    if r.range_tombstones:
                        e = table_get_covered(sv, key, read_seq, self._open_table)
                        break
                    if may_contain_probe(r.filter, (x, pe, pf, d)):
                        e = r.find(key, -read_seq)
                        if e is not None:
                            break
                    continue
            bits, nfb, k, ikeys, offsets, sizes, key_base, block_shards, cached, r = p
            if k == 6:  # the default filter (10 bits per key): its two masks, inline
                o = (x % nfb) << 6
                if not (bits[o + pe[0]] & pe[1] and bits[o + pe[2]] & pe[3] and bits[o + pe[4]] & pe[5]):
                    continue
                if not (bits[o + pf[0]] & pf[1] and bits[o + pf[2]] & pf[3] and bits[o + pf[4]] & pf[5]):
                    continue
            elif k and not may_contain_probe(r.filter, (x, pe, pf, d)):
                continue
            i = bisect_left(ikeys, key)
            if i == len(ikeys):
                continue
            # block i's cache entry (value, charge, key, slot), or None when the block is not
            # cached: every insert of a table's data block gives the entry its home in cached
            e = cached[i]
            s = block_shards[i]  # the shard of its key, found when the table was opened
            if e is not None:
                s.bits[e[3]] = 1  # its reference bit
                next(s.hit_counter)  # s.count_hit(), without the method-wrapper's call
                block = e[0]
            else:  # r.load_searchable(i, offset, size), inline
                next(s.miss_counter)
                offset = offsets[i]
                size = sizes[i]
                pread, verify, path = r.block_source
                try:
                    buf, size = check_block(pread(size + BLOCK_TRAILER_SIZE, offset), offset, size, verify, path)
                except AntIOError as exc:  # the file's own read failed
                    r.read_failed(exc)
                except (OSError, CorruptionError):  # a bare OSError or a short read: the file's read says
                    buf, size = r.read_checked(offset, size)
                block = searchable_block(buf, size, path, offset)
                s.put(key_base + i, block, size + SEARCHABLE_CHARGE, False, cached, i)
            try:
                buf, _size, width, n, seqs_off, qw, kinds_off, ends, g, _r = block
            except ValueError:  # not SEARCHABLE_FIELDS long: decoded by an iterator
                width = 0
            if width == klen:  # (0: not one width)
                end = n * width
                pos = buf.find(key, 0, end)
                while pos > 0 and pos % width:  # a match across two keys: go on from the next key
                    pos = buf.find(key, pos - pos % width + width, end)
                if pos >= 0:
                    j = pos // width
                    at = seqs_off + j * qw
                    seq = int.from_bytes(buf[at : at + qw], "little")
                    kind = buf[kinds_off + j]
                    if seq <= read_seq and kind <= MAX_KIND:  # else an older version, or damage
                        v = g + n + j
                        if kind == VALUE:
                            return buf[ends[v - 1] : ends[v]]
                        e = seq, kind, buf[ends[v - 1] : ends[v]]
                        break
                elif ikeys[i] != key:
                    continue  # not in block i, so in no block of this table
            # the general search: an index key equal to the key may have the key's versions in
            # the next blocks too (find picks the block), else search_cached says which version
            # or which damage
            if ikeys[i] == key:
                e = r.find(key, -read_seq)
            else:
                e = r.search_cached(block, i, key, -read_seq)
            if e is not None:
                break
        else:
            return default
        if e is None or e[1] == DELETION:
            return default
        if e[1] == VALUE:
            return e[2]
        return self._entry_value(key, e[1], e[2], sv, read_seq, default)

    def _await_published(self) -> None:
        """Wait until the write under way, if any, has published its sequence number: the writer
        holds the write lock until it has.  A read without a snapshot that met a version newer
        than its read sequence, and none below it (a write no snapshot stopped may have dropped
        them: ``Options.inplace_update_support``), reads again after this, at a later sequence,
        as the same read a moment later would."""
        with self._write_lock:
            pass

    def _get_list(self, keys: list, default, snapshot) -> list:
        """:meth:`get` of a list of keys (its own frame: a comprehension over ``default`` in
        ``get`` would make every get build a closure cell)."""
        return [default if v is None else v for v in self.multi_get(keys, snapshot=snapshot)]

    def key_may_exist(self, key, fetch: bool = False, *, snapshot=None):
        """Whether ``key`` is present (rocksdict's ``key_may_exist``, here exact: no false
        positives), answered from the tables' and memtables' entries alone: a large value's
        pointer is enough, the value log is never read.  ``key in db`` and ``del db[key]`` ask
        this.  ``fetch=True`` returns ``(present, value or None)``, reading the value."""
        if type(key) is not bytes:
            key = as_bytes(key, "key")
        if not isinstance(fetch, bool):
            raise TypeError("fetch must be a bool")
        self._check_open()
        if fetch:
            value = self.get(key, snapshot=snapshot)
            return value is not None, value
        # a value, a value pointer, or merge operands (onto a base or onto nothing): present
        return self.get(key, _PRESENCE, snapshot=snapshot) is not _PRESENCE

    def _view(self, snapshot) -> ReadView:
        if snapshot is None and self._inplace:
            # writes drop versions no snapshot sees (Options.inplace_update_support): the view
            # holds one while it lives, taken as snapshot() takes it
            with self._write_lock:
                self._check_open()
                snap = Snapshot(self, self._last_seq, self._snapshots)
                self._snapshots.add(snap.sequence)
                return ReadView(self, self._sv, snap.sequence, ReadPin(snap))
        self._check_open()
        return ReadView(self, self._sv, self._read_seq(snapshot))

    def iterator(
        self, lower_bound=None, upper_bound=None, snapshot=None, *, prefix=None, reverse=False, start=None,
        stop=None, include_start=True, include_stop=False, include_key=True, include_value=True,
    ) -> DBIterator:
        """A cursor (RocksDB style): seek it, or iterate it (``for k, v in db.iterator()``)
        from its first key (its last with ``reverse``).  The range arguments are those of
        :meth:`items` (``start``/``stop`` are plyvel's names for ``lower_bound``/``upper_bound``);
        ``include_key``/``include_value`` say what iterating yields, as in plyvel: a key-only
        cursor reads no value from the value log until ``value()`` asks for it."""
        lo, hi = scan_range(
            ("lower_bound", lower_bound), ("start", start), ("upper_bound", upper_bound), ("stop", stop),
            include_start, include_stop, prefix,
        )
        if not isinstance(reverse, bool):
            raise TypeError(f"reverse must be a bool, not {type(reverse).__name__}")
        shape = yielded_shape(include_key, include_value)
        return DBIterator(self._view(snapshot), lo, hi, reverse, shape)

    def key_versions(self, begin=None, end=None) -> Iterator[KeyVersion]:
        """Every stored version of the keys in ``[begin, end)`` -- older versions, deletions,
        range deletions, value pointers -- as :class:`~antkv.read.key_versions.KeyVersion`
        records, key ascending then newest first (RocksDB's ``GetAllKeyVersions``; ``antkv
        idump``).  A debugging view of the current state, not a snapshot read."""
        lo = None if begin is None else as_bytes(begin, "begin")
        hi = None if end is None else as_bytes(end, "end")
        self._check_open()
        return key_versions(self._sv, self._open_table, lo, hi)

    def multi_get(self, keys, *, snapshot=None) -> list:
        """The values of ``keys`` (None for an absent key), all read at one sequence number.
        ``keys`` is an iterable of keys: one key (bytes-like or ``str``) is a TypeError."""
        if isinstance(keys, (bytes, bytearray, memoryview, str)):
            raise TypeError(f"multi_get takes an iterable of keys (e.g. a list), not one {type(keys).__name__}")
        keys = [as_bytes(k, "key") for k in keys]
        if snapshot is not None:
            return [self.get(k, snapshot=snapshot) for k in keys]
        with self.snapshot() as snap:
            return [self.get(k, snapshot=snap) for k in keys]

    def approximate_size(self, begin=None, end=None) -> int:
        """Estimated bytes on disk of the keys in ``[begin, end)``: tables and the value-log
        records they point to (memtables not counted; ``antkv/read/sizes.py``)."""
        lo = None if begin is None else as_bytes(begin, "begin")
        hi = None if end is None else as_bytes(end, "end")
        if lo is not None and hi is not None and lo > hi:
            raise InvalidArgumentError(f"approximate_size: begin {lo!r} > end {hi!r}")
        self._check_open()
        return approximate_size(self._sv.version, self._open_table, lo, hi)

    def items(
        self, start=None, stop=None, *, prefix=None, reverse=False, snapshot=None, lower_bound=None,
        upper_bound=None, include_start=True, include_stop=False, include_key=True, include_value=True,
        from_key=None, backwards=None,
    ) -> Iterator:
        """``(key, value)`` for keys in ``[start, stop)`` (and with ``prefix``), ascending or not.

        The range arguments, the same for :meth:`iterator`, :meth:`keys` and :meth:`values`:
        ``start``/``stop`` (or RocksDB's names ``lower_bound``/``upper_bound``; one of each pair),
        ``include_start=True``/``include_stop=False`` (plyvel's), ``prefix`` (intersected with
        the bounds), ``reverse``.  ``include_key=False`` or ``include_value=False`` yields values
        or keys alone, as plyvel's iterator does (the same as :meth:`values`, :meth:`keys`).
        rocksdict's ``backwards`` is ``reverse``, and its ``from_key`` the key the scan starts
        at (inclusive): ``start`` going forward, an included ``stop`` going backwards."""
        mode = {(True, True): "items", (True, False): "keys", (False, True): "values"}[
            yielded_shape(include_key, include_value)
        ]
        return self._scan(start, lower_bound, stop, upper_bound, include_start, include_stop, prefix, reverse,
                          snapshot, mode, from_key, backwards)

    def keys(
        self, start=None, stop=None, *, prefix=None, reverse=False, snapshot=None, lower_bound=None,
        upper_bound=None, include_start=True, include_stop=False, from_key=None, backwards=None,
    ) -> Iterator[bytes]:
        """The keys of :meth:`items` (no value is read)."""
        return self._scan(start, lower_bound, stop, upper_bound, include_start, include_stop, prefix, reverse,
                          snapshot, "keys", from_key, backwards)

    def values(
        self, start=None, stop=None, *, prefix=None, reverse=False, snapshot=None, lower_bound=None,
        upper_bound=None, include_start=True, include_stop=False, from_key=None, backwards=None,
    ) -> Iterator[bytes]:
        """The values of :meth:`items`."""
        return self._scan(start, lower_bound, stop, upper_bound, include_start, include_stop, prefix, reverse,
                          snapshot, "values", from_key, backwards)

    def _scan(self, start, lower_bound, stop, upper_bound, include_start, include_stop, prefix, reverse, snapshot, mode,
              from_key, backwards):
        if backwards is not None:  # rocksdict's names
            if not isinstance(backwards, bool) or reverse:
                raise TypeError("backwards (rocksdict's name of reverse) must be a bool, and not given with reverse")
            reverse = backwards
        if not isinstance(reverse, bool):
            raise TypeError(f"reverse must be a bool, not {type(reverse).__name__}")
        if from_key is not None:
            if reverse:
                stop, upper_bound, include_stop = _one_bound("stop", stop, upper_bound, from_key), None, True
            else:
                start, lower_bound, include_start = _one_bound("start", start, lower_bound, from_key), None, True
        lo, hi = scan_range(
            ("start", start), ("lower_bound", lower_bound), ("stop", stop), ("upper_bound", upper_bound),
            include_start, include_stop, prefix,
        )
        return self._view(snapshot).items(lo, hi, reverse, mode)

    def snapshot(self) -> Snapshot:
        """A snapshot of the current state (release it when done)."""
        with self._write_lock:
            self._check_open()
            snap = Snapshot(self, self._last_seq, self._snapshots)
            self._snapshots.add(snap.sequence)
            return snap

    # the mapping protocol's reads (its writes are DB's, in database.py)
    def __getitem__(self, key) -> bytes:
        v = self.get(key)
        if v is None:
            raise KeyError(key)
        return v

    def __contains__(self, key) -> bool:
        return self.key_may_exist(key)

    def __iter__(self) -> Iterator[bytes]:
        return self.keys()


def _one_bound(name: str, value, alias, from_key):
    """``from_key`` as the bound ``name`` (whose RocksDB alias is ``alias``), given alone."""
    if value is not None or alias is not None:
        raise TypeError(f"from_key is the {name} of this scan: give one of them")
    return from_key
