"""What an operator of a Spark deployment sees: an executor with another antkv fails the first
task with both versions named and writes nothing, and each streaming batch's antkv figures
reach a ``StreamingQueryListener`` (``antkv.spark.batch_metrics``).  The job descriptions and
an executor whose Python lacks antkv are checked on the standalone cluster
(``tests/spark_cluster_shipping.py``), where the UI's REST API runs."""

from __future__ import annotations

import os
import re
import sys
import time

import pandas as pd
import pytest
from pyspark import cloudpickle

import antkv
from antkv.spark import StatefulPipeline, batch_metrics, read_state
from spark_summing import progress_listener, summing

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the executors cannot import tests/


def _pipeline(location):
    return StatefulPipeline(location, "sums", ["key"], summing, "key string, total long", partitions=2,
                            key_groups=16, query_id="ops")


def _rows(batch: int) -> list[tuple[str, int]]:
    return [(f"k{(batch * 7 + i) % 11}", batch * 100 + i) for i in range(30)]


def _totals(batches) -> dict:
    want: dict = {}
    for b in batches:
        for k, v in _rows(b):
            want[(k,)] = (want.get((k,), (0,))[0] + v,)
    return want


def test_an_executor_with_another_antkv_fails_the_first_task_and_writes_nothing(spark, tmp_path, monkeypatch):
    location = "file://" + str(tmp_path / "state")
    df = spark.createDataFrame(_rows(0), "key string, value long")
    real = antkv.__version__
    monkeypatch.setattr(antkv, "__version__", "0.0.0+driver")  # the driver runs another antkv than the executors
    with pytest.raises(Exception) as failed:
        _pipeline(location).run(df)
    message = str(failed.value)
    assert re.search(r"antkv version mismatch: the driver runs antkv 0\.0\.0\+driver, this executor's Python "
                     rf"\(.+\) imports antkv {re.escape(real)} from ", message), message[-3000:]
    written = sorted(os.path.relpath(os.path.join(d, f), tmp_path / "state")
                     for d, _, files in os.walk(tmp_path / "state") for f in files)
    assert written == ["sums/pipeline.json"], written  # the driver's record only: no task wrote a file
    monkeypatch.undo()
    _pipeline(location).run(df)
    assert read_state(location, "sums")["total"] == _totals([0])


def test_a_streaming_listener_sees_each_batchs_antkv_figures(spark, tmp_path):
    inputs = tmp_path / "in"
    inputs.mkdir()
    for b in range(3):
        pd.DataFrame(_rows(b), columns=["key", "value"]).to_csv(inputs / f"part-{b}.csv", index=False, header=False)
    location = "file://" + str(tmp_path / "state")
    pipe = _pipeline(location)
    listener = progress_listener()
    spark.streams.addListener(listener)
    try:
        stream = spark.readStream.schema("key string, value long").option("maxFilesPerTrigger", 1).csv(str(inputs))
        query = (stream.writeStream.foreachBatch(pipe.foreach_batch()).trigger(availableNow=True)
                 .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
        query.awaitTermination(120)
        deadline = time.monotonic() + 60  # the listener bus delivers asynchronously
        while len(listener.seen) < 3 and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        spark.streams.removeListener(listener)
    assert sorted(listener.seen) == [0, 1, 2], listener.seen
    assert [m.batch_id for m in pipe.history] == [0, 1, 2]
    for b, metrics in enumerate(pipe.history):
        query_id, input_rows, figures = listener.seen[b]
        assert query_id == str(query.id)
        assert figures == {"sums": metrics.figures()}
        f = figures["sums"]
        assert f["rows"] == input_rows == 30
        assert f["copies_reused"] + f["copies_rebuilt"] == f["partitions"] == 2
        assert f["bytes_uploaded"] > 0 and f["load_s"] >= 0 and f["process_s"] > 0 and f["commit_s"] > 0
    assert batch_metrics(query.lastProgress) == {"sums": pipe.history[-1]}
    assert read_state(location, "sums")["total"] == _totals(range(3))
