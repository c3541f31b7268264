"""A pipeline's output on the real local Spark: it never reaches the driver, it is published
exactly once with the state whatever fails, and it chains like any Spark DataFrame.

Faults are real task failures on ``local[2,2]`` (a failed task is retried once): a task failing
while it writes its output, after its output files are closed but before its state commits,
and after its commit (its files and manifest are then exactly a speculative loser's); a driver
failing before it publishes and after (the batch replayed).  Locally and on a real S3 API."""

from __future__ import annotations

import sys
import uuid

import pandas as pd
import pytest
from pyspark import TaskContext, cloudpickle
from pyspark.sql.streaming.stateful_processor import StatefulProcessor

import antkv
from antkv.spark import (
    CommitCoordinator,
    Location,
    StatefulPipeline,
    StoreOptions,
    TransformWithState,
    output_versions,
    read_output,
    read_state,
    release_idle_stores,
)
from antkv.spark.runtime.output import retire_output, write_output_log
from antkv.spark.store.location import OUTPUT_DIR, output_file_name

from test_spark_store_model import s3_server  # noqa: F401

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # executors cannot import tests/

SCHEMA = "key string, total long, batch long"


def rows(batch: int, n: int = 400):
    return [(f"k{(batch * 7 + i) % 37}", batch * 1000 + i) for i in range(n)]


def running_sum(state, frame):
    """total[key] += values; emits one row per input row with the running total."""
    total = state.value_state("total", 1)
    keys, totals = [], []
    for (key,), group in state.groups(frame):
        t = (total.get() or (0,))[0]
        for v in group["v"].tolist():
            t += int(v)
            keys.append(key)
            totals.append(t)
        total.update((t,))
    yield pd.DataFrame({"key": keys, "total": totals, "batch": state.batch_id})


def expected(batches):
    out, totals = [], {}
    for b in batches:
        for k, v in sorted(rows(b), key=lambda r: (r[0], r[1])):
            totals[k] = totals.get(k, 0) + v
            out.append((k, totals[k], b))
    return out


class ActionRows:
    """Counts the rows every Spark action returns to the driver's Python process."""

    def __init__(self, monkeypatch, spark):
        from pyspark import RDD

        DataFrame = type(spark.range(1))  # the session's DataFrame class (classic or connect)
        self.returned: list[int] = []
        for cls, name in ((DataFrame, "collect"), (DataFrame, "toPandas"), (DataFrame, "toArrow"),
                          (DataFrame, "take"), (DataFrame, "tail"), (RDD, "collect")):
            original = getattr(cls, name)

            def counted(*args, _original=original, **kwargs):
                result = _original(*args, **kwargs)
                self.returned.append(len(result) if hasattr(result, "__len__") else result.num_rows)
                return result
            monkeypatch.setattr(cls, name, counted)


def _frame(spark, batch):
    return spark.createDataFrame(rows(batch), "key string, v long")


def test_no_output_row_reaches_the_driver(spark, tmp_path, monkeypatch):
    pipe = StatefulPipeline(str(tmp_path / "state"), "sums", "key", running_sum, SCHEMA, partitions=2, key_groups=16)
    df = spark.createDataFrame([(f"k{i % 50}", i) for i in range(20000)], "key string, v long")
    actions = ActionRows(monkeypatch, spark)
    result = pipe.run(df)
    assert actions.returned and max(actions.returned) <= 2  # the commit rows: one per partition
    monkeypatch.undo()
    assert result.metrics.output_rows == 20000 == result.output.count()


class CountChunks(StatefulProcessor):
    """Per key: how many DataFrames ``handleInputRows`` got, and how many rows; a running
    count of rows per key in a value state."""

    def init(self, handle):
        self.seen = handle.getValueState("seen", "n long")

    def handleInputRows(self, key, rows, timerValues):
        chunks = n = 0
        for frame in rows:
            chunks += 1
            n += len(frame)
        seen = (self.seen.get() or (0,))[0] + n
        self.seen.update((seen,))
        yield pd.DataFrame({"key": [key[0]], "chunks": [chunks], "rows": [n], "bucket": [seen % 3]})


CHUNK_SCHEMA = "key string, chunks long, rows long, bucket long"


def _chunk_input(spark):
    data = [("one", 1)] + [("two", i) for i in range(2)] + [("five", i) for i in range(5)] + \
        [(f"s{i}", i) for i in range(40)]
    return spark.createDataFrame(data, "key string, v long")


@pytest.mark.parametrize("max_records", [1, 2, None], ids=["1", "2", "default"])
def test_chunks_per_key_and_a_chained_aggregation_equal_spark(spark, tmp_path, max_records):
    conf = "spark.sql.execution.arrow.maxRecordsPerBatch"
    before = spark.conf.get(conf)
    if max_records is not None:
        spark.conf.set(conf, str(max_records))
    try:
        df = _chunk_input(spark)
        theirs = df.groupBy("key").transformWithStateInPandas(CountChunks(), CHUNK_SCHEMA, "Update", "None")
        runner = TransformWithState(str(tmp_path / "state"), "chunks", "key", CountChunks(), CHUNK_SCHEMA,
                                    partitions=2, key_groups=8)
        ours = runner.run(df).output
        assert sorted(map(tuple, ours.collect())) == sorted(map(tuple, theirs.collect()))
        chained = [ours.groupBy("bucket").sum("rows", "chunks").orderBy("bucket"),
                   theirs.groupBy("bucket").sum("rows", "chunks").orderBy("bucket")]
        assert [tuple(r) for r in chained[0].collect()] == [tuple(r) for r in chained[1].collect()]
        got = {r["key"]: r["chunks"] for r in ours.collect()}
        limit = max_records or 10000
        assert got["five"] == -(-5 // limit) and got["one"] == 1
    finally:
        spark.conf.set(conf, before)


def _fail(where: str, flag_dir: str):
    """A state function failing attempt 0 of partition 0 at ``where``."""
    import os

    def first_attempt():
        ctx = TaskContext.get()
        return ctx.partitionId() == 0 and ctx.attemptNumber() == 0

    def func(state, frame):
        if where in ("before-commit", "after-commit") and first_attempt():
            store_type = type(state.store)
            commit = store_type.commit

            def failing_commit(self, *a, **kw):
                store_type.commit = commit  # once: the retry commits normally
                if where == "after-commit":
                    commit(self, *a, **kw)  # its files and manifest: a speculative loser's
                else:
                    self.abort()
                open(os.path.join(flag_dir, where), "w").close()
                raise RuntimeError(f"injected task failure {where}")
            store_type.commit = failing_commit
        produced = list(running_sum(state, frame))
        yield produced[0].iloc[: len(produced[0]) // 2]
        if where == "mid-output" and first_attempt():
            open(os.path.join(flag_dir, where), "w").close()
            raise RuntimeError("injected task failure while writing output")
        yield produced[0].iloc[len(produced[0]) // 2:]
    return func


@pytest.fixture(params=["local", "s3"])
def location(request, tmp_path):
    release_idle_stores()
    if request.param == "local":
        yield Location(str(tmp_path / "state"))
    else:
        yield Location(f"antkv-state/{uuid.uuid4().hex}", filesystem=request.getfixturevalue("s3_server"))
    release_idle_stores()


def _output_files(loc, version):
    return sorted(f"{OUTPUT_DIR}/{version:020d}/{n}" for n in loc.list_dir(f"sums/{OUTPUT_DIR}/{version:020d}"))


def test_every_published_batch_holds_each_row_once_whatever_fails(spark, tmp_path, location):
    options = StoreOptions(cache_dir=str(tmp_path / "cache"))

    def pipeline(func):
        return StatefulPipeline(location, "sums", "key", func, SCHEMA, partitions=2, key_groups=16,
                                query_id="faults", options=options)

    flags = tmp_path / "flags"
    flags.mkdir()
    batch = 0
    for where in ("mid-output", "before-commit", "after-commit"):
        result = pipeline(_fail(where, str(flags))).run(_frame(spark, batch), batch)
        assert (flags / where).exists()  # the failure happened, and Spark retried the task
        assert not result.metrics.replayed
        batch += 1
    # the driver fails before publishing: nothing is published, the rerun publishes once
    with pytest.raises(RuntimeError, match="driver dies"):
        pipeline(running_sum).run(_frame(spark, batch), batch, before_publish=_die)
    pipeline(running_sum).run(_frame(spark, batch), batch)
    # the driver fails after publishing: Spark replays the batch, which keeps the first publication
    first = sorted(map(tuple, read_output(spark, location, "sums", batch).collect()))
    replay = pipeline(running_sum).run(_frame(spark, batch), batch)
    assert replay.metrics.replayed
    assert sorted(map(tuple, replay.output.collect())) == first
    batches = list(range(batch + 1))
    published = [tuple(r) for b in batches for r in read_output(spark, location, "sums", b).collect()]
    assert sorted(published) == sorted(expected(batches))  # each row exactly once
    # what losing attempts wrote is gone: each retained version's output holds its published files only
    for v in (batch, batch + 1):
        named = sorted(n.split("/", 1)[1] for n in location_marker_outputs(location, v))
        assert _output_files(location, v) == named


def location_marker_outputs(location, version):
    from antkv.spark.store.published import read_marker

    return read_marker(location, "sums", version).outputs


def _die(version, parts):
    raise RuntimeError("the driver dies before publishing")


def test_output_retention_keeps_the_newest_batches_output_only(spark, tmp_path):
    """``output_retention=2``: after each batch the location holds the output files and records
    of the two newest batches, those read back whole, and an older batch's output is a clear
    error; without it every batch's output stays."""
    loc = Location(str(tmp_path / "state"))
    pipe = StatefulPipeline(loc, "sums", "key", running_sum, SCHEMA, partitions=2, key_groups=16,
                            options=StoreOptions(cache_dir=str(tmp_path / "cache")), output_retention=2)
    for b in range(5):
        pipe.run(_frame(spark, b), b)
        kept = sorted(int(d) for d in loc.list_subdirs(f"sums/{OUTPUT_DIR}") if loc.list_dir(f"sums/{OUTPUT_DIR}/{d}"))
        assert kept == list(range(max(1, b), b + 2))
        assert output_versions(loc, "sums") == kept
    everything = expected(range(5))
    for b in (3, 4):
        assert sorted(map(tuple, read_output(spark, loc, "sums", b).collect())) == sorted(r for r in everything if r[2] == b)
    with pytest.raises(antkv.InvalidArgumentError, match="no retained output"):
        read_output(spark, loc, "sums", 0)
    with pytest.raises(antkv.InvalidArgumentError, match="output_retention"):
        StatefulPipeline(loc, "sums", "key", running_sum, SCHEMA, partitions=2, output_retention=0)
    with pytest.raises(TypeError, match="output_retention"):
        StatefulPipeline(loc, "sums", "key", running_sum, SCHEMA, partitions=2, output_retention="2")


def test_retiring_output_finishes_a_version_an_interrupted_retirement_left(tmp_path):
    """Files go before their output-log record: a retirement interrupted after a version's
    files leaves its record, and the next one removes it; names it did not make stay."""
    loc = Location(str(tmp_path / "state"))
    for v in (1, 2, 3):
        names = [output_file_name("sums", v, "a" * 16, 0), output_file_name("sums", v, "b" * 16, 0)]
        for n in names:
            loc.create_exclusive(n, b"parquet bytes")
        write_output_log(loc, "sums", v, names[:1], SCHEMA)
    loc.create_exclusive(f"sums/{OUTPUT_DIR}/{1:020d}/notes.txt", b"a user's file")
    loc.delete(output_file_name("sums", 1, "a" * 16, 0))  # as if a retirement died after version 1's files
    loc.delete(output_file_name("sums", 1, "b" * 16, 0))
    assert retire_output(loc, "sums", 3, 1) == 1 + 2 + 1  # version 1's record, version 2's files and record
    assert output_versions(loc, "sums") == [3]
    assert loc.list_dir(f"sums/{OUTPUT_DIR}/{1:020d}") == ["notes.txt"]
    assert len(loc.list_dir(f"sums/{OUTPUT_DIR}/{3:020d}")) == 2


class DriverDied(Exception):
    """The driver process is gone: raised by :class:`DriverDiesAt` (not an ``antkv`` error, so
    nothing on the driver handles it: the rest of the batch never runs)."""


class DriverDiesAt(Location):
    """A location whose driver dies at its ``k``-th write (create, write, upload or delete)
    after :meth:`arm`: that write and every later call fail.  The tasks get pickled, unarmed
    copies; the pipeline's ``before_publish`` arms the driver's own."""

    left = None  # writes the driver still makes (None: not armed); 0: dead

    def arm(self, k):
        self.left = k

    def _call(self, what: str, write: bool):
        if self.left is None:
            return
        if self.left == 0 or (write and self.left == 1):
            self.left = 0
            raise DriverDied(f"the driver died at {what}")
        if write:
            self.left -= 1

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if k != "left"}  # tasks are never armed

    def read(self, name):
        self._call(f"read {name}", False)
        return super().read(name)

    def exists(self, name):
        self._call(f"exists {name}", False)
        return super().exists(name)

    def size(self, name):
        self._call(f"size {name}", False)
        return super().size(name)

    def _infos(self, directory):
        self._call(f"list {directory}", False)
        return super()._infos(directory)

    def download(self, name, local_path):
        self._call(f"download {name}", False)
        return super().download(name, local_path)

    def write(self, name, data):
        self._call(f"write {name}", True)
        return super().write(name, data)

    def upload(self, name, local_path):
        self._call(f"upload {name}", True)
        return super().upload(name, local_path)

    def writer(self, name):
        self._call(f"write {name}", True)
        return super().writer(name)

    def create_exclusive(self, name, data):
        self._call(f"create {name}", True)
        return super().create_exclusive(name, data)

    def delete(self, name):
        self._call(f"delete {name}", True)
        return super().delete(name)


@pytest.mark.parametrize("where", ["local", "s3"])
def test_a_published_batch_reads_whole_whatever_step_of_publishing_the_driver_dies_at(spark, tmp_path, request,
                                                                                      where):
    """The driver dies at each write of publishing a batch in turn (the marker, the output-log
    record, each deletion of cleanup); before anything restarts, a new process reads the newest
    published version's state and its batch's output, and both are exactly the batches run so
    far.  The next batch is the restart: it finishes what the dead driver left."""
    release_idle_stores()
    if where == "local":
        root, fs = str(tmp_path / "state"), None
    else:
        fs = request.getfixturevalue("s3_server")
        root = f"antkv-state/{uuid.uuid4().hex}"
    loc = DriverDiesAt(root, filesystem=fs)
    healthy = Location(root, filesystem=fs)

    def pipeline():  # a new one for each run: a restarted driver knows nothing of the dead one
        return StatefulPipeline(loc, "sums", "key", running_sum, SCHEMA, partitions=2, key_groups=8,
                                query_id="dies", options=StoreOptions(cache_dir=str(tmp_path / "cache")))

    def small(batch):
        return spark.createDataFrame(rows(batch, 12), "key string, v long")

    def want_rows(batch):
        return sorted(r for r in expected_small(range(batch + 1)) if r[2] == batch)

    def expected_small(batches):
        out, totals = [], {}
        for b in batches:
            for k, v in sorted(rows(b, 12)):
                totals[k] = totals.get(k, 0) + v
                out.append((k, totals[k], b))
        return out

    pipeline().run(small(0), 0)
    batch, k, deaths = 1, 1, []
    while True:
        loc.arm(None)
        try:
            pipeline().run(small(batch), batch, before_publish=lambda version, parts: loc.arm(k))
        except DriverDied as e:
            deaths.append(str(e))
        else:
            break  # the k-th write is past the last one: publishing ran to the end
        latest = CommitCoordinator(healthy, "sums", 2, query_id="dies").latest_version()
        assert latest in (batch, batch + 1), deaths[-1]
        published = latest - 1  # the newest published batch
        totals = {}
        for key, total, _ in expected_small(range(published + 1)):
            totals[(key,)] = (total,)
        assert read_state(healthy, "sums")["total"] == totals, deaths[-1]
        got = sorted(map(tuple, read_output(spark, healthy, "sums", published).collect()))
        assert got == want_rows(published), deaths[-1]
        batch = latest  # the restart runs the next batch: a rerun when nothing was published
        k += 1
    assert any("create" in d and ".marker" in d for d in deaths)
    assert any("_output_log" in d for d in deaths) and any("delete" in d for d in deaths)
    for b in range(batch + 1):  # and every batch's output is there once, after the restarts
        assert sorted(map(tuple, read_output(spark, healthy, "sums", b).collect())) == want_rows(b)
    release_idle_stores()
