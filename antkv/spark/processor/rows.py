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
``bool``, ``str``, ``bytes``, ``Decimal``, ``datetime.date``; a ``TIMESTAMP`` an aware ``datetime`` in
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

import datetime
from itertools import chain
from typing import Callable, Iterator

from pandas import NA

_INTEGRAL = {"ByteType", "ShortType", "IntegerType", "LongType"}
_FRACTIONAL = {"FloatType", "DoubleType"}


def _missing(v) -> bool:
    """None, or the NaN / NaT / NA pandas puts where a value is null."""
    return v is None or v is NA or v != v


_EPOCH = datetime.datetime(1970, 1, 1)


def _zone(name: str):
    """The session time zone as ``pyarrow`` hands it over: a ``zoneinfo`` zone for a region,
    a fixed ``datetime.timezone`` for an offset such as ``+02:00``."""
    import re
    import zoneinfo

    offset = re.fullmatch(r"([+-])(\d\d):?(\d\d)", name)
    if offset is None:
        return zoneinfo.ZoneInfo(name)
    sign, hours, minutes = offset.groups()
    delta = datetime.timedelta(hours=int(hours), minutes=int(minutes))
    return datetime.timezone(-delta if sign == "-" else delta)


def _local(ns: int, zone):
    """The wall time ``ns`` nanoseconds past 1970-01-01 00:00 (pandas' naive local time), in
    ``zone`` (its first occurrence when a daylight-saving change repeats it), or naive."""
    t = _EPOCH + datetime.timedelta(microseconds=ns // 1000)
    return t if zone is None else t.replace(tzinfo=zone)


def column_values(series, data_type, timezone: str, convert: Callable) -> list:
    """The values of a pandas column of Spark type ``data_type`` for the row-based API
    (``convert`` is its :func:`value_converter`), converted a column at a time."""
    name = type(data_type).__name__
    if name in ("TimestampType", "TimestampNTZType") and series.dtype.kind == "M" \
            and getattr(series.dtype, "tz", None) is None:  # naive local times, as Spark hands them
        import numpy as np

        zone = _zone(timezone) if name == "TimestampType" else None
        nat = np.iinfo(np.int64).min
        ns = series.to_numpy().astype("datetime64[ns]").view("int64").tolist()
        return [None if v == nat else _local(v, zone) for v in ns]
    return list(map(convert, series.tolist()))


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

        zone = _zone(timezone) if name == "TimestampType" else None

        def timestamp(v):
            if _missing(v):
                return None
            t = pd.Timestamp(v)
            if t.tzinfo is not None:  # an instant: in the session's zone
                return t.tz_convert(zone).to_pydatetime() if zone is not None else t.tz_localize(None).to_pydatetime()
            return _local(int(t.value), zone)
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
    """Rows of the columns ``names`` (of Spark types ``types``) from pandas frames.  Also a
    cutter for :func:`antkv.spark.state.chunks.key_chunks`: each incoming batch is converted
    once, a column at a time, and a key's chunks are lists of its Rows."""

    def __init__(self, names, types, timezone: str):
        from pyspark.sql import Row

        self.names = list(names)
        self.types = list(types)
        self.timezone = timezone
        self.row_type = Row(*self.names)
        self.converters = [value_converter(t, timezone) for t in types]

    def rows(self, frame) -> list:
        """The rows of ``frame`` (which holds at least the columns ``names``), in its order."""
        columns = [column_values(frame[n], t, self.timezone, convert)
                   for n, t, convert in zip(self.names, self.types, self.converters)]
        return list(map(self.row_type, *columns))

    def slicer(self, frame):
        """``(start, end)`` -> the list of the Rows ``start:end`` of ``frame`` (a batch)."""
        rows = self.rows(frame)
        return lambda start, end: rows[start:end]

    @staticmethod
    def join(pieces) -> list:
        return pieces[0] if len(pieces) == 1 else list(chain.from_iterable(pieces))


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
        """``chunks``: lists of the key's Rows (cut by :attr:`inputs`), or its frames."""
        rows = chain.from_iterable(c if isinstance(c, list) else self.inputs.rows(c) for c in chunks)
        return frame_of_rows(self.processor.handleInputRows(python_key(key), rows, timerValues), self.output_columns)

    def handleInitialState(self, key, frame, timerValues):
        key = python_key(key)
        for row in self.initial.rows(frame):
            self.processor.handleInitialState(key, row, timerValues)

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
        produced = self.processor.handleExpiredTimer(python_key(key), timerValues, expiredTimerInfo)
        return frame_of_rows(produced, self.output_columns)
