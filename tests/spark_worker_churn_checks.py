"""Pipelines whose every task runs in a new Python worker; ``tests/test_spark_worker_churn.py``
runs them in a subprocess driver with ``spark.python.worker.reuse=false`` (``ANTKV_SPARK_CONF``).
That is what a streaming query meets when its batches are a minute or more apart: Spark stops
idle Python workers after a minute, so each batch's tasks start in new ones.  Not collected by
a plain ``pytest tests`` (the file name does not start with ``test_``): with reuse on, Spark
keeps workers and the fates below would be ``reused``."""

from __future__ import annotations

import os
import sys

from pyspark import cloudpickle

from antkv.spark import StatefulPipeline, StoreOptions, read_state
from antkv.spark.tools.demo import OUTPUT_SCHEMA, click_state, expected_with_spark, write_event_files

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import tests/


def clicks_noting_the_worker(state, rows):
    state.reports["pid"] = os.getpid()
    return click_state(state, rows)


def test_every_task_in_a_new_worker_reopens_the_parked_copies_and_equals_plain_spark(spark, tmp_path):
    assert spark.sparkContext.getConf().get("spark.python.worker.reuse") == "false"
    events = tmp_path / "events"
    write_event_files(str(events), 0, 5, users=60, events=150, payload_bytes=40)
    options = StoreOptions(cache_dir=str(tmp_path / "cache"), max_changelog_chain=2)
    location = "file://" + str(tmp_path / "state")
    outputs, fates, pids = [], [], []
    for f, partitions in enumerate([2, 2, 2, 3, 3]):
        pipe = StatefulPipeline(location, "clicks", ["user"], clicks_noting_the_worker, OUTPUT_SCHEMA, partitions=partitions,
                                key_groups=64, query_id="churn", options=options)
        result = pipe.run(spark.read.parquet(str(events / f"events-{f:05d}.parquet")))
        outputs += [tuple(r) for r in result.output.collect()]
        fates.append([m.copy_fate for m in sorted(result.metrics.partition_metrics, key=lambda m: m.partition)])
        pids += [m.reports["pid"] for m in result.metrics.partition_metrics]
    assert len(set(pids)) == len(pids)  # every task ran in a new Python worker
    assert fates[0] == ["new", "new"]
    assert fates[1] == fates[2] == ["reopened", "reopened"], fates  # a new worker, no rebuild
    assert fates[4] == ["reopened"] * 3, fates  # after the rescale too
    want_state, want_rows = expected_with_spark(spark, str(events))
    assert read_state(location, "clicks") == want_state
    assert sorted(outputs) == want_rows
