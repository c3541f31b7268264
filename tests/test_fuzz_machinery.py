"""Tests of the differential fuzzer itself (fuzz/), independent of the engine under test.

The fuzzer must (1) find a planted difference, (2) shrink it to a handful of operations,
(3) write a replay file that reproduces it, (4) generate the same stream for the same seed,
and (5) apply RocksDB's iterator-bound rules exactly as RocksDB would.  The planted
difference is a test fixture of the fuzzer: a RocksDB side that drops every single-key
delete of one key -- not a stand-in for antkv.
"""

from __future__ import annotations

import gc
import io
import random

import pytest
import rocksdict

from fuzz import replay
from fuzz.cursors import BoundedCursor, ListCursor, prefix_upper, scan
from fuzz.generator import SMALL_KEYS, OpStream, generate, make_value
from fuzz.oracle import RocksSide
from fuzz.runner import Config, fuzz_one, run_stream, side_factory
from fuzz.shrink import _Budget, ShrinkStats, ddmin

DROPPED = b"k1"


class DropsDeletesOfOneKey(RocksSide):
    """RocksDB, except that ``delete(DROPPED)`` is silently ignored: a planted bug."""

    def op_delete(self, key):
        if key == DROPPED:
            return None
        return super().op_delete(key)


def test_generator_is_seeded_and_prefix_stable():
    assert generate(5, 300) == generate(5, 300)
    assert generate(5, 1000)[:300] == generate(5, 300)
    assert generate(5, 300) != generate(6, 300)
    names = {op[0] for op in generate(3, 20000)}
    assert {"put", "delete", "delete_range", "batch", "get", "contains", "snap_take",
            "snap_get", "snap_scan", "snap_release", "iter_open", "iter", "iter_close",
            "scan", "flush", "compact_range", "reopen", "checkpoint", "gc", "verify"} <= names


def test_stream_draws_empty_keys_and_large_values():
    ops = [op for seed in range(8) for op in OpStream(seed).take(3000)]
    keys = [op[1] for op in ops if op[0] == "put"]
    sizes = [op[2][1] for op in ops if op[0] == "put"]
    assert b"" in keys
    assert 0 in sizes and max(sizes) >= 100 * 1024
    assert sum(s < 200 for s in sizes) > len(sizes) // 2  # mostly small


def test_make_value_is_deterministic_and_sized():
    for vid in range(30):
        for size in (0, 1, 7, 100, 5000):
            v = make_value(vid, size)
            assert len(v) == size and v == make_value(vid, size)
    assert make_value(1, 50) != make_value(2, 50)


def test_replay_round_trip(tmp_path):
    ops = generate(9, 500)
    path = str(tmp_path / "r.json")
    replay.write(path, ops, seed=9, option_set="default", oracle="plain")
    back, meta = replay.read(path)
    assert back == ops and meta == {"seed": 9, "option_set": "default", "oracle": "plain"}


def test_ddmin_finds_a_one_minimal_subset():
    stats = ShrinkStats()
    out = ddmin(list(range(100)), lambda xs: 13 in xs and 71 in xs, _Budget(30, stats))
    assert out == [13, 71]
    assert stats.runs < 200


def _brute(keys, lower, upper, op, arg):
    inside = [k for k in keys if (lower is None or k >= lower) and (upper is None or k < upper)]
    if op == "seek":
        c = [k for k in inside if k >= arg]
        return c[0] if c else None
    if op == "seek_for_prev":
        c = [k for k in inside if k <= arg]
        return c[-1] if c else None
    if op == "first":
        return inside[0] if inside else None
    return inside[-1] if inside else None


def test_bounded_cursor_follows_rocksdb_bound_rules(tmp_path):
    """Bounds applied over a real rocksdict iterator and over a list agree with a model."""
    rng = random.Random(4)
    keys = sorted(set(SMALL_KEYS[rng.randrange(len(SMALL_KEYS))] for _ in range(18)))
    db = rocksdict.Rdict(str(tmp_path / "db"), rocksdict.Options(raw_mode=True))
    try:
        for k in keys:
            db.put(k, b"v" + k)
        probes = list(SMALL_KEYS) + [b"k", b"a\x00", b"\xff\xff\xff"]
        for _ in range(400):
            lower = rng.choice(probes + [None])
            upper = rng.choice(probes + [None])
            for cur in (BoundedCursor(db.iter(), lower, upper),
                        BoundedCursor(ListCursor(keys, [b"v" + k for k in keys]), lower, upper)):
                op, arg = rng.choice(["seek", "seek_for_prev", "first", "last"]), rng.choice(probes)
                {"seek": lambda: cur.seek(arg), "seek_for_prev": lambda: cur.seek_for_prev(arg),
                 "first": cur.seek_to_first, "last": cur.seek_to_last}[op]()
                want = _brute(keys, lower, upper, op, arg)
                assert (cur.key() if cur.valid() else None) == want, (lower, upper, op, arg)
            inside = [k for k in keys
                      if (lower is None or k >= lower) and (upper is None or k < upper)]
            for reverse in (False, True):
                got = scan(BoundedCursor(db.iter(), lower, upper), reverse, 1000)
                assert [k for k, _ in got] == (inside[::-1] if reverse else inside)
    finally:
        db.close()


def test_prefix_upper():
    assert prefix_upper(b"ab") == b"ac"
    assert prefix_upper(b"a\xff") == b"b"
    assert prefix_upper(b"\xff\xff") is None and prefix_upper(b"") is None


@pytest.mark.parametrize("seed", [1, 2])
def test_rocksdb_plain_and_blob_give_the_same_answers(seed, tmp_path):
    """The fuzzer finds no difference between two correct engines (no false alarms)."""
    r = run_stream(generate(seed, 1500), side_factory("rocksdb-blob", "default"),
                   side_factory("rocksdb-plain", "default"), workdir=str(tmp_path))
    assert r.divergence is None
    assert r.ops_run == 1500 and not r.skipped


def test_planted_difference_is_found_reported_shrunk_and_replayable(tmp_path):
    out = io.StringIO()
    cfg = Config(seed=49, option_set="default", oracle="plain", subject="rocksdb-plain", ops=600)
    # the shrink ends at its fixed point; the budget is only a bound (60 s was reached on a loaded machine)
    r = fuzz_one(cfg, workdir=str(tmp_path), shrink_seconds=900, out_dir=str(tmp_path / "f"),
                 out=out, make_subject=lambda p: DropsDeletesOfOneKey(p, "blob"))
    text = out.getvalue()
    assert r.divergence is not None, text
    assert "DIVERGENCE seed=49 option_set=default" in text
    assert f"--seed 49 --option-set default --oracle plain --ops {r.divergence.index + 1}" in text
    files = list((tmp_path / "f").iterdir())
    assert len(files) == 1
    shrunk, meta = replay.read(str(files[0]))
    assert meta["seed"] == 49
    # The bug needs a write of k1, the dropped delete, and a read (the final check reads).
    assert len(shrunk) <= 3, shrunk
    assert any(op[0] == "delete" and op[1] == DROPPED for op in shrunk)
    again = run_stream(shrunk, lambda p: DropsDeletesOfOneKey(p, "blob"),
                       side_factory("rocksdb-plain", "default"), workdir=str(tmp_path))
    assert again.divergence is not None
    fixed = run_stream(shrunk, side_factory("rocksdb-blob", "default"),
                       side_factory("rocksdb-plain", "default"), workdir=str(tmp_path))
    assert fixed.divergence is None


def test_a_reopen_finds_the_database_free_when_a_cursor_was_caught_in_a_cycle(tmp_path):
    """Closing forgets the side's snapshots and cursors without a garbage collection (one costs
    a fraction of a second in a large process); a cursor kept alive by a reference cycle still
    holds the database's lock, and the reopen collects it and opens."""
    side = RocksSide(str(tmp_path / "db"), "plain")
    gc.disable()  # no automatic collection frees the cycle before the reopen
    try:
        side.op_put(b"a", (1, 5))
        side.op_snap_take(1)
        side.op_iter_open(7, None, None, None)
        cycle = [side.iters[7], side.snaps[1]]
        cycle.append(cycle)
        del cycle
        side.op_reopen()
        assert side.op_get(b"a") == make_value(1, 5)
        assert side.op_scan(None, None, None, False, 10) == [(b"a", make_value(1, 5))]
    finally:
        gc.enable()
        side.close()
