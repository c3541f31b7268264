"""Merge (``db.merge(key, operand)``, ``Options.merge_operator``): a model test under extreme
option sets (with snapshots, iterators both ways, TTL, range deletes, reopen, flush, compaction
and value-log GC), compaction combining operands per snapshot stripe and fully at the bottom,
a user-defined operator (run in-process) and the built-in one in worker processes, and
refusals.  Crashes: the "merges" configuration of ``tests/test_crash.py`` (``fuzz/crash.py``)
kills and power-fails a history of merges at every file-system call."""

from __future__ import annotations

import random

import pytest

import antkv
from antkv.fs.memory import MemoryFileSystem
from model_configs import CONFIGS

KEYS = [b"m%02d" % i for i in range(24)]


class Clock:
    def __init__(self, t: float = 1_000_000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


class Model:
    """Per key ``(base, base expiry or None, operands oldest first)``: what the key holds at
    time t is the operands appended (``,``) onto the base, or onto nothing once it expired."""

    def __init__(self):
        self.keys: dict = {}

    def copy(self) -> "Model":
        m = Model()
        m.keys = {k: (b, e, list(ops)) for k, (b, e, ops) in self.keys.items()}
        return m

    def put(self, k, v, expiry=None):
        self.keys[k] = (v, expiry, [])

    def merge(self, k, operand):
        b, e, ops = self.keys.get(k, (None, None, []))
        self.keys[k] = (b, e, ops + [operand])

    def delete(self, k):
        self.keys.pop(k, None)

    def delete_range(self, a, b):
        for k in [k for k in self.keys if a <= k < b]:
            del self.keys[k]

    def state(self, now: float) -> dict:
        out = {}
        for k, (b, e, ops) in self.keys.items():
            v = b if e is None or e > now else None
            for op in ops:
                v = op if v is None else v + b"," + op
            if v is not None:
                out[k] = v
        return out


def check(db, want: dict, snapshot=None) -> None:
    assert dict(db.items(snapshot=snapshot)) == want
    assert list(db.items(reverse=True, snapshot=snapshot)) == sorted(want.items(), reverse=True)
    assert list(db.keys(b"m05", b"m15", snapshot=snapshot)) == sorted(k for k in want if b"m05" <= k < b"m15")
    for k in KEYS[::3]:
        assert db.get(k, snapshot=snapshot) == want.get(k)
    assert db.multi_get(KEYS[:4], snapshot=snapshot) == [want.get(k) for k in KEYS[:4]]
    with db.iterator(snapshot=snapshot) as it:
        it.seek(b"m10")
        fwd = []
        while it.valid() and len(fwd) < 5:
            fwd.append((it.key(), it.value()))
            it.next()
        it.seek_for_prev(b"m10")
        back = []
        while it.valid() and len(back) < 5:
            back.append((it.key(), it.value()))
            it.prev()
    assert fwd == sorted((k, v) for k, v in want.items() if k >= b"m10")[:5]
    assert back == sorted(((k, v) for k, v in want.items() if k <= b"m10"), reverse=True)[:5]


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_merge_model(config):
    clock = Clock()
    opts = antkv.Options(file_system=MemoryFileSystem(), clock=clock, merge_operator="append:2c", **CONFIGS[config])
    rng = random.Random(config)
    db = antkv.open("db", opts)
    model = Model()
    snaps: list = []  # (snapshot, model copy)
    for step in range(600):
        r = rng.random()
        k = rng.choice(KEYS)
        v = bytes([97 + rng.randrange(26)]) * rng.choice([1, 3, 40, 150])
        if r < 0.40:
            db.merge(k, v)
            model.merge(k, v)
        elif r < 0.48:
            with db.write_batch() as b:
                b.merge(k, v)
                b.put(KEYS[0], v)
                b.merge(KEYS[0], b"b")
            model.merge(k, v)
            model.put(KEYS[0], v)
            model.merge(KEYS[0], b"b")
        elif r < 0.58:
            db.put(k, v)
            model.put(k, v)
        elif r < 0.63:
            ttl = rng.choice([1, 20])
            db.put(k, v, ttl=ttl)
            model.put(k, v, clock.t + ttl)
        elif r < 0.68:
            db.delete(k)
            model.delete(k)
        elif r < 0.71:
            a, b = sorted(rng.sample(KEYS, 2))
            db.delete_range(a, b)
            model.delete_range(a, b)
        elif r < 0.75:
            clock.t += rng.choice([0.5, 5])
        elif r < 0.80:
            db.flush()
        elif r < 0.84:
            db.compact_range()
        elif r < 0.86:
            for s, _ in snaps:
                s.release()
            snaps = []
            db.close()
            db = antkv.open("db", opts)
        elif r < 0.91:
            if len(snaps) < 3:
                snaps.append((db.snapshot(), model.copy()))
            else:
                snaps.pop(rng.randrange(len(snaps)))[0].release()
        elif r < 0.93:
            db.gc_value_log()
        if step % 20 == 0:
            check(db, model.state(clock.t))
            for s, m in snaps:
                check(db, m.state(clock.t), snapshot=s)
    check(db, model.state(clock.t))
    for s, m in snaps:
        check(db, m.state(clock.t), snapshot=s)
        s.release()
    db.compact_range()
    check(db, model.state(clock.t))
    db.verify()
    db.close()


def _entries(db, key: bytes) -> list[tuple[int, bytes]]:
    """``(kind, value)`` of every stored version of ``key`` in the tables, newest first."""
    out = []
    version = db._sv.version  # noqa: SLF001 - the test looks at what compaction wrote
    for level in version.levels:
        for f in level:
            r = db._open_table(f)  # noqa: SLF001
            for k, _neg, kind, value in r.iter_forward(key):
                if k != key:
                    break
                out.append((kind, value))
    return out


def test_compaction_merges_operands_per_snapshot_stripe_and_fully_at_the_bottom():
    opts = antkv.Options(file_system=MemoryFileSystem(), merge_operator="append:2c", max_background_jobs=0)
    with antkv.open("db", opts) as db:
        db.put(b"k", b"base")
        db.merge(b"k", b"a")
        db.merge(b"k", b"b")
        snap = db.snapshot()
        db.merge(b"k", b"c")
        db.merge(b"k", b"d")
        db.merge(b"n", b"x")
        db.merge(b"n", b"y")
        db.compact_range()
        # below the snapshot: base + a + b merged into one value; above it: c, d as one operand
        assert _entries(db, b"k") == [(7, b"c,d"), (1, b"base,a,b")]
        assert _entries(db, b"n") == [(1, b"x,y")]  # the bottom: a full merge onto nothing
        assert db.get(b"k") == b"base,a,b,c,d"
        assert db.get(b"k", snapshot=snap) == b"base,a,b"
        snap.release()
        db.compact_range()
        assert _entries(db, b"k") == [(1, b"base,a,b,c,d")]
        # a delete stops the merge: what follows starts from nothing
        db.merge(b"k", b"e")
        db.delete(b"k")
        db.merge(b"k", b"f")
        assert db.get(b"k") == b"f"
        db.flush()
        assert db.get(b"k") == b"f"
        db.compact_range()
        assert _entries(db, b"k") == [(1, b"f")]


def test_value_log_base_stays_below_one_operand(tmp_path):
    """A large value lives in the value log: compaction combines the operands above it, reads
    apply them, and GC moves the value without losing them."""
    opts = antkv.Options(merge_operator="append", max_background_jobs=0, min_blob_size=100, blob_gc_threshold=0.01)
    with antkv.open(str(tmp_path / "db"), opts) as db:
        big = b"B" * 1000
        db.put(b"k", big)
        for i in range(5):
            db.merge(b"k", b"%d" % i)
        db.put(b"other", b"O" * 1000)
        db.put(b"other", b"P" * 1000)  # garbage in the value log: GC has work
        db.compact_range()
        assert [kind for kind, _ in _entries(db, b"k")] == [7, 3]
        assert db.get(b"k") == big + b"01234"
        db.gc_value_log()
        db.compact_range()
        assert db.get(b"k") == big + b"01234"
        assert dict(db.items()) == {b"k": big + b"01234", b"other": b"P" * 1000}
        db.verify()


class Counter:
    """A user-defined associative operator: operands are decimal integers to add."""

    name = "counter"

    def merge(self, key, existing, operand):
        return str(int(existing or b"0") + int(operand)).encode()


def test_user_operator_runs_in_process_and_reopen_checks_its_name(tmp_path):
    path = str(tmp_path / "db")
    opts = antkv.Options(merge_operator=Counter(), write_buffer_size=4096, level0_file_num_compaction_trigger=2)
    with antkv.open(path, opts) as db:
        for i in range(2000):
            db.merge(b"c%d" % (i % 7), b"%d" % i)
        db.flush()
        db.compact_range()
        assert db._jobs.worker_processes() == []  # noqa: SLF001 - a user's operator may not pickle
        want = {b"c%d" % j: str(sum(range(j, 2000, 7))).encode() for j in range(7)}
        assert dict(db.items()) == want
    with pytest.raises(antkv.InvalidArgumentError, match="counter"):
        antkv.open(path)
    with pytest.raises(antkv.InvalidArgumentError, match="counter"):
        antkv.open(path, merge_operator="append")
    with antkv.open(path, merge_operator=Counter()) as db:
        assert dict(db.items()) == want


def test_builtin_operator_in_worker_processes(tmp_path):
    import time

    opts = antkv.Options(merge_operator="append", write_buffer_size=64 * 1024, level0_file_num_compaction_trigger=2,
                         max_background_jobs=2)
    with antkv.open(str(tmp_path / "db"), opts) as db:
        for i in range(6000):
            db.merge(b"l%02d" % (i % 50), b"%d;" % i)
        db.flush()
        deadline = time.monotonic() + 60
        while db.stats()["compactions"] == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert db._jobs.worker_processes()  # noqa: SLF001 - jobs ran in a worker
        db.compact_range()
        want = {b"l%02d" % j: b"".join(b"%d;" % i for i in range(j, 6000, 50)) for j in range(50)}
        assert dict(db.items()) == want


def test_merge_refusals(tmp_path):
    path = str(tmp_path / "db")
    with antkv.open(path) as db:
        with pytest.raises(antkv.InvalidArgumentError, match="merge operator"):
            db.merge(b"k", b"v")
        with pytest.raises(TypeError):
            db.merge("k", b"v")
        with pytest.raises(antkv.InvalidArgumentError, match="merge operator"):
            db.write(antkv.WriteBatch().merge(b"k", b"v"))
        assert db.get(b"k") is None
    with pytest.raises(antkv.InvalidArgumentError, match="merge_operator"):
        antkv.Options(merge_operator="concat")
    with pytest.raises(antkv.InvalidArgumentError, match="merge_operator"):
        antkv.Options(merge_operator=object())
    with antkv.open(path, merge_operator="append") as db:
        with pytest.raises(TypeError):
            db.merge(b"k", "str")
        db.merge(b"k", b"v")

    class Broken:
        name = "append"  # claims the recorded name, but fails

        def merge(self, key, existing, operand):
            raise RuntimeError("boom")

    with antkv.open(path, merge_operator=Broken()) as db:
        with pytest.raises(antkv.InvalidArgumentError, match="boom"):
            db.get(b"k")
    with antkv.open(path, merge_operator="append") as db:
        assert db.get(b"k") == b"v"  # nothing was lost


def test_ingest_database_with_operands_needs_the_same_operator(tmp_path):
    src, dst = str(tmp_path / "src"), str(tmp_path / "dst")
    with antkv.open(src, merge_operator="append:2c", max_background_jobs=0) as db:
        db.put(b"k", b"a")
        db.flush()
        db.merge(b"k", b"b")
        db.flush()  # an L0 table holding the operand
        db.checkpoint(str(tmp_path / "cp"))
    with antkv.open(dst, max_background_jobs=0) as db:
        with pytest.raises(antkv.InvalidArgumentError, match="merge operator"):
            db.ingest_database(str(tmp_path / "cp"))
        assert db.get(b"k") is None
    with antkv.open(dst, merge_operator="append:2c", max_background_jobs=0) as db:
        db.ingest_database(str(tmp_path / "cp"))
        assert db.get(b"k") == b"a,b"


@pytest.mark.parametrize("base", [None, b"base", "deleted"])
def test_operands_adding_up_to_more_than_a_block_holds_are_stored_apart(tmp_path, monkeypatch, base):
    """Each operand fits a table block, but their combined value does not (the block limit
    scaled down from 4 GiB to 64 KiB): every merge is acknowledged, and then every flush,
    compaction and reopen still succeeds -- the operands that would not fit combined stay
    apart -- so the key can be read, and deleted.  A WAL that already holds such merges
    opens."""
    from antkv.sst import format as sst_format

    monkeypatch.setattr(sst_format, "MAX_BLOCK_SIZE", 64 * 1024)
    path = str(tmp_path / "db")
    opts = dict(max_background_jobs=0, merge_operator="append", min_blob_size=1 << 30)
    parts = [bytes([65 + i]) * 20_000 for i in range(6)]  # 120 KB in all; each 20 KB operand fits
    with antkv.open(path, **opts) as db:
        if base == "deleted":
            db.put(b"big", b"old")
            db.flush()
            db.delete(b"big")
        elif base is not None:
            db.put(b"big", base)
        for part in parts[:4]:
            db.merge(b"big", part)
        db.put(b"other", b"x")
    # the WAL holds the merges: reopening replays and flushes them ("append" concatenates)
    start = [base] if isinstance(base, bytes) else []
    with antkv.open(path, **opts) as db:
        assert db.get(b"big") == b"".join(start + parts[:4])
        db.flush()
        for part in parts[4:]:
            db.merge(b"big", part)
        db.flush()
        db.compact_range()
        assert db.get(b"big") == b"".join(start + parts)
        assert db.get(b"other") == b"x"
        assert db.verify()["tables"] >= 1
    with antkv.open(path, **opts) as db:
        assert db.get(b"big") == b"".join(start + parts)
        db.delete(b"big")
        db.compact_range()
        assert db.get(b"big") is None and db.get(b"other") == b"x"
