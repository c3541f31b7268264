"""A write buffer in front of a :class:`~antkv.fs.api.WritableFile`: many small appends, few
system calls.

A table is written as a stream of ~4 KiB blocks; handing each one to the OS costs a system call,
a large share of a flush of small entries (``bench/bench_sst.py`` times a table build).  A
:class:`BufferedWritableFile` collects appends in memory and hands them to the file in one
``append`` once ``capacity`` bytes are waiting, and before every ``sync`` and ``close``.

Invariants: ``size`` is the number of bytes appended through this object (written or waiting),
so offsets computed from it are the bytes' offsets in the file; the file holds exactly the
bytes appended, in order, once ``flush``, ``sync`` or ``close`` returned; ``sync`` makes every
byte appended so far durable, as the plain file's does.

What it changes: until one of those calls, up to ``capacity`` bytes live only in this process,
so a process kill loses them.  It is therefore only for files that count for nothing until
synced -- a flush's or a compaction's output table, which the database names in the MANIFEST
only after its ``sync`` (an unsynced table is debris removed at the next open), and an
external table, complete only once ``SstFileWriter.finish`` synced it -- never for
the WAL, the value log or the MANIFEST, whose appends must reach the OS before the write that
made them is acknowledged.
"""

from __future__ import annotations

from .api import WritableFile

DEFAULT_CAPACITY = 256 * 1024


class BufferedWritableFile(WritableFile):
    """``file`` (a fresh, empty WritableFile this object now owns) behind a write buffer."""

    __slots__ = ("path", "size", "_file", "_parts", "_waiting", "_capacity")

    def __init__(self, file: WritableFile, capacity: int = DEFAULT_CAPACITY):
        self.path = file.path
        self.size = file.size
        self._file = file
        self._parts: list[bytes] = []
        self._waiting = 0
        self._capacity = capacity

    def append(self, data: bytes) -> None:
        self._parts.append(data)
        self._waiting += len(data)
        self.size += len(data)
        if self._waiting >= self._capacity:
            self.flush()

    def flush(self) -> None:
        """Hand every waiting byte to the file (one append)."""
        if self._parts:
            parts = self._parts
            data = parts[0] if len(parts) == 1 else b"".join(parts)
            # cleared only once the file took them: after a failed append nothing is lost twice
            # or written twice, the caller abandons the file
            self._file.append(data)
            self._parts = []
            self._waiting = 0

    def sync(self) -> None:
        self.flush()
        self._file.sync()

    def close(self) -> None:
        """Write what waits, then close (the file is closed even if that write fails)."""
        try:
            self.flush()
        finally:
            self.discard()

    def discard(self) -> None:
        """Close without writing what waits (the file is being abandoned)."""
        self._parts = []
        self._waiting = 0
        self._file.close()
