"""Checks that only mean something on a multi-executor cluster; ``tests/test_spark_cluster.py``
runs them in its subprocess driver (``ANTKV_SPARK_MASTER`` set: the ``spark`` fixture is then
the standalone cluster of ``tests/spark_cluster.py``).  Not collected by a plain ``pytest
tests`` (the file name does not start with ``test_``): on ``local[*]`` there is one executor.

Where a task ran is told by its Python worker's working directory: a standalone executor
runs in ``<worker dir>/work/<app id>/<executor id>``."""

from __future__ import annotations

import json
import os
import signal
import sys

import pandas as pd
from pyspark import TaskContext, cloudpickle

from antkv.spark import StatefulPipeline, read_state, read_state_df
from spark_summing import summing

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the executors cannot import tests/

ROOT = os.environ.get("ANTKV_SPARK_CLUSTER_ROOT", "")


def executor_of(cwd: str) -> str:
    """``worker<i>/<executor id>`` of a task's working directory (fails outside the cluster)."""
    rel = os.path.relpath(cwd, ROOT).split(os.sep)
    assert ROOT and len(rel) == 4 and rel[0].startswith("worker") and rel[1] == "work" and rel[2].startswith("app-"), cwd
    return f"{rel[0]}/{rel[3]}"


def _inputs(spark, batch: int):
    rows = [(f"k{(batch * 5 + i) % 13}", batch * 100 + i) for i in range(40)]
    return spark.createDataFrame(rows, "key string, value long"), rows


def _pipeline(location, func, partitions=2):
    return StatefulPipeline(location, "sums", ["key"], func, "key string, total long", partitions=partitions,
                            key_groups=32, query_id="cluster")


def test_the_state_source_reads_in_both_executors_not_the_driver(spark, tmp_path):
    location = "file://" + str(tmp_path / "state")
    df, rows = _inputs(spark, 0)
    _pipeline(location, summing, partitions=4).run(df)

    def where(frames):
        for f in frames:
            yield pd.DataFrame({"partition_id": f["partition_id"], "pid": os.getpid(), "cwd": os.getcwd()})

    state = read_state_df(spark, location, "sums")
    seen = state.mapInPandas(where, "partition_id int, pid long, cwd string").distinct().collect()
    assert os.getpid() not in {r["pid"] for r in seen}
    executors = {executor_of(r["cwd"]) for r in seen}
    assert len(executors) == 2, executors
    want: dict = {}
    for k, v in rows:
        want[(k,)] = (want.get((k,), (0,))[0] + v,)
    got = {tuple(json.loads(r["key"]).values()): tuple(json.loads(r["value"])) for r in state.collect()}
    assert got == want == read_state(location, "sums")["total"]


def test_a_killed_python_worker_is_retried_on_the_other_executor(spark, tmp_path):
    """Batch 1's partition 0 kills its own Python worker after changing its state, before the
    commit; the retry runs on the other executor (the session never retries a task where it
    failed), which loads the partition from the location; every batch's
    state and output are still exact, and a partition that stays in one Python worker
    reuses its working copy."""
    location = "file://" + str(tmp_path / "state")
    marks = str(tmp_path / "attempts")
    os.makedirs(marks)

    def summing(state, rows):
        ctx = TaskContext.get()
        total = state.value_state("total", 1)
        out = []
        for key, group in state.groups(rows):
            total.update(((total.get() or (0,))[0] + int(group["value"].sum()),))
            out.append((key[0], total.get()[0]))
        where = [os.getpid(), os.getcwd(), ctx.attemptNumber()]
        state.reports["where"] = where
        with open(os.path.join(marks, f"b{state.batch_id}-p{state.partition}-a{ctx.attemptNumber()}"), "w") as f:
            json.dump(where, f)
        if state.batch_id == 1 and state.partition == 0 and ctx.attemptNumber() == 0:
            os.kill(os.getpid(), signal.SIGKILL)
        return pd.DataFrame(out, columns=["key", "total"])

    want: dict = {}
    metrics = []
    for batch in range(3):
        df, rows = _inputs(spark, batch)
        result = _pipeline(location, summing).run(df, batch)
        for k, v in rows:
            want[(k,)] = (want.get((k,), (0,))[0] + v,)
        assert sorted((r["key"], r["total"]) for r in result.output.collect()) == \
            sorted((k[0], t[0]) for k, t in want.items() if k[0] in {r[0] for r in rows})
        metrics.append({m.partition: m for m in result.metrics.partition_metrics})
        assert read_state(location, "sums", batch + 1)["total"] == want

    with open(os.path.join(marks, "b1-p0-a0")) as f:
        killed_pid, killed_cwd, _ = json.load(f)
    retry = metrics[1][0]
    retry_pid, retry_cwd, attempt = retry.reports["where"]
    assert attempt >= 1 and retry_pid != killed_pid
    assert executor_of(retry_cwd) != executor_of(killed_cwd)
    if executor_of(metrics[0][0].reports["where"][1]) != executor_of(retry_cwd):
        # the retry's executor never held partition 0: it loaded it from the location
        assert not retry.reused_working_copy
    for batch in (1, 2):
        for p, m in metrics[batch].items():
            if m.reports["where"][0] == metrics[batch - 1][p].reports["where"][0]:
                assert m.reused_working_copy, (batch, p)  # the same Python worker kept the copy
