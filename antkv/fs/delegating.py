"""A file system that hands every call to another one: the base of wrappers that change a few.

:class:`DelegatingFileSystem` forwards each :class:`~antkv.fs.FileSystem` call to ``base``
unchanged.  A wrapper subclasses it and overrides only the calls it changes
(:class:`~antkv.fs.pinned.PinnedFileSystem` serves pinned paths from held handles;
``antkv.spark.store.remote_tables.RemoteTables`` serves files of a checkpoint location).
"""

from __future__ import annotations

from .api import FileSystem


class DelegatingFileSystem(FileSystem):
    def __init__(self, base: FileSystem):
        self.base = base

    def create(self, path):
        return self.base.create(path)

    def open_random(self, path):
        return self.base.open_random(path)

    def read_all(self, path):
        return self.base.read_all(path)

    def write_all(self, path, data, sync=True):
        self.base.write_all(path, data, sync)

    def exists(self, path):
        return self.base.exists(path)

    def is_dir(self, path):
        return self.base.is_dir(path)

    def listdir(self, path):
        return self.base.listdir(path)

    def size(self, path):
        return self.base.size(path)

    def remove(self, path):
        self.base.remove(path)

    def rename(self, src, dst):
        self.base.rename(src, dst)

    def link(self, src, dst):
        self.base.link(src, dst)

    def truncate(self, path, size):
        self.base.truncate(path, size)

    def mkdirs(self, path):
        self.base.mkdirs(path)

    def rmdir(self, path):
        self.base.rmdir(path)

    def sync_dir(self, path):
        self.base.sync_dir(path)

    def sync_file(self, path):
        self.base.sync_file(path)

    def lock(self, path):
        return self.base.lock(path)

    def unlock(self, lock):
        self.base.unlock(lock)

    def is_locked(self, path):
        return self.base.is_locked(path)

    def copy(self, src, dst, sync=True):
        self.base.copy(src, dst, sync)
