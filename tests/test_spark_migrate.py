"""A query moves from Spark's state store to antkv mid-stream and gives the same answers.

Each test runs a query's first batches on real Spark (RocksDB state store provider, a
streaming query over one Parquet file per micro-batch), copies its checkpoint at the batch
boundary, lets Spark run the remaining batches on the original (the reference), migrates the
copy's state into antkv with :mod:`antkv.spark.tools.migrate`, runs the remaining batches on
antkv, and compares the outputs of those batches and the final state.  Then the refusals: an
operator or a type antkv cannot carry is an InvalidArgumentError before anything is written."""

import os
import shutil
import sys
import time

import pandas as pd
import pytest
from pyspark import cloudpickle
from pyspark.sql import Row
from pyspark.sql.streaming.stateful_processor import StatefulProcessor

import antkv
from antkv.spark import StatefulPipeline, TransformWithState, read_state
from antkv.spark.tools.migrate import migrate_apply_in_pandas_with_state, migrate_transform_with_state
from antkv.spark.tools.spark_state import check_key_type, check_row_type
from bench.bench_spark_baseline import ROCKSDB_PROVIDER, apply_count_and_latest
from bench.bench_spark_state import count_and_latest

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import tests/
FAR = 10 ** 15  # a processing time no test reaches: timers there never fire


def output_rows(output) -> list:
    """A batch's output (a Spark DataFrame) as sorted plain tuples (the one place that knows its type)."""
    return sorted(tuple(r) for r in output.collect())


def plain(value):
    """Rows as tuples, all the way down (Spark may hand a processor Rows)."""
    if isinstance(value, tuple):
        return tuple(plain(v) for v in value)
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


class Everything(StatefulProcessor):
    """Value state without TTL, with a TTL of an hour (kept) and of 1 ms (gone by the next
    batch), list state with a TTL, map state, and a timer moved at every batch; emits a digest
    of the key's whole state."""

    def init(self, handle):
        self.handle = handle
        self.total = handle.getValueState("total", "n long, last string")
        self.hour = handle.getValueState("hour", "n long", ttlDurationMs=3_600_000)
        self.brief = handle.getValueState("brief", "n long", ttlDurationMs=1)
        self.seen = handle.getListState("seen", "v string", ttlDurationMs=3_600_000)
        self.items = handle.getMapState("items", "item string", "n long, share double")

    def handleInputRows(self, key, rows, timerValues):
        values = [v for frame in rows for v in frame["v"]]
        yield pd.DataFrame({"key": [key[0]], "digest": [self.digest(values)]})

    def digest(self, values) -> str:
        """Apply a key's values to every state variable; the key's whole state, printed."""
        n = (self.total.get() or (0, ""))[0] + len(values)
        self.total.update((n, values[-1]))
        for state in (self.hour, self.brief):
            state.update(((state.get() or (0,))[0] + len(values),))
        self.seen.appendList([(v,) for v in values])
        for v in values:
            old = self.items.getValue((v,))
            self.items.updateValue((v,), ((old[0] if old else 0) + 1, 1.0 / n))
        for t in self.handle.listTimers():
            self.handle.deleteTimer(t)
        self.handle.registerTimer(FAR + n)
        digest = (self.total.get(), self.hour.get(), self.brief.get(), list(self.seen.get()),
                  sorted(self.items.iterator()), list(self.handle.listTimers()))
        return repr(plain(digest))


class EverythingRows(Everything):
    """:class:`Everything` written for the row-based ``transformWithState``: Rows in and out."""

    def handleInputRows(self, key, rows, timerValues):
        yield Row(key=key[0], digest=self.digest([row.v for row in rows]))


# --------------------------------------------------------------------------- Spark's side


def spark_batches(spark, inputs, checkpoint, writer, batches, first):
    """Run ``batches`` (numbered from ``first``) on Spark, one Parquet file each; returns the
    output rows of each batch with output.  Each file is one run of the query ``writer(outputs)``
    (a DataStreamWriter whose trigger never fires again by itself), stopped once its batch read
    the file: a query in the ProcessingTime mode would run batches without data for ever, and
    the availableNow trigger does not end it.  Each run is waited for with a deadline, so a
    stuck query fails the test instead of hanging it.  A run whose Python worker did not connect
    back within Spark's fixed timeout (a loaded machine) is retried, at most twice: nothing ran,
    the checkpoint is unchanged."""
    outputs = []
    for i, rows in enumerate(batches, first):
        tmp = os.path.join(inputs, f".{i}.parquet")
        rows.to_parquet(tmp, index=False)
        os.rename(tmp, os.path.join(inputs, f"{i:03d}.parquet"))
        for attempt in range(3):
            query = writer(outputs).trigger(processingTime="1 hour").start()
            try:
                deadline = time.monotonic() + 300
                while query.isActive and not any(p["numInputRows"] for p in query.recentProgress):
                    assert time.monotonic() < deadline, f"batch {i} did not finish in 300 s"
                    time.sleep(0.1)
                failed = query.exception()
            finally:
                query.stop()
            if failed is None:
                break
            assert "failed to connect back" in str(failed) and attempt < 2, failed
    return [rows for rows in outputs if rows]


def stop_and_copy(checkpoint, work):
    """The copy of a stopped query's checkpoint that is migrated (the original runs on)."""
    copy = os.path.join(work, "migrated-checkpoint")
    shutil.copytree(checkpoint, copy)
    return copy


# --------------------------------------------------------------------------- the tests


def test_apply_in_pandas_with_state_continues_on_antkv(spark, tmp_path, monkeypatch):
    work = str(tmp_path)
    inputs, checkpoint = os.path.join(work, "in"), os.path.join(work, "ckpt")
    os.makedirs(inputs)
    schema = "key string, value binary"
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER)
    from pyspark.sql.streaming.state import GroupStateTimeout

    def writer(outputs):
        out = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(inputs) \
            .groupBy("key").applyInPandasWithState(apply_count_and_latest, "key string, count long",
                                                   "count long, value binary", "update",
                                                   GroupStateTimeout.NoTimeout)
        return out.writeStream.outputMode("update").option("checkpointLocation", checkpoint) \
            .foreachBatch(lambda df, _: outputs.append(sorted(tuple(r) for r in df.collect())))

    def batch(i, keys):
        return pd.DataFrame({"key": keys, "value": [f"{k}{i}{j}".encode() for j, k in enumerate(keys)]})

    batches = [batch(0, ["a", "b", "a"]), batch(1, ["c", "a"]), batch(2, ["b", "d", "d"]), batch(3, ["a", "c"])]
    spark_batches(spark, inputs, checkpoint, writer, batches[:2], 0)
    migrated = stop_and_copy(checkpoint, work)
    want = spark_batches(spark, inputs, checkpoint, writer, batches[2:], 2)

    location = f"file://{work}/antkv"
    real = antkv.__version__
    monkeypatch.setattr(antkv, "__version__", "0.0.0+driver")  # the executors run another antkv
    with pytest.raises(Exception, match=r"antkv version mismatch: the driver runs antkv 0\.0\.0\+driver"):
        migrate_apply_in_pandas_with_state(spark, migrated, location, "counts", ["key"],
                                           state=("count_latest", 1), partitions=2, key_groups=16)
    assert not [f for _, _, files in os.walk(os.path.join(work, "antkv")) for f in files]  # no task wrote
    monkeypatch.setattr(antkv, "__version__", real)
    result = migrate_apply_in_pandas_with_state(spark, migrated, location, "counts", ["key"],
                                                state=("count_latest", 1), partitions=2, key_groups=16)
    assert (result.batch_id, result.version, result.rows, result.keys) == (1, 2, 3, 3)  # a, b, c's rows
    pipe = StatefulPipeline(location, "counts", ["key"], count_and_latest, "key string, count long",
                            partitions=2, key_groups=16)
    got = [output_rows(pipe.run(spark.createDataFrame(rows), batch_id).output)
           for batch_id, rows in enumerate(batches[2:], 2)]
    assert got == want

    final = {tuple(r["key"]): tuple(r["value"]["groupState"]) for r in
             spark.read.format("statestore").load(checkpoint).collect()}
    assert read_state(location, "counts")["count_latest"] == final
    assert len(final) == 4


@pytest.mark.parametrize("rows", [False, True], ids=["pandas", "rows"])
def test_transform_with_state_continues_on_antkv(spark, tmp_path, rows):
    """A ``transformWithStateInPandas`` query, or a row-based ``transformWithState`` one, moves
    to antkv mid-stream."""
    processor, api = (EverythingRows, "transformWithState") if rows else (Everything, "transformWithStateInPandas")
    work = str(tmp_path)
    inputs, checkpoint = os.path.join(work, "in"), os.path.join(work, "ckpt")
    os.makedirs(inputs)
    schema = "key string, v string"
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER)

    def writer(outputs):
        out = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(inputs) \
            .groupBy("key")
        out = getattr(out, api)(processor(), "key string, digest string", "Update", "ProcessingTime")
        return out.writeStream.outputMode("update").option("checkpointLocation", checkpoint) \
            .foreachBatch(lambda df, _: outputs.append(sorted(tuple(r) for r in df.collect())))

    def batch(rows):
        return pd.DataFrame(rows, columns=["key", "v"])

    batches = [batch([("a", "x"), ("b", "y"), ("a", "y")]), batch([("c", "x"), ("a", "x")]),
               batch([("b", "z")]), batch([("a", "z"), ("b", "x"), ("c", "y")])]
    spark_batches(spark, inputs, checkpoint, writer, batches[:2], 0)
    migrated = stop_and_copy(checkpoint, work)
    want = spark_batches(spark, inputs, checkpoint, writer, batches[2:], 2)

    location = f"file://{work}/antkv"
    result = migrate_transform_with_state(spark, migrated, location, "everything", ["key"], processor(),
                                          time_mode="ProcessingTime", partitions=2, key_groups=16)
    assert (result.batch_id, result.version) == (1, 2)
    runner = TransformWithState(location, "everything", ["key"], processor(), "key string, digest string",
                                time_mode="ProcessingTime", partitions=2, key_groups=16, rows=rows)
    got = [output_rows(runner.run(spark.createDataFrame(rows), batch_id).output)
           for batch_id, rows in enumerate(batches[2:], 2)]
    assert got == want
    # the last batch touched every key: its digests are the whole final state, equal on both
    assert {row[0] for row in got[-1]} == {"a", "b", "c"}


def test_what_cannot_be_carried_is_refused_before_anything_is_written(spark, tmp_path):
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout
    from pyspark.sql import types as T

    work = str(tmp_path)
    inputs, checkpoint = os.path.join(work, "in"), os.path.join(work, "ckpt")
    os.makedirs(inputs)
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER)

    def with_timeout(key, frames, state):
        n = (state.get[0] if state.exists else 0) + sum(len(f) for f in frames)
        state.update((n,))
        state.setTimeoutTimestamp(FAR + n)
        yield pd.DataFrame({"key": [key[0]], "n": [n]})

    def writer(outputs):
        out = spark.readStream.schema("key string, ts long").option("maxFilesPerTrigger", 1).parquet(inputs) \
            .withColumn("t", F.timestamp_millis("ts")).withWatermark("t", "0 seconds") \
            .groupBy("key").applyInPandasWithState(with_timeout, "key string, n long", "n long", "update",
                                                   GroupStateTimeout.EventTimeTimeout)
        return out.writeStream.outputMode("update").option("checkpointLocation", checkpoint) \
            .foreachBatch(lambda df, _: outputs.append(df.count()))

    spark_batches(spark, inputs, checkpoint, writer, [pd.DataFrame({"key": ["a", "b"], "ts": [1, 2]})], 0)
    location = f"file://{work}/antkv"

    def nothing_written():
        return not os.path.exists(os.path.join(work, "antkv", "op"))

    with pytest.raises(antkv.InvalidArgumentError, match="applyInPandasWithState"):
        migrate_transform_with_state(spark, checkpoint, location, "op", ["key"], Everything(),
                                     time_mode="ProcessingTime", partitions=2, key_groups=16)
    assert nothing_written()
    with pytest.raises(antkv.InvalidArgumentError, match="timeout_state"):
        migrate_apply_in_pandas_with_state(spark, checkpoint, location, "op", ["key"], state=("n", 1),
                                           partitions=2, key_groups=16)
    assert nothing_written()
    with pytest.raises(antkv.InvalidArgumentError, match="not a Spark streaming checkpoint"):
        migrate_apply_in_pandas_with_state(spark, os.path.join(work, "nowhere"), location, "op", ["key"],
                                           state=("n", 1), partitions=2, key_groups=16)
    with pytest.raises(antkv.InvalidArgumentError, match="no stateful operator 3"):
        migrate_apply_in_pandas_with_state(spark, checkpoint, location, "op", ["key"], state=("n", 1),
                                           partitions=2, key_groups=16, operator_id=3)
    with pytest.raises(antkv.InvalidArgumentError, match="grouping key has 1 column"):
        migrate_apply_in_pandas_with_state(spark, checkpoint, location, "op", ["key", "other"], state=("n", 1),
                                           partitions=2, key_groups=16)
    assert nothing_written()
    for bad in (T.DayTimeIntervalType(), T.VariantType(), T.NullType()):
        with pytest.raises(antkv.InvalidArgumentError, match="cannot be carried"):
            check_row_type(T.StructType([T.StructField("n", T.LongType()), T.StructField("x", bad)]), "state 'x'")
    for bad in (T.TimestampType(), T.StructType([T.StructField("x", T.LongType())])):
        with pytest.raises(antkv.InvalidArgumentError, match="cannot be carried as a grouping key"):
            check_key_type(T.StructType([T.StructField("k", bad)]), "state 'x'")
    check_row_type(T.StructType([T.StructField("n", T.LongType()), T.StructField("at", T.TimestampType()),
                                 T.StructField("tags", T.StructType([T.StructField("x", T.StringType())]))]), "ok")

    # with timeout_state, the timeouts are carried: the timestamps Spark holds
    result = migrate_apply_in_pandas_with_state(spark, checkpoint, location, "op", ["key"], state=("n", 1),
                                                timeout_state=("timeout", 2), partitions=2, key_groups=16)
    # the last batch Spark committed (the data batch, and the batch without data its watermark
    # may start) is the one carried
    committed = max(int(f) for f in os.listdir(os.path.join(checkpoint, "commits")) if f.isdigit())
    assert (result.batch_id, result.version) == (committed, committed + 1)
    assert result.keys == 4  # a's and b's state rows and timeouts: antkv's bookkeeping is not counted
    state = read_state(location, "op")
    assert state["n"] == {("a",): (1,), ("b",): (1,)}
    assert state["timeout"] == {("a",): (FAR + 1,), ("b",): (FAR + 1,)}


def test_the_migration_is_exported_from_antkv_spark():
    import antkv.spark
    from antkv.spark.tools import migrate

    for name in ("migrate_transform_with_state", "migrate_apply_in_pandas_with_state", "copy_query_progress",
                 "MigrationResult"):
        assert name in antkv.spark.__all__ and getattr(antkv.spark, name) is getattr(migrate, name)


def test_an_operator_can_begin_at_a_later_version(tmp_path):
    """The store side of a migration: the empty state opened as version b commits b + 1, is
    published as an origin, and later batches build on it; cleanup retains nothing below it;
    a second origin is refused."""
    from antkv.spark.store.commit_protocol import CommitCoordinator, CommitError
    from antkv.spark.store.opening import open_store

    loc = f"file://{tmp_path}/state"
    coord = CommitCoordinator(loc, "op", 2, query_id="q", min_versions_to_retain=3)

    def batch(version, empty=False):
        bases = [None, None] if empty else coord.base_manifests(version - 1)
        messages = []
        for p in range(2):
            store = open_store(loc, "op", p, version - 1, **({"empty": True} if empty else {"manifest": bases[p]}))
            if not empty:
                assert store.get(b"origin%d" % p) == b"v"
            store.put(b"origin%d" % p if empty else b"batch%d" % version, b"v")
            messages.append(store.commit())
        return messages

    first = batch(6, empty=True)
    assert [(m.version, m.base) for m in first] == [(6, None), (6, None)]
    coord.publish(6, first, bases=[None, None])
    assert coord.cleanup(6).retained_versions == (6, 6)
    for v in (7, 8, 9):
        coord.publish(v, batch(v))
        retained = coord.cleanup(v).retained_versions
    assert retained == (7, 9)
    with pytest.raises(CommitError, match="already has published versions"):
        coord.publish(21, batch(21, empty=True), bases=[None, None])
    with pytest.raises(antkv.InvalidArgumentError):
        open_store(loc, "op", 0, 5, empty=True, manifest=coord.base_manifests(9)[0])


# --------------------------------------------------------------------------- every time mode


def migrate_mid_stream(spark, work, processor, schema, output_schema, time_mode, batches, on_spark,
                       event_time=None, partitions=2):
    """Spark runs every batch of ``batches`` (one Parquet file each) in one query per part --
    the first ``on_spark`` files, then the rest -- its checkpoint copied between the two: the
    uninterrupted run's output is the reference.  The copy is migrated and antkv runs the rest
    (in the EventTime mode each batch followed by one without data, as Spark runs one when the
    watermark moves).  Returns ``(Spark's output after the copy, antkv's, the migration's
    result)``, each output sorted."""
    from antkv.spark import migrate_transform_with_state

    inputs, checkpoint = os.path.join(work, "in"), os.path.join(work, "ckpt")
    os.makedirs(inputs)
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER)
    outputs = []

    def run(files):
        stream = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(inputs)
        if event_time:
            stream = stream.withWatermark(event_time, "0 seconds")
        out = stream.groupBy("key").transformWithStateInPandas(processor, output_schema, "Update", time_mode)
        query = out.writeStream.outputMode("update").option("checkpointLocation", checkpoint) \
            .foreachBatch(lambda df, _: outputs.extend(tuple(r) for r in df.collect())).start()
        try:
            for i, rows in files:
                tmp = os.path.join(inputs, f".{i}.parquet")
                rows.to_parquet(tmp, index=False, coerce_timestamps="us")  # Spark reads micros
                os.rename(tmp, os.path.join(inputs, f"{i:03d}.parquet"))
                query.processAllAvailable()
        finally:
            query.stop()

    numbered = list(enumerate(batches))
    run(numbered[:on_spark])
    migrated = stop_and_copy(checkpoint, work)
    del outputs[:]
    run(numbered[on_spark:])
    location = f"file://{work}/antkv"
    result = migrate_transform_with_state(spark, migrated, location, "op", ["key"], processor, time_mode=time_mode,
                                          partitions=partitions, key_groups=16)
    runner = TransformWithState(location, "op", ["key"], processor, output_schema, time_mode=time_mode,
                                event_time_column=event_time, partitions=partitions, key_groups=16)
    got, batch_id = [], result.version
    for _, rows in numbered[on_spark:]:
        for frame in ([rows, rows.iloc[:0]] if event_time else [rows]):
            got += [tuple(r) for r in runner.run(spark.createDataFrame(frame, schema), batch_id).output.collect()]
            batch_id += 1
    return sorted(outputs), sorted(got), result


def test_a_none_time_mode_query_with_composite_state_continues_on_antkv(spark, tmp_path):
    """The None time mode (Spark records it as NoTime), and value, list and map state holding
    arrays, maps, structs and decimals: carried as the processor's typed state variables."""
    from test_spark_processor_suite import CompositeProfile

    def batch(rows):
        return pd.DataFrame(rows, columns=["key", "item", "qty"]).astype({"qty": "int32"})

    batches = [batch([("a", "x", 1), ("a", "y", 2), ("b", "x", 3)]), batch([("a", "x", 4), ("c", "z", 5)]),
               batch([("b", "y", 6), ("b", "x", 7), ("a", "z", 1), ("c", "z", 2)])]
    want, got, result = migrate_mid_stream(
        spark, str(tmp_path), CompositeProfile(), "key string, item string, qty int",
        "key string, count long, tags string, last string, totals string, spent string, history string, items string",
        "None", batches, on_spark=2)
    assert got == want and {row[0] for row in got} == {"a", "b", "c"}
    assert ("a", 4, "x|y|z", "zx1", "x=5,y=2,z=1", "2.00", "x:1 y:2 x:4 z:1", "x=1/1,4;y=2/2;z=1/1") in got
    # a, b, c: a profile each, a history list each and 4 by_item entries (a: x, y; b: x; c: z)
    assert (result.rows, result.keys) == (3 + 5 + 4, 3 + 3 + 4)


class EventTimeEverything(StatefulProcessor):
    """Event time: per key a count (value state), its event times (list state), events per
    minute (map state) and a timer 10 minutes after each event; an expired timer reports the
    key's whole state and drops the minutes it covers."""

    def init(self, handle):
        self.handle = handle
        self.count = handle.getValueState("count", "n long")
        self.times = handle.getListState("times", "ms long")
        self.minutes = handle.getMapState("minutes", "minute long", "n long")

    def handleInputRows(self, key, rows, timerValues):
        n = 0
        for frame in rows:
            for ts in frame["ts"]:
                ms = int(pd.Timestamp(ts).value // 1_000_000)
                n += 1
                self.times.appendValue((ms,))
                minute = (ms // 60_000,)
                self.minutes.updateValue(minute, ((self.minutes.getValue(minute) or (0,))[0] + 1,))
                self.handle.registerTimer(ms + 600_000)
        self.count.update(((self.count.get() or (0,))[0] + n,))
        yield pd.DataFrame({"key": [key[0]], "what": ["input"], "state": [self.state()]})

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
        expiry = expiredTimerInfo.getExpiryTimeInMs()
        for minute, _ in list(self.minutes.iterator()):
            if minute[0] * 60_000 + 600_000 <= expiry:
                self.minutes.removeKey(minute)
        yield pd.DataFrame({"key": [key[0]], "what": [f"timer {expiry}"], "state": [self.state()]})

    def state(self) -> str:
        return repr(((self.count.get() or (0,))[0], [t for (t,) in self.times.get()],
                     sorted(self.minutes.iterator()), sorted(self.handle.listTimers())))


def test_an_event_time_query_with_timers_continues_on_antkv(spark, tmp_path):
    """The EventTime mode: timers, the watermark and late rows carry over."""
    t0 = pd.Timestamp("2026-01-01 00:00:00")

    def batch(rows):
        return pd.DataFrame([(k, t0 + pd.Timedelta(minutes=m)) for k, m in rows], columns=["key", "ts"])

    batches = [batch([("a", 0), ("a", 3), ("b", 1)]), batch([("a", 5), ("c", 12)]),
               batch([("b", 2), ("c", 30), ("a", 31)])]  # b at 2 min is late (watermark 12 min)
    want, got, result = migrate_mid_stream(spark, str(tmp_path), EventTimeEverything(), "key string, ts timestamp",
                                           "key string, what string, state string", "EventTime", batches,
                                           on_spark=2, event_time="ts")
    assert got == want
    assert any(what.startswith("timer") for _, what, _ in got)
    assert result.keys > 0
