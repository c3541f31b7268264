"""Progress bars for the ``antkv`` command's long work (``load``, ``dump``, ``verify``,
``compact``, ``gc``, ``checkpoint``).

A bar is drawn on standard error only when it is a terminal, with ``tqdm`` (a well-kept
library that redraws at a bounded rate and measures the rate itself); piped or redirected,
the command prints nothing extra, so its output stays exactly what a script expects.
``--no-progress`` turns it off on a terminal too.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Callable, Iterable, Iterator, TypeVar

T = TypeVar("T")


def wanted(disabled: bool = False) -> bool:
    """Whether a bar would be drawn: standard error is a terminal and bars are not disabled."""
    if disabled:
        return False
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def progress(items: Iterable[T], desc: str, unit: str, total: int | None = None, disabled: bool = False) -> Iterator[T]:
    """``items``, with a bar on a terminal (see the module docstring)."""
    if not wanted(disabled):
        yield from items
        return
    from tqdm import tqdm

    bar = tqdm(items, desc=desc, unit=unit, total=total, file=sys.stderr, leave=False, dynamic_ncols=True)
    try:
        yield from bar
    finally:
        bar.close()


@contextlib.contextmanager
def step_bar(desc: str, unit: str, disabled: bool = False) -> Iterator[Callable[[int, int], None] | None]:
    """A ``progress(done, total)`` callback for the engine's maintenance calls
    (:mod:`antkv.base.progress`) drawing a bar on a terminal, or None where no bar is wanted."""
    if not wanted(disabled):
        yield None
        return
    from tqdm import tqdm

    bar = tqdm(desc=desc, unit=unit, total=0, file=sys.stderr, leave=False, dynamic_ncols=True)

    def report(done: int, total: int) -> None:
        if bar.total != total:
            bar.total = total
        bar.n = done
        bar.refresh()

    try:
        yield report
    finally:
        bar.close()
