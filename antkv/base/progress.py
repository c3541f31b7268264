"""Progress reports of long maintenance calls (``verify``, ``compact_range``, ``gc_value_log``,
``checkpoint``).

A caller passes ``progress``, a callable taking ``(done, total)``: the steps finished so far and
the steps in all, both ints with ``0 <= done <= total``.  Each call defines its step (a file
checked, a level compacted, a value-log file collected, a file linked) and reports ``(0,
total)`` before the first and ``(total, total)`` after the last.  ``total`` may grow during the
call when work appears that was not there at its start (a GC pass that finds another file over
the threshold).  The callback runs on the calling thread, between steps; reads and writes of the
database are not blocked while it runs.  What it raises propagates and ends the call between two
steps, leaving the database as that step left it (a checkpoint's unfinished ``DIR.tmp`` is
removed by the next checkpoint to ``DIR``).
"""

from __future__ import annotations

from typing import Callable

Progress = Callable[[int, int], None]


def _ignore(done: int, total: int) -> None:
    return None


def progress_callback(progress) -> Progress:
    """``progress``, checked: a callable, or None for no reports (``TypeError`` otherwise)."""
    if progress is None:
        return _ignore
    if not callable(progress):
        raise TypeError(f"progress must be a callable taking (done, total), not {type(progress).__name__}")
    return progress
