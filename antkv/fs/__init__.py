"""The file-system layer: the only place antkv touches files.

Every read, write, fsync, rename, hard link and directory sync of the engine goes through a
:class:`FileSystem`.  Two implementations exist:

* :class:`~antkv.fs.os_file_system.OSFileSystem` -- the real one (``os.open``/``pwrite``/``fsync``,
  directory fsync, atomic ``rename``, ``flock`` for the LOCK file);
* :class:`~antkv.fs.memory.MemoryFileSystem` -- an in-memory one that remembers what was
  made durable, so a test can simulate a process kill or a power loss exactly;

plus :class:`~antkv.fs.fault.FaultInjectionFileSystem`, a wrapper that fails or "crashes" at
the n-th call, for crash and I/O-error tests, and :class:`~antkv.fs.buffered.BufferedWritableFile`,
a write buffer for files that count only once synced (output tables), and
:class:`~antkv.fs.delegating.DelegatingFileSystem`, the base of wrappers that change a few calls
(:class:`~antkv.fs.pinned.PinnedFileSystem`).

Contract of every implementation:

* an ``OSError`` never escapes: it is raised as :class:`antkv.IOError` naming the path (the
  one exception is the callable of :meth:`RandomAccessFile.positional_read`, a hot path's
  ``pread``, whose caller reads again through ``read`` on a bare ``OSError`` or a short read);
* a :class:`WritableFile` only appends; ``sync()`` makes its bytes durable, but a newly
  created (or renamed, or removed) name is durable only after ``sync_dir`` of its directory;
* ``rename`` replaces the destination atomically;
* ``lock`` raises :class:`antkv.LockError` when another opener holds the lock.
"""

from __future__ import annotations

from .api import FileLock, FileSystem, RandomAccessFile, WritableFile, join

__all__ = ["FileLock", "FileSystem", "RandomAccessFile", "WritableFile", "default_file_system", "join"]


def default_file_system() -> FileSystem:
    from .os_file_system import OSFileSystem

    return OSFileSystem.instance()
