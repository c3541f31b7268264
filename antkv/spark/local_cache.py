"""The executor-local cache: snapshot files already on this host, and the stores' working copies.

Layout under the cache root (``StoreOptions.cache_dir``)::

    LOCK                                   fcntl lock: every change to objects/ holds it
    objects/<location hash>/<object name>  a snapshot file exactly as in the location (immutable)
    work/<id>/owner.lock                   held (fcntl) by the process using this working copy
    work/<id>/db/                          an antkv database: snapshot files hard-linked from
                                           objects/, the engine's metadata written from the manifest

Invariants:

* a file in ``objects/`` has the size and xxh3_128 its manifest records (checked when it was
  downloaded, or hashed when it was uploaded from here); it is never written again;
* it enters ``objects/`` by a rename of a fully written temporary file, under ``LOCK``;
* eviction (under ``LOCK``) removes the least recently used files in ``objects/`` until their
  total is within ``disk_budget``, but never one with another link: such a file is in use by a
  working copy (the engine's files are hard links), and removing it would free nothing;
* a working copy belongs to the process holding its ``owner.lock``; a directory whose lock can
  be taken belongs to a process that ended, and is removed by the next :meth:`LocalCache.sweep`.

Worker processes of one host share a cache safely: downloads run unlocked into private
temporary files, and only the rename into ``objects/`` and eviction take the lock.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import uuid

import xxhash

from antkv import CorruptionError
from antkv import IOError as AntIOError

from .location import Location
from .objects import FileRef, file_digest


class LocalCache:
    def __init__(self, root: str, disk_budget: int):
        self.root = os.path.abspath(root)
        self.disk_budget = disk_budget
        self._objects = os.path.join(self.root, "objects")
        self._work = os.path.join(self.root, "work")
        try:
            os.makedirs(self._objects, exist_ok=True)
            os.makedirs(self._work, exist_ok=True)
        except OSError as e:
            raise AntIOError(f"cannot create the local state cache {self.root}: {e}", e, self.root) from e
        self._lock_path = os.path.join(self.root, "LOCK")
        self.downloads = 0  # files fetched from the location by this process
        self.download_bytes = 0
        self.hits = 0

    # ------------------------------------------------------------------ locking

    def _locked(self):
        return _FileLock(self._lock_path)

    def object_path(self, location: Location, name: str) -> str:
        loc = xxhash.xxh64_hexdigest(location.identity.encode())
        return os.path.join(self._objects, loc, *name.split("/"))

    # ------------------------------------------------------------------ objects

    def fetch(self, location: Location, ref: FileRef) -> str:
        """The local path of snapshot file ``ref``, downloading and checking it if absent."""
        path = self.object_path(location, ref.object)
        try:
            st = os.stat(path)
            if st.st_size == ref.size:
                os.utime(path)  # recency for eviction
                self.hits += 1
                return path
        except FileNotFoundError:
            pass
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            location.download(ref.object, tmp)
            size, digest = file_digest(tmp)
            if size != ref.size or digest != ref.xxh3:
                raise CorruptionError(
                    f"object does not match its manifest (size {size}, expected {ref.size}; "
                    f"xxh3 {digest}, expected {ref.xxh3})", location.path(ref.object))
            with self._locked():
                os.replace(tmp, path)
            self.downloads += 1
            self.download_bytes += size
        finally:
            _unlink_quietly(tmp)
        self.evict()
        return path

    def adopt(self, location: Location, name: str, local_path: str) -> None:
        """Link the local file ``local_path`` (just uploaded as ``name``) into the cache."""
        path = self.object_path(location, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with self._locked():
            try:
                os.link(local_path, path)
            except FileExistsError:
                pass
            except OSError:
                shutil.copyfile(local_path, path)
        self.evict()

    def evict(self) -> int:
        """Remove least recently used unlinked files beyond the disk budget; returns bytes freed."""
        with self._locked():
            files = []
            total = 0
            for d, _, names in os.walk(self._objects):
                for n in names:
                    p = os.path.join(d, n)
                    try:
                        st = os.stat(p)
                    except FileNotFoundError:
                        continue
                    total += st.st_size
                    if st.st_nlink == 1 and ".tmp-" not in n:
                        files.append((st.st_mtime, p, st.st_size))
            freed = 0
            if total <= self.disk_budget:
                return 0
            for _, p, size in sorted(files):
                if total - freed <= self.disk_budget:
                    break
                _unlink_quietly(p)
                freed += size
            return freed

    def usage(self) -> int:
        total = 0
        for d, _, names in os.walk(self._objects):
            for n in names:
                try:
                    total += os.stat(os.path.join(d, n)).st_size
                except FileNotFoundError:
                    pass
        return total

    # ------------------------------------------------------------------ working copies

    def new_work_dir(self) -> "WorkDir":
        self.sweep()
        with self._locked():  # a sweep never sees a directory before its lock is held
            return WorkDir(os.path.join(self._work, uuid.uuid4().hex))

    def sweep(self) -> int:
        """Remove working copies whose owner process has ended; returns how many."""
        with self._locked():
            return self._sweep()

    def _sweep(self) -> int:
        removed = 0
        try:
            names = os.listdir(self._work)
        except FileNotFoundError:
            return 0
        for n in names:
            d = os.path.join(self._work, n)
            lock = os.path.join(d, "owner.lock")
            try:
                fd = os.open(lock, os.O_RDWR)
            except FileNotFoundError:
                continue  # being created (the lock is its first file) or being removed
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError as e:
                    if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                        continue  # its owner is alive
                    raise
                shutil.rmtree(os.path.join(d, "db"), ignore_errors=True)
                _unlink_quietly(lock)
                try:
                    os.rmdir(d)
                except OSError:
                    pass
                removed += 1
            finally:
                os.close(fd)
        return removed


class WorkDir:
    """A working copy owned by this process (its ``owner.lock`` held until :meth:`remove`)."""

    def __init__(self, path: str):
        self.path = path
        self.db_path = os.path.join(path, "db")
        os.makedirs(path)
        self._fd = os.open(os.path.join(path, "owner.lock"), os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        os.makedirs(self.db_path)

    def link_in(self, cached_path: str, local_name: str) -> None:
        dst = os.path.join(self.db_path, local_name)
        try:
            os.link(cached_path, dst)
        except OSError:
            shutil.copyfile(cached_path, dst)

    def write_file(self, local_name: str, data: bytes) -> None:
        with open(os.path.join(self.db_path, local_name), "wb") as f:
            f.write(data)

    def remove(self) -> None:
        shutil.rmtree(self.db_path, ignore_errors=True)
        _unlink_quietly(os.path.join(self.path, "owner.lock"))
        try:
            os.rmdir(self.path)
        except OSError:
            pass
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class _FileLock:
    def __init__(self, path: str):
        self.path = path

    def __enter__(self):
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
