"""Fault injection: fail or "crash" at the n-th file-system call.

``FaultInjectionFileSystem`` wraps another :class:`~antkv.fs.FileSystem` (normally a
:class:`~antkv.fs.memory.MemoryFileSystem`) and counts every mutating or reading call.  A
test arms it with one of:

* ``fail_at(n, persistent=False)`` -- call number ``n`` (and, if ``persistent``, every later
  call) raises ``antkv.IOError`` (ENOSPC for writes, EIO otherwise) without taking effect;
* ``crash_at(n)`` -- call number ``n`` raises :class:`SimulatedCrash` (a ``BaseException``, so
  the engine cannot swallow it).  An ``append`` hit by a crash first writes a random prefix of
  its data, like a torn write.  The test then calls ``crash()`` on the inner file system.

``trace`` records ``(n, op, path)`` of every call, which is how tests enumerate kill points.
"""

from __future__ import annotations

import errno
import os
import random
import threading

from ..errors import IOError as AntIOError
from .api import FileLock, FileSystem, RandomAccessFile, WritableFile


class SimulatedCrash(BaseException):
    """Raised at an armed kill point: the process "dies" here."""


class FaultInjectionFileSystem(FileSystem):
    def __init__(self, inner: FileSystem, seed: int = 0):
        self.inner = inner
        self.calls = 0
        self.trace: list[tuple[int, str, str]] = []
        self.record_trace = False
        self.bytes_read: dict[str, int] = {}  # path -> bytes returned by random-access reads
        self._fail_at: int | None = None
        self._persistent = False
        self._crash_at: int | None = None
        self._rng = random.Random(seed)
        self._mutex = threading.Lock()

    # --- arming ---

    def fail_at(self, n: int, persistent: bool = False) -> None:
        self._fail_at, self._persistent = n, persistent

    def crash_at(self, n: int) -> None:
        self._crash_at = n

    def disarm(self) -> None:
        self._fail_at = self._crash_at = None
        self._persistent = False

    # --- the hook every call passes ---

    def _hook(self, op: str, path: str, data: bytes | None = None, inner_file=None) -> None:
        with self._mutex:
            self.calls += 1
            n = self.calls
            if self.record_trace:
                self.trace.append((n, op, path))
        if self._crash_at is not None and n >= self._crash_at:
            self._crash_at = None
            if op == "append" and data and inner_file is not None:
                inner_file.append(data[: self._rng.randint(0, len(data) - 1)])
            raise SimulatedCrash(f"crash at call {n}: {op} {path}")
        if self._fail_at is not None and (n == self._fail_at or (self._persistent and n > self._fail_at)):
            code = errno.ENOSPC if op in ("append", "create", "link", "write_all") else errno.EIO
            e = OSError(code, os.strerror(code), path)
            raise AntIOError(f"{op} failed: {os.strerror(code)} (injected)", e, path)

    # --- FileSystem ---

    def create(self, path: str) -> WritableFile:
        self._hook("create", path)
        return _FaultWritableFile(self, self.inner.create(path))

    def open_random(self, path: str) -> RandomAccessFile:
        self._hook("open", path)
        return _FaultRandomAccessFile(self, self.inner.open_random(path))

    def read_all(self, path: str) -> bytes:
        self._hook("read_all", path)
        return self.inner.read_all(path)

    def exists(self, path: str) -> bool:
        return self.inner.exists(path)

    def is_locked(self, path: str) -> bool | None:
        return self.inner.is_locked(path)

    def is_dir(self, path: str) -> bool:
        return self.inner.is_dir(path)

    def listdir(self, path: str) -> list[str]:
        self._hook("listdir", path)
        return self.inner.listdir(path)

    def size(self, path: str) -> int:
        self._hook("size", path)
        return self.inner.size(path)

    def remove(self, path: str) -> None:
        self._hook("remove", path)
        self.inner.remove(path)

    def rename(self, src: str, dst: str) -> None:
        self._hook("rename", src)
        self.inner.rename(src, dst)

    def link(self, src: str, dst: str) -> None:
        self._hook("link", src)
        self.inner.link(src, dst)

    def truncate(self, path: str, size: int) -> None:
        self._hook("truncate", path)
        self.inner.truncate(path, size)

    def mkdirs(self, path: str) -> None:
        self._hook("mkdirs", path)
        self.inner.mkdirs(path)

    def rmdir(self, path: str) -> None:
        self._hook("rmdir", path)
        self.inner.rmdir(path)

    def sync_dir(self, path: str) -> None:
        self._hook("sync_dir", path)
        self.inner.sync_dir(path)

    def sync_file(self, path: str) -> None:
        self._hook("sync", path)
        self.inner.sync_file(path)

    def lock(self, path: str) -> FileLock:
        self._hook("lock", path)
        return self.inner.lock(path)

    def unlock(self, lock: FileLock) -> None:
        self.inner.unlock(lock)


class _FaultWritableFile(WritableFile):
    def __init__(self, fs: FaultInjectionFileSystem, inner: WritableFile):
        self._fs = fs
        self._inner = inner
        self.path = inner.path

    @property
    def size(self) -> int:  # type: ignore[override]
        return self._inner.size

    def append(self, data: bytes) -> None:
        self._fs._hook("append", self.path, data, self._inner)
        self._inner.append(data)

    def sync(self) -> None:
        self._fs._hook("sync", self.path)
        self._inner.sync()

    def close(self) -> None:
        self._inner.close()


class _FaultRandomAccessFile(RandomAccessFile):
    def __init__(self, fs: FaultInjectionFileSystem, inner: RandomAccessFile):
        self._fs = fs
        self._inner = inner
        self.path = inner.path

    def read(self, offset: int, n: int) -> bytes:
        self._fs._hook("read", self.path)
        data = self._inner.read(offset, n)
        counts = self._fs.bytes_read
        counts[self.path] = counts.get(self.path, 0) + len(data)
        return data

    def size(self) -> int:
        return self._inner.size()

    def close(self) -> None:
        self._inner.close()
