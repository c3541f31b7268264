"""What a process keeps between batches: committed working copies left open for the next
batch to reuse (at most ``StoreOptions.max_idle_stores``, the least recently used closed first),
and one local cache per cache directory.  :func:`antkv.spark.store.opening.open_store` takes
copies from here; a commit gives its copy back."""

from __future__ import annotations

import atexit
import collections
import os
import threading

from antkv.spark.store.local_cache import LocalCache
from antkv.spark.store.location import Location
from antkv.spark.store.store_options import StoreOptions
from antkv.spark.store.working_copy import WorkingCopy


class IdleCopies:
    """Committed working copies kept open in this process, least recently used first."""

    def __init__(self):
        self._lock = threading.Lock()
        self._idle: "collections.OrderedDict[tuple, WorkingCopy]" = collections.OrderedDict()

    def take(self, loc: Location, operator: str, partition: int) -> WorkingCopy | None:
        """The idle copy of ``partition`` this process holds, whatever version it holds."""
        with self._lock:
            return self._idle.pop((loc.identity, operator, partition), None)

    def give_back(self, loc: Location, operator: str, partition: int, copy: WorkingCopy, limit: int) -> None:
        drop = []
        with self._lock:
            old = self._idle.pop((loc.identity, operator, partition), None)
            if old is not None:
                drop.append(old)
            self._idle[(loc.identity, operator, partition)] = copy
            while len(self._idle) > limit:
                drop.append(self._idle.popitem(last=False)[1])
        for c in drop:
            c.destroy()

    def clear(self) -> None:
        with self._lock:
            copies = list(self._idle.values())
            self._idle.clear()
        for c in copies:
            c.destroy()


held = IdleCopies()  # this process's
atexit.register(held.clear)
_caches: dict[tuple[int, str], LocalCache] = {}
_caches_lock = threading.Lock()


def cache_for(options: StoreOptions) -> LocalCache:
    """This process's local cache of ``options``'s cache directory (one per directory)."""
    root = os.path.abspath(options.resolved_cache_dir())
    with _caches_lock:
        key = (os.getpid(), root)
        cache = _caches.get(key)
        if cache is None:
            cache = _caches[key] = LocalCache(root, options.cache_disk_bytes)
        return cache


def release_idle_stores() -> None:
    """Close every working copy this process keeps for reuse (tests, shutdown)."""
    held.clear()


def local_cache_counters(options: StoreOptions | None = None) -> dict:
    """This process's local-cache counters: ``hits`` (snapshot files found cached),
    ``downloads`` and ``download_bytes`` (fetched from locations)."""
    cache = cache_for(options or StoreOptions())
    return {"hits": cache.hits, "downloads": cache.downloads, "download_bytes": cache.download_bytes}
