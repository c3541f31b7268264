"""Crash and power-loss tests through the file-system layer (in memory, deterministic).

Every file-system call of a workload covering writes, flushes, compactions, MANIFEST rolls,
value-log rotation and GC is a kill point; after each, recovery runs with unsynced data kept,
dropped, and partly dropped (with unsynced directory entries lost).
"""

from __future__ import annotations

import pytest

from fuzz.crash import CONFIGS, check_recovery, run_until_crash, workload

CRASH_CONFIGS = CONFIGS


@pytest.mark.parametrize("config", sorted(CRASH_CONFIGS))
@pytest.mark.parametrize("seed", [1, 2])
def test_every_kill_point(config, seed):
    options = CRASH_CONFIGS[config]
    ops = workload(config, seed, n=50)
    _, acked, total_calls, crashed = run_until_crash(ops, options, None, seed)
    assert not crashed and acked == len(ops)
    assert total_calls > 50
    step = max(1, total_calls // 120)  # at most ~120 kill points per workload
    checked = 0
    for n in range(1, total_calls + 1, step):
        inner, acked, _, crashed = run_until_crash(ops, options, n, seed)
        assert crashed
        for mode in ("kill", "power", "partial"):  # each crash of the same interrupted run
            check_recovery(inner.clone(), ops, acked, mode, options, seed * 1000 + n)
            checked += 1
    assert checked >= 3 * min(total_calls, 100)


@pytest.mark.parametrize("config", sorted(CRASH_CONFIGS))
def test_power_loss_after_clean_run_keeps_synced_prefix(config):
    options = CRASH_CONFIGS[config]
    for seed in range(5):
        ops = workload(config, 100 + seed, n=80)
        inner, acked, _, crashed = run_until_crash(ops, options, None, seed)
        assert not crashed
        # close() synced everything: nothing may be lost, even on power loss
        assert check_recovery(inner, ops, acked, "power", options, seed) == len(ops)


@pytest.mark.parametrize("config", sorted(CRASH_CONFIGS))
def test_crash_during_recovery(config):
    """A power loss while recovering from a power loss: every file-system call of the recovery
    (replay, flush of the replayed data, value-log sealing, MANIFEST roll, CURRENT swap,
    obsolete-file removal) is a kill point, and the final recovery still obeys the prefix rule."""
    from fuzz.crash import check_crash_during_recovery

    checked = 0
    for first in (60, 140, 220):
        checked += check_crash_during_recovery(config, seed=3, first_crash_at=first)
    assert checked > 30
