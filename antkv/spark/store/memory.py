"""One memory budget per Python worker process.

Every state store a process opens shares one block cache and one write buffer manager, made
once by ``antkv.shared_memory(total_bytes)`` (cache = (3 - r) * total / 3, write buffers =
2 * total * r / 3, memtables charged to the cache).  So a worker serving many partitions, or
many operators, stays within one figure instead of one budget per store -- the native-memory
growth users of Spark's RocksDB provider report.

The row caches of the process's working copies (:mod:`antkv.spark.store.row_cache`) share one
:class:`~antkv.spark.store.row_cache.RowBudget`, charged to the same block cache.

The budget belongs to the process: a forked child does not inherit its parent's (it makes its
own on first use), and the first caller's ``total_bytes`` fixes it for the process's life.
"""

from __future__ import annotations

import os
import threading

import antkv

from antkv.spark.store.row_cache import RowBudget

_lock = threading.Lock()
_budget: tuple[int, int, antkv.Cache, antkv.WriteBufferManager] | None = None  # (pid, total, cache, wbm)
_rows: tuple[int, RowBudget] | None = None  # (pid, the row caches' budget)


def worker_memory(total_bytes: int) -> tuple[antkv.Cache, antkv.WriteBufferManager]:
    """The ``(cache, write buffer manager)`` every store of this process shares."""
    global _budget
    with _lock:
        pid = os.getpid()
        if _budget is None or _budget[0] != pid:
            cache, wbm = antkv.shared_memory(total_bytes)
            _budget = (pid, total_bytes, cache, wbm)
        return _budget[2], _budget[3]


def worker_row_budget(total_bytes: int, row_cache_bytes: int) -> RowBudget:
    """The row-cache budget every working copy of this process shares (the first caller's
    ``row_cache_bytes`` fixes it), charged to the process's block cache."""
    global _rows
    cache, _ = worker_memory(total_bytes)
    with _lock:
        pid = os.getpid()
        if _rows is None or _rows[0] != pid:
            _rows = (pid, RowBudget(row_cache_bytes, cache))
        return _rows[1]


def worker_memory_total() -> int | None:
    """The budget this process fixed, or None before any store opened."""
    b = _budget
    return None if b is None or b[0] != os.getpid() else b[1]
