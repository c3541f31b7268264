"""Spark 4 StatefulProcessor classes run unchanged on antkv state, and agree with Spark.

Each processor of the suite (a counter with TTL, a session window driven by event-time timers,
list-state deduplication, a map-state aggregate, one with initial state) runs over the same
micro-batches twice: on Spark's own ``transformWithStateInPandas`` with the RocksDB state store
provider (a streaming query over one Parquet file per micro-batch), and on antkv's
:class:`TransformWithState`; the outputs must be equal.  The processors are plain pyspark
``StatefulProcessor`` subclasses, imported from pyspark and passed to both as they are.
Then antkv alone: TTL and processing-time timers against an injected clock, the event-time
record across a restarted runner, and refusals."""

import os
import sys
import time

import pandas as pd
import pyarrow.parquet as pq
import pytest
from pyspark import cloudpickle
from pyspark.sql.streaming.stateful_processor import StatefulProcessor

import antkv
from antkv.spark import TransformWithState
from bench.bench_spark_baseline import ROCKSDB_PROVIDER, session_processor_class

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import tests/
MINUTE = 60_000
T0 = 1_700_000_000_000


class CounterWithTTL(StatefulProcessor):
    """Per key: every event ever (no TTL), the events of this batch (a 1 ms TTL: gone by the
    next batch) and of the last hour (a TTL of an hour: kept)."""

    def init(self, handle):
        self.total = handle.getValueState("total", "n long")
        self.recent = handle.getValueState("recent", "n long", ttlDurationMs=1)
        self.hour = handle.getValueState("hour", "n long", 3_600_000)

    def handleInputRows(self, key, rows, timerValues):
        n = sum(len(f) for f in rows)
        out = [key[0]]
        for state in (self.total, self.recent, self.hour):
            value = (state.get() or (0,))[0] + n
            state.update((value,))
            out.append(value)
        yield pd.DataFrame([out], columns=["key", "total", "recent", "hour"])


class Dedup(StatefulProcessor):
    """List state: emit each (key, value) the first time it is seen."""

    def init(self, handle):
        self.seen = handle.getListState("seen", "value string")

    def handleInputRows(self, key, rows, timerValues):
        seen = {v for (v,) in self.seen.get()}
        new = []
        for frame in rows:
            for v in frame["value"]:
                if v not in seen:
                    seen.add(v)
                    new.append(v)
        if new:
            self.seen.appendList([(v,) for v in new])
            yield pd.DataFrame({"key": [key[0]] * len(new), "value": new})


class ItemCounts(StatefulProcessor):
    """Map state: counts per item of each key; an item reaching 3 is reported and removed."""

    def init(self, handle):
        self.counts = handle.getMapState("counts", "item string", "n long")

    def handleInputRows(self, key, rows, timerValues):
        out = []
        for frame in rows:
            for item in frame["item"]:
                n = self.counts.getValue((item,))[0] + 1 if self.counts.containsKey((item,)) else 1
                if n >= 3:
                    self.counts.removeKey((item,))
                    out.append((key[0], item, n, "full"))
                else:
                    self.counts.updateValue((item,), (n,))
        for (item,), (n,) in self.counts.iterator():
            out.append((key[0], item, n, "open"))
        assert sorted(self.counts.keys()) == sorted(k for k, _ in self.counts.iterator())
        assert len(list(self.counts.values())) == len(list(self.counts.keys()))
        if out:
            yield pd.DataFrame(out, columns=["key", "item", "n", "status"])


class RunningTotal(StatefulProcessor):
    """Initial state: totals start from the initial state's balance."""

    def init(self, handle):
        self.total = handle.getValueState("total", "amount long")

    def handleInitialState(self, key, initialState, timerValues):
        self.total.update((int(initialState["balance"].sum()),))

    def handleInputRows(self, key, rows, timerValues):
        total = (self.total.get() or (0,))[0]
        for frame in rows:
            total += int(frame["amount"].sum())
        self.total.update((total,))
        yield pd.DataFrame({"key": [key[0]], "total": [total]})


# --------------------------------------------------------------------------- the two runs


def _frame(spark, rows, schema):
    return spark.createDataFrame(rows, schema)


def run_on_spark(spark, work, name, processor, batches, schema, output_schema, time_mode,
                 event_time=None, initial=None, api="transformWithStateInPandas"):
    """The processor on ``api`` (``transformWithStateInPandas``, or the row-based
    ``transformWithState``) with Spark's RocksDB provider, one file per micro-batch; returns
    every output row, sorted."""
    inputs, checkpoint = os.path.join(work, f"in-{name}"), os.path.join(work, f"ckpt-{name}")
    os.makedirs(inputs)
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER)
    stream = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(inputs)
    if event_time:
        stream = stream.withWatermark(event_time, "0 seconds")
    grouped_init = None if initial is None else spark.createDataFrame(*initial).groupBy("key")
    out = getattr(stream.groupBy("key"), api)(processor, output_schema, "Update", time_mode, grouped_init)
    got = []
    writer = out.writeStream.outputMode("update").option("checkpointLocation", checkpoint) \
        .foreachBatch(lambda df, _: got.extend(tuple(r) for r in df.collect()))
    # In the ProcessingTime mode Spark runs a batch without data at every trigger, for ever, so
    # processAllAvailable never returns: there, each file is one run of the query (same
    # checkpoint) stopped once its first batch, the one with the file, is done.
    once = time_mode == "ProcessingTime"
    query = None if once else writer.start()
    try:
        for i, rows in enumerate(batches):
            tmp = os.path.join(inputs, f".{i}.parquet")
            pq.write_table(_frame(spark, rows, schema).toArrow(), tmp, coerce_timestamps="us")  # the types kept
            os.rename(tmp, os.path.join(inputs, f"{i:03d}.parquet"))
            if once:
                query = writer.trigger(processingTime="1 hour").start()
                deadline = time.monotonic() + 300
                while not any(p["numInputRows"] for p in query.recentProgress):
                    assert query.isActive and time.monotonic() < deadline, query.exception()
                    if query.recentProgress and not query.status["isTriggerActive"]:
                        # the run's first trigger ran a batch without the file (one the stopped run
                        # had planned) and waits an hour for the next: start the run again
                        query.stop()
                        query = writer.trigger(processingTime="1 hour").start()
                    time.sleep(0.1)
                if i < len(batches) - 1:
                    query.stop()
            else:
                query.processAllAvailable()
        metrics = query.lastProgress["stateOperators"][0]["customMetrics"]
        assert any(k.startswith("rocksdb") for k in metrics), metrics  # the provider took effect
    finally:
        query.stop()
    return sorted(got)


def run_on_antkv(spark, work, name, processor, batches, schema, output_schema, time_mode,
                 event_time=None, initial=None, restart=False, location=None, **kwargs):
    """The same processor on antkv, one run() per micro-batch (and, in the EventTime mode, an
    empty batch after each, as Spark runs one when the watermark moves); with ``restart``, a
    new runner (a restarted driver) for each micro-batch.  ``location``: the state's location
    URI (default: ``<work>/antkv``)."""
    init_df = None if initial is None else spark.createDataFrame(*initial)

    def new_runner():
        return TransformWithState(location or f"file://{work}/antkv", name, "key", processor, output_schema,
                                  time_mode=time_mode, event_time_column=event_time, initial_state=init_df,
                                  partitions=2, key_groups=16, **kwargs)

    runner = new_runner()
    got, batch = [], 0
    for rows in batches:
        if restart and batch:
            runner = new_runner()
        for data in ([rows, []] if event_time else [rows]):
            result = runner.run(_frame(spark, data, schema), batch)
            got += [tuple(r) for r in result.output.collect()]
            batch += 1
    return sorted(got), runner


def both(spark, tmp_path, name, processor, batches, schema, output_schema, time_mode, restart=False, rows=False,
         **kw):
    """The processor on Spark and on antkv (``rows``: a row-based processor, on Spark's
    ``transformWithState``); the outputs must be equal."""
    api = "transformWithState" if rows else "transformWithStateInPandas"
    want = run_on_spark(spark, str(tmp_path), name, processor, batches, schema, output_schema, time_mode, api=api,
                        **kw)
    got, _ = run_on_antkv(spark, str(tmp_path), name, processor, batches, schema, output_schema, time_mode,
                          restart=restart, rows=rows, **kw)
    assert want, "the suite's processors all produce output"
    assert got == want
    return got


def test_counter_with_ttl_equals_spark(spark, tmp_path):
    batches = [[("a", 1), ("a", 2), ("b", 3)], [("a", 4), ("c", 5)], [("b", 6), ("b", 7), ("a", 8)]]
    got = both(spark, tmp_path, "counter", CounterWithTTL(), batches, "key string, v long",
               "key string, total long, recent long, hour long", "ProcessingTime")
    assert ("a", 4, 1, 4) in got and ("b", 3, 2, 3) in got  # recent restarted, hour kept


def test_session_window_driven_by_timers_equals_spark(spark, tmp_path):
    def at(minutes):
        return pd.Timestamp(T0 + minutes * MINUTE, unit="ms").to_pydatetime()
    batches = [
        [("u1", at(0)), ("u1", at(2)), ("u2", at(1))],
        [("u1", at(4)), ("u2", at(9)), ("u3", at(10))],          # u2: a gap closes its first session
        [("u3", at(12)), ("u4", at(30))],                       # the watermark passes u1's timer
        [("u4", at(31)), ("u3", at(50))],
    ]
    got = both(spark, tmp_path, "sessions", session_processor_class()(), batches, "key string, ts timestamp",
               "key string, start long, end long, events long", "EventTime", event_time="ts")
    assert ("u1", T0, T0 + 4 * MINUTE, 3) in got and ("u2", T0 + MINUTE, T0 + MINUTE, 1) in got


def test_list_state_dedup_equals_spark(spark, tmp_path):
    batches = [[("a", "x"), ("a", "y"), ("a", "x"), ("b", "x")], [("a", "y"), ("a", "z"), ("b", "x")],
               [("b", "w"), ("c", "x"), ("a", "z")]]
    both(spark, tmp_path, "dedup", Dedup(), batches, "key string, value string", "key string, value string", "None")


def test_map_state_aggregate_equals_spark(spark, tmp_path):
    batches = [[("a", "x"), ("a", "y"), ("a", "x"), ("b", "x")], [("a", "x"), ("a", "z"), ("b", "x")],
               [("b", "x"), ("b", "x"), ("a", "y")]]
    got = both(spark, tmp_path, "items", ItemCounts(), batches, "key string, item string",
               "key string, item string, n long, status string", "None")
    assert ("a", "x", 3, "full") in got


def test_initial_state_equals_spark(spark, tmp_path):
    initial = ([("a", 100), ("a", 5), ("c", 7)], "key string, balance long")
    batches = [[("a", 1), ("b", 2)], [("a", 3), ("c", 4)]]
    got = both(spark, tmp_path, "totals", RunningTotal(), batches, "key string, amount long",
               "key string, total long", "None", initial=initial)
    assert got == sorted([("a", 106), ("b", 2), ("a", 109), ("c", 11)])


# --------------------------------------------------------------------------- antkv alone


class Clock:
    def __init__(self, seconds):
        self.now = seconds

    def __call__(self):
        return self.now


class Reminder(StatefulProcessor):
    """A processing-time timer 8 s after a key's last event; value, map and list state with a
    TTL of 10 s."""

    def init(self, handle):
        self.handle = handle
        self.last = handle.getValueState("last", "ms long", ttlDurationMs=10_000)
        self.tags = handle.getMapState("tags", "tag string", "n long", ttlDurationMs=10_000)
        self.log = handle.getListState("log", "ms long", ttlDurationMs=10_000)

    def handleInputRows(self, key, rows, timerValues):
        now = timerValues.getCurrentProcessingTimeInMs()
        for t in self.handle.listTimers():
            self.handle.deleteTimer(t)
        self.handle.registerTimer(now + 8_000)
        self.last.update((now,))
        self.log.appendValue((now,))
        for frame in rows:
            for tag in frame["tag"]:
                self.tags.updateValue((tag,), ((self.tags.getValue((tag,)) or (0,))[0] + 1,))
        yield pd.DataFrame({"key": [key[0]], "what": ["seen"], "n": [len(list(self.log.get()))],
                            "timers": [len(list(self.handle.listTimers()))]})

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
        yield pd.DataFrame({"key": [key[0]], "what": [f"timer {expiredTimerInfo.getExpiryTimeInMs()}"],
                            "n": [len(list(self.tags.keys()))],
                            "timers": [timerValues.getCurrentProcessingTimeInMs()]})


def test_processing_time_timers_and_ttl_follow_the_injected_clock(spark, tmp_path):
    clock = Clock(1000.0)
    runner = TransformWithState(f"file://{tmp_path}/s", "remind", "key", Reminder(),
                                "key string, what string, n long, timers long",
                                time_mode="ProcessingTime", partitions=2, key_groups=8, clock=clock)
    schema = "key string, tag string"

    def step(rows, seconds):
        clock.now = seconds
        out = runner.run(spark.createDataFrame(rows, schema))
        return sorted(tuple(r) for r in out.output.collect()), out.metrics.keys

    rows, _ = step([("a", "x"), ("b", "y")], 1000)
    assert rows == [("a", "seen", 1, 1), ("b", "seen", 1, 1)]
    rows, keys_mid = step([("a", "z")], 1005)  # a's timer moves to 1013 s; b's stays at 1008 s
    assert rows == [("a", "seen", 2, 1)]
    rows, _ = step([], 1007.999)  # nothing is due
    assert rows == []
    rows, _ = step([], 1008)  # b's timer fires at its time; b's tag (until 1010 s) is still there
    assert rows == [("b", "timer 1008000", 1, 1008000)]
    rows, keys_after = step([], 1013)  # a's timer: tag x expired at 1010 s (>=, as Spark), z not
    assert rows == [("a", "timer 1013000", 1, 1013000)]
    rows, keys_end = step([], 1030)
    assert rows == [] and keys_end < keys_after < keys_mid  # expired state is removed, not just hidden
    # everything left is metadata: K, the three state names and the timers' layout version, in
    # each of the 2 partitions
    assert keys_end == 2 * 5


def test_event_time_survives_a_restarted_runner_and_late_rows_are_dropped(spark, tmp_path):
    def run(batches, first):
        runner = TransformWithState(f"file://{tmp_path}/s", "sess", "key", session_processor_class()(),
                                    "key string, start long, end long, events long", time_mode="EventTime",
                                    event_time_column="ts", partitions=1, key_groups=4)
        outs = []
        for i, rows in enumerate(batches):
            outs += list(runner.run(spark.createDataFrame(rows, "key string, ts long").selectExpr(
                "key", "timestamp_millis(ts) as ts"), first + i).output.collect())
        return runner, sorted(tuple(r) for r in outs)

    runner, out = run([[("a", T0)], [("b", T0 + 20 * MINUTE)]], 0)
    assert out == [] and runner.watermark_ms == T0  # batch 1's watermark: batch 0's max event time
    # a new runner (a restarted driver) continues from the recorded event time: batch 2's
    # watermark is T0 + 20 min, so a's session (timer at T0 + 5 min) closes, and a row at T0
    # (at or below batch 1's watermark, T0) is late and dropped
    runner, out = run([[("a", T0), ("c", T0 + 21 * MINUTE)]], 2)
    assert runner.watermark_ms == T0 + 20 * MINUTE
    assert out == [("a", T0, T0, 1)]


def test_refusals_are_clear_and_publish_nothing(spark, tmp_path):
    class TTLWithoutProcessingTime(StatefulProcessor):
        def init(self, handle):
            handle.getValueState("v", "n long", ttlDurationMs=5)

        def handleInputRows(self, key, rows, timerValues):
            return iter([])

    class TimerWithoutTimeMode(StatefulProcessor):
        def init(self, handle):
            self.handle = handle

        def handleInputRows(self, key, rows, timerValues):
            self.handle.registerTimer(5)
            return iter([])

    class WrongArity(StatefulProcessor):
        def init(self, handle):
            self.v = handle.getValueState("v", "a long, b long")

        def handleInputRows(self, key, rows, timerValues):
            self.v.update((1,))
            return iter([])

    with pytest.raises(antkv.InvalidArgumentError, match="needs the ProcessingTime"):
        TransformWithState(f"file://{tmp_path}/s", "bad", "key", TTLWithoutProcessingTime(), "key string",
                           partitions=1)  # refused on the driver, as Spark's pre-init does
    df = spark.createDataFrame([("a", 1)], "key string, v long")
    for i, (proc, words) in enumerate([(TimerWithoutTimeMode(), "timers need"), (WrongArity(), "2 field")]):
        runner = TransformWithState(f"file://{tmp_path}/s", f"bad{i}", "key", proc, "key string",
                                    partitions=1, key_groups=4)
        with pytest.raises(Exception, match=words):  # in a task: Spark reports the task's error
            runner.run(df)
        assert runner.pipeline.coordinator.latest_version() == 0
    with pytest.raises(antkv.InvalidArgumentError, match="time mode"):
        TransformWithState(f"file://{tmp_path}/s", "x", "key", Dedup(), "key string", time_mode="Wall", partitions=1)
    with pytest.raises(antkv.InvalidArgumentError, match="event_time_column"):
        TransformWithState(f"file://{tmp_path}/s", "x", "key", Dedup(), "key string", time_mode="EventTime",
                           partitions=1)
    with pytest.raises(TypeError, match="StatefulProcessor"):
        TransformWithState(f"file://{tmp_path}/s", "x", "key", object(), "key string", partitions=1)


def test_timers_and_state_move_with_their_keys_when_the_partitions_change(spark, tmp_path):
    """The session window over partitions 2 -> 3 -> 1 gives what it gives on 2 throughout:
    timers live in their keys' key groups, so a rescale carries them along."""
    def at(minutes):
        return T0 + minutes * MINUTE
    batches = [[(f"u{i}", at(i % 3)) for i in range(30)], [(f"u{i}", at(4 + i % 2)) for i in range(0, 30, 2)],
               [("u0", at(20))], []]

    def run(name, partitions):
        out = []
        for b, (rows, n) in enumerate(zip(batches, partitions)):
            runner = TransformWithState(f"file://{tmp_path}/s", name, "key", session_processor_class()(),
                                        "key string, start long, end long, events long", time_mode="EventTime",
                                        event_time_column="ts", partitions=n, key_groups=16)
            df = spark.createDataFrame(rows, "key string, ts long")
            out += [tuple(r) for r in runner.run(df, b).output.collect()]
        return sorted(out)

    fixed = run("fixed", [2, 2, 2, 2])
    # 30 sessions close: u0's first one in handleInputRows (a gap), the 29 others by their timers
    # in the last batch (watermark 20 min); u0's second session stays open
    assert len(fixed) == 30 and ("u0", T0, T0 + 4 * MINUTE, 2) in fixed
    assert run("rescaled", [2, 3, 1, 1]) == fixed
