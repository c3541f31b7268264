"""The real file system: POSIX calls, with every ``OSError`` raised as ``antkv.IOError``."""

from __future__ import annotations

import errno
import fcntl
import os
import sys
import threading
from functools import partial

from ..errors import IOError as AntIOError
from ..errors import LockError
from .api import FileLock, FileSystem, RandomAccessFile, WritableFile


def _io_error(op: str, path: str, e: OSError) -> AntIOError:
    return AntIOError(f"{op} failed: {e.strerror or e}", e, path)


def _fsync_path(path: str, flags: int, op: str) -> None:
    try:
        fd = os.open(path, flags | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as e:
        raise _io_error(op, path, e) from e


def _find_sync_file_range():
    """Linux's ``sync_file_range`` through ctypes (which releases the GIL while it runs), or None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        f = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError, ImportError):
        return None
    f.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)
    f.restype = ctypes.c_int
    return f


_sync_file_range = _find_sync_file_range()
_SYNC_FILE_RANGE_WRITE = 2  # start writing the range's dirty pages back; do not wait
WRITEBACK_BYTES = 1 << 20
"""Every this many appended bytes, a file asks the kernel to start writing them to the device
(RocksDB's ``bytes_per_sync``), so the ``fsync`` that later makes a WAL, a value-log file or a
table durable finds most of its bytes written already: at a memtable switch the old WAL's
fsync (~16 MB of 1 KiB values) went from ~13 ms to under 1 ms.  The call queues the pages for
writing and returns (~0.3 ms of kernel time per MiB, paid by the appending thread instead of the
kernel's flusher).  Only a hint: it makes nothing durable and changes no guarantee; its errors
are left to the ``fsync`` that follows."""
_NEVER = 1 << 63


class _OSWritableFile(WritableFile):
    __slots__ = ("path", "size", "_fd", "_writeback_from", "_writeback_at")

    def __init__(self, path: str, fd: int):
        self.path = path
        self.size = 0
        self._fd = fd
        self._writeback_from = 0  # bytes before this offset were handed to writeback already
        self._writeback_at = WRITEBACK_BYTES if _sync_file_range is not None else _NEVER

    def append(self, data: bytes) -> None:
        try:
            n = os.write(self._fd, data)
            if n != len(data):  # short write: only on a full disk or a signal
                view = memoryview(data)
                while n < len(data):
                    n += os.write(self._fd, view[n:])
        except OSError as e:
            raise _io_error("write", self.path, e) from e
        self.size += len(data)
        if self.size >= self._writeback_at:
            start, end = self._writeback_from, self.size
            _sync_file_range(self._fd, start, end - start, _SYNC_FILE_RANGE_WRITE)  # its error: ignored
            self._writeback_from, self._writeback_at = end, end + WRITEBACK_BYTES

    def sync(self) -> None:
        try:
            os.fsync(self._fd)
        except OSError as e:
            raise _io_error("fsync", self.path, e) from e

    def close(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            try:
                os.close(fd)
            except OSError as e:
                raise _io_error("close", self.path, e) from e


class _OSRandomAccessFile(RandomAccessFile):
    __slots__ = ("path", "_fd")

    def __init__(self, path: str, fd: int):
        self.path = path
        self._fd = fd

    def read(self, offset: int, n: int) -> bytes:
        try:
            data = os.pread(self._fd, n, offset)
            if len(data) < n:  # pread may return short reads before EOF; loop to be exact
                parts = [data]
                got = len(data)
                while got < n:
                    more = os.pread(self._fd, n - got, offset + got)
                    if not more:
                        break
                    parts.append(more)
                    got += len(more)
                data = b"".join(parts)
            return data
        except OSError as e:
            raise _io_error("read", self.path, e) from e

    def positional_read(self, checked: bool):
        """``os.pread`` on this file's descriptor when ``checked``: no Python frame between a
        point read and the system call.  Once the file is closed the number may name another
        file; a reader stops using this before it closes the file
        (:meth:`antkv.sst.reader.TableReader.close`), and a read already under way meets a
        checksum that bytes of another file fail.  Unchecked readers get :meth:`read`, which
        fails once the file is closed."""
        if not checked:
            return super().positional_read(checked)
        return partial(os.pread, self._fd)

    def size(self) -> int:
        try:
            return os.fstat(self._fd).st_size
        except OSError as e:
            raise _io_error("fstat", self.path, e) from e

    def close(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            try:
                os.close(fd)
            except OSError as e:
                raise _io_error("close", self.path, e) from e


class _OSFileLock(FileLock):
    def __init__(self, path: str, fd: int):
        self.path = path
        self.fd = fd


class OSFileSystem(FileSystem):
    """The operating system's file system."""

    _instance: "OSFileSystem | None" = None
    _instance_lock = threading.Lock()

    @classmethod
    def instance(cls) -> "OSFileSystem":
        with cls._instance_lock:
            if cls._instance is None:
                cls._instance = cls()
            return cls._instance

    def create(self, path: str) -> WritableFile:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        except OSError as e:
            raise _io_error("create", path, e) from e
        return _OSWritableFile(path, fd)

    def open_random(self, path: str) -> RandomAccessFile:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as e:
            raise _io_error("open", path, e) from e
        return _OSRandomAccessFile(path, fd)

    def read_all(self, path: str) -> bytes:
        try:
            with open(path, "rb") as f:
                return f.read()
        except OSError as e:
            raise _io_error("read", path, e) from e

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def is_dir(self, path: str) -> bool:
        return os.path.isdir(path)

    def listdir(self, path: str) -> list[str]:
        try:
            return sorted(os.listdir(path))
        except OSError as e:
            raise _io_error("listdir", path, e) from e

    def size(self, path: str) -> int:
        try:
            return os.stat(path).st_size
        except OSError as e:
            raise _io_error("stat", path, e) from e

    def remove(self, path: str) -> None:
        try:
            os.remove(path)
        except OSError as e:
            raise _io_error("remove", path, e) from e

    def rename(self, src: str, dst: str) -> None:
        try:
            os.replace(src, dst)
        except OSError as e:
            raise _io_error("rename", src, e) from e

    def link(self, src: str, dst: str) -> None:
        try:
            os.link(src, dst)
        except OSError as e:
            raise _io_error("link", src, e) from e

    def truncate(self, path: str, size: int) -> None:
        try:
            os.truncate(path, size)
        except OSError as e:
            raise _io_error("truncate", path, e) from e

    def mkdirs(self, path: str) -> None:
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as e:
            raise _io_error("mkdir", path, e) from e

    def rmdir(self, path: str) -> None:
        try:
            os.rmdir(path)
        except OSError as e:
            raise _io_error("rmdir", path, e) from e

    def sync_dir(self, path: str) -> None:
        _fsync_path(path or ".", os.O_RDONLY | os.O_DIRECTORY, "fsync directory")

    def sync_file(self, path: str) -> None:
        _fsync_path(path, os.O_RDONLY, "fsync")

    def lock(self, path: str) -> FileLock:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as e:
            raise _io_error("open lock file", path, e) from e
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise LockError(f"{path} is held by another opener of the database") from None
            raise _io_error("lock", path, e) from e
        return _OSFileLock(path, fd)

    def is_locked(self, path: str) -> bool | None:
        """From ``/proc/locks`` (Linux: one line per lock, ``... FLOCK ... maj:min:inode ...``),
        which lists the lock without taking it; None elsewhere or when unreadable."""
        try:
            st = os.stat(path)
            with open("/proc/locks", encoding="ascii", errors="replace") as f:
                table = f.read()
        except OSError:
            return None
        wanted = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
        return any(line.split()[1:2] == ["FLOCK"] and wanted in line.split() for line in table.splitlines())

    def unlock(self, lock: FileLock) -> None:
        assert isinstance(lock, _OSFileLock)
        if lock.fd >= 0:
            fd, lock.fd = lock.fd, -1
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)
