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
