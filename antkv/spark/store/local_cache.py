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
* it enters ``objects/`` by a rename of a fully written, checked temporary file, under ``LOCK``,
  and is linked into a working copy under ``LOCK`` too;
* eviction (under ``LOCK``) removes the least recently used files in ``objects/`` until their
  total is within ``disk_budget``, but never one with another link: such a file is in use by a
  working copy (the engine's files are hard links), and removing it would free nothing;
* a snapshot commit removes the partition's unlinked files its new snapshot does not name
  (:meth:`LocalCache.drop_superseded`), so a steady stream's cache stays the size of its
  working set instead of growing to the budget;
* a working copy belongs to the process holding its ``owner.lock``; a directory whose lock can
  be taken belongs to a process that ended, and is removed by the next :meth:`LocalCache.sweep`.

Worker processes of one host share a cache safely: downloads run unlocked into private
temporary files, and only the rename into ``objects/`` and eviction take the lock.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import uuid

import xxhash

import antkv
from antkv import CorruptionError
from antkv import IOError as AntIOError

from antkv.spark.store.location import Location
from antkv.spark.store.objects import FileRef, file_digest


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
        self.changelog_bytes = 0  # changelogs read from the location by this process's loads
        self.hits = 0

    # ------------------------------------------------------------------ locking

    def locked(self):
        """The cache's ``LOCK`` (a context manager): every change to ``objects/`` and every
        new directory a sweep could see holds it."""
        return HostLock(self._lock_path)

    def object_path(self, location: Location, name: str) -> str:
        loc = xxhash.xxh64_hexdigest(location.identity.encode())
        return os.path.join(self._objects, loc, *name.split("/"))

    # ------------------------------------------------------------------ objects

    def link_into(self, location: Location, ref: FileRef, dst: str) -> None:
        """Hard-link snapshot file ``ref`` to ``dst``, downloading and checking it if absent.

        The link is made under ``LOCK``, so eviction (which skips linked files) can never
        remove the cached file between the check and the link.  The caller runs
        :meth:`evict` once it has linked all it needs."""
        path = self.object_path(location, ref.object)
        with os_errors(path):
            with self.locked():
                if self._link_cached(path, ref, dst):
                    self.hits += 1
                    return
            os.makedirs(os.path.dirname(path), exist_ok=True)
            tmp = f"{path}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
            try:
                location.download(ref.object, tmp)  # unlocked: other processes go on meanwhile
                size, digest = file_digest(tmp)
                if size != ref.size or digest != ref.xxh3:
                    raise CorruptionError(
                        f"object does not match its manifest (size {size}, expected {ref.size}; "
                        f"xxh3 {digest}, expected {ref.xxh3})", location.path(ref.object))
                with self.locked():
                    if not os.path.exists(path):
                        os.rename(tmp, path)
                    self._link_cached(path, ref, dst)
                self.downloads += 1
                self.download_bytes += size
            finally:
                _unlink_quietly(tmp)

    @staticmethod
    def _link_cached(path: str, ref: FileRef, dst: str) -> bool:
        """REQUIRES: LOCK held.  Link the cached ``path`` to ``dst`` if it is there."""
        try:
            if os.stat(path).st_size != ref.size:
                return False
        except FileNotFoundError:
            return False
        os.utime(path)  # recency for eviction
        try:
            os.link(path, dst)
        except OSError as e:
            if e.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK):
                raise
            shutil.copyfile(path, dst)
        return True

    def adopt(self, location: Location, name: str, local_path: str) -> None:
        """Link the local file ``local_path`` (just uploaded as ``name``) into the cache
        (the caller runs :meth:`evict` when done)."""
        path = self.object_path(location, name)
        with os_errors(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with self.locked():
                try:
                    os.link(local_path, path)
                except FileExistsError:
                    pass
                except OSError:
                    shutil.copyfile(local_path, path)

    def evict(self) -> int:
        """Remove least recently used unlinked files beyond the disk budget; returns bytes freed."""
        with os_errors(self._objects), self.locked():
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

    def drop_superseded(self, location: Location, directory: str, named) -> int:
        """Remove the cached files of ``location`` under ``directory`` (a partition's objects)
        that ``named`` (object names: the snapshot a working copy just committed) does not hold
        and no working copy links; returns bytes freed.

        A snapshot supersedes the partition's older ones: the location deletes their files once
        no retained version names them, and this process would otherwise keep its copies until
        the disk budget forced them out.  A task that reopens an older version downloads what
        it lacks again, so dropping early costs at most a download, never an answer."""
        root = self.object_path(location, directory)
        named = {self.object_path(location, name) for name in named}
        freed = 0
        with os_errors(root), self.locked():
            try:
                names = os.listdir(root)
            except FileNotFoundError:
                return 0
            for n in names:
                p = os.path.join(root, n)
                if p in named or ".tmp-" in n:
                    continue
                try:
                    st = os.stat(p)
                except FileNotFoundError:
                    continue
                if st.st_nlink == 1 and os.path.isfile(p):
                    _unlink_quietly(p)
                    freed += st.st_size
        return freed

    def usage(self) -> int:
        return tree_bytes(self._objects)

    # ------------------------------------------------------------------ working copies

    def new_work_dir(self) -> "WorkDir":
        self.sweep()
        path = os.path.join(self._work, uuid.uuid4().hex)
        with os_errors(path), self.locked():  # a sweep never sees a directory before its lock is held
            return WorkDir(path)

    def sweep(self) -> int:
        """Remove working copies whose owner process has ended; returns how many."""
        with os_errors(self._work), self.locked():
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

    def write_file(self, local_name: str, data: bytes) -> None:
        p = os.path.join(self.db_path, local_name)
        with os_errors(p), open(p, "wb") as f:
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


class HostLock:
    """An ``fcntl`` lock on file ``path`` shared by every process of the host (a context manager)."""

    def __init__(self, path: str):
        self.path = path

    def __enter__(self):
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)


@contextlib.contextmanager
def os_errors(path: str):
    """Operating-system failures of the local cache leave as antkv.IOError."""
    try:
        yield
    except OSError as e:
        if isinstance(e, antkv.Error):
            raise
        raise AntIOError(f"local state cache: {e}", e, path) from e


def tree_bytes(root: str) -> int:
    """Bytes of the files under ``root`` (0 if it does not exist); files removed meanwhile count nothing."""
    total = 0
    for d, _, names in os.walk(root):
        for n in names:
            try:
                total += os.stat(os.path.join(d, n)).st_size
            except FileNotFoundError:
                pass
    return total


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
