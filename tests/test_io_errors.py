"""I/O-error sweep: the n-th file-system call fails, once or from then on.

For every operation -- put with and without sync, a separated (value-log) put, a synced
batch, delete_range, enough writes to switch the memtable (flush and compaction inline),
flush, compaction, value-log GC, checkpoint and open -- and for n = 1, 2, ... through every
call the operation makes: the operation raises an ``antkv.Error`` (or, where the failed call
was best-effort, succeeds), ``close()`` returns without hanging or raising anything else,
and reopening without faults gives a database that passes ``verify()`` and holds the state
from before or after the operation (every acknowledged write present).  The cases and the
checks live in ``fuzz/sweeps.py``; ``python -m fuzz.sweeps --only io`` runs more seeds.
"""

from __future__ import annotations


import pytest

from fuzz.sweeps import (
    IO_OPERATIONS,
    IOCase,
    SweepFailure,
    build_io_base,
    check_io_case,
    count_io_calls,
    io_cases,
    run_io_sweep,
)




@pytest.fixture(scope="module")
def base():
    return build_io_base(0)


def test_every_operation_makes_file_system_calls(base):
    calls = {op: count_io_calls(base, op) for op in IO_OPERATIONS}
    assert all(n >= 1 for n in calls.values()), calls
    # the heavy operations really do their work (flush writes a table, GC rewrites, ...)
    assert calls["flush"] >= 5 and calls["compact"] >= 20 and calls["gc"] >= 20 and calls["open"] >= 10


@pytest.mark.parametrize("op", IO_OPERATIONS)
def test_fail_every_call(base, op):
    cases = io_cases(base, ops=(op,))
    counts = run_io_sweep(base, cases)
    assert sum(counts.values()) == len(cases)
    raised = sum(n for (_, outcome), n in counts.items() if outcome.startswith("raised:"))
    if op == "open":
        # an open refuses only before its commit point; after it, a failure leaves debris for
        # the next open or becomes a background error (tests/test_open_refusals.py checks both
        # sides of that point, call by call)
        assert raised >= len(cases) * 0.2, counts
        return
    # most failed calls must surface; only best-effort ones (removing an obsolete file,
    # a hard link that falls back to a copy) may be absorbed
    assert raised >= len(cases) * 0.8, counts


def test_the_oracle_rejects_a_wrong_state(base):
    """A sweep that cannot fail proves nothing: a wrong expectation must be caught."""
    key = next(iter(sorted(base.model)))
    wrong = build_io_base(0)
    wrong.model = dict(wrong.model) | {key: b"not what was written"}
    with pytest.raises(SweepFailure, match="neither before nor after"):
        check_io_case(wrong, IOCase("put", 1, False))


pytestmark = pytest.mark.usefixtures("quiet_recovery")
