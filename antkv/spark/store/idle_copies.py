"""What a process keeps between batches: committed working copies left open for the next
batch to reuse (at most ``StoreOptions.max_idle_stores``, the least recently used closed first),
and one local cache per cache directory.  :func:`antkv.spark.store.opening.open_store` takes
copies from here; a commit gives its copy back.

A copy given back may still be parking (:mod:`antkv.spark.store.parked_copies`) in a thread of
its own: in a Python worker Spark reuses, the commit returns at once and the checkpoint is
taken while the worker waits for its next task.  Invariant: nothing else touches a copy until
its parking ended -- :meth:`IdleCopies.take` and every close wait for it
(:meth:`~antkv.spark.store.working_copy.WorkingCopy.finish_parking`), and a copy whose parking
failed is closed, not reused."""

from __future__ import annotations

import atexit
import collections
import logging
import os
import threading

from antkv.spark.store.block_cache import BlockCache
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
        """The idle copy of ``partition`` this process holds, whatever version it holds (once
        its parking ended; None if that failed)."""
        with self._lock:
            copy = self._idle.pop((loc.identity, operator, partition), None)
        if copy is not None and not copy.finish_parking():
            copy.destroy()
            return None
        return copy

    def give_back(self, loc: Location, operator: str, partition: int, copy: WorkingCopy, limit: int,
                  park=None) -> None:
        """Keep ``copy`` for reuse; with ``park`` (a callable), run it in a thread of its own
        first (see the module docstring)."""
        if park is not None:
            copy.start_parking(park)
        drop = []
        with self._lock:
            old = self._idle.pop((loc.identity, operator, partition), None)
            if old is not None:
                drop.append(old)
            self._idle[(loc.identity, operator, partition)] = copy
            while len(self._idle) > limit:
                drop.append(self._idle.popitem(last=False)[1])
        for c in drop:
            c.finish_parking()
            c.destroy()

    def clear(self) -> None:
        with self._lock:
            copies = list(self._idle.values())
            self._idle.clear()
        for c in copies:
            c.finish_parking()
            c.destroy()


def background_parking() -> bool:
    """Whether a commit may park its copy in a thread: only in a Python worker that Spark
    reuses for the next task (``SPARK_REUSE_WORKER``, set by Spark's worker factory).  A worker
    that is not reused exits right after its task, ending every thread it started."""
    return bool(os.environ.get("SPARK_REUSE_WORKER"))


held = IdleCopies()  # this process's
atexit.register(held.clear)
_caches: dict[tuple[int, str], LocalCache] = {}
_blocks: dict[tuple[int, str], BlockCache] = {}
_caches_lock = threading.Lock()


def cache_for(options: StoreOptions) -> LocalCache:
    """This process's local cache of ``options``'s cache directory (one per directory)."""
    return _per_process(_caches, LocalCache, options)


def blocks_for(options: StoreOptions) -> BlockCache:
    """This process's block cache of ``options``'s cache directory (remote mode; one per
    directory); its location reads time out after ``options.location_timeout_s``."""
    blocks = _per_process(_blocks, BlockCache, options)
    blocks.read_timeout_s = options.location_timeout_s
    return blocks


def _per_process(made: dict, make, options: StoreOptions):
    """``make(root, cache_disk_bytes)`` for ``options``'s cache directory, once per process."""
    root = os.path.abspath(options.resolved_cache_dir())
    with _caches_lock:
        key = (os.getpid(), root)
        cache = made.get(key)
        if cache is None:
            cache = made[key] = make(root, options.cache_disk_bytes)
        return cache


def release_idle_stores() -> None:
    """Close every working copy this process keeps for reuse (tests, shutdown)."""
    held.clear()


def local_cache_counters(options: StoreOptions | None = None) -> dict:
    """This process's local-cache counters: ``hits`` (snapshot files found cached),
    ``downloads`` and ``download_bytes`` (snapshot files fetched from locations), and
    ``changelog_bytes`` (changelogs read from locations to build or catch up copies); in
    remote mode also the block cache's ``block_hits`` and ``block_misses`` (chunks served from
    local disk, fetched from the location) and ``block_fetched_bytes``."""
    options = options or StoreOptions()
    cache = cache_for(options)
    counters = {"hits": cache.hits, "downloads": cache.downloads, "download_bytes": cache.download_bytes,
                "changelog_bytes": cache.changelog_bytes, "block_hits": 0, "block_misses": 0,
                "block_fetched_bytes": 0}
    if options.remote_tables:
        blocks = blocks_for(options).stats()
        counters.update(block_hits=blocks["hits"], block_misses=blocks["misses"],
                        block_fetched_bytes=blocks["fetched_bytes"])
    return counters
