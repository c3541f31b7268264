"""Stateful pipelines: a vectorised user function over keyed antkv state, for batch and streaming.

::

    def count_clicks(state, rows):                 # state: PartitionState, rows: pandas DataFrame
        total = state.value_state("total", 1)
        out = []
        for key, group in state.groups(rows):      # sets the current key
            n = (total.get() or (0,))[0] + len(group)
            total.update((n,))
            out.append((key[0], n))
        yield pandas.DataFrame(out, columns=["user", "clicks"])

    pipe = StatefulPipeline("file:///ckpt/state", "clicks", key=["user"], func=count_clicks,
                            schema="user string, clicks long", partitions=4, query_id="clicks")
    result = pipe.run(batch_df)              # a batch job: one version; result.output: a Spark DataFrame
    stream.writeStream.foreachBatch(pipe.foreach_batch(sink)).start()   # a streaming query

**One batch** (``run(df, batch_id)``) makes version ``batch_id + 1`` of the operator's state
(``batch_id`` defaults to the newest published version, so successive batch jobs continue):

1. on the driver: check ``K`` against the one recorded with the operator (``KeyGroupError``
   before any task runs), read the published version ``batch_id`` and, if it has another
   number of partitions, plan the rescale (:mod:`antkv.spark.store.rescale`);
2. in the JVM: add each row's key group, route rows with ``repartitionById``
   (:func:`antkv.spark.runtime.routing.route`) and sort each partition by (key group, key);
3. in each task (``mapInPandas``): check that the executor imports the driver's antkv version
   (:mod:`antkv.spark.runtime.executor_check`), open the partition's state, then stream the partition's
   Arrow batches: check every row's key group belongs to the partition (a stray row fails the
   task at once: nothing is published), call ``func(state, rows)`` once per chunk of complete
   keys (:func:`antkv.spark.state.chunks.whole_key_chunks`: about one Arrow batch of
   ``spark.sql.execution.arrow.maxRecordsPerBatch`` rows, more when a key has more), and
   stream what it yields into the attempt's own Parquet files
   (:class:`antkv.spark.runtime.output.OutputWriter`); then commit, and return one row: the
   commit message (naming the state's manifest and the output files) and the metrics;
4. on the driver: one Spark action (its jobs described as ``antkv <operator> batch <b>: ...``,
   :mod:`antkv.spark.runtime.spark_status`) collects those rows -- one per partition, never an output
   row -- and publishes the version: one write-once marker naming the winning attempts'
   manifests and output files (exactly once: a replayed batch keeps the first publication),
   then the output-log record, cleanup of what no version needs (losers' output included),
   the metrics, and the output as a lazy Spark DataFrame reading exactly the published files
   (:mod:`antkv.spark.runtime.output`).

**Output is exactly-once, sinks at-least-once.**  The published files of batch ``b`` hold every
output row of the batch once, whatever failed, was retried, ran twice or was replayed; a reader
of the output log (:func:`antkv.spark.runtime.output.read_output`) sees each batch once.  Under
``foreachBatch``, Spark reruns a batch whose end it did not record (a driver failure after the
sink wrote): the rerun returns the first publication's files again, and ``sink(output_df,
batch_id)`` is called again with them, so a sink keyed by batch id stays exact.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from dataclasses import asdict, dataclass, field

import antkv

from antkv.spark.runtime.collector import task_collections
from antkv.spark.runtime.output import (
    OutputWriter,
    check_output_retention,
    cleanup_output,
    ensure_output_log,
    output_dataframe,
    retire_output,
    write_output_log,
)
from antkv.spark.runtime.executor_check import checked_task
from antkv.spark.runtime.spark_status import describing_jobs, record_batch
from antkv.spark.store.commit_message import CommitMessage
from antkv.spark.store.commit_protocol import CommitCoordinator
from antkv.spark.runtime.output_schema import OutputCheck
from antkv.spark.runtime.routing import route
from antkv.spark.store.keygroups import (
    DEFAULT_KEY_GROUPS,
    check_partition_key_groups,
    ensure_key_group_count,
    key_group_prefix,
    key_group_range,
    plan_rescale,
    validate_parallelism,
)
from antkv.spark.store.location import as_location, check_operator
from antkv.spark.store.pipeline_record import check_key_columns, ensure_pipeline_record
from antkv.spark.store.rescale import open_rescaled_store
from antkv.spark.state.chunks import whole_key_chunks
from antkv.spark.state.views import KeyedState, group_batch, groups_of
from antkv.spark.store.idle_copies import local_cache_counters
from antkv.spark.store.opening import open_store
from antkv.spark.store.store_options import StoreOptions

log = logging.getLogger("antkv.spark")

KEY_GROUP_COLUMN = "__key_group"
COMMIT_COLUMN = "_antkv_commit"
METRICS_COLUMN = "_antkv_metrics"


class PartitionState(KeyedState):
    """A task's keyed state for one batch: :class:`KeyedState` plus the batch and partition,
    and the operator's key columns bound so that ``groups(rows)`` needs no more arguments.

    ``reports`` is a dict of JSON values the function may fill; it reaches the driver in the
    partition's :class:`PartitionMetrics` (e.g. the partition's largest event time)."""

    def __init__(self, store, owned, key_columns, batch_id: int, partition: int, partitions: int):
        super().__init__(store, owned)
        self.key_columns = list(key_columns)
        self.batch_id = batch_id
        self.partition = partition
        self.partitions = partitions
        self.reports: dict = {}
        self._chunk = None  # (the rows the runtime handed the function, their GroupedBatch)

    def _begin_chunk(self, rows) -> None:
        """The runtime is about to call the function with ``rows`` (whole keys, sorted by key
        group and key in the JVM): find their groups once, for ``grouped``/``groups`` of
        ``rows``, and read the key groups they touch densely into the row cache
        (``StateStore.warm_touched``: one ordered scan instead of a point read per key)."""
        import numpy as np

        grouped = group_batch(rows, KEY_GROUP_COLUMN, self.key_columns, presorted=True)
        self._chunk = (rows, grouped)
        if len(grouped):
            groups, per_group = np.unique(grouped.key_groups, return_counts=True)
            self.store.warm_touched({key_group_prefix(int(g)): int(n) for g, n in zip(groups, per_group)})

    def _grouped_chunk(self, frame):
        chunk = self._chunk
        return chunk[1] if chunk is not None and chunk[0] is frame else None

    def groups(self, frame, key_group_col: str = KEY_GROUP_COLUMN, key_cols=None):
        """For each group of grouping-key values of ``frame``: set it as the current key and
        yield ``(key tuple, rows)``."""
        batch = self._grouped_chunk(frame) if key_group_col == KEY_GROUP_COLUMN and key_cols is None else None
        if batch is None:
            return super().groups(frame, key_group_col, self.key_columns if key_cols is None else key_cols)
        return self._each_current(groups_of(batch))

    def grouped(self, frame):
        """The rows sorted by (key group, key) with their group boundaries
        (:class:`antkv.spark.state.views.GroupedBatch`), for column-wise work over groups
        (the rows the runtime handed the function come sorted: their groups are found once)."""
        batch = self._grouped_chunk(frame)
        return batch if batch is not None else group_batch(frame, KEY_GROUP_COLUMN, self.key_columns)


@dataclass(frozen=True)
class PartitionMetrics:
    """What one task did in one batch (times in seconds)."""

    partition: int
    rows: int  # input rows
    output_rows: int
    keys: int  # keys in the partition's state after the batch
    bytes_uploaded: int
    bytes_reused: int  # bytes of objects the new version names that were already in the location
    snapshot: bool
    load_s: float  # opening the state (incl. a rescale's clip and bring-in)
    process_s: float  # the user function
    commit_s: float
    reused_working_copy: bool  # a copy on the executor's machine was used: nothing loaded but changelogs it lacked
    cache_hits: int  # snapshot files found in the executor's local cache during the load
    cache_downloads: int  # ... and fetched from the location
    write_amplification: float  # the working copy's engine write amplification
    rescaled: bool
    reports: dict = field(default_factory=dict)  # what the function put in PartitionState.reports
    caught_up_working_copy: bool = False  # the reused copy was of an older version: its changelogs were applied
    copy_fate: str = ""  # "reused", "reopened", "caught_up", "rebuilt" or "new" (StateStore.copy_fate)
    bytes_downloaded: int = 0  # read from the location by the load: snapshot files and changelogs
    # remote tables (StoreOptions.tables="remote"), over the whole task: chunks the block cache
    # served from local disk, chunks it fetched from the location, and the bytes fetched
    block_hits: int = 0
    block_misses: int = 0
    block_fetched_bytes: int = 0


@dataclass(frozen=True)
class BatchMetrics:
    batch_id: int
    version: int
    partitions: int
    previous_partitions: int
    rows: int
    output_rows: int
    keys: int
    bytes_uploaded: int
    bytes_reused: int
    seconds: float  # the whole batch, driver side
    publish_s: float
    replayed: bool  # the version was already published by an earlier run of this batch
    cache_hit_ratio: float  # of snapshot-file loads and working-copy opens, the share served locally
    partition_metrics: tuple[PartitionMetrics, ...] = field(default=())

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    def figures(self) -> dict:
        """The batch's figures as one flat dict of numbers, for a ``StreamingQueryListener``
        or a metrics system: the totals, the tasks' load/process/commit seconds summed over the
        partitions, and how many partitions reused their working copy (``copies_reused``, of
        which ``copies_caught_up`` applied changelogs it lacked) or loaded it from the location
        and the executor's cache (``copies_rebuilt``)."""
        parts = self.partition_metrics
        reused = sum(m.reused_working_copy for m in parts)
        return {
            "rows": self.rows, "output_rows": self.output_rows, "keys": self.keys, "partitions": self.partitions,
            "load_s": sum(m.load_s for m in parts), "process_s": sum(m.process_s for m in parts),
            "commit_s": sum(m.commit_s for m in parts), "publish_s": self.publish_s, "seconds": self.seconds,
            "bytes_uploaded": self.bytes_uploaded, "bytes_reused": self.bytes_reused,
            "copies_reused": reused, "copies_rebuilt": len(parts) - reused,
            "copies_caught_up": sum(m.caught_up_working_copy for m in parts),
            "cache_hit_ratio": self.cache_hit_ratio, "replayed": int(self.replayed),
        }


@dataclass(frozen=True)
class BatchResult:
    output: object  # a lazy Spark DataFrame reading exactly the batch's published output files
    metrics: BatchMetrics


class StatefulPipeline:
    """A keyed, stateful, vectorised operator over antkv state; see the module docstring.

    ``func(state: PartitionState, rows: pandas.DataFrame)`` returns an iterable of pandas
    DataFrames (or one DataFrame, or None) with at least the columns of ``schema`` (a DDL
    string).  ``rows`` holds every row of one or more keys of the partition's batch (a chunk
    of the partition's stream: ``func`` is called once per chunk, and once with no rows for a
    partition without any), with the key-group column ``__key_group``.  ``partitions`` may change between runs (a rescale at the next batch);
    ``key_groups`` may not.  ``metrics_path`` (a local file) receives one JSON line per batch.
    ``output_retention=R`` keeps the published output of the newest ``R`` batches only (None:
    every batch's, as a file table keeps its files)."""

    def __init__(self, location, operator: str, key, func, schema: str, *, partitions: int,
                 key_groups: int = DEFAULT_KEY_GROUPS, query_id: str | None = None,
                 options: StoreOptions | None = None, metrics_path: str | None = None,
                 min_versions_to_retain: int = 2, output_retention: int | None = None):
        from pyspark.sql.types import StructType

        self.location = as_location(location)
        self.operator = check_operator(operator)
        self.key = [key] if isinstance(key, str) else list(key)
        if not self.key or not all(isinstance(k, str) for k in self.key):
            raise TypeError("key must be a column name or a non-empty list of column names")
        if not callable(func):
            raise TypeError("func must be callable: func(state, rows) -> DataFrames")
        validate_parallelism(key_groups, partitions)
        self.func, self.schema = func, schema
        self.struct = StructType.fromDDL(schema)
        self.columns = [f.name for f in self.struct.fields]
        clash = {COMMIT_COLUMN, METRICS_COLUMN} & set(self.columns)
        if clash:
            raise antkv.InvalidArgumentError(f"output columns {sorted(clash)} are reserved")
        self.partitions, self.key_groups = partitions, key_groups
        self.options = options
        self.metrics_path = metrics_path
        self.coordinator = CommitCoordinator(self.location, self.operator, partitions,
                                             query_id=query_id or self.operator,
                                             min_versions_to_retain=min_versions_to_retain)
        self.output_retention = check_output_retention(output_retention)
        self.history: list[BatchMetrics] = []

    # ------------------------------------------------------------------ driver

    def _check_pipeline_metadata(self, df) -> None:
        """Refuse missing key columns, then record ``K`` and the key columns with the operator
        once and refuse others (:mod:`antkv.spark.store.pipeline_record`)."""
        check_key_columns(df.columns, self.key)
        ensure_pipeline_record(self.location, self.operator, self.key, self.key_groups)

    def run(self, df, batch_id: int | None = None, *, before_publish=None) -> BatchResult:
        """Run one batch of ``df`` (a batch DataFrame, or a micro-batch under ``foreachBatch``)
        and publish version ``batch_id + 1``; returns the output and the metrics.

        ``before_publish(version, partition_metrics)``, if given, runs on the driver after every
        task committed and before the version is published: what it writes is in place before
        the version exists (a failure there publishes nothing)."""
        return self.run_partitions(df, batch_id, self._chunked_function(list(df.columns)),
                                   before_publish=before_publish)

    def run_partitions(self, df, batch_id: int | None, partition_function, *, sort_columns=(),
                       before_publish=None) -> BatchResult:
        """:meth:`run` with another task body: ``partition_function(state, frames)`` gets the
        partition's stream of pandas DataFrames (sorted by key group, key and then
        ``sort_columns``) and yields output DataFrames (the ``StatefulProcessor`` runner)."""
        started = time.perf_counter()
        self._check_pipeline_metadata(df)
        coord = self.coordinator
        if batch_id is None:
            batch_id = coord.latest_version()
        if isinstance(batch_id, bool) or not isinstance(batch_id, int) or batch_id < 0:
            raise antkv.InvalidArgumentError(f"batch_id must be an int >= 0, got {batch_id!r}")
        version = batch_id + 1
        if batch_id == 0:
            old, plans, bases = None, None, [None] * self.partitions
        else:
            old = coord.published_manifests(batch_id)
            if len(old) == self.partitions:
                plans, bases = None, old
            else:
                plans = plan_rescale(self.key_groups, len(old), self.partitions)
                bases = [old[plan.base] for plan in plans]
            ensure_output_log(coord, batch_id, self.schema)  # before cleanup may retire its marker
        previous = self.partitions if old is None else len(old)
        spark = df.sparkSession
        conf = spark.conf
        writing = (conf.get("spark.sql.session.timeZone"),
                   conf.get("spark.sql.execution.pandas.convertToArrowArraySafely", "false").lower() == "true")
        routed = route(df, self.key, self.partitions, self.key_groups, KEY_GROUP_COLUMN)
        routed = routed.sortWithinPartitions(KEY_GROUP_COLUMN, *self.key, *sort_columns)
        # every task first checks its executor runs the driver's antkv (executor_check)
        task = checked_task(self._task(batch_id, bases, old, plans, partition_function, writing), antkv.__version__)
        commits = routed.mapInPandas(task, f"{COMMIT_COLUMN} string, {METRICS_COLUMN} string")
        sc = spark.sparkContext
        with describing_jobs(sc, f"antkv {self.operator} batch {batch_id}: route the rows, then load, process "
                                 f"and commit the state of {self.partitions} partitions"):
            collected = commits.collect()  # the one Spark action of the batch: one row per partition
        if not collected:
            # an input without rows: Spark's adaptive execution replaced the sorted, shuffled
            # input by an empty relation and ran no task; every partition still makes a version
            empty = spark.createDataFrame(sc.parallelize([], self.partitions), routed.schema)
            with describing_jobs(sc, f"antkv {self.operator} batch {batch_id}: commit the state of "
                                     f"{self.partitions} partitions (no input rows)"):
                collected = empty.mapInPandas(task, f"{COMMIT_COLUMN} string, {METRICS_COLUMN} string").collect()
        messages = [CommitMessage.from_json(r[COMMIT_COLUMN]) for r in collected]
        parts = sorted((PartitionMetrics(**json.loads(r[METRICS_COLUMN])) for r in collected),
                       key=lambda m: m.partition)
        if before_publish is not None:
            before_publish(version, tuple(parts))
        t0 = time.perf_counter()
        result = coord.publish(version, messages, bases=bases, output_schema=self.schema)
        files = result.marker.outputs or ()
        write_output_log(self.location, self.operator, version, files, self.schema)
        coord.cleanup(version)
        cleanup_output(coord, version)
        if self.output_retention is not None:
            retire_output(self.location, self.operator, version, self.output_retention)
        publish_s = time.perf_counter() - t0
        local = sum(m.cache_hits + m.reused_working_copy for m in parts)
        total = local + sum(m.cache_downloads + (not m.reused_working_copy) for m in parts)
        metrics = BatchMetrics(
            batch_id=batch_id, version=version, partitions=self.partitions, previous_partitions=previous,
            rows=sum(m.rows for m in parts), output_rows=sum(m.output_rows for m in parts),
            keys=sum(msg.num_keys for msg in messages),
            bytes_uploaded=sum(m.bytes_uploaded for m in parts),
            bytes_reused=sum(m.bytes_reused for m in parts),
            seconds=time.perf_counter() - started, publish_s=publish_s, replayed=result.replayed,
            cache_hit_ratio=local / total if total else 1.0, partition_metrics=tuple(parts))
        self._record(metrics)
        record_batch(sc, self.operator, metrics)
        return BatchResult(output_dataframe(spark, self.location, files, self.schema), metrics)

    def _record(self, metrics: BatchMetrics) -> None:
        self.history.append(metrics)
        log.info("antkv.spark %s batch %d: %d rows, %d keys, %d partitions%s, %.2f s, %d bytes uploaded, "
                 "%d reused", self.operator, metrics.batch_id, metrics.rows, metrics.keys, metrics.partitions,
                 "" if metrics.previous_partitions == metrics.partitions else
                 f" (rescaled from {metrics.previous_partitions})", metrics.seconds,
                 metrics.bytes_uploaded, metrics.bytes_reused)
        if self.metrics_path is not None:
            with open(self.metrics_path, "a", encoding="utf-8") as f:
                f.write(metrics.to_json() + "\n")

    def foreach_batch(self, sink=None):
        """A function for ``DataStreamWriter.foreachBatch``: runs the batch, then calls
        ``sink(output_df, batch_id)`` with the batch's published output as a Spark DataFrame
        (at-least-once: see the module docstring)."""
        def on_batch(df, batch_id):
            result = self.run(df, int(batch_id))
            if sink is not None:
                sink(result.output, int(batch_id))
        return on_batch

    # ------------------------------------------------------------------ executors

    def _chunked_function(self, input_columns):
        """The task body of the vectorised API: ``func`` once per chunk of complete keys."""
        func = self.func

        def call_per_chunk(state, frames):
            import pandas as pd

            called = False
            for rows in whole_key_chunks(frames, KEY_GROUP_COLUMN, state.key_columns):
                called = True
                state._begin_chunk(rows)
                yield from _frames_of(func(state, rows))
            if not called:
                yield from _frames_of(func(state, pd.DataFrame({c: [] for c in input_columns + [KEY_GROUP_COLUMN]})))
        return call_per_chunk

    def _task(self, batch_id, bases, old, plans, partition_function, writing):
        location, operator, options = self.location, self.operator, self.options
        columns, key, struct = self.columns, self.key, self.struct
        output_check = OutputCheck(self.schema, self.operator)
        K, N = self.key_groups, self.partitions
        timezone, safecheck = writing

        def task(batches):
            with task_collections():  # the collector walks the worker's working copies less often
                yield from run_task(batches)

        def run_task(batches):
            import pandas as pd
            from pyspark import TaskContext

            p = TaskContext.get().partitionId()
            before = local_cache_counters(options)
            t0 = time.perf_counter()
            if plans is None:
                store = open_store(location, operator, p, batch_id, manifest=bases[p], options=options)
            else:
                store = open_rescaled_store(location, operator, plans[p], batch_id, old, options)
            writer = OutputWriter(location, operator, batch_id + 1, struct, timezone, safecheck)
            try:
                load_s = time.perf_counter() - t0
                after = local_cache_counters(options)
                ensure_key_group_count(store, K)
                state = PartitionState(store, key_group_range(K, N, p), key, batch_id, p, N)
                seen = [0]
                t1 = time.perf_counter()
                write_outputs(partition_function(state, owned_frames(batches, K, N, p, seen)), writer, columns,
                              output_check)
                files = writer.close()
                process_s = time.perf_counter() - t1
                write_amp = store.engine_stats()["write_amplification"]
                t2 = time.perf_counter()
                msg = dataclasses.replace(store.commit(), outputs=files)
                commit_s = time.perf_counter() - t2
                done = local_cache_counters(options)
            except BaseException:
                writer.abort()
                store.abort()
                raise
            metrics = PartitionMetrics(
                partition=p, rows=seen[0], output_rows=writer.rows, keys=msg.num_keys,
                bytes_uploaded=msg.bytes_uploaded, bytes_reused=max(0, store.bytes_referenced - msg.bytes_uploaded),
                snapshot=msg.snapshot, load_s=load_s, process_s=process_s, commit_s=commit_s,
                reused_working_copy=store.reused_working_copy,
                cache_hits=after["hits"] - before["hits"],
                cache_downloads=after["downloads"] - before["downloads"],
                write_amplification=float(write_amp), rescaled=plans is not None,
                reports=state.reports, caught_up_working_copy=store.caught_up_working_copy,
                copy_fate=store.copy_fate,
                bytes_downloaded=sum(after[c] - before[c] for c in ("download_bytes", "changelog_bytes")),
                block_hits=done["block_hits"] - before["block_hits"],
                block_misses=done["block_misses"] - before["block_misses"],
                block_fetched_bytes=done["block_fetched_bytes"] - before["block_fetched_bytes"])
            yield pd.DataFrame({COMMIT_COLUMN: [msg.to_json()], METRICS_COLUMN: [json.dumps(asdict(metrics))]})

        return task


def owned_frames(frames, key_groups: int, partitions: int, partition: int, seen: list):
    """``frames`` as they come, each checked to hold only rows of key groups ``partition`` owns
    (a stray row fails the task at once); ``seen[0]`` counts their rows."""
    for frame in frames:
        check_partition_key_groups(frame[KEY_GROUP_COLUMN].to_numpy(), key_groups, partitions, partition)
        seen[0] += len(frame)
        yield frame


def write_outputs(outputs, writer, columns: list, output_check) -> None:
    """Write each DataFrame of ``outputs`` (what the state function yields) with ``writer``,
    fitted to the output schema by ``output_check``: TypeError for anything but a DataFrame,
    InvalidArgumentError for one lacking a column of ``columns``."""
    import pandas as pd

    for out in outputs:
        if not isinstance(out, pd.DataFrame):
            raise TypeError(f"the state function must yield pandas DataFrames, not {type(out).__name__}")
        missing = [c for c in columns if c not in out.columns]
        if missing:
            raise antkv.InvalidArgumentError(f"the state function's output lacks columns {missing}")
        if len(out):
            writer.write(output_check.fit(out))


def _frames_of(produced):
    """What a state function returned, as an iterable of DataFrames."""
    import pandas as pd

    if isinstance(produced, pd.DataFrame):
        return (produced,)
    return produced or ()
