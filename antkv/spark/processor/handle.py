"""An antkv-backed ``StatefulProcessorHandle``: what a Spark ``StatefulProcessor`` sees.

The handle gives a processor's ``init`` its state variables (``getValueState``,
``getListState``, ``getMapState``, each with ``ttlDurationMs``), and its handlers the timers
of the current grouping key (``registerTimer``, ``deleteTimer``, ``listTimers``) and
``deleteIfExists``, with the names, arguments and rules of Spark 4's handle:

* TTL needs the ``ProcessingTime`` time mode, timers need a time mode other than ``None``
  (Spark raises the same refusals); a TTL of None or 0 means no TTL, a negative one is refused;
* the grouping key is implicit: the runner sets it before each handler call
  (:meth:`set_current_key`), and every state variable and timer call acts on it.

**State ids.**  A state variable's id (the 2 bytes after the key group in its stored keys,
:mod:`antkv.spark.store.keygroups`) is derived from its name, ``1 + xxh32(name) % 0xFF00``, so every
partition and every batch agrees on it without coordination.  The first use of an id records
``kind | name`` under ``PROCESSOR_STATE_PREFIX + id`` in the store's metadata area; a second
name with the same id, or the same name with another kind, is refused with a clear error
before anything is written under it.  Ids from ``0xFF00`` up are reserved for the timers and
the TTL index.
"""

from __future__ import annotations

import functools

import xxhash
from pyspark.sql import Row

from antkv import InvalidArgumentError

from antkv.spark.state.codec import encode_key
from antkv.spark.store.keygroups import METADATA_PREFIX, KeyGroupError, KeyGroupRange, key_group_prefix, state_id_bytes
from antkv.spark.state.schema import StateSchema
from antkv.spark.processor.variables import (
    ListState, MapState, ValueState, expired_index_entries, spark_error)
from antkv.spark.processor.timers import Timers

PROCESSOR_STATE_PREFIX = METADATA_PREFIX + b"processor-state"
FIRST_RESERVED_ID = 0xFF00
TIME_MODES = {"none": "None", "processingtime": "ProcessingTime", "eventtime": "EventTime"}
_KIND_NAMES = {b"v": "value", b"l": "list", b"m": "map"}


def check_time_mode(time_mode) -> str:
    """Spark's spelling of a time mode given in any case; InvalidArgumentError otherwise."""
    if not isinstance(time_mode, str):
        raise TypeError(f"time_mode must be a str, not {type(time_mode).__name__}")
    mode = TIME_MODES.get(time_mode.lower())
    if mode is None:
        raise InvalidArgumentError(f"time mode must be one of None, ProcessingTime, EventTime; got {time_mode!r}")
    return mode


def check_ttl(name: str, ttl, time_mode: str) -> int | None:
    """The TTL in ms of state ``name`` (None: no TTL), refused as Spark refuses it."""
    if ttl is None or ttl == 0:
        return None
    if isinstance(ttl, bool) or not hasattr(ttl, "__index__"):
        raise TypeError(f"ttlDurationMs of state {name!r} must be an int, not {type(ttl).__name__}")
    if ttl < 0:
        raise spark_error("initializing state", "STATEFUL_PROCESSOR_TTL_DURATION_MUST_BE_POSITIVE",
                          f"ttlDurationMs of state {name!r} must be positive, got {ttl}")
    if time_mode != "ProcessingTime":
        raise spark_error("initializing state", "STATEFUL_PROCESSOR_CANNOT_USE_TTL_FOR_TIME_MODE",
                          f"state {name!r} has a TTL, which needs the ProcessingTime time mode "
                          f"(this processor runs in {time_mode}), as in Spark")
    return int(ttl)


@functools.lru_cache(maxsize=256)
def _parsed(schema: str, what: str) -> StateSchema:
    return StateSchema(schema, what, Row)


def state_schema(schema, what: str) -> StateSchema:
    """The parsed schema of a state variable (a DDL string is parsed once per process)."""
    if isinstance(schema, str):
        return _parsed(schema, what)
    return StateSchema(schema, what, Row)


def _refuse_outside_init(operation: str, what: str, phase: str) -> None:
    """Spark creates and deletes state variables in ``init()`` only (its handle state CREATED)."""
    raise spark_error(what, "STATE_STORE_CANNOT_PERFORM_OPERATION_WITH_INVALID_HANDLE_STATE",
                      f"Failed to perform stateful processor operation={operation} with invalid "
                      f"handleState={phase}: state variables are created and deleted in init()")


def state_id_of(name: str) -> int:
    """The state id of the state variable ``name`` (see the module docstring)."""
    return 1 + xxhash.xxh32_intdigest(name.encode("utf-8")) % (FIRST_RESERVED_ID - 1)


class ProcessorHandle:
    """The handle of one partition's processor for one batch.

    ``batch_timestamp_ms`` is the batch's processing time (TTL and processing-time timers);
    the current key's key group always lies in ``owned`` (:class:`KeyGroupError` otherwise),
    so nothing is written outside the partition's key groups."""

    def __init__(self, store, owned: KeyGroupRange, time_mode: str, batch_timestamp_ms: int):
        if not isinstance(owned, KeyGroupRange):
            raise TypeError("owned must be a KeyGroupRange")
        self.store = store
        self.owned = owned
        self.time_mode = check_time_mode(time_mode)
        self.batch_timestamp_ms = int(batch_timestamp_ms)
        self.timers = Timers(store, self)
        self._variables: dict[bytes, object] = {}  # state id bytes -> state variable
        self._deleted: dict[str, list] = {}  # name -> its state objects deleteIfExists removed
        # the current key: its key group's prefix (None: no current key) and its encoding; read
        # directly by the state variables and timers, which check the prefix is not None
        self.current_kg: bytes | None = None
        self.current_key = b""
        self._kg_number = None  # the key group of _kg_prefix, the last one set
        self._kg_prefix = b""
        # what a value state's exists() read last: (the current key it was read for, state id,
        # stored row or None), owned by ValueState (every write of a value state forgets it)
        self.value_read = None
        # Spark's handle state: CREATED while init() runs, INITIALIZED from the first handler
        # call on (the runner sets a current key before each one)
        self.phase = "CREATED"

    # ------------------------------------------------------------------ the current key

    def set_current_key(self, key_group: int, key: tuple) -> None:
        self.phase = "INITIALIZED"
        if key_group != self._kg_number:  # keys come grouped by key group: check and encode once
            if key_group not in self.owned:
                raise KeyGroupError(f"key group {key_group} is outside this partition's key groups "
                                    f"[{self.owned.start}, {self.owned.stop})")
            self._kg_prefix = key_group_prefix(int(key_group))
            self._kg_number = key_group
        self.current_kg = self._kg_prefix
        self.current_key = encode_key(key)

    def clear_current_key(self) -> None:
        self.current_kg, self.current_key = None, b""

    def current_key_bytes(self) -> tuple[bytes, bytes]:
        """``(key group prefix, encoded grouping key)`` of the current key."""
        if self.current_kg is None:
            raise spark_error("using state or timers", "STATE_STORE_CANNOT_PERFORM_OPERATION_WITH_INVALID_HANDLE_STATE",
                              f"no current grouping key (handleState={self.phase}): state and timers are "
                              f"used from handleInputRows, handleExpiredTimer and handleInitialState only")
        return self.current_kg, self.current_key

    # ------------------------------------------------------------------ state variables

    def _ttl(self, name: str, ttl) -> int | None:
        return check_ttl(name, ttl, self.time_mode)

    def _register(self, name: str, kind: bytes) -> int:
        if not isinstance(name, str) or not name:
            raise TypeError("a state name must be a non-empty str")
        sid = state_id_of(name)
        meta = PROCESSOR_STATE_PREFIX + state_id_bytes(sid)
        record = kind + name.encode("utf-8")
        stored = self.store.get(meta)
        if stored is None:
            self.store.put(meta, record)
        elif stored != record:
            other = stored[1:].decode("utf-8", "replace")
            if other == name:
                raise InvalidArgumentError(f"state {name!r} is a {_KIND_NAMES.get(stored[:1], '?')} state; "
                                           f"it cannot become a {_KIND_NAMES[kind]} state (deleteIfExists first)")
            raise InvalidArgumentError(f"state names {name!r} and {other!r} map to the same state id "
                                       f"{sid}: rename one of them")
        return sid

    def _add(self, variable):
        for other in self._deleted.pop(variable.name, ()):  # Spark's state objects act on a name
            if other.kind == variable.kind:
                other.deleted(False)
        self._variables[variable.state_id] = variable
        return variable

    def _in_init(self, operation: str, what: str) -> None:
        if self.phase != "CREATED":
            _refuse_outside_init(operation, what, self.phase)

    def getValueState(self, stateName, schema, ttlDurationMs=None) -> ValueState:  # noqa: N802,N803
        self._in_init("get_value_state", "initializing value state")
        ttl = self._ttl(stateName, ttlDurationMs)
        parsed = state_schema(schema, f"value state {stateName!r}")
        return self._add(ValueState(self, stateName, self._register(stateName, ValueState.kind), parsed, ttl))

    def getListState(self, stateName, schema, ttlDurationMs=None) -> ListState:  # noqa: N802,N803
        self._in_init("get_list_state", "initializing list state")
        ttl = self._ttl(stateName, ttlDurationMs)
        parsed = state_schema(schema, f"list state {stateName!r}")
        return self._add(ListState(self, stateName, self._register(stateName, ListState.kind), parsed, ttl))

    def getMapState(self, stateName, userKeySchema, valueSchema, ttlDurationMs=None) -> MapState:  # noqa: N802,N803
        self._in_init("get_map_state", "initializing map state")
        ttl = self._ttl(stateName, ttlDurationMs)
        values = state_schema(valueSchema, f"map state {stateName!r}")
        keys = state_schema(userKeySchema, f"the user key of map state {stateName!r}")
        return self._add(MapState(self, stateName, self._register(stateName, MapState.kind), values, ttl, keys))

    def deleteIfExists(self, stateName) -> None:  # noqa: N802,N803
        """Delete every value of state ``stateName`` in this partition's key groups, and its
        registration (nothing when it was never used).  As in Spark, only ``init()`` may call
        it, and every state object of that name obtained before answers as Spark's does for a
        removed variable (:data:`~antkv.spark.processor.variables.SPARK_ERRORS`) until ``init``
        gets the name again."""
        if not isinstance(stateName, str):
            raise TypeError("a state name must be a str")
        self._in_init("delete_if_exists", "deleting state")
        self.value_read = None
        for variable in self._variables.values():
            if variable.name == stateName:
                variable.deleted()
                self._deleted.setdefault(stateName, []).append(variable)
        sid = state_id_of(stateName)
        meta = PROCESSOR_STATE_PREFIX + state_id_bytes(sid)
        stored = self.store.get(meta)
        if stored is None or stored[1:].decode("utf-8", "replace") != stateName:
            return
        sid_bytes = state_id_bytes(sid)
        end = state_id_bytes(sid + 1)
        for kg in self.owned:
            head = key_group_prefix(kg)
            self.store.delete_range(head + sid_bytes, head + end)
        self.store.delete(meta)

    # ------------------------------------------------------------------ timers

    def _check_timers(self, operation: str, what: str) -> None:
        """Spark's timer rules: a time mode other than None, and a handler (not init())."""
        if self.time_mode == "None":
            raise spark_error(what, "STATEFUL_PROCESSOR_CANNOT_PERFORM_OPERATION_WITH_INVALID_TIME_MODE",
                              f"Failed to perform stateful processor operation={operation} with invalid "
                              f"timeMode=None: timers need the ProcessingTime or EventTime time mode, as in Spark")
        if self.phase != "INITIALIZED":
            raise spark_error(what, "STATE_STORE_CANNOT_PERFORM_OPERATION_WITH_INVALID_HANDLE_STATE",
                              f"Failed to perform stateful processor operation={operation} with invalid "
                              f"handleState={self.phase}: timers are used from the handlers")

    def registerTimer(self, expiryTimestampMs) -> None:  # noqa: N802,N803
        if self.time_mode == "None" or self.phase != "INITIALIZED":
            self._check_timers("register_timer", "register timer")
        self.timers.register(expiryTimestampMs)

    def deleteTimer(self, expiryTimestampMs) -> None:  # noqa: N802,N803
        if self.time_mode == "None" or self.phase != "INITIALIZED":
            self._check_timers("delete_timer", "deleting timer")
        self.timers.delete(expiryTimestampMs)

    def listTimers(self):  # noqa: N802
        self._check_timers("list_timers", "listing timers")
        return iter(self.timers.list())

    # ------------------------------------------------------------------ end of batch

    def clear_expired_state(self) -> int:
        """Remove every element whose TTL expired at this batch's processing time, through the
        TTL index; returns the number of index entries consumed."""
        if self.time_mode != "ProcessingTime":  # the only mode with TTL
            return 0
        now = self.batch_timestamp_ms
        done = 0
        for index_key, stored, sid in expired_index_entries(self.store, self.owned, now):
            variable = self._variables.get(sid)
            if variable is not None:
                variable.expire(stored, now)
            self.store.delete(index_key)
            done += 1
        return done


class DeclaringHandle:
    """The handle of a processor's ``init`` on the driver, before any task runs (Spark's
    driver-side pre-init does the same): it collects the state variables the processor
    declares and refuses, as an :class:`antkv.InvalidArgumentError` on the driver, a TTL
    outside the ProcessingTime mode, a bad TTL, and two names with one state id.  The state
    objects it returns are None: ``init`` only declares."""

    def __init__(self, time_mode: str):
        self.time_mode = check_time_mode(time_mode)
        self.declared: dict[str, tuple[str, int | None]] = {}  # name -> (kind, ttl)
        self._ids: dict[int, str] = {}

    def _declare(self, name, kind: str, ttl):
        if not isinstance(name, str) or not name:
            raise TypeError("a state name must be a non-empty str")
        if kind != "map" and name in self.declared:  # Spark's driver refuses these, not maps
            raise spark_error(f"initializing {kind} state", "STATEFUL_PROCESSOR_DUPLICATE_STATE_VARIABLE_DEFINED",
                              f"state variable {name!r} is defined twice in init()")
        ttl = check_ttl(name, ttl, self.time_mode)
        sid = state_id_of(name)
        other = self._ids.setdefault(sid, name)
        if other != name:
            raise InvalidArgumentError(f"state names {name!r} and {other!r} map to the same state id {sid}: "
                                       f"rename one of them")
        self.declared[name] = (kind, ttl)

    def getValueState(self, stateName, schema, ttlDurationMs=None):  # noqa: N802,N803
        state_schema(schema, f"value state {stateName!r}")
        self._declare(stateName, "value", ttlDurationMs)

    def getListState(self, stateName, schema, ttlDurationMs=None):  # noqa: N802,N803
        state_schema(schema, f"list state {stateName!r}")
        self._declare(stateName, "list", ttlDurationMs)

    def getMapState(self, stateName, userKeySchema, valueSchema, ttlDurationMs=None):  # noqa: N802,N803
        state_schema(userKeySchema, f"the user key of map state {stateName!r}")
        state_schema(valueSchema, f"map state {stateName!r}")
        self._declare(stateName, "map", ttlDurationMs)

    def deleteIfExists(self, stateName) -> None:  # noqa: N802,N803
        if not isinstance(stateName, str):
            raise TypeError("a state name must be a str")

    def _no_key(self, *args):
        raise spark_error("using timers", "STATE_STORE_CANNOT_PERFORM_OPERATION_WITH_INVALID_HANDLE_STATE",
                          "Failed to perform stateful processor operation=timers with invalid "
                          "handleState=PRE_INIT: timers are used from the handlers, not from init()")

    registerTimer = deleteTimer = listTimers = _no_key  # noqa: N815 - Spark's names
