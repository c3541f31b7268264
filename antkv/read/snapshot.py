"""Snapshots: a sequence number a reader pins so compaction keeps what it can see."""

from __future__ import annotations

import threading

from sortedcontainers import SortedList

from ..base.dbformat import MAX_SEQUENCE
from ..errors import DBClosedError


class SnapshotList:
    """The sequence numbers of live snapshots (with repeats), ascending.  Thread-safe."""

    def __init__(self) -> None:
        self._seqs = SortedList()
        self._lock = threading.Lock()

    def add(self, seq: int) -> None:
        with self._lock:
            self._seqs.add(seq)

    def release(self, snap: "Snapshot") -> None:
        """Drop ``snap``'s sequence once, however many threads release it at the same time
        (two snapshots may share a sequence: a second removal would take the other's)."""
        with self._lock:
            if snap._released:
                return
            snap._released = True
            self._seqs.remove(snap.sequence)

    def sequences(self) -> list[int]:
        """Distinct live snapshot sequence numbers, ascending."""
        with self._lock:
            out: list[int] = []
            for s in self._seqs:
                if not out or out[-1] != s:
                    out.append(s)
            return out

    def bounds(self) -> tuple[int, int]:
        """``(oldest, newest)`` live sequence numbers; ``(MAX_SEQUENCE + 1, -1)`` when none."""
        with self._lock:
            seqs = self._seqs
            return (seqs[0], seqs[-1]) if seqs else (MAX_SEQUENCE + 1, -1)

    def oldest(self) -> int | None:
        with self._lock:
            return self._seqs[0] if self._seqs else None

    def __len__(self) -> int:
        return len(self._seqs)


class ReadPin:
    """A snapshot held for as long as this object lives: a plain scan's or cursor's view holds
    one on a database with ``inplace_update_support``, so that writes keep the versions the
    view reads (released when the view is dropped; the database takes it under its write lock)."""

    __slots__ = ("_snap",)

    def __init__(self, snap: "Snapshot"):
        self._snap = snap

    def __del__(self) -> None:
        self._snap.release()


class Snapshot:
    """A consistent point-in-time view: reads through it see exactly the writes acknowledged
    before it was taken.  Release it (or use it as a context manager) so compaction can drop
    the old versions it kept alive."""

    __slots__ = ("_db", "_list", "sequence", "_released", "__weakref__")

    def __init__(self, db, sequence: int, snapshots: SnapshotList):
        self._db = db
        self._list = snapshots  # the database's live snapshots, which hold this one's sequence
        self.sequence = sequence
        self._released = False

    def get(self, key, default=None):
        self._check()
        v = self._db.get(key, snapshot=self)
        return default if v is None else v

    def items(self, *args, **kwargs):
        self._check()
        return self._db.items(*args, snapshot=self, **kwargs)

    def keys(self, *args, **kwargs):
        self._check()
        return self._db.keys(*args, snapshot=self, **kwargs)

    def values(self, *args, **kwargs):
        self._check()
        return self._db.values(*args, snapshot=self, **kwargs)

    def iterator(self, lower_bound=None, upper_bound=None, **kwargs):
        self._check()
        return self._db.iterator(lower_bound, upper_bound, snapshot=self, **kwargs)

    def _check(self) -> None:
        if self._released:
            raise DBClosedError("snapshot was released")

    def release(self) -> None:
        if not self._released:
            self._list.release(self)

    @property
    def released(self) -> bool:
        return self._released

    def readable_by(self, db) -> bool:
        """Whether ``db`` may read at this snapshot: it took it, and it is not released."""
        return self._db is db and not self._released

    def __enter__(self) -> "Snapshot":
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"Snapshot(sequence={self.sequence}{', released' if self._released else ''})"
