"""Bounded cursors for the RocksDB side of the fuzzer.

Why this exists: in the installed ``rocksdict`` (0.3.x) ``ReadOptions`` has no raw mode, so
``set_iterate_lower_bound`` / ``set_iterate_upper_bound`` encode the bound with the binding's
typed (non-raw) key encoding; on a raw-mode database the lower bound is then ignored and the
bounds land at the wrong keys (verified: lower bound ``b"a"`` still yields ``b""``).  And
``Snapshot.iter()`` reads the live state, not the snapshot.  So the fuzzer applies RocksDB's
bound rules itself, on top of an unbounded RocksDB iterator or of a snapshot's contents
materialised (from RocksDB) when the snapshot was taken.

RocksDB's rules for ``iterate_lower_bound`` L and ``iterate_upper_bound`` U (``DBIter``):
``Seek(k)`` with k < L seeks to L; ``SeekForPrev(k)`` with k >= U seeks to the last key < U;
``SeekToFirst`` = ``Seek(L)``; ``SeekToLast`` = last key < U; the iterator is invalid as soon
as its key leaves [L, U).  A bounded cursor therefore shows exactly the keys in [L, U).

Invariant: ``next``/``prev`` are only called on a valid cursor (``rocksdict`` segfaults on
``next()`` of an invalid iterator); the callers check ``valid()`` first.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right


class ListCursor:
    """A RocksDB-style cursor over parallel sorted ``keys`` / ``values`` lists."""

    __slots__ = ("keys", "values", "pos")

    def __init__(self, keys: list[bytes], values: list[bytes]):
        self.keys = keys
        self.values = values
        self.pos = -1

    def valid(self) -> bool:
        return 0 <= self.pos < len(self.keys)

    def key(self) -> bytes:
        return self.keys[self.pos]

    def value(self) -> bytes:
        return self.values[self.pos]

    def seek(self, k: bytes) -> None:
        self.pos = bisect_left(self.keys, k)

    def seek_for_prev(self, k: bytes) -> None:
        self.pos = bisect_right(self.keys, k) - 1

    def seek_to_first(self) -> None:
        self.pos = 0

    def seek_to_last(self) -> None:
        self.pos = len(self.keys) - 1

    def next(self) -> None:
        self.pos += 1

    def prev(self) -> None:
        self.pos -= 1 if self.pos >= 0 else 0


class BoundedCursor:
    """RocksDB's iterate_lower_bound / iterate_upper_bound rules over an unbounded cursor."""

    __slots__ = ("raw", "lower", "upper", "_valid")

    def __init__(self, raw, lower: bytes | None, upper: bytes | None):
        self.raw = raw
        self.lower = lower
        self.upper = upper
        self._valid = False

    def _check(self) -> None:
        raw = self.raw
        if not raw.valid():
            self._valid = False
            return
        k = raw.key()
        self._valid = (self.lower is None or k >= self.lower) and (
            self.upper is None or k < self.upper
        )

    def _last_below_upper(self) -> None:
        raw = self.raw
        raw.seek(self.upper)
        if raw.valid():
            raw.prev()
        else:
            raw.seek_to_last()

    def valid(self) -> bool:
        return self._valid

    def key(self) -> bytes:
        return self.raw.key()

    def value(self) -> bytes:
        return self.raw.value()

    def seek(self, k: bytes) -> None:
        if self.lower is not None and k < self.lower:
            k = self.lower
        self.raw.seek(k)
        self._check()

    def seek_for_prev(self, k: bytes) -> None:
        if self.upper is not None and k >= self.upper:
            self._last_below_upper()
        else:
            self.raw.seek_for_prev(k)
        self._check()

    def seek_to_first(self) -> None:
        if self.lower is not None:
            self.raw.seek(self.lower)
        else:
            self.raw.seek_to_first()
        self._check()

    def seek_to_last(self) -> None:
        if self.upper is not None:
            self._last_below_upper()
        else:
            self.raw.seek_to_last()
        self._check()

    def next(self) -> None:
        self.raw.next()
        self._check()

    def prev(self) -> None:
        self.raw.prev()
        self._check()


def prefix_upper(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key starting with ``prefix`` (None: no bound)."""
    p = prefix.rstrip(b"\xff")
    if not p:
        return None
    return p[:-1] + bytes([p[-1] + 1])


def scan(cursor: BoundedCursor, reverse: bool, limit: int) -> list[tuple[bytes, bytes]]:
    """Up to ``limit`` (key, value) pairs of a bounded cursor, forward or backward."""
    out = []
    if reverse:
        cursor.seek_to_last()
        step = cursor.prev
    else:
        cursor.seek_to_first()
        step = cursor.next
    while cursor.valid() and len(out) < limit:
        out.append((cursor.key(), cursor.value()))
        step()
    return out


def step_cursor(cursor, step: str, arg, not_valid):
    """Apply one cursor step (``seek``, ``next``, ...) and report ``(True, key, value)`` or
    ``(False,)``; ``next``/``prev`` on an invalid cursor answer ``not_valid`` instead of being
    called (the RocksDB binding crashes on them).  Shared by both sides of the fuzzer."""
    if step in ("next", "prev") and not cursor.valid():
        return not_valid
    if arg is None:
        getattr(cursor, step)()
    else:
        getattr(cursor, step)(arg)
    if cursor.valid():
        return (True, cursor.key(), cursor.value())
    return (False,)
