"""Crash-test harness: run a workload on a fault-injecting in-memory file system, crash it at
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


def make_workload(seed: int, n: int = 60, big: bool = True) -> list[tuple]:
    rng = random.Random(seed)
    keys = [b"k%02d" % i for i in range(24)] + [b""]
    ops = []
    for _ in range(n):
        r = rng.random()
        sync = rng.random() < 0.3
        k = rng.choice(keys)
        if r < 0.55:
            size = rng.choice([0, 5, 40, 150, 600]) if big else rng.choice([0, 5, 40])
            ops.append(("put", k, bytes([rng.randrange(256)]) * size, sync))
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
                    batch.append(("put", kk, bytes([rng.randrange(256)]) * rng.choice([3, 200])))
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


def apply_model(model: dict, op: tuple) -> None:
    kind = op[0]
    if kind == "put":
        model[op[1]] = op[2]
    elif kind == "delete":
        model.pop(op[1], None)
    elif kind == "delete_range":
        for k in [k for k in model if op[1] <= k < op[2]]:
            del model[k]
    elif kind == "batch":
        for sub in op[1]:
            if sub[0] == "put":
                model[sub[1]] = sub[2]
            else:
                model.pop(sub[1], None)


def apply_db(db, op: tuple) -> None:
    kind = op[0]
    if kind == "put":
        db.put(op[1], op[2], sync=op[3])
    elif kind == "delete":
        db.delete(op[1], sync=op[2])
    elif kind == "delete_range":
        db.delete_range(op[1], op[2], sync=op[3])
    elif kind == "batch":
        b = antkv.WriteBatch()
        for sub in op[1]:
            if sub[0] == "put":
                b.put(sub[1], sub[2])
            else:
                b.delete(sub[1])
        db.write(b, sync=op[2])
    elif kind == "flush":
        db.flush()
    elif kind == "compact":
        db.compact_range()
    elif kind == "gc":
        db.gc_value_log()
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
    db = antkv.open("db", file_system=inner, **options)
    try:
        got = dict(db.items())
        for k, v in list(got.items())[:50]:
            assert db.get(k) == v
        db.verify()
    finally:
        db.close()
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
