"""State schemas: what a state variable's values are, checked on the way in, typed on the way out.

A :class:`StateSchema` is parsed once from what a processor gives ``getValueState`` and its
kin: a DDL string (``"start long, tags array<string>, attrs map<string, int>, at struct<x:
double, y: double>"``) or a ``StructType`` (anything with Spark's ``jsonValue()``).  Then

* :meth:`StateSchema.fit` turns a value given by the processor into the row that is stored,
  or raises :class:`antkv.InvalidArgumentError` naming the state variable and the field;
* :meth:`StateSchema.restore` turns a stored row back into the value Spark's Python API
  returns: ``int``, ``float``, ``bool``, ``str``, ``bytes``, ``Decimal``, ``date``,
  ``datetime``, a ``list`` for an array, a ``dict`` for a map, a ``Row`` for a struct (the
  top level stays a tuple, as Spark's ``get`` returns it), ``None`` for a null.

How each type is stored in the row encoding of :mod:`antkv.spark.state.codec` is defined in
``docs/spark-reference.md`` ("State value types"); this module applies it.  A flat row of
longs, strings, doubles and booleans is stored as given and read back as decoded, with one
exact-type test per field.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import json
import re
import struct

from antkv import InvalidArgumentError

_F32 = struct.Struct("<f")
_INT_RANGES = {"byte": 7, "short": 15, "integer": 31, "long": 63}
_ALIASES = {"tinyint": "byte", "smallint": "short", "int": "integer", "bigint": "long", "real": "float",
            "dec": "decimal", "numeric": "decimal", "timestamp_ltz": "timestamp", "bool": "boolean"}
# fields stored as given and read back as decoded: the exact types a value may have
_PLAIN = {"long": (int,), "integer": (int,), "short": (int,), "byte": (int,), "string": (str,),
          "double": (float,), "boolean": (bool,)}
_WIDE = decimal.Context(prec=100)  # exact for every decimal(p <= 38, s)
_UTC = _dt.timezone.utc
_TOKEN = re.compile(r"\s*(`(?:[^`]|``)*`|[A-Za-z_][A-Za-z0-9_]*|\d+|[<>(),:]|'(?:[^']|\\')*')")


# --------------------------------------------------------------------------- types
#
# A type is a str for a scalar ("long", "string", "timestamp", ...), ("decimal", p, s),
# ("array", element, contains_null), ("map", key, value, value_contains_null) or
# ("struct", ((name, type, nullable), ...)).


def _from_json(t):
    """A type from Spark's JSON form of a data type (``StructType.jsonValue()``)."""
    if isinstance(t, str):
        m = re.fullmatch(r"decimal\((\d+),\s*(\d+)\)", t)
        if m:
            return ("decimal", int(m.group(1)), int(m.group(2)))
        if t.startswith(("varchar", "char")):
            return "string"
        return _scalar(t)
    kind = t.get("type")
    if kind == "array":
        return ("array", _from_json(t["elementType"]), bool(t.get("containsNull", True)))
    if kind == "map":
        return ("map", _from_json(t["keyType"]), _from_json(t["valueType"]), bool(t.get("valueContainsNull", True)))
    if kind == "struct":
        return ("struct", tuple((f["name"], _from_json(f["type"]), bool(f.get("nullable", True))) for f in t["fields"]))
    if kind == "udt":
        return _from_json(t["sqlType"])
    raise InvalidArgumentError(f"unsupported state type {json.dumps(t)}")


def _scalar(name: str):
    name = _ALIASES.get(name.lower(), name.lower())
    if name == "decimal":
        return ("decimal", 10, 0)
    if name in ("boolean", "byte", "short", "integer", "long", "float", "double", "string", "binary",
                "date", "timestamp", "timestamp_ntz", "null"):
        return name
    raise InvalidArgumentError(f"unsupported state type {name!r}")


class _DDL:
    """A recursive-descent parser of Spark's DDL for a list of fields."""

    def __init__(self, text: str):
        self.text = text
        self.tokens, pos = [], 0
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if m is None:
                if text[pos:].strip():
                    raise InvalidArgumentError(f"cannot parse the schema {text!r} at {text[pos:]!r}")
                break
            self.tokens.append(m.group(1))
            pos = m.end()
        self.i = 0

    def peek(self):
        return self.tokens[self.i].lower() if self.i < len(self.tokens) else None

    def take(self, want=None) -> str:
        if self.i >= len(self.tokens) or (want is not None and self.tokens[self.i].lower() != want):
            raise InvalidArgumentError(f"cannot parse the schema {self.text!r}: expected {want or 'more'}")
        self.i += 1
        return self.tokens[self.i - 1]

    def name(self) -> str:
        tok = self.take()
        return tok[1:-1].replace("``", "`") if tok.startswith("`") else tok

    def fields(self, end=None) -> tuple:
        out = []
        while True:
            name = self.name()
            if end is not None and self.peek() == ":":
                self.take(":")
            t = self.type()
            nullable = True
            while self.peek() in ("not", "comment"):
                if self.take().lower() == "not":
                    self.take("null")
                    nullable = False
                else:
                    self.take()
            out.append((name, t, nullable))
            if self.peek() != ",":
                break
            self.take(",")
        if end is not None:
            self.take(end)
        elif self.i != len(self.tokens):
            raise InvalidArgumentError(f"cannot parse the schema {self.text!r} at {self.tokens[self.i]!r}")
        return tuple(out)

    def type(self):
        word = self.take().lower()
        if word == "array":
            self.take("<")
            element = self.type()
            self.take(">")
            return ("array", element, True)
        if word == "map":
            self.take("<")
            key = self.type()
            self.take(",")
            value = self.type()
            self.take(">")
            return ("map", key, value, True)
        if word == "struct":
            self.take("<")
            if self.peek() == ">":
                self.take(">")
                return ("struct", ())
            return ("struct", self.fields(end=">"))
        if word in ("decimal", "dec", "numeric", "varchar", "char") and self.peek() == "(":
            self.take("(")
            args = [int(self.take())]
            if self.peek() == ",":
                self.take(",")
                args.append(int(self.take()))
            self.take(")")
            if word in ("varchar", "char"):
                return "string"
            return ("decimal", args[0], args[1] if len(args) > 1 else 0)
        return _scalar(word)


def parse_fields(schema) -> tuple:
    """``((name, type, nullable), ...)`` of a DDL string or a ``StructType``."""
    json_value = getattr(schema, "jsonValue", None)
    if json_value is not None:
        t = _from_json(json_value())
        if t[0] != "struct":
            raise InvalidArgumentError("a state schema is a struct of fields")
        return t[1]
    if isinstance(schema, dict):
        return _from_json(schema)[1]
    if not isinstance(schema, str):
        raise TypeError(f"a schema is a StructType or a DDL string, not {type(schema).__name__}")
    text = schema.strip()
    if text.lower().startswith("struct<") and text.endswith(">"):
        text = text[len("struct<"):-1]
    if not text:
        raise InvalidArgumentError("a state schema needs at least one field")
    return _DDL(text).fields()


def type_name(t) -> str:
    """Spark's simple string of a type."""
    if isinstance(t, str):
        return {"integer": "int", "long": "bigint", "short": "smallint", "byte": "tinyint"}.get(t, t)
    if t[0] == "decimal":
        return f"decimal({t[1]},{t[2]})"
    if t[0] == "array":
        return f"array<{type_name(t[1])}>"
    if t[0] == "map":
        return f"map<{type_name(t[1])},{type_name(t[2])}>"
    return "struct<" + ",".join(f"{n}:{type_name(ft)}" for n, ft, _ in t[1]) + ">"


# --------------------------------------------------------------------------- values in


class _Misfit(Exception):
    """A value that does not fit its type: ``path`` (field names, indexes) and what is wrong."""

    def __init__(self, path: list, message: str):
        self.path, self.message = path, message


def _plain(value):
    item = getattr(value, "item", None)  # NumPy and pandas scalars stand for Python ones
    if item is not None and not isinstance(value, (bytes, str, tuple, list, dict)):
        return item()
    return value


def _found(value) -> str:
    return f"{type(value).__name__} {value!r}"[:120]


def fit_value(t, value, nullable: bool = True):
    """``value`` as stored for type ``t`` (the docs' table); raises :class:`_Misfit`."""
    if value is not None:
        value = _plain(value)
    if value is None:  # None, or a NaT's item()
        if nullable:
            return None
        raise _Misfit([], "is not nullable, got None")
    if isinstance(t, str):
        if t in _INT_RANGES:
            if type(value) is bool or not isinstance(value, int):
                raise _Misfit([], f"expects {type_name(t)}, got {_found(value)}")
            bits = _INT_RANGES[t]
            if not -(1 << bits) <= value < (1 << bits):
                raise _Misfit([], f"expects {type_name(t)}, got {value} (out of range)")
            return int(value)
        if t == "string":
            if not isinstance(value, str):
                raise _Misfit([], f"expects string, got {_found(value)}")
            return value if type(value) is str else str.__str__(value)
        if t in ("double", "float"):
            if type(value) is bool or not isinstance(value, (int, float)):
                raise _Misfit([], f"expects {t}, got {_found(value)}")
            value = float(value)
            return _F32.unpack(_F32.pack(value))[0] if t == "float" and value == value else value
        if t == "boolean":
            if type(value) is not bool:
                raise _Misfit([], f"expects boolean, got {_found(value)}")
            return value
        if t == "binary":
            if not isinstance(value, (bytes, bytearray, memoryview)):
                raise _Misfit([], f"expects binary, got {_found(value)}")
            return bytes(value)
        if t == "date":
            if isinstance(value, _dt.datetime) or not isinstance(value, _dt.date):
                raise _Misfit([], f"expects date, got {_found(value)}")
            return value
        if t in ("timestamp", "timestamp_ntz"):
            if not isinstance(value, _dt.datetime):
                raise _Misfit([], f"expects {t}, got {_found(value)}")
            if getattr(value, "nanosecond", 0):
                raise _Misfit([], f"holds nanoseconds ({value}); state keeps microseconds")
            if value.tzinfo is not None:  # an instant: as UTC
                return value.astimezone(_UTC).replace(tzinfo=None)
            if t == "timestamp":  # naive: local wall time, as Spark reads it
                return value.astimezone(_UTC).replace(tzinfo=None)
            return value
        raise _Misfit([], f"has type {t}, which holds only None")
    kind = t[0]
    if kind == "decimal":
        if type(value) is bool or not isinstance(value, (int, decimal.Decimal)):
            raise _Misfit([], f"expects {type_name(t)}, got {_found(value)}")
        _, precision, scale = t
        exact = decimal.Decimal(value)
        if not exact.is_finite():
            raise _Misfit([], f"expects {type_name(t)}, got {value}")
        unscaled = exact.scaleb(scale, context=_WIDE)
        if unscaled != unscaled.to_integral_value():
            raise _Misfit([], f"expects {type_name(t)}, got {value} (more than {scale} decimal places)")
        unscaled = int(unscaled)
        if abs(unscaled) >= 10 ** precision:
            raise _Misfit([], f"expects {type_name(t)}, got {value} (more than {precision} digits)")
        return unscaled
    if kind == "array":
        if not isinstance(value, (list, tuple)) and not hasattr(value, "tolist"):
            raise _Misfit([], f"expects {type_name(t)}, got {_found(value)}")
        if hasattr(value, "tolist"):
            value = value.tolist()
        return tuple(_at(f"[{i}]", t[1], v, t[2]) for i, v in enumerate(value))
    if kind == "map":
        if not isinstance(value, dict):
            raise _Misfit([], f"expects {type_name(t)}, got {_found(value)}")
        out = []
        for k, v in value.items():
            out.append(_at(f"[key {k!r}]", t[1], k, False))
            out.append(_at(f"[{k!r}]", t[2], v, t[3]))
        return tuple(out)
    return fit_struct(t[1], value)


def _at(step, t, value, nullable):
    try:
        return fit_value(t, value, nullable)
    except _Misfit as e:
        e.path.insert(0, step)
        raise


def fit_struct(fields: tuple, value) -> tuple:
    """A struct given as a tuple, list, ``Row`` or dict, as the stored row of its fields."""
    if isinstance(value, dict):
        names = {n for n, _, _ in fields}
        extra = [k for k in value if k not in names]
        if extra:
            raise _Misfit([], f"has no field {extra[0]!r} (fields: {', '.join(sorted(names))})")
        value = tuple(value.get(n) for n, _, _ in fields)
    elif hasattr(value, "asDict") and hasattr(value, "__fields__"):  # a named Row: by name
        given = value.asDict()
        value = tuple(given.get(n) for n, _, _ in fields)
    elif not isinstance(value, (tuple, list)):
        raise _Misfit([], f"expects a struct (tuple, Row or dict), got {_found(value)}")
    if len(value) != len(fields):
        raise _Misfit([], f"has {len(fields)} field(s), got {len(value)}: {value!r}"[:200])
    return tuple(_at(n, ft, v, nullable) for (n, ft, nullable), v in zip(fields, value))


# --------------------------------------------------------------------------- values out


def restore_value(t, stored, row_class=tuple):
    """The value Spark returns for type ``t`` from what :func:`fit_value` stored; a struct is
    made by ``row_class(*names)(*values)`` (pyspark's ``Row``), or as a tuple by default."""
    if stored is None or isinstance(t, str):
        if t == "timestamp" and stored is not None:  # the stored UTC instant in local wall time
            return stored.replace(tzinfo=_UTC).astimezone().replace(tzinfo=None)
        return stored
    kind = t[0]
    if kind == "decimal":
        return decimal.Decimal(stored).scaleb(-t[2], context=_WIDE)
    if kind == "array":
        return [restore_value(t[1], v, row_class) for v in stored]
    if kind == "map":
        return {restore_value(t[1], stored[i], row_class): restore_value(t[2], stored[i + 1], row_class)
                for i in range(0, len(stored), 2)}
    values = [restore_value(ft, v, row_class) for (_, ft, _), v in zip(t[1], stored)]
    if row_class is tuple:
        return tuple(values)
    return row_class(*[n for n, _, _ in t[1]])(*values)


class StateSchema:
    """A state variable's schema, parsed once; see the module docstring.  ``what`` names the
    variable in refusals (``"value state 'session'"``)."""

    def __init__(self, schema, what: str, row_class=tuple):
        self.what = what
        self.row_class = row_class
        self.fields = parse_fields(schema)
        self.names = tuple(n for n, _, _ in self.fields)
        self.width = len(self.fields)
        # plain[i]: (the exact types field i may have to be stored as given, the bound of an
        # integer's magnitude or 0); None when some field needs fit_value whatever its value
        plain = [(_PLAIN[t], 1 << _INT_RANGES.get(t, 0) if t in _INT_RANGES else 0)
                 if isinstance(t, str) and t in _PLAIN and nullable else None for _, t, nullable in self.fields]
        self._plain = tuple(plain) if all(p is not None for p in plain) else None
        self.flat = all(isinstance(t, str) and t != "timestamp" for _, t, _ in self.fields)
        # fit gives rows of exact int, str, float, bool, bytes or None: they decode as themselves
        self.plain = all(isinstance(t, str) and (t in _PLAIN or t in ("float", "binary")) for _, t, _ in self.fields)
        # fit gives rows of exact ints and Nones
        self.ints = all(isinstance(t, str) and t in _INT_RANGES for _, t, _ in self.fields)
        # the bound of every field's magnitude when all are nullable integers of one type (the
        # commonest schema: all long): fit's first test is then one loop over the values
        bounds = {bound for _, bound in plain} if self.ints and self._plain is not None else ()
        self._int_bound = bounds.pop() if len(bounds) == 1 else 0

    def fit(self, value) -> tuple:
        """The stored row of ``value``; InvalidArgumentError naming the variable and the field."""
        bound = self._int_bound
        if bound and type(value) is tuple and len(value) == self.width:
            for v in value:
                if type(v) is int:
                    if -bound <= v < bound:
                        continue
                    break
                if v is not None:
                    break
            else:
                return value  # ints in range and Nones: stored as given
        plain = self._plain
        if plain is not None and type(value) is tuple and len(value) == self.width:
            for v, (types, bound) in zip(value, plain):
                if type(v) not in types:
                    if v is None:
                        continue
                    break
                if bound and not -bound <= v < bound:
                    break
            else:
                return value  # flat and already of the stored types (None fields checked below)
        if not isinstance(value, (tuple, list, dict)) and not hasattr(value, "asDict"):
            # Spark's client takes any iterable as the row of its items: "0" is the row ("0",)
            try:
                value = tuple(value)
            except TypeError:
                raise TypeError(f"{self.what}: '{type(value).__name__}' object is not iterable (a state "
                                f"value is a row of the schema's fields, as in Spark)") from None
        try:
            return fit_struct(self.fields, value)
        except _Misfit as e:
            raise self._refusal(e) from None

    def _refusal(self, e: _Misfit) -> InvalidArgumentError:
        if not e.path:
            return InvalidArgumentError(f"{self.what}: the schema {self.ddl()} {e.message}")
        field = str(e.path[0])
        rest = "".join(s if str(s).startswith("[") else f".{s}" for s in e.path[1:])
        return InvalidArgumentError(f"{self.what}, field {field!r}{rest}: {e.message}")

    def restore(self, stored: tuple) -> tuple:
        """The value Spark returns (a tuple of the fields' values) for a stored row."""
        if self.flat:
            return stored
        row_class = self.row_class
        return tuple(restore_value(t, v, row_class) for (_, t, _), v in zip(self.fields, stored))

    def ddl(self) -> str:
        return ", ".join(f"{n} {type_name(t)}" for n, t, _ in self.fields)
