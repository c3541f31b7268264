"""The memtable: the newest writes, in memory, until they are flushed to an L0 table.

A memtable holds two structures, as RocksDB does:

* the *point memtable*: ``versions`` maps a user key to its newest ``(seq, kind, value)``, and
  ``older`` maps the keys that have older versions to them, in ascending sequence order: a
  tuple while there are at most :data:`TUPLE_VERSIONS`, a list beyond.  A tuple of atoms (or of
  such tuples) is ignored by CPython's cyclic garbage collector where a list is not: with lists,
  the collector's passes over a memtable of a few hundred thousand keys cost ~40% of the insert
  time, and a memtable where most keys were overwritten paid it again (a Spark state store
  rewriting every key each batch: ~15% of its processing).  A tuple is replaced by a longer one
  on each new version, so a key rewritten more often gets a list, which grows in place.  ``keys`` (a
  ``sortedcontainers.SortedList``) plus ``pending`` (new keys not sorted in yet) hold every user
  key.  A put only appends to ``pending``: sorting happens in bulk, in C, the first time an
  iterator needs order (:meth:`_settle`), which keeps the put path free of per-key sorting;
* the *range-tombstone memtable*: the list of ``(begin, end, seq)`` from ``delete_range``, with a
  fragmented view (:mod:`antkv.memtable.rangedel`) built lazily and cached with the number of
  tombstones it was built from: a reader builds it without a lock, so a tombstone may be added
  between its copy of the list and its store of the view, and a view of fewer tombstones than the
  list holds is never used again (:meth:`MemTable.fragments`).

Invariants: every key of ``versions`` is in exactly one of ``keys`` and ``pending``, once;
``older[k]`` (a tuple or a list) is strictly ascending in seq and older than ``versions[k]``.
With ``Options.inplace_update_support`` the writer adds through :meth:`add_batch_pruning`,
which keeps only the versions a live snapshot or pinned iterator can see (RocksDB's in-place
update, without its loss of snapshot consistency).

Concurrency: one writer at a time (the DB's write lock); it never takes ``lock``.  Readers call
:meth:`get` without a lock (dict and list reads are atomic in CPython).  The writer appends the
replaced version to ``older`` *before* it stores the new one in ``versions``, and readers read
``versions`` first: a reader that sees the new version therefore finds the old one in ``older``
(it may see one version twice, which the merge tolerates, but never misses one).  Iterators take ``lock``
(among themselves) to move ``pending`` into ``keys`` and to read ``keys`` in chunks.  Moving is
safe against a concurrent writer because it only uses atomic list operations: it takes the first
``n`` pending keys by slice and deletes exactly that slice, so a key appended meanwhile stays.

``memory`` is an honest estimate of the bytes the memtable occupies in this process (object
headers, dict and list slots), not just payload; the write buffer manager counts it.
"""

from __future__ import annotations

import itertools
import threading
from itertools import islice
from typing import Iterator

from sortedcontainers import SortedList

from ..base.dbformat import RANGE_DELETION, VALUE
from .rangedel import EMPTY, FragmentedRangeTombstones, fragment

# Per-entry memory in CPython 3.11, measured with tracemalloc (tests/test_memtable_memory.py
# keeps these honest): a new key costs its dict slot, the version tuple, its SortedList slot and
# the two bytes-object headers (33 B each) beyond the payload; another version of an existing
# key costs the tuple, a slot in its ``older`` list and the value's object header.
VERSION_OVERHEAD = 138
TUPLE_VERSIONS = 8  # older versions of a key kept in a tuple; more go into a list
NEW_KEY_OVERHEAD = 230
RANGE_DEL_OVERHEAD = 200
_CHUNK = 256  # keys read per lock hold by iterators


class MemTable:
    __slots__ = (
        "id",
        "versions",
        "keys",
        "range_dels",
        "_fragments",
        "memory",
        "num_range_deletes",
        "lock",
        "log_number",
        "first_vlog",
        "pending",
        "older",
        "flush_waited",
        "flushing",
        "pruned",
    )

    def __init__(self, id: int = 0, log_number: int = 0, first_vlog: int | None = None):
        self.id = id
        self.versions: dict[bytes, tuple[int, int, bytes]] = {}
        self.older: dict[bytes, tuple | list] = {}  # key -> its older (seq, kind, value), ascending
        self.keys = SortedList()
        self.pending: list[bytes] = []
        self.range_dels: list[tuple[bytes, bytes, int]] = []
        self._fragments: tuple[int, FragmentedRangeTombstones] = (0, EMPTY)  # (tombstones it covers, view)
        self.memory = 0
        self.num_range_deletes = 0
        self.lock = threading.Lock()
        self.log_number = log_number  # the WAL that holds this memtable's writes
        self.first_vlog = first_vlog  # value-log files this memtable may point into are >= it
        self.flush_waited = False  # a ``flush(wait=True)`` call waits for this memtable's flush
        self.flushing = False  # a background thread is writing this (immutable) memtable's table
        self.pruned = False  # add_batch_pruning dropped a version a reader without a snapshot may have wanted

    # --- writes (REQUIRES: the DB's write lock) ---


    @classmethod
    def from_contents(cls, versions: dict, older: dict, range_dels: list) -> "MemTable":
        """An immutable memtable holding what ``(versions, older, range_dels)`` of another one
        held (a flush job's input, rebuilt in a worker process)."""
        mem = cls()
        mem.versions, mem.older, mem.range_dels = versions, older, range_dels
        mem.pending = list(versions)  # sorted into ``keys`` by the first iterator
        return mem

    def add(self, seq: int, kind: int, key: bytes, value: bytes) -> int:
        """Add a point entry; returns the memory it added.  (``DB.put`` inlines
        :meth:`add_batch`; ``tests/test_put_path.py`` keeps the two the same.)"""
        return self.add_batch(seq, ((kind, key, value),))

    def add_batch(self, seq: int, ops) -> int:
        """Add every ``(kind, key, value)`` of ``ops``, the i-th at ``seq + i`` (a range
        deletion's key and value are its begin and end); returns the memory added."""
        versions, older_of, pending = self.versions, self.older, self.pending
        added = ranges = 0
        for kind, key, value in ops:
            if kind == RANGE_DELETION:
                ranges += self.add_range_deletion(seq, key, value)
                seq += 1
                continue
            old = versions.get(key)
            if old is None:
                versions[key] = (seq, kind, value)
                pending.append(key)
                added += NEW_KEY_OVERHEAD + len(key) + len(value)
            else:
                older = older_of.get(key)
                if older is None:
                    older_of[key] = (old,)
                elif type(older) is list:
                    older.append(old)
                else:
                    older_of[key] = older + (old,) if len(older) < TUPLE_VERSIONS else [*older, old]
                versions[key] = (seq, kind, value)  # after the append: see the module docstring
                added += VERSION_OVERHEAD + len(value)
            seq += 1
        self.memory += added  # (add_range_deletion counted its own)
        return added + ranges

    def add_batch_pruning(self, seq: int, ops, oldest: int, newest: int) -> int:
        """:meth:`add_batch`, keeping no version that no reader can see (``inplace_update_support``):
        live snapshots (and pinned iterators) are at sequence numbers ``oldest`` to ``newest``
        (``oldest > newest`` when there are none).  A value or deletion that replaces a value or
        deletion ``old`` of its key

        * *replaces* ``old`` (one dict store) when ``old`` is newer than ``newest``: no reader
          sees it (and with no reader at all, the key's older versions go too);
        * keeps ``old`` as the key's only older version when ``old`` is no newer than
          ``oldest``: every reader sees ``old`` or a newer version, never those before it
          (dropped only when they too are values or deletions: a dropped value pointer's bytes
          would be garbage the value log never learns of, and merge operands stay);
        * is added as :meth:`add_batch` adds it otherwise, and for every other kind.

        A reader with no snapshot may therefore meet a newest version newer than its read
        sequence and none it can see below it: ``DB.get`` reads again then
        (:attr:`pruned` tells it when that can happen).  Returns the memory added: what a batch
        frees (shorter values, dropped versions) is not subtracted, so ``memory`` is the
        memtable's high-water mark, and the write buffer manager, told of each increase, gets
        back at the flush exactly what it was told."""
        if newest < 0:
            return self._add_unread(seq, ops)
        versions, older_of, pending = self.versions, self.older, self.pending
        own = other = 0  # memory added here, and by add_batch (which counts its own)
        for op in ops:
            kind, key, value = op
            old = versions.get(key) if kind <= VALUE else None  # (DELETION 0, VALUE 1)
            if old is None:
                if kind <= VALUE:  # a new key
                    versions[key] = (seq, kind, value)
                    pending.append(key)
                    own += NEW_KEY_OVERHEAD + len(key) + len(value)
                else:
                    other += self.add_batch(seq, (op,))
            elif old[1] > VALUE:
                other += self.add_batch(seq, (op,))
            elif old[0] > newest:  # no reader sees old: replaced
                versions[key] = (seq, kind, value)
                own += len(value) - len(old[2])
                self.pruned = True
                if newest < 0 and older_of:  # no reader at all: the older versions go too
                    dropped = older_of.get(key)
                    if dropped is not None and all(e[1] <= VALUE for e in dropped):
                        del older_of[key]
                        own -= sum([VERSION_OVERHEAD + len(e[2]) for e in dropped])
            elif old[0] > oldest:  # a reader may see a version before old
                other += self.add_batch(seq, (op,))
            else:
                dropped = older_of.get(key)
                if dropped is None:
                    older_of[key] = (old,)
                    own += VERSION_OVERHEAD + len(value)
                elif len(dropped) == 1 and dropped[0][1] <= VALUE:
                    older_of[key] = (old,)
                    own += len(value) - len(dropped[0][2])
                    self.pruned = True
                elif all(e[1] <= VALUE for e in dropped):
                    older_of[key] = (old,)
                    own += VERSION_OVERHEAD + len(value) - sum([VERSION_OVERHEAD + len(e[2]) for e in dropped])
                    self.pruned = True
                else:
                    other += self.add_batch(seq, (op,))
                    seq += 1
                    continue
                versions[key] = (seq, kind, value)  # after older: see the module docstring
            seq += 1
        if own < 0:
            own = 0  # (memory never shrinks: the write buffer manager was told of it, and a flush frees it whole)
        self.memory += own
        return own + other

    def _add_unread(self, seq: int, ops) -> int:
        """:meth:`add_batch_pruning` when no snapshot nor pinned iterator is live (``newest <
        0``), in one loop: a value or deletion replaces a value or deletion of its key, which
        loses its older versions too when they are all values and deletions; any other entry
        is added as :meth:`add_batch` adds it.  :attr:`pruned` is set before the first
        replacement a reader could meet."""
        versions, older_of, pending = self.versions, self.older, self.pending
        get = versions.get
        own = other = 0  # memory added here, and by add_batch (which counts its own)
        for op in ops:
            kind, key, value = op
            old = get(key) if kind <= VALUE else None  # (DELETION 0, VALUE 1)
            if old is not None and old[1] <= VALUE:  # no reader sees old: replaced
                if not self.pruned:
                    self.pruned = True
                versions[key] = (seq, kind, value)
                own += len(value) - len(old[2])
                if older_of:
                    dropped = older_of.get(key)
                    if dropped is not None and all(e[1] <= VALUE for e in dropped):
                        del older_of[key]
                        own -= sum([VERSION_OVERHEAD + len(e[2]) for e in dropped])
            elif old is None and kind <= VALUE:  # a new key
                versions[key] = (seq, kind, value)
                pending.append(key)
                own += NEW_KEY_OVERHEAD + len(key) + len(value)
            else:
                other += self.add_batch(seq, (op,))
            seq += 1
        if own < 0:
            own = 0  # (as add_batch_pruning: memory never shrinks)
        self.memory += own
        return own + other

    def add_range_deletion(self, seq: int, begin: bytes, end: bytes) -> int:
        self.range_dels.append((begin, end, seq))  # (a view cached from fewer is rebuilt by the next reader: fragments)
        added = RANGE_DEL_OVERHEAD + len(begin) + len(end)
        self.memory += added
        self.num_range_deletes += 1
        return added

    # --- reads ---

    def is_empty(self) -> bool:
        return not self.versions and not self.range_dels

    def get(self, key: bytes, read_seq: int) -> tuple[int, int, bytes] | None:
        """Newest ``(seq, kind, value)`` of ``key`` with seq <= ``read_seq``, or None."""
        e = self.versions.get(key)
        if e is None or e[0] <= read_seq:
            return e
        for e in reversed(self.older.get(key, ())[:]):
            if e[0] <= read_seq:
                return e
        return None

    def fragments(self) -> FragmentedRangeTombstones:
        """The fragmented range tombstones, built once per count of tombstones.  ``range_dels``
        only grows, so a cached view is current exactly when it was built from as many
        tombstones as the list holds.  A reader builds the view without a lock, and a writer
        may add a tombstone between the reader's copy of the list and its store of the view:
        the view stored then covers fewer tombstones than the list holds, and the next reader
        builds it again (a view cached as current would hide that tombstone from every later
        point read of this memtable)."""
        built, f = self._fragments
        n = len(self.range_dels)
        if built != n:
            f = fragment(self.range_dels[:n])
            self._fragments = (n, f)
        return f

    def _settle(self) -> None:
        """REQUIRES ``lock``.  Sort the pending keys into ``keys`` (see the module docstring)."""
        pending = self.pending
        n = len(pending)
        if n:
            self.keys.update(pending[:n])
            del pending[:n]

    def _key_chunks_forward(self, start: bytes | None) -> Iterator[list[bytes]]:
        keys = self.keys
        lo, inclusive = start, True
        while True:
            with self.lock:
                self._settle()
                if lo is None:
                    chunk = list(islice(keys, _CHUNK))
                else:
                    chunk = list(islice(keys.irange(lo, None, (inclusive, True)), _CHUNK))
            if not chunk:
                return
            yield chunk
            if len(chunk) < _CHUNK:
                return
            lo, inclusive = chunk[-1], False

    def _key_chunks_backward(self, start: bytes | None) -> Iterator[list[bytes]]:
        keys = self.keys
        hi, inclusive = start, True
        while True:
            with self.lock:
                self._settle()
                chunk = list(islice(keys.irange(None, hi, (True, inclusive), reverse=True), _CHUNK))
            if not chunk:
                return
            yield chunk
            if len(chunk) < _CHUNK:
                return
            hi, inclusive = chunk[-1], False

    def iter_forward(self, start: bytes | None = None) -> Iterator[tuple[bytes, int, int, bytes]]:
        """Entry tuples ``(key, -seq, kind, value)`` in internal order from ``key >= start``."""
        versions = self.versions
        older = self.older
        for chunk in self._key_chunks_forward(start):
            for key in chunk:
                seq, kind, value = versions[key]
                yield (key, -seq, kind, value)
                if key in older:
                    for oseq, okind, ovalue in reversed(older[key][:]):
                        if oseq < seq:  # a version replaced meanwhile may show up twice
                            yield (key, -oseq, okind, ovalue)

    def iter_backward(self, start: bytes | None = None) -> Iterator[tuple[bytes, int, int, bytes]]:
        """Entry tuples in reverse internal order from ``key <= start``."""
        versions = self.versions
        older = self.older
        for chunk in self._key_chunks_backward(start):
            for key in chunk:
                newest = versions[key]
                if key in older:
                    for oseq, okind, ovalue in older[key][:]:
                        if oseq < newest[0]:
                            yield (key, -oseq, okind, ovalue)
                yield (key, -newest[0], newest[1], newest[2])

    @property
    def num_entries(self) -> int:
        """Point entries held (O(keys): for statistics, not for hot paths)."""
        return len(self.versions) + sum(map(len, self.older.values()))

    @property
    def data_bytes(self) -> int:
        """User key and value bytes held (an estimate: memory minus per-entry overheads)."""
        return max(0, self.memory - NEW_KEY_OVERHEAD * len(self.versions))

    def _check(self) -> None:
        with self.lock:
            self._settle()
        assert len(self.keys) == len(self.versions)
        for k in self.keys:
            lst = [*self.older.get(k, ()), self.versions[k]]
            assert all(lst[i][0] < lst[i + 1][0] for i in range(len(lst) - 1)), k
        assert set(self.older) <= set(self.versions)
        self.fragments()._check()
