"""Smoke test of the soak bench (``bench/bench_spark_soak.py``) on the shared Spark session.

A few tiny batches of the bench's stream run through antkv's two runners and Spark's
``applyInPandasWithState`` on the RocksDB provider: every engine must close the same keys with
the same aggregates and values (the bench's own check), and the table and plots must be
written.  Nothing here asserts a timing.
"""

from __future__ import annotations

import argparse

import numpy as np

from bench.bench_spark_soak import PROVIDER_CONF, QUICK, run
from bench.measure import dir_bytes
from bench.soak_report import compare_outputs, plots, report, slope_per_100, summary
from bench.soak_workload import DELETE, LARGE_FROM, NOOP, SoakStream

ENGINES = ["antkv-pipeline", "antkv-tws", "spark-apply-changelog", "floor"]
ANSWERING = ENGINES[:-1]  # the floor keeps no state and emits nothing


def test_the_stream_is_deterministic_and_shaped_as_documented():
    stream = SoakStream(seed=3, batches=10, rows=2000, keys=5000, ttl_batches=2)
    a, b = stream.table(4), stream.table(4)
    assert a.equals(b)
    assert not a.equals(stream.table(5))
    assert not SoakStream(seed=4, batches=10, rows=2000, keys=5000, ttl_batches=2).table(4).equals(a)
    assert [stream.key_space(i) for i in (0, 1, 3, 9)] == [500, 2000, 5000, 5000]  # grows, then flat
    keys = a.column("key").to_pylist()
    assert keys.count("k00000000") > keys.count("k00000100") > 0  # skewed to the first keys
    sizes = np.array([len(v) for v in a.column("value").to_pylist()])
    ops = np.array(a.column("op").to_pylist())
    assert 0.02 < (ops == DELETE).mean() < 0.1 and (sizes[ops == DELETE] == 0).all()
    live = sizes[ops != DELETE]
    assert live.min() >= 100 and live.max() <= 4096 and 0.05 < (live >= LARGE_FROM).mean() < 0.3
    noop, empty = stream.flush_tables()
    assert noop.column("op").to_pylist() == [NOOP] and empty.num_rows == 0
    assert stream.event_ms_of_file(10) > stream.event_ms(9) + stream.ttl_ms


def test_local_disk_counts_a_hard_linked_file_once(tmp_path):
    """antkv's working copies link their snapshot files from the local cache: one file on disk."""
    (tmp_path / "objects").mkdir()
    (tmp_path / "work").mkdir()
    (tmp_path / "objects" / "a.sst").write_bytes(b"x" * 100_000)
    alone = dir_bytes(str(tmp_path))
    assert alone >= 100_000
    (tmp_path / "work" / "000001.sst").hardlink_to(tmp_path / "objects" / "a.sst")
    assert dir_bytes(str(tmp_path)) == alone
    (tmp_path / "work" / "000002.sst").write_bytes(b"y" * 100_000)
    assert dir_bytes(str(tmp_path)) >= alone + 100_000


def test_slope_is_the_least_squares_slope_per_100_batches():
    assert slope_per_100([1.0, 1.0, 1.0]) == 0.0
    assert abs(slope_per_100([1.0, 1.5, 2.0, 2.5]) - 50.0) < 1e-9
    assert slope_per_100([3.0]) == 0.0


def test_the_comparison_names_the_engine_that_differs():
    row = ("k00000001", 1, 2, 3, 400, 5, 6, 100, "expired")
    same = compare_outputs({"a": [row, row], "b": [row, row]})
    assert same["equal"] and same["rows"] == {"a": 2, "b": 2} and same["closed"] == {"expired": 2}
    other = row[:6] + (7,) + row[7:]
    for changed in ([row, other], [row], [row, row, row]):
        out = compare_outputs({"a": [row, row], "b": [row, row], "c": changed})
        assert not out["equal"] and out["difference"].startswith("c lacks") and "b lacks" not in out["difference"]


def test_a_quick_soak_run_agrees_across_engines_and_writes_its_table_and_plots(spark, tmp_path):
    provider = spark.conf.get(PROVIDER_CONF, None)
    args = argparse.Namespace(**dict(QUICK, batches=2, partitions=2, seed=7, engines=ENGINES, output_retention=1,
                                     memory_mib=256))
    results = run(spark, args, str(tmp_path / "work"))
    assert spark.conf.get(PROVIDER_CONF, None) == provider  # the shared session's settings are back

    outputs = results["outputs"]
    assert outputs["equal"], outputs["difference"]
    assert set(outputs["rows"]) == set(ANSWERING) and min(outputs["rows"].values()) > 0
    assert outputs["closed"].get("deleted", 0) > 0 and outputs["closed"].get("expired", 0) > 0

    assert len(results["per_batch"]) == 2 + 2  # the batches and the two flush files
    for batch in results["per_batch"]:
        for name in ENGINES:
            figures = batch[name]
            assert figures["latency_s"] > 0 and figures["objects"] > 0 and figures["jvm_rss"] > 0
            if name.startswith("antkv"):
                assert figures["reused"] + figures["reopened"] + figures["caught_up"] + figures["rebuilt"] == (2 if batch["batch"] else 0)
                assert figures["local_disk"] > 0 and "load" in figures["antkv_s"]
                assert figures["output_objects"] <= 2 + 1  # one batch's files (one per partition) and record
            else:
                assert figures["spark_ms"]["addBatch"] > 0
    assert max(b["antkv-pipeline"]["max_worker_rss"] for b in results["per_batch"]) > 0

    figures = summary(results)
    assert set(figures) == set(ENGINES) and all(f["rows_per_s"] > 0 for f in figures.values())
    for name in ("antkv-pipeline", "antkv-tws"):  # the most copies one measured batch rebuilt
        assert figures[name]["rebuilt_most"] == max(b[name]["rebuilt"] for b in results["per_batch"][1:]
                                                    if not b["flush"])
    table = report(results)
    assert "rebuilt (most in one batch)" in table
    for name in ENGINES:
        assert f"| {name} |" in table
    assert "outputs equal" in table and "floor / spark-apply-changelog: throughput" in table
    assert "memory budget per worker 256 MiB" in table
    for path in plots(results, str(tmp_path / "plots")):
        with open(path, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"
