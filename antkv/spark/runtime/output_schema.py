"""The output schema, checked in the task: each column's values must be of its declared type.

A processor's (or state function's) output frames reach Spark as Arrow batches of the output
schema.  A column whose values cannot be of its type would fail there, deep in the Arrow
conversion, naming neither the column nor the operator; :class:`OutputCheck` refuses it in
the task first, as :class:`antkv.InvalidArgumentError` naming the operator, the column, the
expected type and the type found (with the first value that does not fit).  Nothing is
published: the task fails, so the batch does.

The test is per column, on its dtype and ``pandas.api.types.infer_dtype`` (no loop over the
values in Python).  Values Spark converts are converted the same way: an integer column of a
``decimal`` type becomes ``Decimal`` values (Spark's int-to-decimal coercion).  Nested types
(arrays, maps, structs) are left to Spark.
"""

from __future__ import annotations

import decimal

import pandas as pd

from antkv import InvalidArgumentError

from antkv.spark.state.schema import parse_fields, type_name

_INTEGRAL = {"byte", "short", "integer", "long"}
# type -> (dtype kinds taken as they are, infer_dtype results of object columns taken as they are)
_ACCEPTED = {
    "integral": ("iu", {"integer", "empty"}),
    "fractional": ("iuf", {"integer", "floating", "mixed-integer-float", "decimal", "empty"}),
    "string": ("", {"string", "empty"}),
    "boolean": ("b", {"boolean", "empty"}),
    "binary": ("", {"bytes", "empty"}),
    "date": ("M", {"date", "datetime", "datetime64", "empty"}),
    "timestamp": ("M", {"datetime", "datetime64", "empty"}),
    "decimal": ("", {"decimal", "empty"}),
}


def _category(t) -> str | None:
    if isinstance(t, str):
        if t in _INTEGRAL:
            return "integral"
        if t in ("float", "double"):
            return "fractional"
        if t in ("timestamp", "timestamp_ntz"):
            return "timestamp"
        return t if t in _ACCEPTED else None
    return "decimal" if t[0] == "decimal" else None  # nested types: Spark checks them


class OutputCheck:
    """The output schema of ``operator`` (a DDL string or a ``StructType``), parsed once."""

    def __init__(self, schema, operator: str):
        self.operator = operator
        self.columns = [(name, t, _category(t)) for name, t, _ in parse_fields(schema)]

    def fit(self, frame):
        """``frame``, its decimal columns of integers as Decimals; InvalidArgumentError when a
        column's values are not of its type."""
        for name, t, category in self.columns:
            if category is None or name not in frame.columns:
                continue
            col = frame[name]
            kinds, inferred_ok = _ACCEPTED[category]
            kind = col.dtype.kind
            if kind in kinds:
                continue
            inferred = pd.api.types.infer_dtype(col, skipna=True)
            if category == "decimal" and (kind in "iu" or inferred == "integer"):
                frame = frame.assign(**{name: [None if v is None or v != v else decimal.Decimal(int(v)) for v in col]})
                continue
            if inferred in inferred_ok:
                continue
            if category == "integral" and inferred in ("floating", "mixed-integer-float") and _whole(col):
                continue  # integers that pandas holds as floats (a null among them)
            raise InvalidArgumentError(
                f"output of {self.operator!r}: column {name!r} expects {type_name(t)}, found "
                f"{inferred} values (dtype {col.dtype}), e.g. {_first_misfit(col, category)}")
        return frame


def _whole(col) -> bool:
    values = pd.to_numeric(col.dropna(), errors="coerce")
    return bool(values.notna().all() and (values % 1 == 0).all())


def _first_misfit(col, category: str) -> str:
    """A value of ``col`` that does not fit ``category``, as ``type value``."""
    fits = {
        "integral": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "fractional": lambda v: isinstance(v, (int, float, decimal.Decimal)) and not isinstance(v, bool),
        "string": lambda v: isinstance(v, str),
        "boolean": lambda v: isinstance(v, bool),
        "binary": lambda v: isinstance(v, (bytes, bytearray)),
        "decimal": lambda v: isinstance(v, (int, decimal.Decimal)) and not isinstance(v, bool),
    }.get(category, lambda v: False)
    for v in col:
        if v is None or (isinstance(v, float) and v != v):
            continue
        plain = v.item() if hasattr(v, "item") and not isinstance(v, (str, bytes)) else v
        if not fits(plain):
            return f"{type(plain).__name__} {plain!r}"[:100]
    return "?"
