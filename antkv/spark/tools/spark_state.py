"""What a Spark checkpoint holds for one stateful operator, read through Spark's own sources.

Spark reads a streaming query's state back with two batch data sources of its own:
``state-metadata`` (one row per stateful operator: its id, name, partitions and the batches
whose state is committed) and ``statestore`` (the state of one operator at one batch, with
``stateVarName`` naming a ``transformWithState`` state variable and ``readRegisteredTimers``
its timers).  This module plans, on the driver, what a migration reads: one *piece* per kind
of state (an ``applyInPandasWithState`` state row, each value, list and map state variable, the
timers), each a lazy ``statestore`` DataFrame whose columns are the grouping key under the
antkv key column names and the piece's payload; and it refuses, before any of it is read,
what antkv cannot carry:

* an operator of another kind than the one asked for, or not found in the checkpoint;
* a state variable the processor does not declare, or one Spark holds of another kind;
* a type whose values antkv does not give back equal: a sample value of every field type is
  stored and read back on the driver as the migration writes it -- through the state codec
  (:mod:`antkv.spark.state.codec`) for an ``applyInPandasWithState`` state row, through a
  processor's typed state variables (:mod:`antkv.spark.state.schema`) for a state variable --
  so what is carried follows what is written.

Values reach the tasks as Arrow and become the Python values Spark's own Python API hands a
processor (:func:`to_spark_python`): structs as tuples (rows), arrays as lists, maps as
dicts, timestamps as naive local datetimes.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import json
from dataclasses import dataclass

from antkv import InvalidArgumentError

from antkv.spark.state.codec import decode_key, decode_row, encode_key, encode_row
from antkv.spark.state.schema import StateSchema

# operator names Spark's state-metadata source reports, by the API that made them
APPLY_IN_PANDAS_WITH_STATE = ("applyInPandasWithState",)
TRANSFORM_WITH_STATE = ("transformWithStateInPandasExec", "transformWithStateExec",
                        "transformWithStateInPySparkExec")
PIECE_COLUMN = "__antkv_piece"  # which piece a row of the unioned state belongs to


@dataclass(frozen=True)
class SparkOperator:
    """One stateful operator of a Spark checkpoint (a row of ``state-metadata``)."""

    operator_id: int
    name: str
    partitions: int
    batch_id: int  # the newest batch whose state is committed
    properties: dict  # the operator's properties (transformWithState: its state variables)


@dataclass(frozen=True)
class Piece:
    """One kind of state to carry: ``kind`` is ``"row"`` (an ``applyInPandasWithState`` state
    row and its timeout), ``"value"``, ``"list"``, ``"map"`` (a state variable) or
    ``"timers"``; ``payload`` names the piece's columns in the unioned frame and
    ``types`` their Spark types (to convert Arrow values); ``ttl`` marks a variable whose
    elements carry their expiry (its last payload column)."""

    index: int
    kind: str
    name: str
    payload: tuple
    types: tuple
    ttl: bool = False


def spark_operator(spark, checkpoint: str, operator_id: int, accepted: tuple, api: str) -> SparkOperator:
    """The operator ``operator_id`` of ``checkpoint``, refused unless Spark names it one of
    ``accepted`` (the operators ``api`` makes)."""
    from pyspark.errors import PySparkException

    if isinstance(operator_id, bool) or not isinstance(operator_id, int) or operator_id < 0:
        raise InvalidArgumentError(f"operator_id must be an int >= 0, got {operator_id!r}")
    try:
        rows = spark.read.format("state-metadata").load(checkpoint).collect()
    except PySparkException as e:  # Spark's own refusal: not a checkpoint with state
        raise InvalidArgumentError(f"{checkpoint} is not a Spark streaming checkpoint with state: "
                                   f"{str(e).splitlines()[0]}") from e
    if not rows:
        raise InvalidArgumentError(f"{checkpoint} is not a Spark streaming checkpoint with state "
                                   f"(Spark finds no stateful operator there)")
    found = [r for r in rows if r["operatorId"] == operator_id]
    names = sorted({(r["operatorId"], r["operatorName"]) for r in rows})
    if not found:
        raise InvalidArgumentError(f"{checkpoint} has no stateful operator {operator_id} "
                                   f"(operators: {names or 'none'})")
    row = found[0]
    if row["operatorName"] not in accepted:
        raise InvalidArgumentError(
            f"operator {operator_id} of {checkpoint} is {row['operatorName']!r}, not an operator "
            f"{api} makes: antkv migrates applyInPandasWithState and transformWithState(InPandas) state "
            f"only (operators: {names})")
    stores = {r["stateStoreName"] for r in found}
    if len(stores) != 1:
        raise InvalidArgumentError(f"operator {operator_id} of {checkpoint} has several state stores "
                                   f"{sorted(stores)}: antkv carries single-store operators")
    props = row["operatorProperties"] if "operatorProperties" in row.asDict() else None
    return SparkOperator(operator_id, row["operatorName"], int(row["numPartitions"]),
                         int(row["maxBatchId"]), json.loads(props) if props else {})


# the time modes as Spark records them in a transformWithState operator's properties (its
# TimeMode objects' names: ``timeMode="None"`` is recorded as ``NoTime``), by the spelling a
# query and antkv's runner use
_RECORDED_TIME_MODES = {"notime": "None", "none": "None", "processingtime": "ProcessingTime",
                        "eventtime": "EventTime"}


def recorded_time_mode(recorded) -> str:
    """The time mode (``None``, ``ProcessingTime`` or ``EventTime``) of a ``timeMode`` Spark
    recorded for an operator; an unknown one is returned as recorded, so it matches none."""
    return _RECORDED_TIME_MODES.get(str(recorded).lower(), str(recorded))


# --------------------------------------------------------------------------- types


def _sample(dtype):
    """A non-trivial value of Spark type ``dtype`` as Spark's Python API gives it, or None
    when there is none to offer (the type is then refused)."""
    from pyspark.sql import types as T

    simple = {
        T.BooleanType: True, T.ByteType: -3, T.ShortType: 300, T.IntegerType: -70000,
        T.LongType: 1 << 40, T.FloatType: 1.5, T.DoubleType: -2.25, T.StringType: "sé",
        T.BinaryType: b"\x00b", T.DateType: _dt.date(2024, 2, 29),
        T.TimestampType: _dt.datetime(2024, 2, 29, 1, 2, 3, 4),
        T.TimestampNTZType: _dt.datetime(2024, 2, 29, 1, 2, 3, 4),
    }
    for cls, value in simple.items():
        if isinstance(dtype, cls):
            return value
    if isinstance(dtype, T.DecimalType):
        return decimal.Decimal(1).scaleb(-dtype.scale) + 1
    if isinstance(dtype, T.ArrayType):
        element = _sample(dtype.elementType)
        return None if element is None else [element, None] if dtype.containsNull else [element]
    if isinstance(dtype, T.MapType):
        k, v = _sample(dtype.keyType), _sample(dtype.valueType)
        return None if k is None or v is None else {k: v}
    if isinstance(dtype, T.StructType):
        values = [_sample(f.dataType) for f in dtype.fields]
        return None if any(v is None for v in values) else T.Row(**{f.name: v for f, v in zip(dtype.fields, values)})
    return None


def check_row_type(schema, what: str) -> None:
    """Refuse a row schema (a ``StructType``) with a field the codec does not give back equal."""
    for f in schema.fields:
        sample = _sample(f.dataType)
        ok = sample is not None
        if ok:
            try:
                ok = decode_row(encode_row((sample,))) == (sample,)
            except (TypeError, InvalidArgumentError):
                ok = False
        if not ok:
            raise InvalidArgumentError(
                f"{what}: field {f.name!r} of type {f.dataType.simpleString()} cannot be carried "
                f"(antkv's state rows do not hold it unchanged); nothing was written")


def check_variable_type(schema, what: str) -> None:
    """Refuse a state variable's row schema (a ``StructType``) with a field whose value a
    processor's typed state variable does not give back equal: a sample value of the field is
    fitted to the schema, encoded, decoded and restored as the processor handle's state
    variables do (:class:`antkv.spark.state.schema.StateSchema`), so arrays, maps, structs and
    decimals are carried as the handle stores them."""
    from pyspark.sql import Row
    from pyspark.sql import types as T

    for f in schema.fields:
        sample = _sample(f.dataType)
        ok = sample is not None
        if ok:
            try:
                typed = StateSchema(T.StructType([f]), what, Row)
                ok = typed.restore(decode_row(encode_row(typed.fit((sample,))))) == (sample,)
            except (TypeError, InvalidArgumentError):
                ok = False
        if not ok:
            raise InvalidArgumentError(
                f"{what}: field {f.name!r} of type {f.dataType.simpleString()} cannot be carried "
                f"(a processor's state variables do not hold it unchanged); nothing was written")


def check_key_type(schema, what: str) -> None:
    """Refuse a key schema whose fields the key encoding does not give back equal, and
    timestamps (their Python value depends on the session's time zone)."""
    from pyspark.sql import types as T

    for f in schema.fields:
        sample = None if isinstance(f.dataType, (T.TimestampType, T.TimestampNTZType)) else _sample(f.dataType)
        ok = sample is not None
        if ok:
            try:
                ok = decode_key(encode_key((sample,)))[0] == (sample,)
            except (TypeError, InvalidArgumentError):
                ok = False
        if not ok:
            raise InvalidArgumentError(
                f"{what}: key field {f.name!r} of type {f.dataType.simpleString()} cannot be carried "
                f"as a grouping key; nothing was written")


# --------------------------------------------------------------------------- reading


def read_piece(spark, checkpoint: str, op: SparkOperator, key, **options):
    """The ``statestore`` DataFrame of ``op`` at its batch with ``options``, its key struct
    flattened into the columns ``key`` (by position), refused when the arity differs."""
    from pyspark.errors import PySparkException

    reader = spark.read.format("statestore").option("batchId", op.batch_id).option("operatorId", op.operator_id)
    for name, value in options.items():
        reader = reader.option(name, value)
    try:
        df = reader.load(checkpoint)
    except PySparkException as e:  # Spark's own refusal, e.g. a state variable it does not hold
        raise InvalidArgumentError(f"Spark cannot read the state of operator {op.operator_id} "
                                   f"({', '.join(f'{k}={v}' for k, v in options.items()) or 'its state'}): "
                                   f"{str(e).splitlines()[0]}") from e
    key_type = df.schema["key"].dataType
    if len(key_type.fields) != len(key):
        raise InvalidArgumentError(
            f"Spark's grouping key has {len(key_type.fields)} column(s) "
            f"{[f.name for f in key_type.fields]}, the antkv key {len(key)} {list(key)}")
    return df, key_type


def key_columns(df, key):
    from pyspark.sql import functions as F

    fields = df.schema["key"].dataType.fields
    return [F.col("key").getField(f.name).alias(k) for f, k in zip(fields, key)]


def to_spark_python(value, dtype, top: bool = False):
    """An Arrow ``to_pylist`` value of Spark type ``dtype`` as Spark's Python API gives it:
    a struct as a tuple (``top``: a state row) or a ``Row``, an array as a list, a map as a
    dict, a timestamp as a naive local datetime (as ``TimestampType.fromInternal``)."""
    from pyspark.sql import types as T

    if value is None:
        return None
    if isinstance(dtype, T.StructType):
        values = [to_spark_python(value[f.name], f.dataType) for f in dtype.fields]
        return tuple(values) if top else T.Row(**{f.name: v for f, v in zip(dtype.fields, values)})
    if isinstance(dtype, T.ArrayType):
        return [to_spark_python(v, dtype.elementType) for v in value]
    if isinstance(dtype, T.MapType):
        return {to_spark_python(k, dtype.keyType): to_spark_python(v, dtype.valueType) for k, v in value}
    if isinstance(dtype, T.TimestampType) and value.tzinfo is not None:
        return value.astimezone().replace(tzinfo=None)
    return value
