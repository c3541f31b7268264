"""``antkv state-report`` on the location and metrics of a small real pipeline run (the demo's
state function, three batches, rescaled 2 -> 3 at the last), and its bad input."""

from __future__ import annotations

import json
import os

import pytest

from antkv.spark import StatefulPipeline
from antkv.spark.tools.demo import OUTPUT_SCHEMA, click_state, write_event_files

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def run(antkv_cli):
    return antkv_cli


@pytest.fixture(scope="module")
def pipeline_run(spark, tmp_path_factory):
    """A demo-like work directory: ``state/`` (the location) and ``metrics.jsonl`` beside it."""
    root = tmp_path_factory.mktemp("report")
    write_event_files(str(root / "events"), 0, 3, users=40, events=80, payload_bytes=32)
    metrics = []
    for batch, partitions in enumerate([2, 2, 3]):
        pipe = StatefulPipeline("file://" + str(root / "state"), "clicks", ["user"], click_state, OUTPUT_SCHEMA,
                                partitions=partitions, key_groups=32, query_id="report",
                                metrics_path=str(root / "metrics.jsonl"))
        df = spark.read.parquet(str(root / "events" / f"events-{batch:05d}.parquet"))
        metrics.append(pipe.run(df, batch_id=batch).metrics)
    return root, metrics


def test_state_report_prints_the_batches_and_draws_them(run, pipeline_run):
    root, metrics = pipeline_run
    code, out, err = run("state-report", root / "state", "clicks")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("operator clicks in ") and f"from {root / 'metrics.jsonl'}" in lines[0]
    table = lines[2:5]
    assert [line.split()[0] for line in table] == ["0", "1", "2"]
    assert "rescaled 2 -> 3" in table[2] and "rescaled" not in table[0] + table[1]
    assert [int(line.split()[4]) for line in table] == [m.keys for m in metrics]
    png = root / "clicks-report.png"
    assert lines[-1] == f"picture: {png}"
    assert png.read_bytes()[:8] == PNG_MAGIC and png.stat().st_size > 20_000
    code, out, _ = run("state-report", root / "state", "clicks", "--json", "--output", root / "other.png")
    doc = json.loads(out)
    assert code == 0 and doc["png"] == str(root / "other.png") and (root / "other.png").exists()
    rows = doc["batches"]
    assert [r["rows"] for r in rows] == [m.rows for m in metrics]
    assert [r["bytes_uploaded"] for r in rows] == [m.bytes_uploaded for m in metrics]
    assert [r["cache_hit_ratio"] for r in rows] == [m.cache_hit_ratio for m in metrics]
    # each partition's copy, one letter per partition in partition order, in the JSON and the table
    letters = {"new": "N", "reused": "R", "reopened": "O", "caught_up": "C", "rebuilt": "B"}
    want = ["".join(letters[p.copy_fate] for p in sorted(m.partition_metrics, key=lambda p: p.partition))
            for m in metrics]
    assert [r["copies"] for r in rows] == want and want[0] == "NN"
    assert all(w in line.split() for w, line in zip(want, table))
    for r, m in zip(rows, metrics):
        # the split adds up to the batch's wall time, along its slowest task
        assert sum(r[t] for t in ("load", "process", "commit", "publish", "spark")) == pytest.approx(m.seconds)
        slowest = max(m.partition_metrics, key=lambda p: p.load_s + p.process_s + p.commit_s)
        assert (r["load"], r["process"], r["commit"]) == (slowest.load_s, slowest.process_s, slowest.commit_s)


def test_state_report_bad_input(run, pipeline_run, tmp_path):
    root, _ = pipeline_run
    code, _, err = run("state-report", tmp_path / "nothing", "clicks")
    assert code == 1 and "does not exist" in err
    code, _, err = run("state-report", root / "state", "nope")
    assert code == 1 and "'nope' has no published version" in err
    code, _, err = run("state-report", root / "state", "clicks", "--metrics", tmp_path / "none.jsonl")
    assert code == 2 and "no such file" in err
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"batch_id": 0}\n')
    code, _, err = run("state-report", root / "state", "clicks", "--metrics", bad, "--no-png")
    assert code == 1 and "line 1 is not a batch's metrics" in err
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    code, _, err = run("state-report", root / "state", "clicks", "--metrics", empty)
    assert code == 1 and "holds no batch" in err
    # a location with no metrics file where the pipeline keeps one
    lone = tmp_path / "lone"
    os.makedirs(lone)
    os.symlink(root / "state", lone / "state")
    code, _, err = run("state-report", lone / "state", "clicks")
    assert code == 2 and "no metrics file found" in err and "--metrics" in err
    code, out, _ = run("state-report", lone / "state", "clicks", "--metrics", root / "metrics.jsonl", "--no-png")
    assert code == 0 and "picture:" not in out and not list(lone.glob("*.png"))


def test_state_report_without_matplotlib_says_what_to_install(run, pipeline_run, tmp_path, monkeypatch):
    import sys

    root, _ = pipeline_run
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if it were not installed
    code, out, err = run("state-report", root / "state", "clicks", "--output", tmp_path / "r.png")
    assert code == 1 and "matplotlib, which is not installed" in err and "--no-png" in err
    assert not (tmp_path / "r.png").exists()
    code, out, _ = run("state-report", root / "state", "clicks", "--no-png")
    assert code == 0 and "rescaled 2 -> 3" in out
