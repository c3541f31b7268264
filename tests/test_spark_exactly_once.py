"""Exactly-once on a real local Spark (the session-scoped ``spark`` fixture, ``local[2,2]``).

A running sum per key is kept in antkv state stores, two partitions, and checked against the
same sums computed directly from the input:

* a task fails *after* its store committed (Spark retries it): the failed attempt's commit is
  never published and its objects are collected;
* every task runs twice (two executions of the same stage, the first discarded, as a
  speculative loser would be): only the published attempt counts;
* the driver fails between publishing a batch's marker and Spark's commit log (a streaming
  query with ``foreachBatch``, restarted from its checkpoint): Spark replays the batch, which
  rebuilds from the previous marker, finds the marker published and keeps it;
* the executors reach a location on a real S3 API (moto on 127.0.0.1).
"""

from __future__ import annotations

import os
import sys
import uuid

import pandas as pd
import pytest
from pyspark import TaskContext
from pyspark import cloudpickle

from antkv.spark import CommitCoordinator, CommitError, CommitMessage, Location, StoreOptions, open_store, release_idle_stores
import spark_minimal_runner
from spark_minimal_runner import map_with_state, publish_batch, run_batch

from test_spark_store_model import location_objects, referenced_objects, s3_server  # noqa: F401

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # executors cannot import tests/
cloudpickle.register_pickle_by_value(spark_minimal_runner)

N = 2
SCHEMA = "key string, total long"


def running_sum(store, batches):
    """The stateful function: total[key] += value, emitting the new totals."""
    for pdf in batches:
        keys, totals = [], []
        for k, v in zip(pdf["key"], pdf["value"]):
            kb = k.encode()
            old = store.get(kb)
            new = (0 if old is None else int(old)) + int(v)
            store.put(kb, b"%d" % new)
            keys.append(k)
            totals.append(new)
        yield pd.DataFrame({"key": keys, "total": totals})


def rows(batch: int, n: int = 60) -> list[tuple[str, int]]:
    return [(f"key{(batch * 7 + i) % 23}", batch * 1000 + i) for i in range(n)]


def expected_totals(batches) -> dict[bytes, bytes]:
    out: dict[str, int] = {}
    for b in batches:
        for k, v in rows(b):
            out[k] = out.get(k, 0) + v
    return {k.encode(): b"%d" % v for k, v in out.items()}


def state(loc, version, options) -> dict[bytes, bytes]:
    out = {}
    for p in range(N):
        with open_store(loc, "sums", p, version, options=options) as s:
            out.update(s.items())
    return out


@pytest.fixture
def setup(tmp_path):
    release_idle_stores()
    loc = Location(str(tmp_path / "state"))
    options = StoreOptions(cache_dir=str(tmp_path / "cache"), max_changelog_chain=2)
    yield loc, options, tmp_path
    release_idle_stores()


def frame(spark, batch: int):
    return spark.createDataFrame(rows(batch), "key string, value long").repartition(N, "key")


def test_task_failing_after_its_commit_is_retried_exactly_once(spark, setup):
    loc, options, tmp = setup
    coord = CommitCoordinator(loc, "sums", N, query_id="task-failure")
    run_batch(frame(spark, 1), coord, 1, running_sum, SCHEMA, options)
    flag = str(tmp / "failed-once")

    def fail_after_commit(batches):
        """Consumes the stateful stage's output (commit row included), then fails attempt 0 of
        partition 0: its store has committed, the task fails anyway and Spark retries it."""
        out = list(batches)
        ctx = TaskContext.get()
        if ctx.partitionId() == 0 and ctx.attemptNumber() == 0:
            assert any(o["_antkv_commit"].notna().any() for o in out)
            open(flag, "w").close()
            raise RuntimeError("injected failure after the state was committed")
        yield from out

    stateful = map_with_state(frame(spark, 2), coord, 2, running_sum, SCHEMA, options)
    collected = stateful.mapInPandas(fail_after_commit, stateful.schema).toPandas()
    assert os.path.exists(flag)
    output, result = publish_batch(coord, 2, collected)
    assert not result.replayed
    assert state(loc, 2, options) == expected_totals([1, 2])
    assert len(output) == len(rows(2))
    assert location_objects(loc, "sums") == referenced_objects(loc, coord, 1, 2)  # the failed commit is gone


def test_duplicate_attempts_count_once(spark, setup):
    loc, options, _ = setup
    coord = CommitCoordinator(loc, "sums", N, query_id="duplicates")
    run_batch(frame(spark, 1), coord, 1, running_sum, SCHEMA, options)
    stateful = map_with_state(frame(spark, 2), coord, 2, running_sum, SCHEMA, options)
    losers = stateful.toPandas()  # every task ran and committed: the losing attempts
    winners = stateful.toPandas()  # the attempts whose results Spark reports
    output, result = publish_batch(coord, 2, winners)
    with pytest.raises(CommitError, match="already published"):
        coord.publish(2, [CommitMessage.from_json(m) for m in losers["_antkv_commit"].dropna()])
    assert state(loc, 2, options) == expected_totals([1, 2])
    # Same input, same final state.  The running totals in between depend on the order of a key's
    # rows, which a shuffle on a cluster does not fix (map outputs arrive in any order).
    def final_totals(df):
        return df.dropna(subset=["key"]).groupby("key")["total"].max().to_dict()
    assert final_totals(output) == final_totals(losers)
    coord.cleanup(2)
    assert location_objects(loc, "sums") == referenced_objects(loc, coord, 1, 2)


def test_driver_failure_between_marker_and_commit_log_replays_to_the_same_state(spark, setup):
    loc, options, tmp = setup
    source = tmp / "input"
    source.mkdir()
    for b in range(3):
        pd.DataFrame(rows(b), columns=["key", "value"]).to_json(source / f"part-{b}.json", orient="records", lines=True)
    checkpoint = str(tmp / "spark-checkpoint")
    sink: dict[int, list] = {}
    replays = []

    def start(die_after_marker_of: int | None):
        coord = CommitCoordinator(loc, "sums", N, query_id="stream")  # a new run id per start

        def each_batch(df, batch_id):
            output, result = run_batch(df.repartition(N, "key"), coord, batch_id + 1, running_sum, SCHEMA, options)
            if result.replayed:
                replays.append(batch_id)
            sink[batch_id] = sorted(map(tuple, output.itertuples(index=False)))
            if batch_id == die_after_marker_of:
                raise RuntimeError("the driver dies after the marker, before Spark's commit log")

        return (spark.readStream.schema("key string, value long").option("maxFilesPerTrigger", 1).json(str(source))
                .writeStream.foreachBatch(each_batch).option("checkpointLocation", checkpoint)
                .trigger(availableNow=True).start())

    q = start(die_after_marker_of=1)
    with pytest.raises(Exception, match="dies after the marker"):
        q.awaitTermination()
    assert loc.exists("sums/_batches/%020d.marker" % 2)  # batch 1 made version 2 ...
    assert not os.path.exists(os.path.join(checkpoint, "commits", "1"))  # ... Spark never recorded it
    first_output = sink.pop(1)
    q = start(die_after_marker_of=None)
    q.awaitTermination()
    assert replays == [1]
    assert sink[1] == first_output  # the replay rebuilt from version 1 and computed the same
    assert state(loc, 3, options) == expected_totals([0, 1, 2])


def test_state_in_a_real_s3_api_is_reached_from_the_executors(spark, tmp_path, s3_server):
    release_idle_stores()
    loc = Location(f"antkv-state/{uuid.uuid4().hex}", filesystem=s3_server)  # pickled into the tasks
    options = StoreOptions(cache_dir=str(tmp_path / "cache"), max_changelog_chain=1)
    coord = CommitCoordinator(loc, "sums", N, query_id="s3")
    for b in (1, 2, 3):
        output, result = run_batch(frame(spark, b), coord, b, running_sum, SCHEMA, options)
        assert not result.replayed and len(output) == len(rows(b))
    release_idle_stores()
    assert state(loc, 3, options) == expected_totals([1, 2, 3])
    assert location_objects(loc, "sums") == referenced_objects(loc, coord, 2, 3)
