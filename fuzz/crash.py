"""Crash harness (used by ``tests/test_crash.py``, and long by ``python -m fuzz.crash``): run a workload on a fault-injecting in-memory file system, crash it at
a chosen file-system call, recover, and check the recovered state against the history.

The rule (SPEC section 3): after a power loss the database holds the state after some prefix of
the operation history that includes every acknowledged ``sync=True`` write (and everything
made durable by a flush); after a process kill it holds every acknowledged write (and maybe the
one in flight).
"""

from __future__ import annotations

import random

import antkv
from antkv.fs.fault import FaultInjectionFileSystem, SimulatedCrash
from antkv.fs.memory import MemoryFileSystem


MERGE_OPERATOR = "append:2c"  # the operator of configs with merges: operands joined by ","


def make_workload(seed: int, n: int = 60, big: bool = True, merges: bool = False) -> list[tuple]:
    """A seeded history; with ``merges`` a fifth of the puts are merges (the database needs
    ``merge_operator=MERGE_OPERATOR``)."""
    rng = random.Random(seed)
    keys = [b"k%02d" % i for i in range(24)] + [b""]
    ops = []
    for _ in range(n):
        if rng.random() < 0.08:  # snapshots held across flushes and compactions change what survives them
            ops.append(("snapshot",) if rng.random() < 0.6 else ("release",))
            continue
        r = rng.random()
        sync = rng.random() < 0.3
        k = rng.choice(keys)
        if r < 0.55:
            size = rng.choice([0, 5, 40, 150, 600]) if big else rng.choice([0, 5, 40])
            kind = "merge" if merges and rng.random() < 0.4 else "put"
            ops.append((kind, k, bytes([rng.randrange(256)]) * size, sync))
        elif r < 0.68:
            ops.append(("delete", k, sync))
        elif r < 0.76:
            a, b = sorted((rng.choice(keys), rng.choice(keys)))
            ops.append(("delete_range", a, b, sync))
        elif r < 0.86:
            batch = []
            for _ in range(rng.randint(1, 4)):
                kk = rng.choice(keys)
                if rng.random() < 0.7:
                    kind = "merge" if merges and rng.random() < 0.4 else "put"
                    batch.append((kind, kk, bytes([rng.randrange(256)]) * rng.choice([3, 200])))
                else:
                    batch.append(("delete", kk))
            ops.append(("batch", batch, sync))
        elif r < 0.93:
            ops.append(("flush",))
        elif r < 0.96:
            ops.append(("compact",))
        elif r < 0.98:
            ops.append(("checkpoint",))
        else:
            ops.append(("gc",))
    return ops


def _merged(model: dict, key: bytes, operand: bytes) -> bytes:
    """The append operator of MERGE_OPERATOR applied to the model."""
    return operand if key not in model else model[key] + b"," + operand


def apply_model(model: dict, op: tuple) -> None:
    kind = op[0]
    if kind == "put":
        model[op[1]] = op[2]
    elif kind == "merge":
        model[op[1]] = _merged(model, op[1], op[2])
    elif kind == "delete":
        model.pop(op[1], None)
    elif kind == "delete_range":
        for k in [k for k in model if op[1] <= k < op[2]]:
            del model[k]
    elif kind == "batch":
        for sub in op[1]:
            if sub[0] == "put":
                model[sub[1]] = sub[2]
            elif sub[0] == "merge":
                model[sub[1]] = _merged(model, sub[1], sub[2])
            else:
                model.pop(sub[1], None)


def apply_db(db, op: tuple) -> None:
    kind = op[0]
    if kind == "put":
        db.put(op[1], op[2], sync=op[3])
    elif kind == "merge":
        db.merge(op[1], op[2], sync=op[3])
    elif kind == "delete":
        db.delete(op[1], sync=op[2])
    elif kind == "delete_range":
        db.delete_range(op[1], op[2], sync=op[3])
    elif kind == "batch":
        b = antkv.WriteBatch()
        for sub in op[1]:
            if sub[0] == "put":
                b.put(sub[1], sub[2])
            elif sub[0] == "merge":
                b.merge(sub[1], sub[2])
            else:
                b.delete(sub[1])
        db.write(b, sync=op[2])
    elif kind == "flush":
        db.flush()
    elif kind == "compact":
        db.compact_range()
    elif kind == "gc":
        db.gc_value_log()
    elif kind == "snapshot":
        db._crash_test_snapshots = getattr(db, "_crash_test_snapshots", [])
        db._crash_test_snapshots.append(db.snapshot())
    elif kind == "release":
        held = getattr(db, "_crash_test_snapshots", [])
        if held:
            held.pop(0).release()
    elif kind == "checkpoint":
        n = db._checkpoints_taken = getattr(db, "_checkpoints_taken", 0) + 1
        db.checkpoint(f"cp{n}")


def is_durable_point(op: tuple) -> bool:
    """Ops after which everything before them must survive a power loss."""
    return op[0] in ("flush", "compact", "gc", "checkpoint") or (op[0] != "batch" and op[-1] is True) or (op[0] == "batch" and op[2])


def prefix_states(ops: list[tuple]) -> list[dict]:
    states = [{}]
    m: dict = {}
    for op in ops:
        apply_model(m, op)
        states.append(dict(m))
    return states


def run_until_crash(ops, options: dict, crash_at: int | None, seed: int):
    """Run ``ops``; returns (inner fs, number of acknowledged ops, total fs calls)."""
    inner = MemoryFileSystem()
    fs = FaultInjectionFileSystem(inner, seed=seed)
    if crash_at is not None:
        fs.crash_at(crash_at)
    acked = 0
    try:
        db = antkv.open("db", file_system=fs, **options)
        for op in ops:
            apply_db(db, op)
            acked += 1
        db.close()
    except SimulatedCrash:
        return inner, acked, fs.calls, True
    return inner, acked, fs.calls, False


def check_recovery(inner: MemoryFileSystem, ops, acked: int, mode: str, options: dict, seed: int) -> int:
    """Recover after ``inner.crash(mode)`` and check the prefix rule; returns the prefix length."""
    inner.crash(mode, random.Random(seed))
    states = prefix_states(ops)
    _check_checkpoints(inner, ops, acked, options)
    created = inner.exists("db/CURRENT")
    db = antkv.open("db", file_system=inner, **options)
    try:
        got = dict(db.items())
        for k, v in list(got.items())[:50]:
            assert db.get(k) == v
        db.verify()
        lost = db.stats()["lost"]
    finally:
        db.close()
    # a process kill keeps the LOG lines that prove which files the database was writing: its
    # debris is reclaimed, nothing of its own goes to lost/ (a power loss may lose those lines:
    # then what they would have proven is kept in lost/, never deleted; and the data-less files
    # of a creation that stopped before CURRENT go there too)
    if mode == "kill" and created:
        assert lost["files"] == 0, f"mode=kill: {lost} in lost/: {sorted(inner.listdir('db/lost'))}"
    with antkv.open("db", file_system=inner, **options) as again:  # nothing more is moved aside
        assert again.stats()["lost"] == lost and dict(again.items()) == got
    last_durable = 0
    for i, op in enumerate(ops[:acked]):
        if is_durable_point(op):
            last_durable = i + 1
    if mode == "kill":
        allowed = [acked, acked + 1]
    else:
        allowed = list(range(last_durable, acked + 2))
    matches = [i for i in allowed if i < len(states) and states[i] == got]
    assert matches, (
        f"mode={mode} acked={acked} last_durable={last_durable}: recovered state {sorted(got.items())[:8]}... "
        f"is not an allowed prefix"
    )
    return matches[0]


def _check_checkpoints(inner: MemoryFileSystem, ops, acked: int, options: dict) -> None:
    """Every checkpoint directory that survived the crash opens and holds exactly the state
    of the history up to its checkpoint operation (a crash leaves it complete or absent)."""
    states = prefix_states(ops)
    n = 0
    for i, op in enumerate(ops[: acked + 1]):
        if op[0] != "checkpoint":
            continue
        n += 1
        name = f"cp{n}"
        if not inner.exists(name):
            assert i >= acked, f"acknowledged checkpoint {name} is missing"
            continue
        with antkv.open(name, file_system=inner, create_if_missing=False, **options) as cp:
            assert dict(cp.items()) == states[i], f"checkpoint {name} differs from the state at op {i}"


CONFIGS = {
    "tiny-lsm": dict(
        max_background_jobs=0, write_buffer_size=1024, block_size=64, target_file_size_base=512,
        max_bytes_for_level_base=2048, level0_file_num_compaction_trigger=1, num_levels=4,
        max_manifest_file_size=600, enable_blob_files=False,
    ),
    "blobs": dict(
        max_background_jobs=0, write_buffer_size=2048, block_size=128, target_file_size_base=1024,
        level0_file_num_compaction_trigger=2, min_blob_size=100, blob_file_size=1500,
        blob_gc_threshold=0.05, max_manifest_file_size=1000,
    ),
    "all-blobs": dict(
        max_background_jobs=0, write_buffer_size=4096, min_blob_size=0, blob_file_size=3000,
        blob_gc_threshold=0.2, level0_file_num_compaction_trigger=2,
    ),
    # merges (workload(config)): operands combined by flush and compaction, values in the log
    "merges": dict(
        max_background_jobs=0, write_buffer_size=1024, block_size=128, target_file_size_base=1024,
        level0_file_num_compaction_trigger=1, num_levels=4, min_blob_size=100, blob_file_size=1500,
        blob_gc_threshold=0.05, max_manifest_file_size=1000, merge_operator=MERGE_OPERATOR,
    ),
}


def workload(config: str, seed: int, n: int = 50) -> list[tuple]:
    """The seeded history run under ``config``: with merges when its database has an operator."""
    return make_workload(seed, n=n, merges="merge_operator" in CONFIGS[config])


def sweep(config: str, seed: int, ops_per_workload: int = 50, max_points: int | None = None) -> int:
    """Crash at every (or ``max_points`` evenly spread) file-system call of one workload and
    check recovery in all three modes; returns the number of kill points checked."""
    options = CONFIGS[config]
    ops = workload(config, seed, n=ops_per_workload)
    _, acked, total_calls, crashed = run_until_crash(ops, options, None, seed)
    assert not crashed and acked == len(ops)
    step = 1 if max_points is None else max(1, total_calls // max_points)
    points = 0
    for n in range(1, total_calls + 1, step):
        for mode in ("kill", "power", "partial"):
            inner, acked, _, crashed = run_until_crash(ops, options, n, seed)
            assert crashed
            try:
                check_recovery(inner, ops, acked, mode, options, seed * 1000 + n)
            except AssertionError as e:
                raise AssertionError(
                    f"{e}\nreproduce: python -m fuzz.crash --config {config} --seed {seed} --point {n} --mode {mode}"
                ) from None
        points += 1
    return points


def main(argv: list[str] | None = None) -> int:
    import argparse
    import logging
    import time

    ap = argparse.ArgumentParser(description="Long crash run: every file-system call of seeded workloads is a kill point")
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--seed", type=int, default=1000)
    ap.add_argument("--config", choices=sorted(CONFIGS), default=None)
    ap.add_argument("--point", type=int, default=None, help="with --seed and --config: one kill point")
    ap.add_argument("--mode", choices=("kill", "power", "partial"), default=None)
    args = ap.parse_args(argv)
    logging.disable(logging.WARNING)  # recovery reports every torn tail; the check is the point
    if args.point is not None:
        options = CONFIGS[args.config or "tiny-lsm"]
        ops = workload(args.config or "tiny-lsm", args.seed, n=50)
        inner, acked, _, _ = run_until_crash(ops, options, args.point, args.seed)
        check_recovery(inner, ops, acked, args.mode or "power", options, args.seed * 1000 + args.point)
        print("recovered correctly")
        return 0
    deadline = time.monotonic() + args.seconds
    total = 0
    seed = args.seed
    configs = [args.config] if args.config else sorted(CONFIGS)
    while time.monotonic() < deadline:
        for config in configs:
            n = sweep(config, seed)
            total += n
            print(f"seed {seed} {config}: {n} kill points x 3 recovery modes, all recovered correctly", flush=True)
        seed += 1
    print(f"crash summary: {total} kill points, {3 * total} recoveries, no failure")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


def check_crash_during_recovery(config: str, seed: int, first_crash_at: int, mode: str = "power") -> int:
    """Crash the workload at call ``first_crash_at``, then crash the recovery itself at each of
    its file-system calls (power loss each time), then recover cleanly: the prefix rule must
    still hold.  Returns the number of recovery kill points checked."""
    options = CONFIGS[config]
    ops = workload(config, seed, n=50)
    probe, acked, _, _ = run_until_crash(ops, options, first_crash_at, seed)
    probe.crash(mode, random.Random(seed))
    counter = FaultInjectionFileSystem(probe, seed=seed)
    antkv.open("db", file_system=counter, **options).close()
    recovery_calls = counter.calls
    for n in range(1, recovery_calls + 1):
        inner, acked2, _, _ = run_until_crash(ops, options, first_crash_at, seed)
        assert acked2 == acked
        inner.crash(mode, random.Random(seed))
        fs = FaultInjectionFileSystem(inner, seed=seed + n)
        fs.crash_at(n)
        try:
            antkv.open("db", file_system=fs, **options).close()
        except SimulatedCrash:
            pass
        check_recovery(inner, ops, acked, "power", options, seed * 7919 + n)
    return recovery_calls
