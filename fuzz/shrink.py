"""Shrinking a diverging operation stream (delta debugging, Zeller's ddmin).

``shrink_stream(ops, fails)`` returns a stream, never longer than ``ops``, on which
``fails`` still holds.  ``fails(candidate)`` runs the candidate on fresh databases and says
whether it still diverges (the runner requires the divergence to be at an operation of the
same name, so shrinking does not wander off to another bug).  Passes, each keeping only
changes that still fail:

1. truncate after the first diverging operation (the caller does this);
2. ddmin over the operations: drop chunks of n/2, n/4, ... operations, also keeping only
   one chunk, until no single operation can be dropped (1-minimal);
3. inside each remaining write batch, ddmin over its sub-operations;
4. shrink values: every ``(vid, size)`` spec larger than 8 bytes is tried at 8 bytes,
   so a reproducer holds no large value unless the bug needs one.

A budget (seconds) bounds the whole shrink; the best stream found so far is returned when
it runs out.  ``ShrinkStats`` records how many candidate runs were made.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Sequence


@dataclass
class ShrinkStats:
    runs: int = 0
    start_len: int = 0
    end_len: int = 0
    out_of_time: bool = False


class _Budget:
    def __init__(self, seconds: float, stats: ShrinkStats):
        self.deadline = time.monotonic() + seconds
        self.stats = stats

    def exhausted(self) -> bool:
        if time.monotonic() > self.deadline:
            self.stats.out_of_time = True
            return True
        return False


def ddmin(items: Sequence, fails: Callable[[list], bool], budget: _Budget) -> list:
    """A 1-minimal sublist of ``items`` (order kept) on which ``fails`` holds."""
    items = list(items)
    n = 2
    while len(items) >= 2 and not budget.exhausted():
        chunk = max(1, len(items) // n)
        chunks = [items[i:i + chunk] for i in range(0, len(items), chunk)]
        reduced = False
        # Try each complement first (removing one chunk), then each chunk alone.
        for i in range(len(chunks)):
            candidate = [x for j, c in enumerate(chunks) if j != i for x in c]
            if candidate and _try(fails, candidate, budget):
                items = candidate
                n = max(n - 1, 2)
                reduced = True
                break
            if budget.exhausted():
                return items
        if not reduced and len(chunks) > 2:
            for c in chunks:
                if _try(fails, list(c), budget):
                    items = list(c)
                    n = 2
                    reduced = True
                    break
        if not reduced:
            if chunk == 1:
                break
            n = min(len(items), n * 2)
    return items


def _try(fails, candidate, budget: _Budget) -> bool:
    budget.stats.runs += 1
    return fails(candidate)


def shrink_stream(ops: list[tuple], fails: Callable[[list], bool], seconds: float = 120.0,
                  ) -> tuple[list[tuple], ShrinkStats]:
    stats = ShrinkStats(start_len=len(ops))
    budget = _Budget(seconds, stats)
    ops = ddmin(ops, fails, budget)

    # Pass 3: shrink the inside of write batches.
    for i in range(len(ops)):
        if budget.exhausted():
            break
        op = ops[i]
        if op[0] != "batch" or len(op[1]) < 2:
            continue

        def batch_fails(subs, i=i):
            return fails(ops[:i] + [("batch", tuple(subs))] + ops[i + 1:])

        subs = ddmin(op[1], batch_fails, budget)
        ops = ops[:i] + [("batch", tuple(subs))] + ops[i + 1:]

    # Pass 4: small values.
    for i in range(len(ops)):
        if budget.exhausted():
            break
        smaller = _small_values(ops[i])
        if smaller != ops[i]:
            candidate = ops[:i] + [smaller] + ops[i + 1:]
            if _try(fails, candidate, budget):
                ops = candidate

    stats.end_len = len(ops)
    return ops, stats


def _small_values(op: tuple) -> tuple:
    if op[0] == "put" and op[2][1] > 8:
        return ("put", op[1], (op[2][0], 8))
    if op[0] == "batch":
        return ("batch", tuple(_small_values(s) for s in op[1]))
    return op
