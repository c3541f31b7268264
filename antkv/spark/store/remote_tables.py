"""The engine file system of a working copy in remote mode: snapshot files stay in the location.

A working copy opened with ``StoreOptions(tables="remote")`` downloads none of its snapshot's
tables and value-log files.  Its database directory holds the engine's metadata (``CURRENT``,
``MANIFEST``, an empty WAL, ``OPTIONS``) and the files the copy wrote itself; the snapshot files
are *remote files*: :class:`RemoteTables` lists them in the directory, gives their sizes, and
serves reads of them from the checkpoint location through the machine's block cache
(:class:`~antkv.spark.store.block_cache.RemoteFile`).  Every other call goes to the local file
system (``base``).

A remote file is named by directory: ``(directory, engine file name) -> (location, FileRef)``.
The engine moves files only through this file system, and the calls keep the names true:

* ``link`` / ``copy`` of a remote file (a checkpoint, an ingest) names it in the destination
  directory too -- the same object, nothing is read or written;
* ``rename`` of a remote file, or of a directory holding remote files (a checkpoint's staging
  directory), moves the names;
* ``remove`` of a remote file forgets the name (a compaction deleting an input): the object is
  the location's, and only cleanup deletes it;
* ``create`` or ``truncate`` of a remote name is refused: those files are immutable.

:meth:`make_remote` turns a local file that is now an object of the location (uploaded by a
snapshot commit) into a remote file: readers holding it open switch to the location, and the
local file is removed, so a working copy's local disk holds only what it wrote since its last
snapshot.  For that, every table or value-log file this file system opens locally is opened
through a :class:`_Switchable` handle.
"""

from __future__ import annotations

import os
import threading
import weakref

from antkv import IOError as AntIOError
from antkv.fs import FileSystem, RandomAccessFile
from antkv.fs.delegating import DelegatingFileSystem

from antkv.spark.store.block_cache import BlockCache, RemoteFile
from antkv.spark.store.location import Location
from antkv.spark.store.objects import FileRef
from antkv.spark.store.prefetch import prefetch

_ENGINE_SUFFIXES = (".sst", ".vlog")


class _Switchable(RandomAccessFile):
    """A local table or value-log file that may become remote while open (:meth:`RemoteTables.make_remote`)."""

    def __init__(self, handle: RandomAccessFile):
        self.path = handle.path
        self._handle = handle

    def read(self, offset: int, n: int) -> bytes:
        return self._handle.read(offset, n)

    def size(self) -> int:
        return self._handle.size()

    def switch(self, handle: RandomAccessFile) -> None:
        old, self._handle = self._handle, handle
        old.close()

    def close(self) -> None:
        self._handle.close()


class RemoteTables(DelegatingFileSystem):
    """``base`` (the local file system) plus the remote files of the directories named to it;
    calls that touch no remote file are ``base``'s."""

    def __init__(self, base: FileSystem, blocks: BlockCache):
        super().__init__(base)
        self.blocks = blocks
        self._lock = threading.Lock()
        self._remote: dict[str, dict[str, tuple[Location, FileRef]]] = {}  # directory -> name -> object
        self._local_handles: dict[str, weakref.WeakSet] = {}  # path -> its open _Switchable handles

    # ------------------------------------------------------------------ naming remote files

    def add(self, directory: str, name: str, location: Location, ref: FileRef) -> None:
        """Name object ``ref`` of ``location`` as file ``name`` of ``directory``."""
        with self._lock:
            self._remote.setdefault(_norm(directory), {})[name] = (location, ref)

    def remote_files(self, directory: str) -> dict[str, FileRef]:
        """The remote files of ``directory``: ``{name: FileRef}``."""
        with self._lock:
            return {n: ref for n, (_, ref) in self._remote.get(_norm(directory), {}).items()}

    def forget_dir(self, directory: str) -> None:
        """Forget the remote files of ``directory`` and of every directory under it (removed,
        or moved by a caller that does not go through this file system)."""
        d = _norm(directory)
        with self._lock:
            for key in [k for k in self._remote if k == d or k.startswith(d + os.sep)]:
                del self._remote[key]

    def make_remote(self, path: str, location: Location, ref: FileRef) -> None:
        """The local engine file ``path`` is now object ``ref`` of ``location`` (same bytes):
        serve it from there, switch its open readers, and remove the local file."""
        d, name = _split(path)
        with self._lock:
            self._remote.setdefault(d, {})[name] = (location, ref)
            handles = list(self._local_handles.pop(_norm(path), ()))
        for h in handles:
            h.switch(RemoteFile(self.blocks, location, ref, h.path))
        self.base.remove(path)

    def hand_over(self, directory: str, location: Location, file_map: dict) -> None:
        """After a snapshot commit: every local engine file of ``directory`` that ``file_map``
        (engine name -> FileRef) names is now an object of ``location``: keep its bytes in the
        block cache, then make it a remote file (:meth:`make_remote`)."""
        remote = self.remote_files(directory)
        for name, ref in file_map.items():
            path = os.path.join(directory, name)
            if name in remote or not self.base.exists(path):
                continue
            self.blocks.put_file(location, ref, path)
            self.make_remote(path, location, ref)

    def strip(self, checkpoint: str, file_map: dict) -> dict:
        """Before parking ``checkpoint``: remove from it every engine file the location holds
        (its remote files, and local links of files ``file_map`` names), so a parked copy
        holds only what is nowhere else.  Returns the part of ``file_map`` naming the
        checkpoint's files: reopening the copy names those as remote files again, and only
        those (a snapshot file the database no longer holds must not reappear)."""
        names = self.listdir(checkpoint)
        self.forget_dir(checkpoint)
        for name in names:
            path = os.path.join(checkpoint, name)
            if name in file_map and name.endswith(_ENGINE_SUFFIXES) and self.base.exists(path):
                self.base.remove(path)
        return {name: ref for name, ref in file_map.items() if name in names}

    def _lookup(self, path: str):
        d, name = _split(path)
        with self._lock:
            return self._remote.get(d, {}).get(name)

    # ------------------------------------------------------------------ reads

    def prefetch(self, plan: dict, holder, memory_cap: int) -> dict:
        """Fetch in parallel the byte ranges ``plan`` names (``{path: {(offset, length)}}``,
        :meth:`antkv.DB.data_blocks`) of the remote files among its paths, holding them for
        ``holder`` (:func:`~antkv.spark.store.prefetch.prefetch`); local files are skipped."""
        wanted = []
        for path, ranges in plan.items():
            entry = self._lookup(path)
            if entry is not None:
                wanted.append((entry[0], entry[1], ranges))
        return prefetch(self.blocks, wanted, holder, memory_cap)


    def open_random(self, path: str) -> RandomAccessFile:
        entry = self._lookup(path)
        if entry is not None:
            return RemoteFile(self.blocks, entry[0], entry[1], path)
        handle = self.base.open_random(path)
        if not path.endswith(_ENGINE_SUFFIXES):
            return handle
        handle = _Switchable(handle)
        with self._lock:
            self._local_handles.setdefault(_norm(path), weakref.WeakSet()).add(handle)
        return handle

    def read_all(self, path: str) -> bytes:
        entry = self._lookup(path)
        if entry is None:
            return self.base.read_all(path)
        f = RemoteFile(self.blocks, entry[0], entry[1], path)
        try:
            return f.read(0, entry[1].size)
        finally:
            f.close()

    def size(self, path: str) -> int:
        entry = self._lookup(path)
        return entry[1].size if entry is not None else self.base.size(path)

    def exists(self, path: str) -> bool:
        return self._lookup(path) is not None or self.base.exists(path)

    def listdir(self, path: str) -> list[str]:
        names = set(self.base.listdir(path))
        with self._lock:
            names |= set(self._remote.get(_norm(path), ()))
        return sorted(names)

    # ------------------------------------------------------------------ changes

    def remove(self, path: str) -> None:
        d, name = _split(path)
        with self._lock:
            files = self._remote.get(d)
            if files is not None and files.pop(name, None) is not None:
                return
        self.base.remove(path)

    def rename(self, src: str, dst: str) -> None:
        entry = self._lookup(src)
        if entry is not None:
            self.remove(src)
            self.add(*_split(dst), *entry)
            return
        self.base.rename(src, dst)
        s, t = _norm(src), _norm(dst)
        with self._lock:
            for key in [k for k in self._remote if k == s or k.startswith(s + os.sep)]:
                self._remote[t + key[len(s):]] = self._remote.pop(key)

    def link(self, src: str, dst: str) -> None:
        entry = self._lookup(src)
        if entry is None:
            self.base.link(src, dst)
        elif self.exists(dst):
            raise AntIOError("link failed: destination exists", FileExistsError(dst), dst)
        else:
            self.add(*_split(dst), *entry)

    def copy(self, src: str, dst: str, sync: bool = True) -> None:
        if self._lookup(src) is not None:
            self.link(src, dst)
        else:
            self.base.copy(src, dst, sync)

    def create(self, path):
        self._refuse_remote(path, "create")
        return self.base.create(path)

    def write_all(self, path, data, sync=True):
        self._refuse_remote(path, "write")
        self.base.write_all(path, data, sync)

    def truncate(self, path, size):
        self._refuse_remote(path, "truncate")
        self.base.truncate(path, size)

    def _refuse_remote(self, path: str, op: str) -> None:
        if self._lookup(path) is not None:
            raise AntIOError(f"{op} failed: {path} is a file of the checkpoint location (immutable)", None, path)

    def rmdir(self, path):
        self.base.rmdir(path)
        self.forget_dir(path)

    def sync_file(self, path):
        if self._lookup(path) is None:
            self.base.sync_file(path)


def _norm(path: str) -> str:
    return os.path.normpath(os.path.abspath(path))


def _split(path: str) -> tuple[str, str]:
    d, name = os.path.split(_norm(path))
    return d, name
