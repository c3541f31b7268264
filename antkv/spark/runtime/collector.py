"""CPython's cyclic garbage collector while a task runs a batch.

A Spark Python worker keeps the working copies of the partitions it ran between tasks
(memtables, row caches, table readers: several hundred thousand objects), and a batch creates
a few hundred thousand short-lived objects (a DataFrame per grouping key, the rows a
processor reads and writes).  With the collector's default thresholds those allocations
trigger a collection every 700 new objects and, every hundred or so of those, a full pass
that walks every object the process holds: measured on four partitions of 25,000 keys held
in one process, 5-10% of the processing time, more the more copies the worker holds.

While a task runs (:func:`task_collections`), the first generation's threshold is raised to
:data:`TASK_THRESHOLD` new objects.  The collector still runs, so garbage cycles made during
the task are still reclaimed, only less often; the thresholds the process had are restored
when the last task running in it ends.  A process that set a higher threshold, or disabled
automatic collection, keeps its setting.
"""

from __future__ import annotations

import contextlib
import gc
import threading

TASK_THRESHOLD = 20_000  # new objects between two collections of the youngest generation, in a task

_lock = threading.Lock()
_running = 0  # tasks inside task_collections()
_saved: tuple | None = None  # the thresholds to restore when the last of them ends, if raised


@contextlib.contextmanager
def task_collections():
    """Raise the collector's first threshold for the duration of the block (see the module
    docstring); nested and concurrent blocks restore the process's thresholds once, at the end
    of the last one."""
    global _running, _saved
    with _lock:
        if _running == 0:
            current = gc.get_threshold()
            if 0 < current[0] < TASK_THRESHOLD:
                _saved = current
                gc.set_threshold(TASK_THRESHOLD, *current[1:])
        _running += 1
    try:
        yield
    finally:
        with _lock:
            _running -= 1
            if _running == 0 and _saved is not None:
                gc.set_threshold(*_saved)
                _saved = None
