"""An in-memory file system that knows exactly what a crash would keep.

Each file (an *inode*, shared by hard links) holds the bytes the "OS" has and how many of them
were made durable by ``sync``.  Each directory entry is durable only after ``sync_dir`` of its
directory.  :meth:`MemoryFileSystem.crash` then simulates:

* ``"kill"`` -- the process dies: every byte handed to the OS survives;
* ``"power"`` -- power loss: every file reverts to its synced bytes and the namespace to its
  durable state (unsynced creates, renames and removes are undone);
* ``"partial"`` -- power loss where the disk wrote a random prefix of each file's unsynced
  bytes (a torn write); the namespace reverts as for ``"power"``.

Handles opened before a crash are dead afterwards: using one raises ``antkv.IOError``.
"""

from __future__ import annotations

import errno
import os
import random
import threading

from ..errors import IOError as AntIOError
from ..errors import LockError
from .api import FileLock, FileSystem, RandomAccessFile, WritableFile


def _err(code: int, op: str, path: str) -> AntIOError:
    e = OSError(code, os.strerror(code), path)
    return AntIOError(f"{op} failed: {os.strerror(code)}", e, path)


def _norm(path: str) -> str:
    return os.path.normpath(path)


class _Inode:
    __slots__ = ("data", "synced_len", "durable_copy")

    def __init__(self) -> None:
        self.data = bytearray()
        self.synced_len = 0
        self.durable_copy: bytes | None = None  # set when a truncate cut synced bytes

    def durable_bytes(self) -> bytes:
        if self.durable_copy is not None:
            return self.durable_copy
        return bytes(self.data[: self.synced_len])


class _MemWritableFile(WritableFile):
    __slots__ = ("path", "size", "_fs", "_inode", "_gen", "_closed")

    def __init__(self, fs: "MemoryFileSystem", path: str, inode: _Inode):
        self.path = path
        self.size = 0
        self._fs = fs
        self._inode = inode
        self._gen = fs.generation
        self._closed = False

    def _check(self, op: str) -> None:
        if self._gen != self._fs.generation or self._closed:
            raise _err(errno.EBADF, op, self.path)

    def append(self, data: bytes) -> None:
        with self._fs.mutex:
            self._check("write")
            self._inode.data += data
            self.size += len(data)

    def sync(self) -> None:
        with self._fs.mutex:
            self._check("fsync")
            self._inode.synced_len = len(self._inode.data)
            self._inode.durable_copy = None
            self._fs.sync_count += 1

    def close(self) -> None:
        self._closed = True


class _MemRandomAccessFile(RandomAccessFile):
    __slots__ = ("path", "_fs", "_inode", "_gen", "_closed")

    def __init__(self, fs: "MemoryFileSystem", path: str, inode: _Inode):
        self.path = path
        self._fs = fs
        self._inode = inode
        self._gen = fs.generation
        self._closed = False

    def read(self, offset: int, n: int) -> bytes:
        if self._closed or self._gen != self._fs.generation:
            raise _err(errno.EBADF, "read", self.path)  # as the OS answers a closed descriptor
        return bytes(self._inode.data[offset : offset + n])

    def size(self) -> int:
        return len(self._inode.data)

    def close(self) -> None:
        self._closed = True


class _MemLock(FileLock):
    def __init__(self, path: str, gen: int):
        self.path = path
        self.gen = gen


class MemoryFileSystem(FileSystem):
    """A file system held in memory, for fast and exact crash tests."""

    def __init__(self) -> None:
        self.mutex = threading.RLock()
        self.generation = 0  # bumped by crash(); older handles die
        self.sync_count = 0
        self._files: dict[str, _Inode] = {}
        self._durable_files: dict[str, _Inode] = {}
        self._dirs: set[str] = {".", "/"}
        self._durable_dirs: set[str] = {".", "/"}
        self._locks: set[str] = set()

    # --- namespace helpers ---

    def _parent_exists(self, path: str) -> bool:
        parent = os.path.dirname(path) or "."
        return parent in self._dirs

    def _inode(self, path: str, op: str) -> _Inode:
        inode = self._files.get(_norm(path))
        if inode is None:
            raise _err(errno.ENOENT, op, path)
        return inode

    # --- FileSystem ---

    def create(self, path: str) -> WritableFile:
        p = _norm(path)
        with self.mutex:
            if not self._parent_exists(p):
                raise _err(errno.ENOENT, "create", path)
            if p in self._dirs:
                raise _err(errno.EISDIR, "create", path)
            inode = _Inode()
            self._files[p] = inode
            return _MemWritableFile(self, p, inode)

    def open_random(self, path: str) -> RandomAccessFile:
        with self.mutex:
            return _MemRandomAccessFile(self, _norm(path), self._inode(path, "open"))

    def read_all(self, path: str) -> bytes:
        with self.mutex:
            return bytes(self._inode(path, "read").data)

    def exists(self, path: str) -> bool:
        p = _norm(path)
        with self.mutex:
            return p in self._files or p in self._dirs

    def is_dir(self, path: str) -> bool:
        with self.mutex:
            return _norm(path) in self._dirs

    def listdir(self, path: str) -> list[str]:
        d = _norm(path)
        with self.mutex:
            if d not in self._dirs:
                raise _err(errno.ENOENT, "listdir", path)
            names = {os.path.basename(p) for p in self._files if (os.path.dirname(p) or ".") == d}
            names |= {os.path.basename(p) for p in self._dirs if p != d and (os.path.dirname(p) or ".") == d}
            return sorted(names)

    def size(self, path: str) -> int:
        with self.mutex:
            return len(self._inode(path, "stat").data)

    def remove(self, path: str) -> None:
        with self.mutex:
            self._inode(path, "remove")
            del self._files[_norm(path)]

    def rename(self, src: str, dst: str) -> None:
        s, d = _norm(src), _norm(dst)
        with self.mutex:
            if s in self._dirs:
                self._rename_dir(s, d)
                return
            inode = self._inode(src, "rename")
            if not self._parent_exists(d):
                raise _err(errno.ENOENT, "rename", dst)
            del self._files[s]
            self._files[d] = inode

    def _rename_dir(self, s: str, d: str) -> None:
        """REQUIRES mutex.  Rename directory ``s`` (and everything below it) to ``d``; like
        rename(2), durable only after a sync of the parent directories."""
        if d in self._files or (d in self._dirs and self.listdir(d)):
            raise _err(errno.ENOTEMPTY, "rename", d)
        if not self._parent_exists(d):
            raise _err(errno.ENOENT, "rename", d)
        prefix = s + os.sep
        moved = {p: d + p[len(s):] for p in self._files if p.startswith(prefix)}
        for old_p, new_p in moved.items():
            self._files[new_p] = self._files.pop(old_p)
        dirs = {p for p in self._dirs if p == s or p.startswith(prefix)}
        self._dirs -= dirs
        self._dirs |= {d + p[len(s):] for p in dirs}
        # the subtree moves with its directory entry: what was durable inside stays durable
        # under the new name once the parent is synced
        dmoved = {p: d + p[len(s):] for p in self._durable_files if p.startswith(prefix)}
        for old_p, new_p in dmoved.items():
            self._durable_files[new_p] = self._durable_files.pop(old_p)
        ddirs = {p for p in self._durable_dirs if p.startswith(prefix)}
        self._durable_dirs -= ddirs
        self._durable_dirs |= {d + p[len(s):] for p in ddirs}

    def link(self, src: str, dst: str) -> None:
        d = _norm(dst)
        with self.mutex:
            inode = self._inode(src, "link")
            if d in self._files:
                raise _err(errno.EEXIST, "link", dst)
            if not self._parent_exists(d):
                raise _err(errno.ENOENT, "link", dst)
            self._files[d] = inode

    def truncate(self, path: str, size: int) -> None:
        with self.mutex:
            inode = self._inode(path, "truncate")
            if size < inode.synced_len and inode.durable_copy is None:
                inode.durable_copy = bytes(inode.data[: inode.synced_len])
            if size <= len(inode.data):
                del inode.data[size:]
            else:
                inode.data += bytes(size - len(inode.data))

    def mkdirs(self, path: str) -> None:
        p = _norm(path)
        with self.mutex:
            if p in self._files:
                raise _err(errno.EEXIST, "mkdir", path)
            while p not in self._dirs:
                self._dirs.add(p)
                p = os.path.dirname(p) or "."

    def rmdir(self, path: str) -> None:
        p = _norm(path)
        with self.mutex:
            if p not in self._dirs:
                raise _err(errno.ENOENT, "rmdir", path)
            if self.listdir(p):
                raise _err(errno.ENOTEMPTY, "rmdir", path)
            self._dirs.discard(p)

    def sync_dir(self, path: str) -> None:
        d = _norm(path)
        with self.mutex:
            if d not in self._dirs:
                raise _err(errno.ENOENT, "fsync directory", path)
            in_dir = lambda p: (os.path.dirname(p) or ".") == d  # noqa: E731
            for p in [p for p in self._durable_files if in_dir(p)]:
                del self._durable_files[p]
            for p, inode in self._files.items():
                if in_dir(p):
                    self._durable_files[p] = inode
            self._durable_dirs = {p for p in self._durable_dirs if not in_dir(p) or p in self._dirs}
            self._durable_dirs |= {p for p in self._dirs if in_dir(p)}
            self._durable_dirs.add(d)
            self.sync_count += 1

    def sync_file(self, path: str) -> None:
        with self.mutex:
            inode = self._inode(path, "fsync")
            inode.synced_len = len(inode.data)
            inode.durable_copy = None
            self.sync_count += 1

    def lock(self, path: str) -> FileLock:
        p = _norm(path)
        with self.mutex:
            if p in self._locks:
                raise LockError(f"{path} is held by another opener of the database")
            if p not in self._files:
                self.create(p)
            self._locks.add(p)
            return _MemLock(p, self.generation)

    def is_locked(self, path: str) -> bool | None:
        with self.mutex:
            return _norm(path) in self._locks

    def unlock(self, lock: FileLock) -> None:
        assert isinstance(lock, _MemLock)
        with self.mutex:
            if lock.gen == self.generation:
                self._locks.discard(lock.path)

    # --- crash simulation ---

    def crash(self, mode: str = "power", rng: random.Random | None = None) -> None:
        """Simulate a crash; see the module docstring for ``mode``."""
        if mode not in ("kill", "power", "partial"):
            raise ValueError(f"unknown crash mode {mode!r}")
        rng = rng or random.Random(0)
        with self.mutex:
            self.generation += 1
            self._locks.clear()
            if mode == "kill":
                return
            self._files = dict(self._durable_files)
            self._dirs = set(self._durable_dirs) | {".", "/"}
            for inode in {id(i): i for i in self._files.values()}.values():
                durable = inode.durable_bytes()
                if mode == "partial" and inode.durable_copy is None and len(inode.data) > inode.synced_len:
                    keep = rng.randint(inode.synced_len, len(inode.data))
                    durable = bytes(inode.data[:keep])
                inode.data = bytearray(durable)
                inode.synced_len = len(durable)
                inode.durable_copy = None

    def clone(self) -> "MemoryFileSystem":
        """An independent copy of the files (hard links stay links to one file), directories,
        and what a crash would keep of them; it holds no lock.  A test builds a state once and
        crashes a copy of it at each point."""
        with self.mutex:
            twins: dict[int, _Inode] = {}

            def twin(inode: _Inode) -> _Inode:
                copy = twins.get(id(inode))
                if copy is None:
                    copy = twins[id(inode)] = _Inode()
                    copy.data = bytearray(inode.data)
                    copy.synced_len = inode.synced_len
                    copy.durable_copy = inode.durable_copy
                return copy

            new = MemoryFileSystem()
            new._files = {p: twin(i) for p, i in self._files.items()}
            new._durable_files = {p: twin(i) for p, i in self._durable_files.items()}
            new._dirs = set(self._dirs)
            new._durable_dirs = set(self._durable_dirs)
            return new

    def snapshot_state(self) -> dict[str, bytes]:
        """Every file's current bytes, for assertions in tests."""
        with self.mutex:
            return {p: bytes(i.data) for p, i in self._files.items()}
