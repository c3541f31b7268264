"""antkv shipped with the job to executors whose Python does not have it, on the standalone
cluster of ``tests/spark_cluster.py``; ``tests/test_spark_cluster.py`` runs this file in a
driver of its own with ``ANTKV_SPARK_EXECUTOR_PYTHON`` (the executors' Python: a virtualenv that
sees the dependencies but has no antkv, ``tests/wheel_env.py``) and ``ANTKV_SHIPPED_ZIP`` (the
wheel of this checkout, as the ``.zip`` that ``make dist`` also writes).  Not collected by a
plain ``pytest tests``: the file name does not start with ``test_``.

One streaming query, in order: the executors' Python cannot import antkv; a pipeline run fails
in its first task naming the driver's antkv version, and no task wrote a file; after
``SparkContext.addPyFile`` of the zip, a streaming query of three batches on both executors has
exact state and output, computed by the shipped antkv; a ``StreamingQueryListener`` saw each
batch's antkv figures; and the UI's REST API on 127.0.0.1 shows antkv's job and stage
descriptions."""

from __future__ import annotations

import json
import os
import re
import sys
import time
import urllib.request

import pandas as pd
import pytest
from pyspark import cloudpickle

import antkv
from antkv.spark import StatefulPipeline, read_state
from spark_summing import progress_listener, summing

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the executors cannot import tests/

BATCHES = 3


def _rows(batch: int) -> list[tuple[str, int]]:
    return [(f"k{(batch * 5 + i) % 13}", batch * 100 + i) for i in range(40)]


def _try_import(_):
    import importlib
    import os
    import sys

    try:
        importlib.import_module("antkv")
        said = "imported"
    except ImportError as e:
        said = str(e)
    return said, sys.executable, os.getcwd()


def _rest(sc, what: str):
    with urllib.request.urlopen(f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}/{what}", timeout=30) as r:
        return json.load(r)


def test_a_streaming_pipeline_ships_antkv_to_executors_without_it(spark, tmp_path):
    sc = spark.sparkContext
    executor_python = os.environ["ANTKV_SPARK_EXECUTOR_PYTHON"]
    root = os.environ["ANTKV_SPARK_CLUSTER_ROOT"]

    # the executors' Python cannot import antkv
    tried = sc.parallelize(range(8), 8).map(_try_import).collect()
    assert {said for said, _, _ in tried} == {"No module named 'antkv'"}, tried
    assert {python for _, python, _ in tried} == {executor_python}
    assert all(os.path.relpath(cwd, root).split(os.sep)[1] == "work" for _, _, cwd in tried), tried

    # so a pipeline's first task fails, naming the driver's version, before writing anything
    location = "file://" + str(tmp_path / "state")
    pipe = StatefulPipeline(location, "sums", ["key"], summing, "key string, total long", partitions=2,
                            key_groups=32, query_id="shipped")
    with pytest.raises(Exception) as failed:
        pipe.run(spark.createDataFrame(_rows(0), "key string, value long"), 0)
    assert re.search(rf"antkv is missing on this executor: the driver runs antkv {re.escape(antkv.__version__)}, "
                     rf"this executor's Python \({re.escape(executor_python)}\) cannot import antkv",
                     str(failed.value)), str(failed.value)[-3000:]
    written = [os.path.join(d, f) for d, _, files in os.walk(tmp_path / "state") for f in files]
    assert [os.path.relpath(p, tmp_path / "state") for p in written] == ["sums/pipeline.json"], written

    # ship antkv with the job, then run a streaming query of BATCHES batches
    shipped = os.environ["ANTKV_SHIPPED_ZIP"]
    sc.addPyFile(shipped)
    inputs = tmp_path / "in"
    inputs.mkdir()
    for b in range(BATCHES):
        path = inputs / f"part-{b}.csv"
        pd.DataFrame(_rows(b), columns=["key", "value"]).to_csv(path, index=False, header=False)
        os.utime(path, (1_700_000_000 + b, 1_700_000_000 + b))  # the file source takes them oldest first
    outputs = {}

    def sink(output, batch_id):
        outputs[batch_id] = sorted((r["key"], r["total"]) for r in output.collect())

    listener = progress_listener()
    spark.streams.addListener(listener)
    try:
        stream = spark.readStream.schema("key string, value long").option("maxFilesPerTrigger", 1).csv(str(inputs))
        query = (stream.writeStream.foreachBatch(pipe.foreach_batch(sink)).trigger(availableNow=True)
                 .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
        assert query.awaitTermination(180)
        assert query.exception() is None, query.exception()
        deadline = time.monotonic() + 60  # the listener bus delivers asynchronously
        while len(listener.seen) < BATCHES and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        spark.streams.removeListener(listener)

    # state and output exact
    want: dict = {}
    for b in range(BATCHES):
        for k, v in _rows(b):
            want[(k,)] = (want.get((k,), (0,))[0] + v,)
        assert outputs[b] == sorted((k[0], want[(k[0],)][0]) for k in {(k,) for k, _ in _rows(b)}), b
    assert read_state(location, "sums")["total"] == want

    # computed by the shipped antkv, in both executors
    seen = [m.reports["antkv"] for metrics in pipe.history for m in metrics.partition_metrics if m.rows]
    name = os.path.basename(shipped)
    assert all(v == antkv.__version__ and f"{os.sep}{name}{os.sep}antkv{os.sep}" in f for v, f, _ in seen), seen
    assert len({os.path.relpath(cwd, root).split(os.sep)[0] for _, _, cwd in seen}) == 2, seen

    # the listener saw each batch's figures
    assert sorted(listener.seen) == list(range(BATCHES)), listener.seen
    for b, metrics in enumerate(pipe.history):
        query_id, input_rows, figures = listener.seen[b]
        assert query_id == str(query.id) and figures == {"sums": metrics.figures()} and figures["sums"]["rows"] == input_rows == 40

    # the UI's REST API names antkv's jobs and stages: operator, batch, phase, then the query's
    assert sc.uiWebUrl.startswith("http://127.0.0.1:"), sc.uiWebUrl
    described = [j.get("description") or "" for j in _rest(sc, "jobs")]
    for b in range(BATCHES):
        assert any(d.startswith(f"antkv sums batch {b}: route the rows, then load, process and commit the state of 2 "
                                f"partitions\nid = {query.id}\n") for d in described), described
    stages = [s.get("description") or "" for s in _rest(sc, "stages")]
    assert any(d.startswith("antkv sums batch 2: ") for d in stages), stages
