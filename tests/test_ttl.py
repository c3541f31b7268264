"""Time to live (``db.put(key, value, ttl=seconds)``, ``Options.clock``): a model test under
extreme option sets, compaction dropping expired entries and counting their value-log bytes as
garbage, a crash at every file-system call of a workload with expiring entries, worker
processes, and bad input."""

from __future__ import annotations

import random

import pytest

import antkv
from antkv.fs.fault import FaultInjectionFileSystem, SimulatedCrash
from antkv.fs.memory import MemoryFileSystem
from model_configs import CONFIGS

KEYS = [b"t%02d" % i for i in range(40)]


class Clock:
    """An injectable clock (seconds); tests move it by hand."""

    def __init__(self, t: float = 1_000_000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


def live(model: dict, now: float) -> dict:
    return {k: v for k, (v, expiry) in model.items() if expiry is None or expiry > now}


def check(db, model: dict, now: float) -> None:
    want = live(model, now)
    assert dict(db.items()) == want
    assert list(db.keys(reverse=True)) == sorted(want, reverse=True)
    assert list(db.values()) == [want[k] for k in sorted(want)]
    for k in KEYS[::5]:
        assert db.get(k) == want.get(k)
    it = db.iterator()
    it.seek_to_first()
    seen = []
    while it.valid():
        seen.append((it.key(), it.value()))
        it.next()
    assert seen == sorted(want.items())


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_ttl_model(config):
    clock = Clock()
    fs = MemoryFileSystem()
    opts = antkv.Options(file_system=fs, clock=clock, **CONFIGS[config])
    rng = random.Random(config)
    db = antkv.open("db", opts)
    model: dict = {}  # key -> (value, expiry in seconds or None)
    for step in range(500):
        r = rng.random()
        k = rng.choice(KEYS)
        v = bytes([rng.randrange(256)]) * rng.choice([0, 5, 60, 300])
        if r < 0.35:
            ttl = rng.choice([1, 5, 30, 1000])
            db.put(k, v, ttl=ttl)
            model[k] = (v, clock.t + ttl)
        elif r < 0.55:
            db.put(k, v)
            model[k] = (v, None)
        elif r < 0.65:
            db.delete(k)
            model.pop(k, None)
        elif r < 0.7:
            a, b = sorted(rng.sample(KEYS, 2))
            db.delete_range(a, b)
            for kk in [kk for kk in model if a <= kk < b]:
                del model[kk]
        elif r < 0.85:
            clock.t += rng.choice([0.5, 2, 10])
        elif r < 0.9:
            db.flush()
        elif r < 0.94:
            db.compact_range()
        elif r < 0.96:
            db.close()
            db = antkv.open("db", opts)
        elif r < 0.98:
            snap = db.snapshot()
            before = live(model, clock.t)
            db.put(b"t00", b"after")
            assert dict(db.items(snapshot=snap)) == before
            snap.release()
            model[b"t00"] = (b"after", None)
        else:
            db.gc_value_log()
        if step % 25 == 0:
            check(db, model, clock.t)
    check(db, model, clock.t)
    db.verify()
    db.close()


def test_compaction_drops_expired_entries_and_their_value_log_bytes(tmp_path):
    clock = Clock()
    opts = antkv.Options(clock=clock, max_background_jobs=0, min_blob_size=100, blob_gc_threshold=0.9)
    with antkv.open(str(tmp_path / "db"), opts) as db:
        for i in range(50):
            db.put(b"k%02d" % i, bytes([i]) * 500, ttl=60)
        db.put(b"keep", b"v" * 500)
        db.flush()
        assert int(db.property("antkv.estimate-num-keys")) == 51
        clock.t += 30
        db.compact_range()  # nothing expired yet: everything stays
        assert len(dict(db.items())) == 51
        clock.t += 31
        assert dict(db.items()) == {b"keep": b"v" * 500}  # reads hide them at once
        db.compact_range()  # the bottom level: expired entries are gone, not even tombstones
        assert int(db.property("antkv.estimate-num-keys")) == 1
        stats = db.stats()
        (vlog,) = [v for v in stats["vlog_files"] if v["total_bytes"]]
        assert vlog["garbage_bytes"] >= 50 * 500  # the expired values are garbage
        result = db.gc_value_log()
        assert result["files_deleted"] >= 1 or result["bytes_relocated"] > 0
        assert dict(db.items()) == {b"keep": b"v" * 500}
        db.verify()


def test_expired_entry_hides_older_versions(tmp_path):
    """Expiry reads as a deletion (RocksDB's compaction filter *remove* becomes a tombstone):
    an older version below never comes back, before or after compaction."""
    clock = Clock()
    opts = antkv.Options(clock=clock, max_background_jobs=0, num_levels=3)
    with antkv.open(str(tmp_path / "db"), opts) as db:
        db.put(b"k", b"old")
        db.compact_range()  # old version at the bottom
        db.put(b"k", b"new", ttl=10)
        db.flush()
        assert db.get(b"k") == b"new"
        clock.t += 11
        assert db.get(b"k") is None and list(db.keys()) == []
        db.compact_range(b"k", b"k")
        assert db.get(b"k") is None and list(db.items()) == []


def test_bad_ttl_is_refused():
    fs = MemoryFileSystem()
    with antkv.open("db", file_system=fs) as db:
        for bad in (0, -1, float("nan")):
            with pytest.raises(antkv.InvalidArgumentError):
                db.put(b"k", b"v", ttl=bad)
        for bad in ("5", True):
            with pytest.raises(TypeError):
                db.put(b"k", b"v", ttl=bad)
        assert dict(db.items()) == {}
    with pytest.raises(antkv.InvalidArgumentError):
        antkv.Options(clock=5)


def test_worker_processes_drop_expired_entries(tmp_path):
    """Background compactions run in worker processes with the job's clock reading."""
    import time

    clock = Clock()
    opts = antkv.Options(clock=clock, write_buffer_size=4096, level0_file_num_compaction_trigger=2, min_blob_size=64)
    with antkv.open(str(tmp_path / "db"), opts) as db:
        for i in range(300):
            db.put(b"k%04d" % i, bytes([i % 256]) * 100, ttl=5)
        clock.t += 6
        for i in range(300):
            db.put(b"z%04d" % i, b"v" * 100)
        db.flush()
        deadline = time.monotonic() + 60
        while db.stats()["compactions"] == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        db.compact_range()
        assert list(db.keys()) == [b"z%04d" % i for i in range(300)]
        assert int(db.property("antkv.estimate-num-keys")) == 300
        db.verify()


def _crash_workload(seed: int) -> list[tuple]:
    rng = random.Random(seed)
    ops = []
    for _ in range(40):
        r = rng.random()
        k = rng.choice(KEYS[:12])
        v = bytes([rng.randrange(256)]) * rng.choice([3, 200])
        if r < 0.45:
            ops.append(("put_ttl", k, v, rng.choice([1, 10_000]), rng.random() < 0.3))
        elif r < 0.65:
            ops.append(("put", k, v, rng.random() < 0.3))
        elif r < 0.75:
            ops.append(("delete", k, False))
        elif r < 0.85:
            ops.append(("tick",))
        elif r < 0.93:
            ops.append(("flush",))
        else:
            ops.append(("compact",))
    return ops


def _run(ops, fs, clock, progress=None):
    acked = 0
    db = antkv.open("db", file_system=fs, clock=clock, **CONFIGS["all-blobs-gc"])
    for op in ops:
        if op[0] == "put_ttl":
            db.put(op[1], op[2], ttl=op[3], sync=op[4])
        elif op[0] == "put":
            db.put(op[1], op[2], sync=op[3])
        elif op[0] == "delete":
            db.delete(op[1])
        elif op[0] == "tick":
            clock.t += 2
        elif op[0] == "flush":
            db.flush()
        else:
            db.compact_range()
        acked += 1
        if progress is not None:
            progress.append(acked)
    db.close()
    return acked


def _states(ops, start: float) -> list[dict]:
    """The model after each prefix: (value, expiry) per key, and the clock."""
    t = start
    model: dict = {}
    out = [({}, t)]
    for op in ops:
        if op[0] == "put_ttl":
            model[op[1]] = (op[2], t + op[3])
        elif op[0] == "put":
            model[op[1]] = (op[2], None)
        elif op[0] == "delete":
            model.pop(op[1], None)
        elif op[0] == "tick":
            t += 2
        out.append((dict(model), t))
    return out


@pytest.mark.parametrize("seed", [1, 2])
def test_crash_at_every_call_with_expiring_entries(seed, quiet_recovery):
    """A kill or power loss at any file-system call: the recovered database is the state of a
    prefix of the history, read at the time of the crash (expired entries hidden), and holds
    everything acknowledged before the last durable point."""
    ops = _crash_workload(seed)
    inner = MemoryFileSystem()
    fs = FaultInjectionFileSystem(inner, seed=seed)
    _run(ops, fs, Clock())
    total = fs.calls
    states = _states(ops, Clock().t)
    for n in range(1, total + 1, max(1, total // 150)):
        for mode in ("kill", "power"):
            inner = MemoryFileSystem()
            fs = FaultInjectionFileSystem(inner, seed=seed)
            fs.crash_at(n)
            clock = Clock()
            progress = [0]
            try:
                _run(ops, fs, clock, progress)
                raise AssertionError("no crash")
            except SimulatedCrash:
                pass
            acked = progress[-1]
            inner.crash(mode, random.Random(n))
            with antkv.open("db", file_system=inner, clock=clock, **CONFIGS["all-blobs-gc"]) as db:
                got = dict(db.items())
                db.verify()
            durable = max([i + 1 for i, op in enumerate(ops[:acked])
                           if op[0] in ("flush", "compact") or (op[0] in ("put", "put_ttl") and op[-1])] + [0])
            allowed = [acked, acked + 1] if mode == "kill" else range(durable, acked + 2)
            candidates = [live(states[i][0], clock.t) for i in allowed if i < len(states)]
            assert got in candidates, f"call {n} mode {mode}: not the state of an allowed prefix"


def test_expiring_entries_travel_through_ingest_database(tmp_path):
    """A checkpoint's expiring entries (inline and in the value log) keep their expiry when
    another database brings them in, through a linked table and a rewritten boundary one."""
    clock = Clock()
    opts = antkv.Options(clock=clock, max_background_jobs=0, min_blob_size=50)
    with antkv.open(str(tmp_path / "src"), opts) as src:
        for i in range(40):
            src.put(b"k%02d" % i, bytes([i]) * (10 if i % 2 else 200), ttl=10 if i % 3 else 1000)
        src.compact_range()
        src.checkpoint(str(tmp_path / "cp"))
    with antkv.open(str(tmp_path / "db"), opts) as db:
        db.ingest_database(str(tmp_path / "cp"), b"k05", b"k30")
        want = {b"k%02d" % i: bytes([i]) * (10 if i % 2 else 200) for i in range(5, 30)}
        assert dict(db.items()) == want
        clock.t += 11
        assert dict(db.items()) == {k: v for k, v in want.items() if int(k[1:]) % 3 == 0}
        db.compact_range()
        db.gc_value_log()
        assert dict(db.items()) == {k: v for k, v in want.items() if int(k[1:]) % 3 == 0}
        db.verify()
