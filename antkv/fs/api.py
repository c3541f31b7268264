"""The file-system contract (:mod:`antkv.fs` tells what each implementation promises):
the interfaces every implementation subclasses."""

from __future__ import annotations

import os


class WritableFile:
    """An append-only file.  ``size`` is the number of bytes appended so far."""

    path: str
    size: int

    def append(self, data: bytes) -> None:
        """Hand ``data`` to the OS (it survives a process kill, not a power loss)."""
        raise NotImplementedError

    def sync(self) -> None:
        """Make every appended byte durable against power loss."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class RandomAccessFile:
    """A file opened for positional reads; safe to use from several threads."""

    path: str

    def read(self, offset: int, n: int) -> bytes:
        """Up to ``n`` bytes at ``offset`` (fewer only at the end of the file)."""
        raise NotImplementedError

    def positional_read(self, checked: bool):
        """A callable ``pread(n, offset)`` for a reader in a hot loop (a point read's block that
        missed the cache): it returns what ``read(offset, n)`` returns, or fewer bytes, or
        raises a bare ``OSError``; on either of those the caller asks :meth:`read`, which reads
        in full or reports the failure as ``antkv.IOError``.  Only for use while the file is
        open.  ``checked``: the caller verifies every block's checksum, so that bytes of another
        file (a read racing :meth:`close`, whose descriptor number the system gave to a file
        opened since) are never used; without it the callable must fail once the file is
        closed.  This default calls :meth:`read`; a file system with a cheaper way overrides it."""
        read = self.read
        return lambda n, offset: read(offset, n)

    def size(self) -> int:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class FileLock:
    """A held LOCK file; release it with :meth:`FileSystem.unlock`."""

    path: str


class FileSystem:
    """The interface every file-system implementation fills in."""

    def create(self, path: str) -> WritableFile:
        """Create (or truncate) ``path`` for appending."""
        raise NotImplementedError

    def open_random(self, path: str) -> RandomAccessFile:
        raise NotImplementedError

    def read_all(self, path: str) -> bytes:
        raise NotImplementedError

    def write_all(self, path: str, data: bytes, sync: bool = True) -> None:
        """Create ``path`` holding exactly ``data`` (synced when ``sync``)."""
        f = self.create(path)
        try:
            f.append(data)
            if sync:
                f.sync()
        finally:
            f.close()

    def exists(self, path: str) -> bool:
        raise NotImplementedError

    def is_dir(self, path: str) -> bool:
        raise NotImplementedError

    def listdir(self, path: str) -> list[str]:
        raise NotImplementedError

    def size(self, path: str) -> int:
        raise NotImplementedError

    def remove(self, path: str) -> None:
        raise NotImplementedError

    def rename(self, src: str, dst: str) -> None:
        """Atomically replace ``dst`` by ``src``."""
        raise NotImplementedError

    def link(self, src: str, dst: str) -> None:
        """Hard-link ``src`` as ``dst``; IOError if the file system cannot."""
        raise NotImplementedError

    def truncate(self, path: str, size: int) -> None:
        raise NotImplementedError

    def mkdirs(self, path: str) -> None:
        raise NotImplementedError

    def rmdir(self, path: str) -> None:
        raise NotImplementedError

    def sync_dir(self, path: str) -> None:
        """Make the names in directory ``path`` durable."""
        raise NotImplementedError

    def sync_file(self, path: str) -> None:
        """Make the bytes of an existing file durable (fsync without an open handle)."""
        raise NotImplementedError

    def lock(self, path: str) -> FileLock:
        raise NotImplementedError

    def unlock(self, lock: FileLock) -> None:
        raise NotImplementedError

    def is_locked(self, path: str) -> bool | None:
        """Whether some opener holds the lock on ``path`` now, found without taking it (taking
        it, even for an instant, could make a writer's open fail); None when this file system
        cannot tell.  A hint for reporting only: the answer may change at once."""
        return None

    # --- helpers built on the primitives ---

    def copy(self, src: str, dst: str, sync: bool = True) -> None:
        """Copy ``src`` to ``dst`` (used where a hard link is impossible)."""
        self.write_all(dst, self.read_all(src), sync=sync)

    def link_or_copy(self, src: str, dst: str) -> bool:
        """Hard-link, or copy when linking fails; True when it linked."""
        from ..errors import IOError as AntIOError

        try:
            self.link(src, dst)
            return True
        except AntIOError:
            self.copy(src, dst)
            return False


def join(*parts: str) -> str:
    return os.path.join(*parts)

