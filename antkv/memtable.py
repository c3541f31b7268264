"""The memtable: the newest writes, in memory, until they are flushed to an L0 table.

A memtable holds two structures, as RocksDB does:

* the *point memtable*: ``versions`` maps a user key to the list of its ``(seq, kind, value)``
  versions in ascending sequence order (the newest is last), and ``keys`` (a
  ``sortedcontainers.SortedList``) holds every user key in order for iteration;
* the *range-tombstone memtable*: the list of ``(begin, end, seq)`` from ``delete_range``, with a
  fragmented view (:mod:`antkv.rangedel`) built lazily and cached until the next tombstone.

Invariants: every key of ``versions`` is in ``keys`` exactly once and vice versa; each version
list is strictly ascending in seq; ``first_seq``/``last_seq`` bound every seq held.

Concurrency: one writer at a time (the DB's write lock).  Readers call :meth:`get` without a
lock (dict and list reads are atomic in CPython); iterators read ``keys`` in chunks under
``lock``, which the writer also takes to add a new key, so a chunk never sees a half-done insert.

``memory`` is an honest estimate of the bytes the memtable occupies in this process (object
headers, dict and list slots), not just payload; the write buffer manager counts it.
"""

from __future__ import annotations

import itertools
import threading
from itertools import islice
from typing import Iterator

from sortedcontainers import SortedList

from .rangedel import EMPTY, FragmentedRangeTombstones, fragment

# Per-entry overhead estimates in CPython 3.11 (bytes): a version tuple (64) + list slot (8),
# and for a new key also the dict slot (~100 with resizing slack), the list (56+), the
# SortedList slot (~16) and the key object header (33).
VERSION_OVERHEAD = 72
NEW_KEY_OVERHEAD = 210
RANGE_DEL_OVERHEAD = 200
_CHUNK = 256  # keys read per lock hold by iterators
_FIRST_WRITE_CLOCK = itertools.count(1)  # process-wide: orders memtables of all databases


class MemTable:
    __slots__ = (
        "id",
        "versions",
        "keys",
        "range_dels",
        "_fragments",
        "memory",
        "num_entries",
        "num_deletes",
        "num_range_deletes",
        "first_seq",
        "last_seq",
        "lock",
        "log_number",
        "created",
        "data_bytes",
        "first_vlog",
    )

    def __init__(self, id: int = 0, log_number: int = 0, first_vlog: int | None = None):
        self.id = id
        self.versions: dict[bytes, list[tuple[int, int, bytes]]] = {}
        self.keys = SortedList()
        self.range_dels: list[tuple[bytes, bytes, int]] = []
        self._fragments: FragmentedRangeTombstones | None = EMPTY
        self.memory = 0
        self.num_entries = 0
        self.num_deletes = 0
        self.num_range_deletes = 0
        self.first_seq = 0
        self.last_seq = 0
        self.lock = threading.Lock()
        self.log_number = log_number  # the WAL that holds this memtable's writes
        self.created = 0  # process-wide clock at the first write: smaller = older data
        self.data_bytes = 0  # user key + value bytes added
        self.first_vlog = first_vlog  # value-log files this memtable may point into are >= it

    # --- writes (REQUIRES: the DB's write lock) ---

    def add(self, seq: int, kind: int, key: bytes, value: bytes) -> int:
        """Add a point entry; returns the memory it added."""
        lst = self.versions.get(key)
        if lst is None:
            self.versions[key] = [(seq, kind, value)]
            with self.lock:
                self.keys.add(key)
            added = NEW_KEY_OVERHEAD + len(key) + len(value)
        else:
            lst.append((seq, kind, value))
            added = VERSION_OVERHEAD + len(value)
        self.memory += added
        self.num_entries += 1
        self.data_bytes += len(key) + len(value)
        if not self.first_seq:
            self.first_seq = seq
            self.created = next(_FIRST_WRITE_CLOCK)
        self.last_seq = seq
        return added

    def add_range_deletion(self, seq: int, begin: bytes, end: bytes) -> int:
        self.range_dels.append((begin, end, seq))
        self._fragments = None
        added = RANGE_DEL_OVERHEAD + len(begin) + len(end)
        self.memory += added
        self.num_range_deletes += 1
        self.data_bytes += len(begin) + len(end)
        if not self.first_seq:
            self.first_seq = seq
            self.created = next(_FIRST_WRITE_CLOCK)
        self.last_seq = seq
        return added

    # --- reads ---

    def is_empty(self) -> bool:
        return not self.versions and not self.range_dels

    def get(self, key: bytes, read_seq: int) -> tuple[int, int, bytes] | None:
        """Newest ``(seq, kind, value)`` of ``key`` with seq <= ``read_seq``, or None."""
        lst = self.versions.get(key)
        if lst is None:
            return None
        e = lst[-1]
        if e[0] <= read_seq:
            return e
        for e in reversed(lst):
            if e[0] <= read_seq:
                return e
        return None

    def fragments(self) -> FragmentedRangeTombstones:
        """The fragmented range tombstones (cached until the next ``add_range_deletion``)."""
        f = self._fragments
        if f is None:
            f = self._fragments = fragment(list(self.range_dels))
        return f

    def _key_chunks_forward(self, start: bytes | None) -> Iterator[list[bytes]]:
        keys = self.keys
        lo, inclusive = start, True
        while True:
            with self.lock:
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
        for chunk in self._key_chunks_forward(start):
            for key in chunk:
                lst = versions[key]
                if len(lst) == 1:
                    seq, kind, value = lst[0]
                    yield (key, -seq, kind, value)
                else:
                    for seq, kind, value in reversed(lst[:]):
                        yield (key, -seq, kind, value)

    def iter_backward(self, start: bytes | None = None) -> Iterator[tuple[bytes, int, int, bytes]]:
        """Entry tuples in reverse internal order from ``key <= start``."""
        versions = self.versions
        for chunk in self._key_chunks_backward(start):
            for key in chunk:
                for seq, kind, value in versions[key][:]:
                    yield (key, -seq, kind, value)

    def _check(self) -> None:
        assert len(self.keys) == len(self.versions)
        for k in self.keys:
            lst = self.versions[k]
            assert all(lst[i][0] < lst[i + 1][0] for i in range(len(lst) - 1))
        self.fragments()._check()
