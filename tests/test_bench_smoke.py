"""Smoke test of the benchmark harness: a tiny run end to end on the real engines.

It checks that the harness measures something sane (positive throughput, write amplification
above zero, a report and plots), never how fast anything is.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# one process runs this module under pytest -n, so the module's one harness run serves every test
pytestmark = pytest.mark.xdist_group("bench-smoke")


def _antkv_opens() -> bool:
    import antkv

    return hasattr(antkv, "open")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    cmd = [sys.executable, "-m", "bench", "--engines", "antkv", "rocksdb", "sqlite",
           "--workloads", "fillrandom", "readrandom", "overwrite", "seekrandom", "deleterange",
           "--value-sizes", "100", "--num", "400", "--runs", "2", "--physical-mb", "4",
           "--max-seconds", "20", "--timeout", "60", "--no-install", "--out", str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    with open(out / "results.json") as f:
        data = json.load(f)
    return out, data, proc.stdout


def test_every_measurement_of_the_peers_is_sane(run):
    _out, data, _stdout = run
    rows = [r for r in data["results"] if r["engine"] in ("rocksdb", "sqlite")]
    # 2 runs x 2 engines x 5 workloads
    assert len(rows) == 20
    for r in rows:
        assert r["ok"], r
        assert r["ops"] > 0 and r["ops_s"] > 0 and r["secs"] > 0
        assert r["p99_us"] >= r["p50_us"] > 0
        assert r["disk_bytes"] > 0 and r["space_amp"] > 0
        if r["workload"] in ("fillrandom", "overwrite"):
            assert r["write_amp"] > 0
            assert r["user_bytes_written"] == r["ops"] * (16 + 100)
        if r["workload"] == "readrandom":
            assert r["extra"]["found"] == r["ops"] == 400  # every loaded key is found
        if r["workload"] == "deleterange":
            assert r["ops"] == 40  # 10% of the keys
    overwrite = [r for r in rows if r["workload"] == "overwrite"]
    assert all(r["space_amp_gc"] > 0 for r in overwrite)


def test_engines_alternate_within_each_workload(run):
    _out, data, _stdout = run
    seq = [r["engine"] for r in data["results"] if r["workload"] == "readrandom"]
    present = [e for e in ("antkv", "rocksdb", "sqlite") if e in seq]
    assert seq == present * 2


def test_report_and_plots_are_written(run):
    out, data, stdout = run
    report = (out / "report.md").read_text()
    assert "## Throughput, ops/s — 100 B values" in report
    assert "| readrandom |" in report and "antkv/rocksdb" in report
    assert "MiB/s including the final fsync" in report
    for png in ("throughput.png", "amplification.png", "latency.png"):
        assert (out / png).stat().st_size > 1000
    assert not (out / "data").exists()  # databases are removed after the run
    assert "bench: report in" in stdout


def test_antkv_is_measured_or_reported_unavailable(run):
    out, data, _stdout = run
    report = (out / "report.md").read_text()
    if _antkv_opens():
        rows = [r for r in data["results"] if r["engine"] == "antkv"]
        assert len(rows) == 10 and all(r["ok"] and r["ops_s"] > 0 for r in rows), rows
    else:
        assert "antkv not available yet" in data["meta"]["unavailable"]["antkv"]
        assert "**antkv**: antkv not available yet" in report


def test_ycsb_streams_have_their_mix_and_skew():
    from collections import Counter

    from bench.ycsb import ycsb_ops

    loaded = list(range(10_000))
    ops, inserted = ycsb_ops("a", loaded, 10_000, 20_000, seed=1)
    kinds = Counter(op for op, _k, _n in ops)
    assert inserted == 0 and 0.47 < kinds["read"] / len(ops) < 0.53
    hottest = Counter(k for _op, k, _n in ops).most_common(1)[0][1]
    assert hottest > 50 * len(ops) / len(loaded)  # zipfian, not uniform
    ops_e, inserted_e = ycsb_ops("e", loaded, 10_000, 20_000, seed=1)
    scans = [n for op, _k, n in ops_e if op == "scan"]
    assert 0.93 < len(scans) / len(ops_e) < 0.97 and min(scans) >= 1 and max(scans) <= 100
    assert inserted_e == len(ops_e) - len(scans)
    assert ycsb_ops("a", loaded, 10_000, 100, seed=1) == ycsb_ops("a", loaded, 10_000, 100, seed=1)


def test_values_are_ascii_half_compressible_and_sized():
    import zlib

    from bench.workloads import make_values

    vals = make_values(1000, 50, seed=3)
    assert len(vals) == 50 and all(len(v) == 1000 and v.isascii() for v in vals)
    ratio = len(zlib.compress(b"".join(vals))) / (1000 * 50)
    assert 0.3 < ratio < 0.7


def test_percentiles_and_io_counters():
    from bench import measure

    s = sorted(float(i) for i in range(1, 101))
    assert measure.percentile(s, 50) == 50.0 and measure.percentile(s, 99) == 99.0
    io = measure.read_proc_io()
    assert io["write_bytes"] >= 0 and "cancelled_write_bytes" in io


def test_bench_small_sets_the_point_reads_beside_their_floor(tmp_path):
    """The small-value bench runs its point-read floor beside both engines (also on the
    compacted database of the read-after-load scenario, whose tables are in a sorted level);
    every reader's answers are checked against the data (a wrong answer fails the run)."""
    cmd = [sys.executable, "-m", "bench.bench_small", "--num", "3000", "--rounds", "1",
           "--workloads", "readrandom", "readrandom_uncached", "readafterload", "--dir", str(tmp_path),
           "--timeout", "120"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    for w in ("readrandom", "readrandom_uncached", "readafterload"):
        assert f"round 1 {w:20} floor" in proc.stdout
        assert f"\n{w}, the floor (bench/read_floor.py, the same cache): " in proc.stdout
    assert proc.stdout.count("  by process CPU time (") == 3  # each workload's share by CPU time too


def test_the_state_bench_runs_sparks_side_with_a_command_line_the_baseline_accepts(monkeypatch):
    """``bench_spark_state`` runs Spark's ``applyInPandasWithState`` through
    ``bench_spark_baseline``'s phase command: every option that command takes must come from
    the state bench's arguments (a field it lacked stopped the full run at Spark's phase)."""
    import argparse

    from bench import bench_spark_baseline, bench_spark_state

    commands = []
    monkeypatch.setattr(bench_spark_baseline, "run_child", lambda cmd, phase, marker: commands.append(cmd))
    ours = argparse.Namespace(keys=1234, value_size=56, partitions=3, batches=2)
    bench_spark_baseline.child("apply", 2, 1, bench_spark_state.spark_phase_args(ours), "/tmp/work")
    (cmd,) = commands
    theirs = bench_spark_baseline.parser().parse_args(cmd[2:])
    assert theirs.phase and theirs.workload == "apply" and theirs.first_batch == 2 and theirs.batches == 1
    assert (theirs.keys, theirs.value_size, theirs.partitions, theirs.touched) == (1234, 56, 3, 1.0)


def _state_bench_frames(batch: int):
    """A partition's sorted stream for the pipeline floor's test: 30 keys in 4 key groups,
    every third key with 3 rows, cut into frames of 7 rows (keys span frames)."""
    import pandas as pd

    rows = []
    for i in range(30):
        for j in range(3 if i % 3 == 0 else 1):
            rows.append({"key": f"user-{i:03d}", "value": f"{batch}-{i}-{j}".encode(), "ts": pd.Timestamp(0),
                         "__key_group": i % 4})
    frame = pd.DataFrame(rows).sort_values(["__key_group", "key"], kind="stable", ignore_index=True)
    return [frame.iloc[s:s + 7].reset_index(drop=True) for s in range(0, len(frame), 7)]


def test_the_pipeline_floor_answers_as_antkv_does_with_its_state_in_a_dict(tmp_path):
    """``bench/pipeline_floor.py`` runs the state bench's function through the pipeline's own
    task body on a dict: over two batches its output files and its state hold what the same
    body writes and keeps on antkv's state store (committed and published in between)."""
    import pandas as pd
    import pyarrow.parquet as pq
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from antkv.spark import CommitCoordinator, StoreOptions, open_store
    from antkv.spark.runtime.pipeline import PartitionState
    from antkv.spark.state.rows_codec import ROWS
    from antkv.spark.store.keygroups import METADATA_PREFIX, key_group_range
    from bench.bench_spark_state import count_and_latest
    from bench.pipeline_floor import DictStore, PipelineFloor, chunked_body

    struct = StructType([StructField("key", StringType()), StructField("count", LongType())])
    columns = ["key", "value", "ts"]
    floor = PipelineFloor(count_and_latest, "key", "key string, count long", struct, columns, 1,
                          str(tmp_path / "floor"), "floor")
    dicts = DictStore()
    loc, options = str(tmp_path / "antkv"), StoreOptions(cache_dir=str(tmp_path / "cache"))
    coord = CommitCoordinator(loc, "bench", 1, query_id="q")
    body = chunked_body(count_and_latest, columns)
    for batch in (0, 1):
        report = floor.run_partition(dicts, 0, batch, iter(_state_bench_frames(batch)))
        written = pd.concat([pq.read_table(floor.location.path(name)).to_pandas() for name in report["outputs"]])
        store = open_store(loc, "bench", 0, batch, manifest=coord.base_manifests(batch)[0], options=options)
        state = PartitionState(store, key_group_range(16384, 1, 0), ["key"], batch, 0, 1)
        expected = pd.concat(list(body(state, iter(_state_bench_frames(batch)))), ignore_index=True)
        assert report["rows"] == 50 and report["output_rows"] == 30
        assert written.reset_index(drop=True).equals(expected)
        assert sorted(expected["count"]) == sorted([batch + 1] * 20 + [3 * (batch + 1)] * 10)
        # every stored entry (the state-name record, each key's count and latest value) alike
        assert len(dicts) == len(list(store.keys())) == 31
        for k in store.keys():
            assert dicts.get(k) == store.get(k)
            if not k.startswith(METADATA_PREFIX):
                assert dicts.get_decoded(k, ROWS) == store.get_decoded(k, ROWS)
        coord.publish(batch + 1, [store.commit()])


def test_the_write_floor_writes_and_syncs_the_bytes_and_leaves_nothing(tmp_path):
    """The pipeline bench's write floor times writing the bytes as one synced file per
    partition, best of its rounds, and removes what it wrote."""
    from bench.pipeline_floor import write_floor_ms

    ms = write_floor_ms(str(tmp_path), 3 << 20, 4, rounds=2)
    assert ms > 0 and os.listdir(tmp_path) == []


@pytest.mark.parametrize("reopen", [False, True])
def test_the_processor_split_runs_both_engines_and_splits_antkvs_extra(tmp_path, reopen):
    """``bench/processor_split.py`` runs the processor over antkv's store and over the dict
    floor in every batch, times the parts of antkv's work, and leaves nothing behind: no
    file, no wrapped method, no collector callback.  Its copies stay in the process, or with
    ``--reopen`` are reopened from the machine every batch."""
    import argparse
    import gc

    from antkv.spark.store.state_store import StateStore
    from bench.processor_split import report, run, split

    settle, callbacks = StateStore.__dict__["_settle"], list(gc.callbacks)

    args = argparse.Namespace(keys=600, partitions=4, held=2, batches=3, reopen=reopen, dir=str(tmp_path), json=None)
    result = run(args)
    assert [r["batch"] for r in result["per_batch"]] == [0, 1, 2]
    assert [r["copies"] for r in result["per_batch"]] == [["new"] * 2] + [["reopened" if reopen else "reused"] * 2] * 2
    for row in result["per_batch"]:
        assert row["antkv"] > 0 and row["floor"] > 0
        parts = row["parts"]
        assert 0 < parts["settle"] < row["antkv"] and 0 < parts["park"] < parts["commit"] < row["antkv"]
        assert 0 <= parts["settle_in_commit"] <= parts["settle"]
        assert sum(split(row).values()) == pytest.approx(row["antkv"] - row["floor"])
        assert row["antkv_gc"] >= 0 and row["floor_gc"] >= 0
    text = report(result)
    assert "| antkv |" in text and "of the floor's rate" in text and "parking" in text and "garbage" in text
    assert ("reopened from the machine every batch" in text) == reopen
    assert os.listdir(tmp_path) == []
    assert StateStore.__dict__["_settle"] is settle and gc.callbacks == callbacks


def test_the_processor_split_clock_counts_a_part_called_inside_itself_once():
    """A settle hook's write may settle the store again inside the settle: that inner call's
    time is already in the outer one's, and the part is counted once."""
    import time

    from bench.processor_split import _Clock

    class Work:
        def run(self, depth):
            end = time.process_time() + 0.02
            while time.process_time() < end:
                pass
            if depth:
                self.run(depth - 1)

    clock = _Clock()
    try:
        clock.wrap(Work, "run", "work")
        t0 = time.process_time()
        Work().run(3)
        spent = time.process_time() - t0
    finally:
        clock.close()
    assert 0.08 <= clock.take()["work"] <= spent and "run" in Work.__dict__


def test_the_processor_bench_orders_run_every_batch_of_every_query_once_after_the_warm_up():
    """The warm-ups' batches first (they warm the JVM and are not reported), then every batch of
    every query once, each query's in order; ``--order streams``: antkv's, Spark's, the floor's (reversed:
    the floor's first)."""
    from bench.bench_spark_processor import ENGINES, WARMUPS, _schedule

    for order in ("interleave", "alternate", "streams", "streams-reversed"):
        schedule = _schedule(order, 4, 3)
        assert schedule[:6] == [(b, name) for b in range(3) for name in WARMUPS]
        assert sorted(schedule[6:]) == sorted((b, e) for b in range(4) for e in ENGINES)
        for engine in ENGINES:
            assert [b for b, e in schedule if e == engine] == [0, 1, 2, 3]
    assert [e for _, e in _schedule("streams", 2)] == ["antkv", "antkv", "spark", "spark", "floor", "floor"]
    assert [e for _, e in _schedule("streams-reversed", 2)] == ["floor", "floor", "spark", "spark", "antkv", "antkv"]


def test_the_views_write_floor_leaves_what_the_views_leave(tmp_path):
    """``bench/state_ops_floor.py`` does the views' writes with fewer steps, not other ones: a
    batch reads its own writes, and after the commit its row cache holds, for every key
    written, the bytes the views' batch committed in the store, with no key added; its changelog
    holds those writes, published beside a manifest-sized object.  ``bench_state_ops`` reports
    the views' share of it."""
    from antkv.spark import StoreOptions, open_store
    from antkv.spark.state.rows_codec import ROWS
    from antkv.spark.store.objects import decode_changelog
    from bench import bench_state_ops as ops

    options = StoreOptions(cache_dir=str(tmp_path / "cache"), park_copies=False)
    keys = ops._keys(300)
    stream = ops._Stream(f"file://{tmp_path}/loc", options, keys, f"file://{tmp_path}/floor")
    calls = ops._operations()
    written = {}
    for op in ("value_update", "list_append", "map_put"):
        floor = stream._write_floor()
        before = dict(floor.rows)
        for over in ("floor", "views"):
            stream.time(over, calls[f"{over if over == 'floor' else 'view'}_{op}"][1])
        changed = {k: v for k, v in floor.rows.items() if before.get(k) != v}
        assert len(changed) == len(keys) and floor.keys_added == 0
        written.update(changed)
    store = open_store(stream.loc, "bench", 0, stream.version, manifest=stream.manifest, options=options)
    assert {k: store.get(k) for k in written} == written
    store.abort()

    floor = stream._write_floor()
    kg, key = keys[0]
    floor.set_current_key(kg, key)
    floor.value.update((8, 9, 10))
    stored_key = next(k for k in floor.rows_written)
    assert ROWS.decode(floor.rows[stored_key]) != ((8, 9, 10),)
    assert ROWS.decode(floor.get(stored_key)) == ((8, 9, 10),)  # the batch's own write
    floor.commit()
    _, logged, values, _ = decode_changelog(floor.location.read(f"changelog-{floor.commits}"), "log")
    assert logged == [stored_key] and ROWS.decode(values[0]) == ((8, 9, 10),)
    assert floor.location.size(f"manifest-{floor.commits}") == floor.manifest_bytes > 0

    result = {"set_key": (1.0, 0.0), "floor_set_key": (1.0, 0.0), "view_value_update": (3.0, 2.0),
              "floor_value_update": (2.0, 1.0)}
    assert "value update 50%" in ops.report(300, 1, result)
