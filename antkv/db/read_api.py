"""The read API of a database: point reads, scans, cursors, snapshots, the mapping protocol.

:class:`ReadAPI` is the part of :class:`~antkv.db.DB` that reads.  How a read travels: take the
current *super version* (mutable memtable, immutable memtables, table version: replaced
atomically, never mutated, so read without a lock) and a read sequence number (the snapshot's,
or the last published one); search newest to oldest, stopping at the first version or covering
range tombstone (:mod:`antkv.read` does the searching).  Reads take no lock but the snapshot
list's.
"""

from __future__ import annotations

from typing import Iterator

from ..base.dbformat import DELETION, EXPIRING, MERGE, VALUE, VALUE_POINTER
from ..base.expiry import live_inner, now_ms
from ..base.merge_operator import missing_operator
from ..errors import InvalidArgumentError
from ..read.iterators import DBIterator
from ..read.scan_arguments import scan_range, yielded_shape
from ..read.key_versions import KeyVersion, key_versions
from ..read.read_view import ReadView
from ..read.sizes import approximate_size
from ..read.snapshot import ReadPin, Snapshot
from ..record.batch import as_bytes
from .state import DBState


class ReadAPI(DBState):
    """Part of :class:`~antkv.db.DB`: reading (calls only :class:`~antkv.db.state.DBState`)."""

    def _entry_value(self, key: bytes, kind: int, value: bytes, sv, read_seq: int, default):
        """The value a point read returns for the newest visible entry of ``key`` when its kind
        is not VALUE (a DELETION never gets here): a value pointer resolved, an expiring entry
        unwrapped (``default`` once expired), or the key's operands merged onto its base."""
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
        the list of their values (rocksdict's list ``get``; :meth:`multi_get`)."""
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
        e = sv.table_get(key, read_seq, self._open_table)
        if e is None:
            return default
        if e[1] == VALUE:
            return e[2]
        if e[1] == DELETION:
            return default
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
        read_seq = self._read_seq(snapshot)
        if fetch:
            value = self.get(key, snapshot=snapshot)
            return value is not None, value
        e = self._newest_entry(key, read_seq, snapshot is None)
        if e is None:
            return False
        if e[1] == EXPIRING:
            return live_inner(e[2], now_ms(self.options.clock)) is not None
        return True  # a value, a value pointer, or merge operands (onto a base or onto nothing)

    def _newest_entry(self, key: bytes, read_seq: int, unpinned: bool = False):
        """The newest ``(seq, kind, value)`` of ``key`` visible at ``read_seq``, value pointers
        unresolved, or None where it reads as absent (deleted, range-deleted, never written).
        :meth:`get` runs the same search fused with its value step.  ``unpinned``: ``read_seq``
        is no snapshot's, so a later one serves as well (see :meth:`_await_published`)."""
        sv = self._sv
        tomb = 0
        for mem in sv.memtables:
            e = mem.get(key, read_seq)
            if e is None and unpinned and mem.pruned:
                newest = mem.versions.get(key)
                if newest is not None and newest[0] > read_seq:
                    self._await_published()
                    return self._newest_entry(key, self._last_seq, True)
            if mem.range_dels:
                tomb = max(tomb, mem.fragments().max_covering_seq(key, read_seq))
            if e is not None:
                return None if tomb > e[0] or e[1] == DELETION else e
            if tomb:
                return None
        e = sv.table_get(key, read_seq, self._open_table)
        return None if e is None or e[1] == DELETION else e

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
