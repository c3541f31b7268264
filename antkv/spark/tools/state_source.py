"""The ``antkv-state`` Spark data source: a version's state as a distributed DataFrame.

::

    from antkv.spark import read_state_df
    df = read_state_df(spark, "s3://bucket/state", "clicks")            # the newest version
    df = (spark.read.format("antkv-state")                              # after register_state_source(spark)
          .option("operator", "clicks").option("batchId", 4).load("s3://bucket/state"))

It is modelled on Spark's own ``statestore`` source (same option names where they apply) and
is a Spark 4 Python data source (:mod:`pyspark.sql.datasource`):

* planning (a Python worker the driver's JVM starts) reads only the published marker of the
  version: one Spark partition per state partition, each told its manifest;
* each reading task opens its partition's store at that manifest in its executor
  (:func:`antkv.spark.store.opening.open_store`, through the executor's local cache),
  scans it once (:func:`antkv.spark.tools.state_records.partition_records`) and aborts it;
  nothing of the state goes through the driver.

Columns (:data:`SCHEMA`): ``stateVarName``, ``stateVarType`` (``value``, ``list``, ``map`` or
``timer``), ``key`` (the grouping key), ``user_map_key``, ``value``,
``expiration_timestamp_ms`` (a TTL expiry, or a timer's time) and ``partition_id``.  State is
stored without its Spark schema, so ``key``, ``user_map_key`` and ``value`` are JSON text by
default (the key as an object of the key columns, rows as arrays; dates and timestamps in ISO
8601, bytes in base64); a schema given with ``.schema(...)`` that declares any of them as a
struct (or array) gets the decoded values themselves, which Spark converts field by field.
"""

from __future__ import annotations

import base64
import datetime as _dt
import decimal
import json
import os
from dataclasses import dataclass

import antkv
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StringType, StructType

from antkv.spark.store.location import as_location, check_operator
from antkv.spark.store.opening import open_store
from antkv.spark.store.store_options import StoreOptions
from antkv.spark.tools.state_reader import key_columns, published_version, reading_options
from antkv.spark.tools.state_records import partition_records

NAME = "antkv-state"
_TYPES = (("stateVarName", "string"), ("stateVarType", "string"), ("key", "string"), ("user_map_key", "string"),
          ("value", "string"), ("expiration_timestamp_ms", "bigint"), ("partition_id", "int"))
SCHEMA = ", ".join(f"{name} {kind}" for name, kind in _TYPES)
_COLUMNS = tuple(name for name, _ in _TYPES)
_DECODED = {"key", "user_map_key", "value"}  # columns holding decoded state: JSON text or as they are

# option (lower case, as Spark hands them over) -> its spelling in messages
OPTIONS = {
    "path": "path", "operator": "operator", "operatorid": "operatorId", "batchid": "batchId",
    "version": "version", "statevarname": "stateVarName", "readregisteredtimers": "readRegisteredTimers",
    "flattencollectiontypes": "flattenCollectionTypes", "cachedir": "cacheDir",
}


@dataclass(frozen=True)
class StateRead:
    """What one read asks for, from the source's options (:func:`parse_options`)."""

    location: str
    operator: str
    version: int | None  # None: the newest published
    state_var: str | None
    timers: bool
    flatten: bool
    cache_dir: str | None


def _integer(options, name: str) -> int | None:
    raw = options.get(name.lower())
    if raw is None:
        return None
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise antkv.InvalidArgumentError(f"option {name} must be an integer, got {raw!r}") from None
    if value < 0:
        raise antkv.InvalidArgumentError(f"option {name} must be >= 0, got {value}")
    return value


def _boolean(options, name: str, default: bool) -> bool:
    raw = options.get(name.lower())
    if raw is None:
        return default
    text = str(raw).strip().lower()
    if text not in ("true", "false"):
        raise antkv.InvalidArgumentError(f"option {name} must be true or false, got {raw!r}")
    return text == "true"


def parse_options(options) -> StateRead:
    """The read an ``antkv-state`` source's options ask for (names in any case); bad or
    unknown options raise :class:`antkv.InvalidArgumentError` naming them."""
    options = {str(k).lower(): v for k, v in dict(options).items()}
    unknown = sorted(k for k in options if k not in OPTIONS)
    if unknown:
        raise antkv.InvalidArgumentError(f"unknown option(s) {unknown} of the {NAME} source; it knows "
                                         f"{', '.join(sorted(OPTIONS.values()))}")
    location = options.get("path")
    if not location:
        raise antkv.InvalidArgumentError(f"the {NAME} source needs the checkpoint location: load(location)")
    operator, alias = options.get("operator"), options.get("operatorid")
    if operator is not None and alias is not None and operator != alias:
        raise antkv.InvalidArgumentError(f"options operator ({operator!r}) and operatorId ({alias!r}) disagree")
    operator = operator if operator is not None else alias
    if operator is None:
        raise antkv.InvalidArgumentError(f"the {NAME} source needs option operator (the operator's name)")
    batch_id, version = _integer(options, "batchId"), _integer(options, "version")
    if batch_id is not None and version is not None:
        raise antkv.InvalidArgumentError("give batchId (the state after that batch) or version, not both")
    if version == 0:
        raise antkv.InvalidArgumentError("version 0 is the empty state before the first batch: nothing to read")
    timers = _boolean(options, "readRegisteredTimers", False)
    state_var = options.get("statevarname")
    if timers and state_var is not None:
        raise antkv.InvalidArgumentError("options stateVarName and readRegisteredTimers exclude each other, as in Spark")
    return StateRead(str(location), check_operator(operator), version if batch_id is None else batch_id + 1,
                     state_var, timers, _boolean(options, "flattenCollectionTypes", True), options.get("cachedir"))


class StatePartition(InputPartition):
    """One state partition of the version: its number and the manifest the marker names."""

    def __init__(self, partition: int, manifest: str):
        super().__init__(partition)
        self.partition = partition
        self.manifest = manifest


def _json_default(value):
    if isinstance(value, (_dt.datetime, _dt.date)):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, decimal.Decimal):
        return str(value)
    raise TypeError(f"{type(value).__name__} has no JSON form")


def to_json(value) -> str | None:
    """The JSON text of a decoded value (tuples become arrays); None stays None."""
    return None if value is None else json.dumps(value, default=_json_default, ensure_ascii=False)


class StateReader(DataSourceReader):
    """Plans one Spark partition per state partition and reads each in its executor."""

    def __init__(self, read: StateRead, schema: StructType):
        self.read_request = read
        loc = as_location(read.location)
        self.version, self.manifests = published_version(loc, read.operator, read.version)
        self.key_names = key_columns(loc, read.operator)
        unknown = [f.name for f in schema.fields if f.name not in _COLUMNS]
        if unknown:
            raise antkv.InvalidArgumentError(f"the {NAME} source has no column(s) {unknown}; its columns are "
                                             f"{', '.join(_COLUMNS)}")
        self.columns = [(f.name, f.name in _DECODED and isinstance(f.dataType, StringType)) for f in schema.fields]

    def partitions(self):
        return [StatePartition(p, m) for p, m in enumerate(self.manifests)]

    def read(self, partition: StatePartition):
        read = self.read_request
        options = reading_options(StoreOptions(cache_dir=read.cache_dir) if read.cache_dir else None)
        store = open_store(read.location, read.operator, partition.partition, self.version,
                           manifest=partition.manifest, options=options)
        try:
            records = partition_records(store, partition.partition, state_var=read.state_var,
                                        timers=read.timers, flatten=read.flatten)
            for r in records:
                yield tuple(self._cell(name, as_json, r) for name, as_json in self.columns)
        finally:
            store.abort()

    def _cell(self, name: str, as_json: bool, r):
        if name == "key":
            value = r.key
            if as_json and self.key_names is not None and len(self.key_names) == len(value):
                value = dict(zip(self.key_names, value))
        elif name == "value":
            value = r.value
        elif name == "user_map_key":
            value = r.user_key
        elif name == "stateVarName":
            return r.name
        elif name == "stateVarType":
            return r.kind
        elif name == "expiration_timestamp_ms":
            return r.expiry_ms
        else:
            return r.partition
        return to_json(value) if as_json else value


class StateDataSource(DataSource):
    """``spark.read.format("antkv-state")``: see the module docstring."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self):
        return SCHEMA

    def reader(self, schema: StructType) -> StateReader:
        return StateReader(parse_options(self.options), schema)


def register_state_source(spark) -> None:
    """Make ``spark.read.format("antkv-state")`` known to ``spark`` (again: harmless)."""
    spark.dataSource.register(StateDataSource)


def read_state_df(spark, location, operator: str, version: int | None = None, *, batch_id: int | None = None,
                  state_var: str | None = None, timers: bool = False, flatten: bool = True,
                  cache_dir: str | None = None, schema=None):
    """A published version of ``operator``'s state as a DataFrame (lazy; read in the
    executors): ``version`` (or ``batch_id``, Spark's numbering: the state after that batch;
    default the newest), the source's options as arguments.  The options and the version are
    checked here first, so a bad one raises :class:`antkv.InvalidArgumentError` at once."""
    if not isinstance(location, (str, os.PathLike)):
        raise TypeError(f"location must be a URI or path (str), not {type(location).__name__}")
    options = {"path": os.fspath(location), "operator": operator, "readRegisteredTimers": str(bool(timers)).lower(),
               "flattenCollectionTypes": str(bool(flatten)).lower()}
    for name, value in (("version", version), ("batchId", batch_id)):
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name} must be an int, not {type(value).__name__}")
            options[name] = str(value)
    if state_var is not None:
        options["stateVarName"] = state_var
    if cache_dir is not None:
        options["cacheDir"] = os.fspath(cache_dir)
    read = parse_options(options)
    published_version(as_location(read.location), read.operator, read.version)  # refuses an unpublished one
    register_state_source(spark)
    reader = spark.read.format(NAME).options(**{k: v for k, v in options.items() if k != "path"})
    if schema is not None:
        reader = reader.schema(schema)
    return reader.load(read.location)
