"""Row-based processors: what Spark 4.1's ``groupBy(key).transformWithState(...)`` hands a
``StatefulProcessor`` and takes back, made from and into the pandas frames the runner streams.

A processor written for the row-based API reads each input row as a ``pyspark.sql.Row`` and
yields ``Row``s.  :class:`~antkv.spark.processor.transform.TransformWithState` runs one with
``rows=True``, and then:

* ``handleInputRows(key, rows, timerValues)`` gets a lazy iterator of ``Row``s with every input
  column, by the input's names and in its order;
* ``handleInitialState(key, initialState, timerValues)`` is called once per row of the initial
  state, with that row as a ``Row`` of the initial state's columns;
* the grouping key is a tuple of Python values.

Values are those of Spark's row-based worker (``pyarrow``'s ``as_py``): ``int``, ``float``,
``bool``, ``str``, ``bytes``, ``Decimal``, ``date``; a ``TIMESTAMP`` an aware ``datetime`` in
the session time zone, a ``TIMESTAMP_NTZ`` a naive one; an array a ``list``, a struct a
``dict``, a map a list of ``(key, value)`` pairs; ``None`` for null.  Rows reach Python through
pandas, where a floating-point null and NaN are one value: both arrive as ``None``.  A local
time that a daylight-saving change repeats (pandas holds timestamps as naive local times) is
read as its first occurrence.

What a handler yields are ``Row``s matched to the output schema by field name, as Spark matches
them: a field the schema lacks is ignored, a column no field names is null.  Anything but a
``Row`` is a ``TypeError``.
"""

from __future__ import annotations

from typing import Callable, Iterator

from pandas import NA

_INTEGRAL = {"ByteType", "ShortType", "IntegerType", "LongType"}
_FRACTIONAL = {"FloatType", "DoubleType"}


def _missing(v) -> bool:
    """None, or the NaN / NaT / NA pandas puts where a value is null."""
    return v is None or v is NA or v != v


def value_converter(data_type, timezone: str) -> Callable:
    """The function that turns a value of a pandas column of Spark type ``data_type`` into
    the value the row-based API hands a processor (see the module docstring)."""
    name = type(data_type).__name__
    if name in _INTEGRAL:
        return lambda v: None if _missing(v) else int(v)
    if name in _FRACTIONAL:
        return lambda v: None if _missing(v) else float(v)
    if name == "BooleanType":
        return lambda v: None if _missing(v) else bool(v)
    if name in ("TimestampType", "TimestampNTZType"):
        import pandas as pd

        zone = timezone if name == "TimestampType" else None

        def timestamp(v):
            if _missing(v):
                return None
            t = pd.Timestamp(v)
            if zone is not None:
                t = t.tz_localize(zone, ambiguous=True) if t.tzinfo is None else t.tz_convert(zone)
            return t.to_pydatetime()
        return timestamp
    if name == "ArrayType":
        element = value_converter(data_type.elementType, timezone)
        return lambda v: None if v is None else [element(x) for x in v]
    if name == "MapType":
        key, value = value_converter(data_type.keyType, timezone), value_converter(data_type.valueType, timezone)
        return lambda v: None if v is None else [(key(k), value(x)) for k, x in dict(v).items()]
    if name == "StructType":
        fields = [(f.name, value_converter(f.dataType, timezone)) for f in data_type.fields]

        def struct(v):
            if v is None:
                return None
            get = v.get if isinstance(v, dict) else v.__getitem__
            return {n: convert(get(n)) for n, convert in fields}
        return struct
    return lambda v: None if _missing(v) else v  # str, bytes, Decimal, date: as pandas holds them


class RowMaker:
    """Rows of the columns ``names`` (of Spark types ``types``) from pandas frames."""

    def __init__(self, names, types, timezone: str):
        from pyspark.sql import Row

        self.names = list(names)
        self.row_type = Row(*self.names)
        self.converters = [value_converter(t, timezone) for t in types]

    def rows(self, frame) -> Iterator:
        """The rows of ``frame`` (which holds at least the columns ``names``), in its order."""
        columns = [list(map(convert, frame[n].tolist())) for n, convert in zip(self.names, self.converters)]
        return map(self.row_type, *columns)

    def rows_of_chunks(self, chunks) -> Iterator:
        """One lazy iterator of the rows of every frame of ``chunks``."""
        for frame in chunks:
            yield from self.rows(frame)


def python_key(key: tuple) -> tuple:
    """A grouping key with numpy scalars made Python values, as the row-based API has it."""
    import numpy as np

    return tuple(k.item() if isinstance(k, np.generic) else k for k in key)


def frame_of_rows(produced, columns):
    """What one handler call yielded -- Rows, or None -- as one pandas frame of ``columns``
    (matched by field name), or None when it yielded nothing."""
    import pandas as pd
    from pyspark.sql import Row

    if produced is None:
        return None
    records = []
    for row in produced:
        if not isinstance(row, Row):
            raise TypeError(f"a row-based processor yields pyspark.sql.Row objects, not {type(row).__name__}")
        records.append(row.asDict(True))
    if not records:
        return None
    return pd.DataFrame.from_records(records, columns=list(columns))


class RowProcessor:
    """A row-based ``processor`` behind the pandas calls the runner makes: its three handlers
    take what :func:`~antkv.spark.processor.transform._run_partition` passes a pandas processor
    (a key's chunks as frames, a key's initial state as one frame) and return frames."""

    def __init__(self, processor, input_columns, initial_columns, output_columns, row_types):
        input_types, initial_types, timezone = row_types
        self.processor = processor
        self.inputs = RowMaker(input_columns, input_types, timezone)
        self.initial = None if initial_columns is None else RowMaker(initial_columns, initial_types, timezone)
        self.output_columns = list(output_columns)

    def handleInputRows(self, key, chunks, timerValues):
        rows = self.inputs.rows_of_chunks(chunks)
        return frame_of_rows(self.processor.handleInputRows(python_key(key), rows, timerValues), self.output_columns)

    def handleInitialState(self, key, frame, timerValues):
        key = python_key(key)
        for row in self.initial.rows(frame):
            self.processor.handleInitialState(key, row, timerValues)

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
        produced = self.processor.handleExpiredTimer(python_key(key), timerValues, expiredTimerInfo)
        return frame_of_rows(produced, self.output_columns)
