"""Spark 4 ``StatefulProcessor`` classes, run unchanged on antkv state.

A processor written for ``groupBy(key).transformWithStateInPandas(processor, outputSchema,
outputMode, timeMode, initialState, eventTimeColumnName)`` runs here as it is, imported from
``pyspark`` and untouched::

    runner = TransformWithState("s3://bucket/state", "sessions", ["user"], SessionWindow(),
                                "user string, start long, end long, events long",
                                time_mode="EventTime", event_time_column="ts", partitions=8)
    result = runner.run(batch_df)                              # one batch: the next version
    stream.writeStream.foreachBatch(runner.foreach_batch(sink)).start()   # a streaming query

The runner is a :class:`antkv.spark.runtime.pipeline.StatefulPipeline` (routing by key group,
exactly-once commits, rescale, metrics) whose function drives the processor.  In each task,
for its partition and batch, in Spark's order:

1. ``init(handle)`` with an antkv-backed handle (:mod:`antkv.spark.processor.handle`);
2. the partition's rows arrive sorted by (key group, key) from the JVM as a stream of Arrow
   batches; the key groups each batch touches densely are read whole into the store's row
   cache (``StateStore.warm_touched``: one ordered scan instead of a point read per key),
   the state values among them decoded in bulk, so that a reopened copy's reads decode nothing;
   on the first batch, ``handleInitialState(key, rows, timerValues)`` for each key of the
   initial state (all its rows in one pandas DataFrame), before that key's input;
3. ``handleInputRows(key, rows, timerValues)`` once per grouping key of the batch, in key
   order, ``rows`` being a lazy iterator of pandas DataFrames with the input's columns, of at
   most ``spark.sql.execution.arrow.maxRecordsPerBatch`` rows each, cut as Spark cuts them
   (:func:`antkv.spark.state.chunks.key_chunks`): a key of any size is streamed (on the
   first batch of a query with an initial state, a key's rows are gathered first);
4. ``handleExpiredTimer(key, timerValues, expiredTimerInfo)`` for every timer that expired,
   by (time, key), each then deleted (:mod:`antkv.spark.processor.timers`: no scan of the state);
5. the end of TTL'd elements that expired, then ``close()``.

A processor written for Spark 4.1's row-based ``groupBy(key).transformWithState(...)`` runs
with ``rows=True``: its handlers get and yield ``pyspark.sql.Row`` objects, as Spark's
row-based worker hands them (:mod:`antkv.spark.processor.rows`).

What the handlers yield is streamed into the task attempt's output files; ``run`` returns the
batch's published output as a Spark DataFrame (:mod:`antkv.spark.runtime.pipeline`).

**Time.**  ``TimerValues.getCurrentProcessingTimeInMs()`` is the batch's processing time, read
once on the driver from ``clock`` (seconds, ``time.time`` by default; inject one in tests).
In the ``EventTime`` mode the runner keeps the watermark as Spark does: the watermark of
batch ``b`` is ``max(0, the largest event time of batches < b - watermark_delay_ms)``, never
going back (0 in the first batch); input rows with an event time at or below the previous
batch's watermark are late and dropped; event-time timers fire when the watermark reaches
them.  The largest event time is recorded with each version (an event-time record,
:mod:`antkv.spark.store.objects`, written before the version is published), so a restarted query
continues with the same watermark.  Spark also runs a batch without data when the watermark
moved; under ``foreachBatch`` the next batch (or an explicit ``run`` of an empty DataFrame)
fires those timers.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import antkv

from antkv.spark.store.keygroups import DEFAULT_KEY_GROUPS, key_group_prefix
from antkv.spark.store.location import event_time_name, marker_name, parse_event_time_name, EVENT_TIME_DIR
from antkv.spark.store.objects import KIND_EVENT_TIME, seal, unseal
from antkv.spark.runtime.pipeline import KEY_GROUP_COLUMN, BatchResult, StatefulPipeline
from antkv.spark.processor.handle import DeclaringHandle, ProcessorHandle, check_time_mode
from antkv.spark.processor.rows import RowProcessor
from antkv.spark.state.chunks import FrameCuts, key_chunks
from antkv.spark.state.rows_codec import ROWS

INITIAL_COLUMN = "__antkv_initial"  # 1 on the rows of the initial state, 0 on input rows
INITIAL_PREFIX = "__antkv_init__"  # the initial state's columns travel under this prefix
EVENT_MS_COLUMN = "__antkv_event_ms"  # the event time in ms since the epoch (UTC), from the JVM
OUTPUT_MODES = {"append": "Append", "update": "Update"}
_FLUSH_ROWS = 1 << 16
_FLUSH_FRAMES = 1 << 12


@dataclass(frozen=True)
class _Batch:
    """What every task of one batch is told by the driver."""

    processor: object
    key: tuple
    input_columns: tuple
    initial_columns: tuple | None  # the initial state's columns, on the first batch only
    output_columns: tuple
    time_mode: str
    batch_timestamp_ms: int
    watermark_ms: int  # -1 outside the EventTime mode, as Spark's TimerValues
    event_time: bool
    exact_columns: dict  # integer and boolean columns -> numpy dtype, to undo a union's nulls
    chunk_rows: int  # spark.sql.execution.arrow.maxRecordsPerBatch: the most rows of a key's chunk
    row_types: tuple | None  # row-based processors: (input types, initial-state types, session time zone)


def _ddl(schema) -> str:
    if isinstance(schema, str):
        return schema
    fields = getattr(schema, "fields", None)
    if fields is None:
        raise TypeError(f"output_schema must be a DDL string or a StructType, not {type(schema).__name__}")
    return ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in fields)


def _delay_ms(delay) -> int:
    if isinstance(delay, bool) or not isinstance(delay, int):
        raise TypeError(f"watermark_delay_ms must be an int, not {type(delay).__name__}")
    if delay < 0:
        raise antkv.InvalidArgumentError(f"watermark_delay_ms must be >= 0, got {delay}")
    return delay


class TransformWithState:
    """Runs a Spark ``StatefulProcessor`` on antkv state, batch after batch; see the module
    docstring.  The arguments after ``output_schema`` are ``transformWithStateInPandas``'s
    (``initial_state`` is a DataFrame holding the key columns under the same names) and
    :class:`~antkv.spark.runtime.pipeline.StatefulPipeline`'s.  ``rows=True`` runs a processor
    written for the row-based ``transformWithState`` (``Row``s in and out) instead of one for
    ``transformWithStateInPandas``."""

    def __init__(self, location, operator: str, key, processor, output_schema, *,
                 output_mode: str = "Update", time_mode: str = "None", initial_state=None,
                 event_time_column: str | None = None, watermark_delay_ms: int = 0,
                 partitions: int, key_groups: int = DEFAULT_KEY_GROUPS, clock=None,
                 query_id: str | None = None, options=None, metrics_path: str | None = None,
                 min_versions_to_retain: int = 2, output_retention: int | None = None, rows: bool = False):
        if not isinstance(rows, bool):
            raise TypeError(f"rows must be a bool, not {type(rows).__name__}")
        self.rows = rows
        for method in ("init", "handleInputRows"):
            if not callable(getattr(processor, method, None)):
                raise TypeError(f"processor must be a StatefulProcessor: it has no {method}()")
        if not isinstance(output_mode, str) or output_mode.lower() not in OUTPUT_MODES:
            raise antkv.InvalidArgumentError(f"output mode must be Append or Update, got {output_mode!r}")
        self.output_mode = OUTPUT_MODES[output_mode.lower()]
        self.time_mode = check_time_mode(time_mode)
        if (self.time_mode == "EventTime") != (event_time_column is not None):
            raise antkv.InvalidArgumentError("event_time_column is required by, and only by, the EventTime time mode")
        if event_time_column is not None and not isinstance(event_time_column, str):
            raise TypeError("event_time_column must be a column name")
        if clock is not None and not callable(clock):
            raise TypeError("clock must be callable: clock() -> seconds since the epoch")
        declared = DeclaringHandle(self.time_mode)
        processor.init(declared)  # refuses a bad declaration here, before any task runs
        processor.close()
        self.state_variables = dict(declared.declared)
        self.processor = processor
        self.event_time_column = event_time_column
        self.watermark_delay_ms = _delay_ms(watermark_delay_ms)
        self.initial_state = initial_state
        self.clock = clock or time.time
        self.pipeline = StatefulPipeline(
            location, operator, key, _unset_function, _ddl(output_schema), partitions=partitions,
            key_groups=key_groups, query_id=query_id, options=options, metrics_path=metrics_path,
            min_versions_to_retain=min_versions_to_retain, output_retention=output_retention)
        self.key = tuple(self.pipeline.key)
        self.min_versions_to_retain = min_versions_to_retain
        self.watermark_ms = 0  # of the last batch run (EventTime)

    # ------------------------------------------------------------------ driver

    def run(self, df, batch_id: int | None = None) -> BatchResult:
        """Run one batch of ``df`` and publish version ``batch_id + 1`` (``batch_id`` defaults
        to the newest published version); returns the processor's output and the metrics."""
        from pyspark.sql import functions as F

        pipe = self.pipeline
        location, operator = pipe.location, pipe.operator
        if batch_id is None:
            batch_id = pipe.coordinator.latest_version()
        if isinstance(batch_id, bool) or not isinstance(batch_id, int) or batch_id < 0:
            raise antkv.InvalidArgumentError(f"batch_id must be an int >= 0, got {batch_id!r}")
        missing = [c for c in self.key if c not in df.columns]
        if missing:
            raise antkv.InvalidArgumentError(f"the key columns {missing} are not in the DataFrame")
        batch_ts = int(self.clock() * 1000)
        input_columns = tuple(df.columns)
        row_types = None
        if self.rows:
            initial_types = None if self.initial_state is None else tuple(f.dataType for f in self.initial_state.schema.fields)
            row_types = (tuple(f.dataType for f in df.schema.fields), initial_types,
                         df.sparkSession.conf.get("spark.sql.session.timeZone"))
        watermark, max_event_time = -1, None
        if self.time_mode == "EventTime":
            if self.event_time_column not in df.columns:
                raise antkv.InvalidArgumentError(f"the event time column {self.event_time_column!r} is not in the DataFrame")
            late, max_event_time = self._event_time(batch_id)
            watermark = late if max_event_time is None else max(late, max_event_time - self.watermark_delay_ms)
            ts = F.col(self.event_time_column)
            is_long = dict(df.dtypes)[self.event_time_column] in ("bigint", "int")
            ms = ts.cast("long") if is_long else F.expr(f"unix_millis(`{self.event_time_column}`)")
            df = df.withColumn(EVENT_MS_COLUMN, ms).where(F.col(EVENT_MS_COLUMN).isNull() | (F.col(EVENT_MS_COLUMN) > late))
        initial_columns, exact = None, {}
        if batch_id == 0 and self.initial_state is not None:
            exact = _exact_dtypes(df.schema) | _exact_dtypes(self.initial_state.schema)
            df, initial_columns = self._with_initial_state(df)
        limit = int(df.sparkSession.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch", "10000"))
        batch = _Batch(self.processor, self.key, input_columns, initial_columns, tuple(pipe.columns), self.time_mode,
                       batch_ts, watermark, self.time_mode == "EventTime", exact, limit if limit > 0 else 2**31 - 1,
                       row_types)

        def run_processor(state, frames):
            return _run_partition(batch, state, frames)

        def record_event_time(version, parts):
            if self.time_mode != "EventTime" or location.exists(marker_name(operator, version)):
                return  # nothing to record, or a replay: the published version keeps its record
            seen = [p.reports["max_event_time_ms"] for p in parts if p.reports.get("max_event_time_ms") is not None]
            newest = max(seen + ([max_event_time] if max_event_time is not None else []), default=None)
            doc = {"format": 1, "version": version, "max_event_time_ms": newest, "watermark_ms": watermark}
            name = event_time_name(operator, version)
            location.delete(name)  # a record of an attempt of this batch that never published
            location.create_exclusive(name, seal(KIND_EVENT_TIME, json.dumps(doc).encode()))

        order = () if initial_columns is None else (F.col(INITIAL_COLUMN).desc(),)  # a key's initial rows first
        result = pipe.run_partitions(df, batch_id, run_processor, sort_columns=order,
                                     before_publish=record_event_time)
        if self.time_mode == "EventTime":
            self.watermark_ms = watermark
            self._forget_event_times(batch_id + 1)
        return result

    def foreach_batch(self, sink=None):
        """A function for ``DataStreamWriter.foreachBatch``: runs the batch, then calls
        ``sink(output_df, batch_id)`` (as :meth:`StatefulPipeline.foreach_batch`)."""
        def on_batch(df, batch_id):
            result = self.run(df, int(batch_id))
            if sink is not None:
                sink(result.output, int(batch_id))
        return on_batch

    def _event_time(self, batch_id: int) -> tuple[int, int | None]:
        """``(watermark of batch batch_id - 1, largest event time of batches < batch_id)``."""
        if batch_id == 0:
            return 0, None
        loc, name = self.pipeline.location, event_time_name(self.pipeline.operator, batch_id)
        doc = json.loads(unseal(KIND_EVENT_TIME, loc.read(name), loc.path(name)))
        if doc.get("version") != batch_id:
            raise antkv.CorruptionError(f"event-time record of version {doc.get('version')} under the name of {batch_id}",
                                        loc.path(name))
        return int(doc["watermark_ms"]), doc["max_event_time_ms"]

    def _forget_event_times(self, version: int) -> None:
        loc, operator = self.pipeline.location, self.pipeline.operator
        for base in loc.list_dir(f"{operator}/{EVENT_TIME_DIR}"):
            v = parse_event_time_name(base)
            if v is not None and v <= version - self.min_versions_to_retain:
                loc.delete(f"{operator}/{EVENT_TIME_DIR}/{base}")

    def _with_initial_state(self, df):
        """``df`` and the initial state in one DataFrame (routed together by key), and the
        initial state's columns."""
        from pyspark.sql import functions as F

        init = self.initial_state
        if not hasattr(init, "columns") or not hasattr(init, "select"):
            raise TypeError(f"initial_state must be a DataFrame, not {type(init).__name__}")
        missing = [c for c in self.key if c not in init.columns]
        if missing:
            raise antkv.InvalidArgumentError(f"the initial state lacks the key columns {missing}")
        columns = tuple(init.columns)
        renamed = init.select(*[F.col(f"`{k}`") for k in self.key],
                              *[F.col(f"`{c}`").alias(INITIAL_PREFIX + c) for c in columns],
                              F.lit(1).alias(INITIAL_COLUMN))
        both = df.withColumn(INITIAL_COLUMN, F.lit(0)).unionByName(renamed, allowMissingColumns=True)
        return both, columns


def transform_with_state(df, key, processor, output_schema, output_mode: str = "Update",
                         time_mode: str = "None", initial_state=None, event_time_column=None, *,
                         location, operator: str, partitions: int, batch_id: int | None = None,
                         **options) -> BatchResult:
    """One batch of a processor on ``df``: ``transformWithStateInPandas``'s arguments, then
    where the state lives.  Successive calls on one ``(location, operator)`` continue its
    state; a streaming query uses :class:`TransformWithState` and ``foreach_batch``."""
    runner = TransformWithState(location, operator, key, processor, output_schema, output_mode=output_mode,
                                time_mode=time_mode, initial_state=initial_state,
                                event_time_column=event_time_column, partitions=partitions, **options)
    return runner.run(df, batch_id)


def _exact_dtypes(schema) -> dict:
    from pyspark.sql.types import BooleanType, ByteType, IntegerType, LongType, ShortType

    names = {ByteType: "int8", ShortType: "int16", IntegerType: "int32", LongType: "int64", BooleanType: "bool"}
    return {f.name: names[type(f.dataType)] for f in schema.fields if type(f.dataType) in names}


def _unset_function(state, rows):
    raise antkv.InvalidArgumentError("a TransformWithState pipeline runs through TransformWithState.run")


# ---------------------------------------------------------------------- executors


class _Output:
    """Buffers the processor's small output frames and hands them on in large ones: ``add``
    what a handler returned, then ``flush`` when ``full``."""

    def __init__(self, columns):
        import pandas as pd

        self._frame_type = pd.DataFrame
        self.columns = list(columns)
        self.frames, self.rows = [], 0

    def add(self, produced) -> None:
        if produced is None:
            return
        frame_type = self._frame_type
        if isinstance(produced, frame_type):
            produced = (produced,)
        for frame in produced:
            if not isinstance(frame, frame_type):
                raise TypeError(f"a processor yields pandas DataFrames, not {type(frame).__name__}")
            if len(frame):
                if not all(isinstance(c, str) for c in frame.columns) and len(frame.columns) == len(self.columns):
                    frame = frame.set_axis(self.columns, axis=1)  # matched by position, as Spark
                self.frames.append(frame)
                self.rows += len(frame)

    @property
    def full(self) -> bool:
        return self.rows >= _FLUSH_ROWS or len(self.frames) >= _FLUSH_FRAMES

    def flush(self):
        import pandas as pd

        if self.frames:
            frames, self.frames, self.rows = self.frames, [], 0
            yield frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)


def _exact(frame, dtypes: dict):
    """``frame`` with its integer and boolean columns back to their type where they hold no
    null (the union with the initial state made them nullable, so pandas widened them)."""
    for c, dtype in dtypes.items():
        if c in frame.columns and frame[c].dtype != dtype and frame[c].notna().all():
            frame[c] = frame[c].astype(dtype)
    return frame


def _initial_and_inputs(batch: _Batch, rows):
    """A key's rows on the first batch of a query with an initial state: ``(its initial-state
    rows under their own column names, or None; its input rows)``."""
    is_initial = rows[INITIAL_COLUMN].to_numpy() == 1
    initial = None
    if is_initial.any():
        init = rows.loc[is_initial]
        initial = _exact(init[[INITIAL_PREFIX + c for c in batch.initial_columns]]
                         .set_axis(list(batch.initial_columns), axis=1).reset_index(drop=True), batch.exact_columns)
    inputs = _exact(rows.loc[~is_initial, list(batch.input_columns)].reset_index(drop=True), batch.exact_columns)
    return initial, inputs


def _run_partition(batch: _Batch, state, frames, handle_class=ProcessorHandle):
    """The processor over one partition's rows: each key's handler calls, then the expired
    timers', then the TTL cleanup; yields the output frames.  ``handle_class(store, owned,
    time_mode, batch_timestamp_ms)`` makes the handle (the processor bench's floor gives one
    whose state is plain dicts)."""
    import numpy as np
    from pyspark.sql.streaming.stateful_processor import ExpiredTimerInfo, TimerValues

    processor = batch.processor
    calls = processor  # what the handlers are called on: the processor, or its row-based adapter
    if batch.row_types is not None:
        calls = RowProcessor(processor, batch.input_columns, batch.initial_columns, batch.output_columns,
                             batch.row_types)
    handle = handle_class(state.store, state.owned, batch.time_mode, batch.batch_timestamp_ms)
    processor.init(handle)
    if batch.time_mode == "None":
        timer_values = TimerValues(-1, -1)
    else:
        timer_values = TimerValues(batch.batch_timestamp_ms, batch.watermark_ms)
    out = _Output(batch.output_columns)
    with_initial = batch.initial_columns is not None
    columns = list(batch.input_columns)
    if with_initial:
        columns += [INITIAL_COLUMN] + [INITIAL_PREFIX + c for c in batch.initial_columns]

    def on_batch(grouped):
        """Per incoming batch: the largest event time, and the densely touched key groups read whole."""
        if batch.event_time:
            times = grouped.frame[EVENT_MS_COLUMN]
            if with_initial:
                times = times[grouped.frame[INITIAL_COLUMN].to_numpy() == 0]
            newest = times.max()
            if newest == newest:  # not NaN: some row has an event time
                seen = state.reports.get("max_event_time_ms")
                state.reports["max_event_time_ms"] = int(newest) if seen is None else max(seen, int(newest))
        groups, per_group = np.unique(grouped.key_groups, return_counts=True)
        state.store.warm_touched({key_group_prefix(int(g)): int(n) for g, n in zip(groups, per_group)}, ROWS)

    limit = batch.chunk_rows
    cuts = calls.inputs if batch.row_types is not None and not with_initial else FrameCuts  # Rows, or frames
    for kg, key, chunks in key_chunks(frames, KEY_GROUP_COLUMN, list(batch.key), columns, limit, on_batch, cuts):
        handle.set_current_key(kg, key)
        if with_initial:
            import pandas as pd

            initial, inputs = _initial_and_inputs(batch, pd.concat(list(chunks), ignore_index=True))
            if initial is not None:
                calls.handleInitialState(key, initial, timer_values)
            if not len(inputs):
                continue
            chunks = (inputs.iloc[i:i + limit].reset_index(drop=True) for i in range(0, len(inputs), limit))
        out.add(calls.handleInputRows(key, chunks, timer_values))
        if out.full:
            yield from out.flush()
    if batch.time_mode != "None":
        threshold = batch.batch_timestamp_ms if batch.time_mode == "ProcessingTime" else batch.watermark_ms
        for expiry, _encoded, kg, key in handle.timers.expired(state.owned, threshold):
            handle.set_current_key(kg, key)
            out.add(calls.handleExpiredTimer(key, timer_values, ExpiredTimerInfo(expiry)))
            handle.timers.delete(expiry)
            if out.full:
                yield from out.flush()
    handle.clear_current_key()
    handle.clear_expired_state()
    processor.close()
    yield from out.flush()
