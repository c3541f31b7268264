"""A file system whose chosen files stay readable after another process deletes them.

A read-only view of a database that a live writer keeps changing sees the files one MANIFEST
state names; the writer deletes them once later states no longer need them, maybe while the
view is still scanning.  :class:`PinnedFileSystem` holds every such file open from the moment
the view chose it (:meth:`pin`) until :meth:`release`: an open descriptor keeps a deleted
file's bytes (POSIX unlink semantics; the in-memory file system behaves alike), so every later
``open_random``, ``read_all``, ``size`` or ``exists`` of a pinned path is answered from the
held handle, whatever happened to the name.  Nothing is ever written or left behind: the pins
are descriptors, not links or copies.

Every other call goes to the wrapped file system unchanged.
"""

from __future__ import annotations

import threading

from .api import FileSystem, RandomAccessFile
from .delegating import DelegatingFileSystem


class _SharedHandle(RandomAccessFile):
    """A pinned handle lent to a reader: reading goes to the pin, closing returns it."""

    __slots__ = ("path", "_pinned")

    def __init__(self, pinned: RandomAccessFile):
        self.path = pinned.path
        self._pinned = pinned

    def read(self, offset: int, n: int) -> bytes:
        return self._pinned.read(offset, n)

    def size(self) -> int:
        return self._pinned.size()

    def close(self) -> None:
        pass  # the pin stays until PinnedFileSystem.release


class PinnedFileSystem(DelegatingFileSystem):
    """``base``, with the paths given to :meth:`pin` held open until :meth:`release`; every
    other call is ``base``'s."""

    def __init__(self, base: FileSystem):
        super().__init__(base)
        self._lock = threading.Lock()
        self._pins: dict[str, RandomAccessFile] = {}

    def pin(self, path: str) -> None:
        """Hold ``path`` open from now on (IOError when it no longer exists)."""
        with self._lock:
            if path in self._pins:
                return
        handle = self.base.open_random(path)
        with self._lock:
            if path not in self._pins:
                self._pins[path] = handle
                return
        handle.close()

    def pinned(self, path: str) -> bool:
        return path in self._pins

    def keep_only(self, paths) -> None:
        """Let go of every pin but those of ``paths``."""
        keep = set(paths)
        with self._lock:
            gone = [p for p in self._pins if p not in keep]
            handles = [self._pins.pop(p) for p in gone]
        for handle in handles:
            handle.close()

    def release(self) -> None:
        """Close every pin (the view is closing); later reads of those paths go to ``base``."""
        with self._lock:
            pins, self._pins = list(self._pins.values()), {}
        for handle in pins:
            handle.close()

    # --- reads of pinned paths come from the held handles ---

    def open_random(self, path: str) -> RandomAccessFile:
        pinned = self._pins.get(path)
        return _SharedHandle(pinned) if pinned is not None else self.base.open_random(path)

    def read_all(self, path: str) -> bytes:
        pinned = self._pins.get(path)
        return pinned.read(0, pinned.size()) if pinned is not None else self.base.read_all(path)

    def size(self, path: str) -> int:
        pinned = self._pins.get(path)
        return pinned.size() if pinned is not None else self.base.size(path)

    def exists(self, path: str) -> bool:
        return path in self._pins or self.base.exists(path)
