"""Iteration over the whole LSM: merged sources, visibility, and the user-facing cursor.

Every source (memtable, L0 table, sorted level) yields *entry tuples*
``(user_key, -seq, kind, value)`` in internal order (or exactly reversed), so ``heapq.merge``
merges them with C-level tuple comparisons.  On top of the merge, :func:`visible_forward` and
:func:`visible_backward` apply what a reader at sequence ``read_seq`` may see:

* versions newer than ``read_seq`` are invisible;
* the newest visible version of each key decides it: a DELETION hides the key, a VALUE or
  VALUE_POINTER shows it;
* a range tombstone with ``entry seq < tombstone seq <= read_seq`` covering the key hides it.

Range tombstones come as one fragmented view over every source (:mod:`antkv.memtable.rangedel`),
already restricted to ``read_seq``; an index walks it in step with the keys, moving by binary
search, so a scan starting deep inside thousands of fragments does not step through them.
Before merging, each table-backed source skips the spans that a tombstone of a *newer* source
covers with one seek (keys in older sources are always older than tombstones in newer
sources), so a deleted range is never read key by key.

:class:`DBIterator` is the RocksDB-style cursor.  It keeps one generator in the current
direction and rebuilds it on a seek or a change of direction.

This is the general, per-entry path: the cursor and every scan with a range tombstone in
view take it.  ``items()``/``keys()``/``values()`` (either direction) with no range tombstone
in view take the batched path of :mod:`antkv.read.runs`, which must agree with it
(``tests/test_scan_runs.py``).  :class:`LevelSource` serves both paths.
"""

from __future__ import annotations

import heapq
from itertools import chain
from bisect import bisect_right
from typing import Callable, Iterator

from ..base.dbformat import DELETION, EXPIRING, VALUE, VALUE_POINTER
from ..base.expiry import live_inner
from ..errors import DBClosedError, InvalidArgumentError
from ..memtable.rangedel import FragmentedRangeTombstones
from ..record.batch import as_bytes

Entry = tuple  # (user_key, neg_seq, kind, value)


def merge_forward(sources: list[Iterator[Entry]]) -> Iterator[Entry]:
    if len(sources) == 1:
        return sources[0]
    return heapq.merge(*sources)


def merge_backward(sources: list[Iterator[Entry]]) -> Iterator[Entry]:
    if len(sources) == 1:
        return sources[0]
    return heapq.merge(*sources, reverse=True)


def visible_forward(
    merged: Iterator[Entry],
    read_seq: int,
    frags: FragmentedRangeTombstones | None,
    upper: bytes | None,
    last: bytes | None = None,
    now: int = 0,
) -> Iterator[tuple[bytes, int, bytes]]:
    """``(key, kind, value)`` of every visible key in ascending order, below ``upper``.

    ``kind`` is VALUE or VALUE_POINTER (the pointer is NOT resolved: callers resolve it, so a
    scan can prefetch).  ``last`` resumes a scan: versions of that key are skipped.  An
    EXPIRING entry is unwrapped, or hides its key once expired at ``now`` (ms).
    """
    neg_read = -read_seq
    if not frags:
        for key, nseq, kind, value in merged:
            if nseq < neg_read or key == last:
                continue
            last = key
            if upper is not None and key >= upper:
                return
            if kind != DELETION:
                if kind == EXPIRING:
                    live = live_inner(value, now)
                    if live is None:
                        continue
                    kind, value = live
                yield key, kind, value
        return
    starts, ends, seqs = frags.starts, frags.ends, frags.seqs
    nfrag = len(starts)
    fi = 0
    for key, nseq, kind, value in merged:
        if nseq < neg_read or key == last:
            continue
        last = key
        if upper is not None and key >= upper:
            return
        if kind == DELETION:
            continue
        if fi < nfrag and ends[fi] <= key:
            fi = bisect_right(ends, key, fi + 1)
        if fi < nfrag and starts[fi] <= key and seqs[fi][0] > -nseq:
            continue  # covered by a newer range tombstone
        if kind == EXPIRING:
            live = live_inner(value, now)
            if live is None:
                continue
            kind, value = live
        yield key, kind, value


def visible_backward(
    merged: Iterator[Entry],
    read_seq: int,
    frags: FragmentedRangeTombstones | None,
    lower: bytes | None,
    now: int = 0,
) -> Iterator[tuple[bytes, int, bytes]]:
    """``(key, kind, value)`` of every visible key in descending order, at or above ``lower``
    (EXPIRING entries as in :func:`visible_forward`)."""
    starts = ends = seqs = None
    if frags:
        starts, ends, seqs = frags.starts, frags.ends, frags.seqs
    fi = len(starts) - 1 if starts else -1
    cur_key = None
    cur = None  # newest visible version of cur_key seen so far: (seq, kind, value)
    # a sentinel entry ends the stream so the last key is decided by the same code as the rest
    for key, nseq, kind, value in chain(merged, _END_OF_STREAM):
        if key != cur_key:
            if cur is not None and cur[1] != DELETION:
                if starts is not None and fi >= 0 and starts[fi] > cur_key:
                    fi = bisect_right(starts, cur_key, 0, fi) - 1
                if starts is None or not (fi >= 0 and cur_key < ends[fi] and seqs[fi][0] > cur[0]):
                    if cur[1] != EXPIRING:
                        yield cur_key, cur[1], cur[2]
                    else:
                        live = live_inner(cur[2], now)
                        if live is not None:
                            yield cur_key, live[0], live[1]
            if key is None or (lower is not None and key < lower):
                return
            cur_key = key
            cur = None
        if -nseq <= read_seq:
            cur = (-nseq, kind, value)


_END_OF_STREAM = ((None, 0, DELETION, b""),)


def live_triples(triples: Iterator[tuple], now: int) -> Iterator[tuple[bytes, int, bytes]]:
    """``(key, kind, value)`` triples with EXPIRING entries unwrapped, and dropped once expired
    at ``now`` (ms)."""
    for t in triples:
        if t[1] != EXPIRING:
            yield t
        else:
            live = live_inner(t[2], now)
            if live is not None:
                yield t[0], live[0], live[1]


def skip_covered_forward(
    source: Iterator[Entry], reopen: Callable[[bytes], Iterator[Entry]], newer: FragmentedRangeTombstones
) -> Iterator[Entry]:
    """Entries of ``source`` outside the fragments of ``newer`` (tombstones of newer sources).

    When an entry falls inside a fragment, the source is re-opened at the fragment's end with
    one seek (``reopen(end)``) instead of being stepped through key by key.
    """
    starts, ends = newer.starts, newer.ends
    n = len(starts)
    fi = 0
    while True:
        jumped = False
        for e in source:
            key = e[0]
            if fi < n and ends[fi] <= key:
                fi = bisect_right(ends, key, fi + 1)
            if fi < n and starts[fi] <= key:
                source = reopen(ends[fi])
                jumped = True
                break
            yield e
        if not jumped:
            return


def skip_covered_backward(
    source: Iterator[Entry], reopen: Callable[[bytes], Iterator[Entry]], newer: FragmentedRangeTombstones
) -> Iterator[Entry]:
    """Reverse twin of :func:`skip_covered_forward`: jumps to just before a fragment's start.

    ``reopen(start)`` must yield entries with key < ``start``.
    """
    starts, ends = newer.starts, newer.ends
    fi = len(starts) - 1
    while True:
        jumped = False
        for e in source:
            key = e[0]
            if fi >= 0 and starts[fi] > key:
                fi = bisect_right(starts, key, 0, fi) - 1
            if fi >= 0 and key < ends[fi]:
                source = reopen(starts[fi])
                jumped = True
                break
            yield e
        if not jumped:
            return


class LevelSource:
    """A sorted level (L1+) as one source: its tables concatenated in key order."""

    __slots__ = ("open_table", "files")

    def __init__(self, open_table, files: list):
        self.open_table = open_table  # the table cache's get: a table's reader
        self.files = files

    def forward(self, start: bytes | None) -> Iterator:
        files = self.files
        i = 0 if start is None else self._first_at_or_after(start)
        # tables are concatenated by chain in C: no Python frame per entry at this layer
        return chain.from_iterable(self._tables_forward(files[i:], start))

    def blocks_forward(self, start: bytes | None) -> Iterator:
        """The decoded blocks of the level's tables from ``start`` on (see :meth:`forward`)."""
        files = self.files
        i = 0
        if start is not None:
            i = self._first_at_or_after(start)
        open_table = self.open_table
        for f in files[i:]:
            yield from (f.reader or open_table(f)).blocks_forward(start)
            start = None

    def _first_at_or_after(self, start: bytes) -> int:
        """Index of the first table that may hold keys >= ``start``."""
        files = self.files
        lo, hi = 0, len(files)
        while lo < hi:
            mid = (lo + hi) // 2
            f = files[mid]
            if f.largest < start or (f.largest_exclusive and f.largest == start):
                lo = mid + 1
            else:
                hi = mid
        return lo

    def _tables_forward(self, files: list, start: bytes | None) -> Iterator[Iterator]:
        open_table = self.open_table
        for f in files:
            yield (f.reader or open_table(f)).iter_forward(start)
            start = None

    def backward(self, start: bytes | None) -> Iterator:
        files = self.files
        i = len(files) - 1
        if start is not None:
            while i >= 0 and files[i].smallest > start:
                i -= 1
        return chain.from_iterable(self._tables_backward(files[i::-1] if i >= 0 else [], start))

    def blocks_backward(self, start: bytes | None, exclusive: bool) -> Iterator:
        """The decoded blocks of the level's tables, last first, from ``start`` down (see
        :meth:`TableReader.blocks_backward`)."""
        files = self.files
        i = len(files) - 1
        if start is not None:
            while i >= 0 and files[i].smallest > start:
                i -= 1
        open_table = self.open_table
        for f in files[i::-1] if i >= 0 else ():
            yield from (f.reader or open_table(f)).blocks_backward(start, exclusive)
            start = None

    def _tables_backward(self, files: list, start: bytes | None) -> Iterator[Iterator]:
        open_table = self.open_table
        for f in files:
            yield (f.reader or open_table(f)).iter_backward(start)
            start = None


class DBIterator:
    """A cursor over a consistent view of the database (RocksDB's ``Iterator``).

    ``lower_bound`` is inclusive, ``upper_bound`` exclusive.  ``key()``/``value()`` require
    ``valid()``.  The view (snapshot sequence and files) is fixed at creation.

    Used as a Python iterator (``for k, v in it``), a cursor that was never positioned starts
    at its first key (its last with ``reverse=True``), as plyvel's and rocksdict's do; a
    positioned one continues from where it is, in its direction.  ``shape``
    ``(include_key, include_value)`` says what that yields: pairs, keys or values.  A key-only
    cursor leaves values in the value log until :meth:`value` asks for one.
    """

    def __init__(self, view, lower_bound: bytes | None, upper_bound: bytes | None, reverse: bool = False,
                 shape: tuple[bool, bool] = (True, True)):
        self._view = view  # antkv.db._ReadView
        self._lower = lower_bound
        self._upper = upper_bound
        self._reverse = reverse
        self._shape = shape
        # what the cursor does with a value pointer as it moves: resolve it now, or (key-only)
        # keep it as a _Deferred that value() resolves
        self._resolve = view.resolve if shape[1] else _Deferred
        self._gen: Iterator | None = None
        # forward with no range tombstone or merge operator in view: the merged entry tuples,
        # read by next() itself (see _step_plain); _gen is None then
        self._entries: Iterator | None = None
        self._neg_read = -view.read_seq
        self._positioned = False  # seeked at least once (a Python iterator's start: __next__)
        self._forward = True
        self._key: bytes | None = None
        self._value: bytes | None = None
        self._closed = False
        # its ``_closed`` flag is read inline on every call (a hot path); close() swaps in
        # _ClosedView, whose flag is True, so that one test also catches a closed iterator
        self._db = view.db

    # --- positioning ---

    def _check_open(self) -> None:
        if self._closed:
            raise DBClosedError("iterator is closed")
        self._view.check_open()

    def _advance(self) -> None:
        try:
            key, kind, value = next(self._gen)  # type: ignore[arg-type]
        except StopIteration:
            self._key = self._value = None
            return
        self._key = key
        self._value = self._resolve(value) if kind == VALUE_POINTER else value

    def _start_forward(self, start: bytes | None, exclusive: bool) -> None:
        lo = self._lower
        if start is None or (lo is not None and start < lo):
            start, exclusive = lo, False
        self._forward = self._positioned = True
        entries = self._view.plain_forward(start)
        if entries is not None:
            self._gen = None
            self._entries = entries
            self._step_plain(start if exclusive else None)
            return
        self._entries = None
        self._gen = self._view.scan_forward(start, self._upper, exclusive)
        self._advance()

    def _step_plain(self, last: bytes | None) -> None:
        """Move to the next key of ``_entries`` after ``last`` (whose older versions are
        skipped) that the view shows: :func:`visible_forward`'s rules without range
        tombstones, on the cursor itself."""
        neg_read, upper = self._neg_read, self._upper
        for key, nseq, kind, value in self._entries:  # type: ignore[union-attr]
            if nseq < neg_read or key == last:
                continue
            if upper is not None and key >= upper:
                break
            if kind == VALUE:
                self._key = key
                self._value = value
                return
            last = key
            if self._show(key, kind, value):
                return
        self._key = self._value = None

    def _show(self, key: bytes, kind: int, value: bytes) -> bool:
        """Become the newest visible version ``(key, kind, value)`` of a key unless it hides
        the key (a deletion, an expired entry): whether it did."""
        if kind == DELETION:
            return False
        if kind == EXPIRING:
            live = live_inner(value, self._view.now)
            if live is None:
                return False
            kind, value = live
        self._key = key
        self._value = self._resolve(value) if kind == VALUE_POINTER else value
        return True

    def _start_backward(self, start: bytes | None, exclusive: bool) -> None:
        hi = self._upper
        if start is None or (hi is not None and start >= hi):
            start, exclusive = hi, True
        self._entries = None
        self._gen = self._view.scan_backward(start, self._lower, exclusive)
        self._forward = False
        self._positioned = True
        self._advance()

    def seek_to_first(self) -> None:
        self._check_open()
        self._start_forward(None, False)

    def seek_to_last(self) -> None:
        self._check_open()
        self._start_backward(None, False)

    def seek(self, key) -> None:
        """Position at the first key >= ``key``."""
        if self._db._closed:
            self._check_open()
        self._start_forward(key if type(key) is bytes else as_bytes(key, "key"), False)

    def seek_for_prev(self, key) -> None:
        """Position at the last key <= ``key``."""
        self._check_open()
        self._start_backward(_key_arg(key), False)

    def valid(self) -> bool:
        if self._db._closed:
            self._check_open()
        return self._key is not None

    def key(self) -> bytes:
        if self._db._closed:
            self._check_open()
        if self._key is None:
            raise InvalidArgumentError("iterator is not valid")
        return self._key

    def value(self) -> bytes:
        if self._db._closed:
            self._check_open()
        if self._key is None:
            raise InvalidArgumentError("iterator is not valid")
        value = self._value
        if type(value) is _Deferred:
            value = self._value = self._view.resolve(value.pointer)
        return value  # type: ignore[return-value]

    def next(self) -> None:
        if self._db._closed:
            self._check_open()
        if self._key is None:
            raise InvalidArgumentError("iterator is not valid")
        if not self._forward:
            self._start_forward(self._key, True)
            return
        entries = self._entries
        if entries is not None:  # _step_plain(self._key), its common case inline
            last, neg_read, upper = self._key, self._neg_read, self._upper
            for key, nseq, kind, value in entries:
                if nseq < neg_read or key == last:
                    continue
                if upper is not None and key >= upper:
                    break
                if kind == VALUE:
                    self._key = key
                    self._value = value
                    return
                if self._show(key, kind, value):
                    return
                self._step_plain(key)
                return
            self._key = self._value = None
            return
        # _advance, inline: a cursor's per-entry path
        try:
            key, kind, value = next(self._gen)  # type: ignore[arg-type]
        except StopIteration:
            self._key = self._value = None
            return
        self._key = key
        self._value = self._resolve(value) if kind == VALUE_POINTER else value

    def prev(self) -> None:
        if self._db._closed:
            self._check_open()
        if self._key is None:
            raise InvalidArgumentError("iterator is not valid")
        if not self._forward:
            self._advance()
        else:
            self._start_backward(self._key, True)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._gen = self._entries = None
            self._view = _ClosedView()
            self._db = _ClosedView

    def __enter__(self) -> "DBIterator":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __iter__(self) -> "DBIterator":
        return self

    def __next__(self):
        """The current entry -- ``(key, value)``, or the key or value alone (``shape``) -- then
        a step forward (backward with ``reverse``), as ``next(it)`` on a plyvel iterator.  A
        cursor never positioned starts at its first key (its last with ``reverse``)."""
        if not self._positioned:
            if self._reverse:
                self.seek_to_last()
            else:
                self.seek_to_first()
        if not self.valid():
            raise StopIteration
        include_key, include_value = self._shape
        if not include_value:
            item = self._key
        elif include_key:
            item = self._key, self._value
        else:
            item = self._value
        if self._reverse:
            self.prev()
        else:
            self.next()
        return item

    def __del__(self) -> None:
        self._gen = self._entries = None


class _Deferred:
    """A value pointer a key-only cursor has not resolved (see :meth:`DBIterator.value`)."""

    __slots__ = ("pointer",)

    def __init__(self, pointer: bytes):
        self.pointer = pointer


class _ClosedView:
    _closed = True

    def check_open(self) -> None:
        raise DBClosedError("iterator is closed")


def _key_arg(key) -> bytes:
    if type(key) is bytes:  # a seek's hot path: no call
        return key
    return as_bytes(key, "key")


__all__ = [
    "DBIterator",
    "LevelSource",
    "merge_forward",
    "merge_backward",
    "visible_forward",
    "visible_backward",
    "skip_covered_forward",
    "skip_covered_backward",
]
