"""Moving a query's state from Spark's state store to antkv, without losing a key.

A query that ran batches ``0 .. b`` on Spark (``applyInPandasWithState``,
``transformWithStateInPandas`` or the row-based ``transformWithState``, any state store
provider) continues on antkv from batch
``b + 1`` with the same answers::

    query.stop()                                       # 1. stop it: batch b is its last
    migrate_transform_with_state(spark, "/ckpt/q", "s3://bucket/state", "sessions", ["user"],
                                 Sessions(), time_mode="ProcessingTime", partitions=8)   # 2.
    copy_query_progress(spark, "/ckpt/q", "/ckpt/q-antkv")  # 3. the progress, without the state
    runner = TransformWithState("s3://bucket/state", "sessions", ["user"], Sessions(), ...)
    stream.writeStream.foreachBatch(runner.foreach_batch(sink)) \
        .option("checkpointLocation", "/ckpt/q-antkv").start()   # runs batch b + 1

**What is written.**  Version ``b + 1`` of the antkv operator (its first), holding the state
Spark committed with batch ``b``: the version a run of batch ``b + 1`` opens.  For
``applyInPandasWithState``: each grouping key's state row in a value state the pipeline's
function names (``state=(name, id)``), and its timeout timestamp, if the query set any, in a
second one (``timeout_state``).  For a processor: every value, list and map state variable
it declares, each element with its TTL expiry, and its timers.

**How**, nothing of the state through the driver:

1. on the driver: Spark's operator metadata names the operator, its kind and ``b``; the
   processor's ``init`` declares its state variables; every refusal
   (:mod:`antkv.spark.tools.spark_state`) happens here, and an operator that already has a
   published version is refused: nothing has been written yet;
2. one Spark job: Spark's ``statestore`` source reads every piece in the executors, the pieces
   are unioned into one DataFrame keyed by the antkv key columns and routed by key group
   (:func:`antkv.spark.runtime.routing.route`); each task opens its partition's empty store as
   version ``b`` (``open_store(..., empty=True)``), writes its rows through the state API the
   pipeline's functions and the processors use (:class:`~antkv.spark.state.views.KeyedState`
   views, the processor handle's state variables and timers) and commits;
3. on the driver: the commit messages (one per partition, the only rows collected) are
   published as version ``b + 1`` by the commit protocol, as an origin
   (:meth:`CommitCoordinator.publish` with empty bases).  A failed job publishes nothing and
   a rerun starts afresh.

**TTL.**  A processor's state variable writes an element at the batch's processing time ``T``
with expiry ``T + ttl``; each element is written at ``T = expiry - ttl`` of its Spark expiry,
so it keeps exactly the expiry Spark gave it.

**Event time.**  For a processor in the ``EventTime`` mode, the watermark Spark would use in
batch ``b + 1`` (its commit log's ``nextBatchWatermarkMs``) and the one of batch ``b`` (the
late-row threshold, from its offset log) are recorded with version ``b + 1``
(:class:`~antkv.spark.processor.transform.TransformWithState` reads them back).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import antkv

from antkv.spark.processor.handle import ProcessorHandle, check_time_mode
from antkv.spark.runtime.executor_check import checked_task
from antkv.spark.runtime.routing import route
from antkv.spark.state.views import KeyedState
from antkv.spark.store.commit_message import CommitMessage
from antkv.spark.store.commit_protocol import CommitCoordinator
from antkv.spark.store.keygroups import (
    DEFAULT_KEY_GROUPS,
    check_key_group_count,
    check_partition_key_groups,
    ensure_key_group_count,
    key_group_range,
    validate_parallelism,
)
from antkv.spark.store.location import as_location, check_operator, event_time_name
from antkv.spark.store.pipeline_record import ensure_pipeline_record, read_pipeline_record
from antkv.spark.store.objects import KIND_EVENT_TIME, seal
from antkv.spark.store.opening import open_store
from antkv.spark.store.store_options import StoreOptions
from antkv.spark.tools.spark_state import (
    APPLY_IN_PANDAS_WITH_STATE,
    PIECE_COLUMN,
    TRANSFORM_WITH_STATE,
    Piece,
    check_key_type,
    check_row_type,
    check_variable_type,
    key_columns,
    read_piece,
    recorded_time_mode,
    spark_operator,
    to_spark_python,
)

KEY_GROUP_COLUMN = "__key_group"
_COMMIT_COLUMN = "_antkv_commit"


@dataclass(frozen=True)
class MigrationResult:
    """What a migration wrote: ``version`` (= Spark's last committed batch + 1) of the antkv
    operator over ``partitions`` partitions, from ``rows`` rows of Spark's state, holding
    ``keys`` keys of user state: one per value-state row (an ``applyInPandasWithState`` state
    row and its timeout count one each), per list (a grouping key's list of one variable), per
    map entry and per timer.  antkv's own bookkeeping (state registrations, the key-group
    count, the TTL and timer indexes) is not counted: an empty state has 0 keys."""

    spark_operator: str
    batch_id: int
    version: int
    partitions: int
    rows: int
    keys: int


class _DeclaredStates:
    """The handle a processor's ``init`` gets on the driver: records each state variable's
    kind, schemas and TTL as the processor declares them."""

    def __init__(self):
        self.states: dict[str, tuple] = {}  # name -> (kind, schemas, ttl)

    def getValueState(self, stateName, schema, ttlDurationMs=None):  # noqa: N802,N803 - Spark's names
        self.states[stateName] = ("value", (schema,), ttlDurationMs)

    def getListState(self, stateName, schema, ttlDurationMs=None):  # noqa: N802,N803
        self.states[stateName] = ("list", (schema,), ttlDurationMs)

    def getMapState(self, stateName, userKeySchema, valueSchema, ttlDurationMs=None):  # noqa: N802,N803
        self.states[stateName] = ("map", (userKeySchema, valueSchema), ttlDurationMs)

    def deleteIfExists(self, stateName):  # noqa: N802,N803
        pass

    def registerTimer(self, *_):  # noqa: N802
        pass

    deleteTimer = registerTimer  # noqa: N815 - Spark's name

    def listTimers(self):  # noqa: N802
        return iter(())


# --------------------------------------------------------------------------- the two APIs


def migrate_apply_in_pandas_with_state(spark, checkpoint: str, location, operator: str, key, *,
                                       state: tuple, timeout_state: tuple | None = None, partitions: int,
                                       key_groups: int = DEFAULT_KEY_GROUPS, operator_id: int = 0,
                                       query_id: str | None = None,
                                       options: StoreOptions | None = None) -> MigrationResult:
    """Carry the state of an ``applyInPandasWithState`` operator of the Spark checkpoint
    ``checkpoint`` into version ``b + 1`` of antkv operator ``operator`` (see the module
    docstring): each grouping key's state row into the value state ``state`` (``(name, state
    id)``, as the pipeline's function names it), its timeout timestamp (ms) into the value
    state ``timeout_state`` as a one-field row.  A query that set timeouts needs
    ``timeout_state``; ``key`` names the antkv key columns, in Spark's grouping order."""
    key = _key_list(key)
    for what, named in (("state", state), ("timeout_state", timeout_state)):
        if named is not None and not (isinstance(named, tuple) and len(named) == 2 and isinstance(named[0], str)
                                       and isinstance(named[1], int)):
            raise TypeError(f"{what} must be a (name, state id) pair")
    if timeout_state is not None and timeout_state[1] == state[1]:
        raise antkv.InvalidArgumentError("state and timeout_state need two state ids")
    op = spark_operator(spark, checkpoint, operator_id, APPLY_IN_PANDAS_WITH_STATE, "applyInPandasWithState")
    df, key_type = read_piece(spark, checkpoint, op, key)
    check_key_type(key_type, "applyInPandasWithState")
    value_type = df.schema["value"].dataType
    fields = [f.name for f in value_type.fields]
    if "groupState" not in fields or not set(fields) <= {"groupState", "timeoutTimestamp"}:
        raise antkv.InvalidArgumentError(f"Spark's state of operator {op.operator_id} is {value_type.simpleString()}, "
                                         f"not applyInPandasWithState's groupState; nothing was written")
    row_type = value_type["groupState"].dataType
    row = "value.groupState"
    timeout = "value.timeoutTimestamp" if "timeoutTimestamp" in fields else None
    check_row_type(row_type, "the state row of applyInPandasWithState")
    if timeout_state is None and timeout is not None:
        from pyspark.sql import functions as F

        if df.where(F.col(timeout) != -1).limit(1).count():
            raise antkv.InvalidArgumentError(
                "the query set timeouts: give timeout_state=(name, state id) to carry them; nothing was written")
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType

    payload = [F.col(row).alias("__p0_row")]
    types = [row_type]
    if timeout_state is not None and timeout is not None:
        payload.append(F.col(timeout).alias("__p0_timeout"))
        types.append(LongType())
    piece = Piece(0, "row", state[0], tuple(c for c in ("__p0_row", "__p0_timeout")[:len(payload)]), tuple(types))
    frame = df.select(*key_columns(df, key), *payload, F.lit(0).alias(PIECE_COLUMN))
    writer = _Writer("apply", key, [piece], state=state, timeout_state=timeout_state)
    return _migrate(spark, frame, writer, op, location, operator, key, partitions, key_groups, query_id,
                    options, event_time=None)


def migrate_transform_with_state(spark, checkpoint: str, location, operator: str, key, processor, *,
                                 time_mode: str = "None", partitions: int, key_groups: int = DEFAULT_KEY_GROUPS,
                                 watermark_delay_ms: int = 0, operator_id: int = 0, query_id: str | None = None,
                                 options: StoreOptions | None = None) -> MigrationResult:
    """Carry the state of a ``transformWithStateInPandas`` (or row-based ``transformWithState``)
    operator of ``checkpoint`` into
    version ``b + 1`` of antkv operator ``operator``: every state variable ``processor``
    declares (its ``init`` runs once on the driver) with each element's TTL expiry, and the
    timers.  ``time_mode`` and ``watermark_delay_ms`` are the ones the query and the
    :class:`TransformWithState` runner use."""
    key = _key_list(key)
    time_mode = check_time_mode(time_mode)
    for method in ("init", "handleInputRows"):
        if not callable(getattr(processor, method, None)):
            raise TypeError(f"processor must be a StatefulProcessor: it has no {method}()")
    declared = _DeclaredStates()
    processor.init(declared)
    processor.close()
    op = spark_operator(spark, checkpoint, operator_id, TRANSFORM_WITH_STATE, "transformWithStateInPandas")
    spark_mode = op.properties.get("timeMode")
    if spark_mode is not None and recorded_time_mode(spark_mode) != time_mode:
        raise antkv.InvalidArgumentError(f"the query ran in the {recorded_time_mode(spark_mode)} time mode "
                                         f"(Spark records {spark_mode!r}), not {time_mode}; nothing was written")
    _check_spark_variables(op, declared.states)
    from pyspark.sql import functions as F

    frames, pieces = [], []
    for name, (kind, _schemas, ttl) in sorted(declared.states.items()):
        index = len(pieces)
        df, key_type = read_piece(spark, checkpoint, op, key, stateVarName=name)
        check_key_type(key_type, f"state {name!r}")
        if kind == "value":
            columns = [("value", "row")]
        elif kind == "list":
            columns = [("list_element", "row")]
        else:
            columns = [("user_map_key", "key"), ("user_map_value", "row")]
        payload, names, types, has_ttl = [], [], [], False
        for column, role in columns:
            dtype = df.schema[column].dataType
            if role == "key":
                check_key_type(dtype, f"the user key of map state {name!r}")
                inner, expiry = dtype, None
            else:
                inner, expiry = _split_ttl(dtype)
                check_variable_type(inner, f"{kind} state {name!r}")
                has_ttl = expiry is not None
            sources = [(column if expiry is None else f"{column}.value", inner)]
            if expiry is not None:
                sources.append((f"{column}.{expiry}", None))
            for source, dtype in sources:
                names.append(f"__p{index}_{len(names)}")
                payload.append(F.col(source).alias(names[-1]))
                types.append(dtype)
        if has_ttl and not ttl:
            raise antkv.InvalidArgumentError(f"Spark holds {kind} state {name!r} with a TTL the processor "
                                             f"does not declare; nothing was written")
        pieces.append(Piece(index, kind, name, tuple(names), tuple(types), has_ttl))
        frames.append(df.select(*key_columns(df, key), *payload, F.lit(index).alias(PIECE_COLUMN)))
    if time_mode != "None":
        index = len(pieces)
        df, key_type = read_piece(spark, checkpoint, op, key, readRegisteredTimers="true")
        check_key_type(key_type, "the timers")
        pieces.append(Piece(index, "timers", "", (f"__p{index}_0",), (None,)))
        frames.append(df.select(*key_columns(df, key), F.col("expiration_timestamp_ms").alias(f"__p{index}_0"),
                                F.lit(index).alias(PIECE_COLUMN)))
    if not frames:
        raise antkv.InvalidArgumentError("the processor declares no state variable and runs without timers: "
                                         "there is nothing to carry")
    frame = frames[0]
    for other in frames[1:]:
        frame = frame.unionByName(other, allowMissingColumns=True)
    event_time = None
    if time_mode == "EventTime":
        event_time = _spark_watermarks(spark, checkpoint, op.batch_id, watermark_delay_ms)
    writer = _Writer("processor", key, pieces, time_mode=time_mode, states=declared.states,
                     delay_ms=watermark_delay_ms)
    return _migrate(spark, frame, writer, op, location, operator, key, partitions, key_groups, query_id,
                    options, event_time=event_time)


# --------------------------------------------------------------------------- the driver


def copy_query_progress(spark, checkpoint: str, dest: str) -> None:
    """Make ``dest``, a new Spark checkpoint for the query restarted on antkv: everything of
    ``checkpoint`` (its source offsets, commit log, source logs and query id) but its
    ``state`` directory, copied through the checkpoint's Hadoop file system.  Spark refuses to
    restart a checkpoint whose stateful operator was removed from the query
    (``STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA``); from ``dest`` the query
    runs batch ``b + 1`` on the input after the one batch ``b`` consumed.  ``checkpoint`` is
    only read; ``dest`` must not exist."""
    jvm = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    Path = jvm.org.apache.hadoop.fs.Path
    source, target = Path(checkpoint), Path(dest)
    fs, target_fs = source.getFileSystem(conf), target.getFileSystem(conf)
    if target_fs.exists(target):
        raise antkv.InvalidArgumentError(f"{dest} exists: the restarted query needs a new checkpoint")
    if not fs.exists(Path(source, "commits")) or not fs.exists(Path(source, "offsets")):
        raise antkv.InvalidArgumentError(f"{checkpoint} is not a Spark streaming checkpoint (no offsets and commits)")
    target_fs.mkdirs(target)
    for status in fs.listStatus(source):
        name = status.getPath().getName()
        if name != "state":
            jvm.org.apache.hadoop.fs.FileUtil.copy(fs, status.getPath(), target_fs, Path(target, name), False, conf)




def _key_list(key) -> list:
    key = [key] if isinstance(key, str) else list(key)
    if not key or not all(isinstance(k, str) for k in key):
        raise TypeError("key must be a column name or a non-empty list of column names")
    return key


_SPARK_KINDS = {"valuestate": "value", "liststate": "list", "mapstate": "map"}


def _check_spark_variables(op, declared: dict) -> None:
    """Refuse a Spark state variable the processor does not declare (it would be lost) or
    declares as another kind, from the operator's properties when Spark records them."""
    for info in op.properties.get("stateVariables", ()):
        name = info.get("stateName")
        kind = _SPARK_KINDS.get(str(info.get("stateVariableType", "")).lower())
        if kind is None or name is None:
            continue  # timers and Spark's internal column families
        if name not in declared:
            raise antkv.InvalidArgumentError(
                f"Spark holds {kind} state {name!r}, which the processor does not declare: it would be "
                f"lost; nothing was written")
        if declared[name][0] != kind:
            raise antkv.InvalidArgumentError(
                f"Spark holds {kind} state {name!r}, the processor declares it as {declared[name][0]} state; "
                f"nothing was written")


def _split_ttl(dtype):
    """``(the element's own type, the name of its expiry field or None)``: Spark stores an
    element of a state variable with a TTL as ``struct<value, ttlExpirationMs>``."""
    names = [f.name for f in getattr(dtype, "fields", ())]
    if names == ["value", "ttlExpirationMs"]:
        return dtype["value"].dataType, "ttlExpirationMs"
    return dtype, None


def _spark_watermarks(spark, checkpoint: str, batch_id: int, delay_ms: int) -> tuple[int, int]:
    """``(watermark of batch b, watermark Spark gives batch b + 1)`` from the checkpoint's
    offset and commit logs (their metadata lines, not state)."""
    if isinstance(delay_ms, bool) or not isinstance(delay_ms, int) or delay_ms < 0:
        raise antkv.InvalidArgumentError(f"watermark_delay_ms must be an int >= 0, got {delay_ms!r}")

    def metadata(log: str) -> dict:
        lines = [r[0] for r in spark.read.text(f"{checkpoint.rstrip('/')}/{log}/{batch_id}").collect()]
        return json.loads(lines[1]) if len(lines) > 1 and lines[1].startswith("{") else {}

    current = int(metadata("offsets").get("batchWatermarkMs", 0))
    following = int(metadata("commits").get("nextBatchWatermarkMs", current))
    return current, max(current, following)


def _migrate(spark, frame, writer, op, location, operator, key, partitions, key_groups, query_id,
             options, event_time) -> MigrationResult:
    loc = as_location(location)
    operator = check_operator(operator)
    validate_parallelism(key_groups, partitions)
    if options is not None and not isinstance(options, StoreOptions):
        raise TypeError(f"options must be a StoreOptions, not {type(options).__name__}")
    coord = CommitCoordinator(loc, operator, partitions, query_id=query_id or operator)
    if coord.latest_version() != 0:
        raise antkv.InvalidArgumentError(
            f"{loc.uri}/{operator} already has published versions: migrate into a new operator; nothing was written")
    stored = read_pipeline_record(loc, operator)
    if stored is not None:
        check_key_group_count(stored["key_groups"], key_groups)
    version = op.batch_id + 1
    from pyspark.sql import functions as F

    frame = frame.withColumn(_SEQ_COLUMN, F.monotonically_increasing_id())
    routed = route(frame, key, partitions, key_groups, KEY_GROUP_COLUMN)
    # every task first checks its executor runs the driver's antkv (executor_check)
    task = checked_task(_Task(writer, loc, operator, op.batch_id, key_groups, partitions, options), antkv.__version__)
    done = routed.mapInArrow(task, f"{_COMMIT_COLUMN} string, rows long, keys long").collect()  # one per partition
    messages = [CommitMessage.from_json(r[0]) for r in done]
    if event_time is not None:
        watermark, following = event_time
        doc = {"format": 1, "version": version, "max_event_time_ms": following + writer.delay_ms,
               "watermark_ms": watermark}
        name = event_time_name(operator, version)
        loc.delete(name)  # a record of an earlier attempt that never published
        loc.create_exclusive(name, seal(KIND_EVENT_TIME, json.dumps(doc).encode()))
    ensure_pipeline_record(loc, operator, list(key), key_groups)
    coord.publish(version, messages, bases=[None] * partitions)
    return MigrationResult(op.name, op.batch_id, version, partitions, sum(int(r[1]) for r in done),
                           sum(int(r[2]) for r in done))


# --------------------------------------------------------------------------- the tasks

_SEQ_COLUMN = "__antkv_seq"  # Spark's order of a state variable's elements (a list's order)


class _Task:
    """The function of ``mapInArrow``: one partition's rows into its store, committed as
    version ``base + 1``; yields the commit message, the number of rows and of user state keys
    written (:class:`MigrationResult`)."""

    def __init__(self, writer, location, operator, base, key_groups, partitions, options):
        self.writer, self.location, self.operator, self.base = writer, location, operator, base
        self.key_groups, self.partitions, self.options = key_groups, partitions, options

    def __call__(self, batches):
        import pyarrow as pa
        from pyspark import TaskContext

        p = TaskContext.get().partitionId()
        K, N = self.key_groups, self.partitions
        store = open_store(self.location, self.operator, p, self.base, empty=True, options=self.options)
        try:
            ensure_key_group_count(store, K)
            state = self.writer.open(store, key_group_range(K, N, p))
            count = keys = 0
            for batch in batches:  # Arrow batches of at most maxRecordsPerBatch rows, in Spark's order
                check_partition_key_groups(batch.column(KEY_GROUP_COLUMN).to_numpy(), K, N, p)
                rows = sorted(batch.to_pylist(), key=lambda r: r[_SEQ_COLUMN])
                keys += self.writer.write(state, rows)
                count += len(rows)
            msg = store.commit()
        except BaseException:
            store.abort()
            raise
        yield pa.RecordBatch.from_pydict({_COMMIT_COLUMN: [msg.to_json()], "rows": [count], "keys": [keys]})


class _Writer:
    """Writes rows of the unioned state through the state API a task's user code uses:
    ``kind="apply"``: a pipeline's :class:`KeyedState` value views; ``kind="processor"``: the
    processor handle's state variables and timers (declared as the processor declares them)."""

    def __init__(self, kind, key, pieces, *, state=None, timeout_state=None, time_mode="None",
                 states=None, delay_ms=0):
        self.kind, self.key, self.pieces = kind, list(key), {p.index: p for p in pieces}
        self.state, self.timeout_state = state, timeout_state
        self.time_mode, self.states, self.delay_ms = time_mode, states or {}, delay_ms

    def open(self, store, owned):
        """What :meth:`write` writes through, for one partition's store: ``(the state API,
        its views or variables, the lists written so far)``."""
        if self.kind == "apply":
            keyed = KeyedState(store, owned)
            views = {"row": keyed.value_state(*self.state),
                     "timeout": None if self.timeout_state is None else keyed.value_state(*self.timeout_state)}
            return keyed, views, set()
        handle = ProcessorHandle(store, owned, self.time_mode, 0)
        variables = {}
        for piece in self.pieces.values():
            if piece.kind == "timers":
                continue
            kind, schemas, ttl = self.states[piece.name]
            make = {"value": handle.getValueState, "list": handle.getListState, "map": handle.getMapState}[kind]
            variables[piece.index] = (make(piece.name, *schemas, ttl), ttl or 0)
        return handle, variables, set()

    def write(self, state, rows) -> int:
        """Write ``rows`` (Arrow ``to_pylist`` dicts in Spark's order) into ``state``; returns
        how many keys of user state they added (:class:`MigrationResult`)."""
        target, views, lists = state
        keys = 0
        key_of = self.key
        run, run_of = [], None  # consecutive elements of one list and expiry: one appendList
        for row in rows:
            piece = self.pieces[row[PIECE_COLUMN]]
            values = [row[c] for c in piece.payload]
            where = (row[KEY_GROUP_COLUMN], tuple(row[k] for k in key_of))
            if self.kind == "apply":
                target.set_current_key(*where)
                views["row"].update(to_spark_python(values[0], piece.types[0], top=True))
                keys += 1
                if views["timeout"] is not None and len(values) > 1 and values[1] not in (None, -1):
                    views["timeout"].update((int(values[1]),))
                    keys += 1
                continue
            expiry = values[-1] if piece.ttl else None
            if piece.kind == "list" and run_of == (where, piece.index, expiry):
                run.append(to_spark_python(values[0], piece.types[0], top=True))
                continue
            self._append(target, views, run, run_of)
            run, run_of = [], None
            target.set_current_key(*where)
            if piece.kind == "timers":
                target.registerTimer(int(values[0]))
                keys += 1
                continue
            variable, ttl = views[piece.index]
            if ttl:  # written at the processing time that gives Spark's expiry (module docstring)
                target.batch_timestamp_ms = (int(expiry) if expiry is not None else 0) - ttl
            if piece.kind == "value":
                variable.update(to_spark_python(values[0], piece.types[0], top=True))
                keys += 1
            elif piece.kind == "list":
                run, run_of = [to_spark_python(values[0], piece.types[0], top=True)], (where, piece.index, expiry)
                if (where, piece.index) not in lists:
                    lists.add((where, piece.index))
                    keys += 1
            else:
                variable.updateValue(to_spark_python(values[0], piece.types[0], top=True),
                                     to_spark_python(values[1], piece.types[1], top=True))
                keys += 1
        self._append(target, views, run, run_of)
        return keys

    @staticmethod
    def _append(handle, views, run, run_of) -> None:
        """Append a run of list elements (one key, one expiry) to its list."""
        if run:
            (key_group, key), index, expiry = run_of
            variable, ttl = views[index]
            handle.set_current_key(key_group, key)
            if ttl:
                handle.batch_timestamp_ms = (int(expiry) if expiry is not None else 0) - ttl
            variable.appendList(run)
