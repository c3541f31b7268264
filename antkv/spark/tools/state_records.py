"""One partition's state, decoded into records: what every reader of a version's state shares.

A partition's store holds the state variables of one operator in two registries, each
recording ``kind | name`` per state id in the metadata area:

* a :class:`~antkv.spark.runtime.pipeline.StatefulPipeline`'s variables
  (:data:`antkv.spark.state.views.STATE_NAME_PREFIX`): a value is the row itself;
* a ``StatefulProcessor``'s (:data:`antkv.spark.processor.handle.PROCESSOR_STATE_PREFIX`):
  every value, list element and map value is stored as ``(expiry ms or None, row)``
  (:mod:`antkv.spark.processor.variables`), and the timers live in a key space of a reserved
  state id (:mod:`antkv.spark.processor.timers`).

:func:`partition_records` scans the partition once, in key order, and yields
:class:`StateRecord` s: per state variable and grouping key, one record per value, list element
or map entry (``flatten=True``, the default of Spark's ``flattenCollectionTypes``), or one
record holding the whole list or map (``flatten=False``); with ``timers=True``, one record per
registered timer instead (in key group order, then time, then key), read from the key groups'
timer sets or, in a store of an earlier layout, from its per-timer entries.  The TTL index is
internal and never shown, and neither are the by-key timer entries of the earliest layout.
:func:`antkv.spark.tools.state_reader.read_state` (on the driver) and the
``antkv-state`` data source (:mod:`antkv.spark.tools.state_source`, in the executors) are both
built on it, so they always agree.
"""

from __future__ import annotations

from typing import NamedTuple

from antkv import CorruptionError, InvalidArgumentError

from antkv.spark.processor.handle import PROCESSOR_STATE_PREFIX
from antkv.spark.processor.timers import TIMER_BY_KEY_ID, TIMER_BY_TIME_ID, TIMER_SET_ID, timer_set_records
from antkv.spark.processor.variables import TTL_INDEX_ID, decode_time
from antkv.spark.state.codec import decode_key, decode_row, decode_rows
from antkv.spark.state.views import LIST, MAP, STATE_NAME_PREFIX, VALUE
from antkv.spark.store.keygroups import KEY_GROUP_BYTES, METADATA_PREFIX, STATE_ID_BYTES, state_id_bytes

KIND_NAMES = {VALUE: "value", LIST: "list", MAP: "map"}
TIMER = "timer"  # the kind of a timer record
_HEAD = KEY_GROUP_BYTES + STATE_ID_BYTES
_BY_TIME = state_id_bytes(TIMER_BY_TIME_ID)
_SET = state_id_bytes(TIMER_SET_ID)
_INTERNAL = {state_id_bytes(TIMER_BY_KEY_ID), state_id_bytes(TTL_INDEX_ID)}


class StateRecord(NamedTuple):
    """One decoded piece of a partition's state.

    ``kind`` is ``"value"``, ``"list"``, ``"map"`` or ``"timer"``; ``key`` the grouping key
    (a tuple); ``user_key`` a map entry's key (None otherwise, and for a whole map); ``value``
    the row of a value or list element or map entry, the list of rows of a whole list, or the
    ``[(user key, row)]`` of a whole map (None for a timer); ``expiry_ms`` the TTL expiry of a
    processor's value or element (of a whole list or map: the earliest), or the time of a
    timer, None when there is none."""

    partition: int
    name: str | None
    kind: str
    key: tuple
    user_key: tuple | None
    value: object
    expiry_ms: int | None


class StateVariable(NamedTuple):
    name: str
    kind: bytes  # VALUE, LIST or MAP
    with_expiry: bool  # a processor's: values are (expiry, row) pairs


def state_variables(store) -> dict[bytes, StateVariable]:
    """``{state id bytes: StateVariable}`` from both registries of ``store``'s metadata area."""
    found: dict[bytes, StateVariable] = {}
    for prefix, with_expiry in ((STATE_NAME_PREFIX, False), (PROCESSOR_STATE_PREFIX, True)):
        for meta_key, record in store.items(prefix=prefix):
            sid = meta_key[len(prefix):]
            kind = record[:1]
            if len(sid) != STATE_ID_BYTES or kind not in KIND_NAMES:
                raise CorruptionError(f"malformed state registration {meta_key!r} -> {record!r}")
            if sid in found:
                raise CorruptionError(f"state id {sid.hex()} is registered twice "
                                      f"({found[sid].name!r} and {record[1:].decode('utf-8', 'replace')!r})")
            found[sid] = StateVariable(record[1:].decode("utf-8"), kind, with_expiry)
    return found


def partition_records(store, partition: int, *, state_var: str | None = None, timers: bool = False,
                      flatten: bool = True):
    """Yield the :class:`StateRecord` s of ``store`` (the module docstring): every state
    variable's, or only ``state_var``'s (InvalidArgumentError when the partition has no such
    variable and holds state), or with ``timers`` only the timers'."""
    variables = state_variables(store)
    wanted = None
    if state_var is not None:
        wanted = {sid for sid, v in variables.items() if v.name == state_var}
        if not wanted and variables:
            known = ", ".join(sorted(repr(v.name) for v in variables.values()))
            raise InvalidArgumentError(f"no state variable {state_var!r} in partition {partition} (it has {known})")
    pending = None  # the whole list or map being gathered when not flattening
    for stored, raw in store.items(stop=METADATA_PREFIX):
        sid = stored[KEY_GROUP_BYTES:_HEAD]
        if timers:
            if sid == _SET:  # (a key group's timers, in time then key order)
                for expiry, encoded in timer_set_records(raw, f" {stored.hex()}"):
                    key, end = decode_key(encoded, 0)
                    if end != len(encoded):
                        raise CorruptionError(f"timer set {stored.hex()} holds a malformed key")
                    yield StateRecord(partition, None, TIMER, key, None, None, expiry)
            elif sid == _BY_TIME:  # (the earlier layout's: one entry per timer)
                if len(stored) < _HEAD + 8:
                    raise CorruptionError(f"timer entry {stored.hex()} is too short")
                key, end = decode_key(stored, _HEAD + 8)
                if end != len(stored):
                    raise CorruptionError(f"timer entry {stored.hex()} has a malformed key")
                yield StateRecord(partition, None, TIMER, key, None, None, decode_time(stored, _HEAD))
            continue
        if sid in _INTERNAL or sid == _BY_TIME or sid == _SET or (wanted is not None and sid not in wanted):
            continue
        variable = variables.get(sid)
        if variable is None:
            raise CorruptionError(f"stored key {stored[:8].hex()}... of partition {partition} belongs to no "
                                  f"registered state id")
        for record in _decode(partition, variable, stored, raw):
            if flatten:
                yield record
            elif record.kind == "value":
                if pending is not None:
                    yield pending
                    pending = None
                yield record
            elif pending is not None and (pending.name, pending.key) == (record.name, record.key):
                pending = _gather(pending, record)
            else:
                if pending is not None:
                    yield pending
                pending = _gather(None, record)
    if pending is not None:
        yield pending


def _split(variable: StateVariable, decoded):
    """``(expiry, row)`` of a stored value or element."""
    if not variable.with_expiry:
        return None, decoded
    if not (isinstance(decoded, tuple) and len(decoded) == 2 and isinstance(decoded[1], tuple)):
        raise CorruptionError(f"a value of processor state {variable.name!r} is not an (expiry, row) pair")
    return decoded


def _decode(partition: int, variable: StateVariable, stored: bytes, raw: bytes):
    """The flattened records of one stored entry."""
    key, end = decode_key(stored, _HEAD)
    name, kind = variable.name, KIND_NAMES[variable.kind]
    if variable.kind == VALUE:
        expiry, row = _split(variable, decode_row(raw))
        yield StateRecord(partition, name, kind, key, None, row, expiry)
    elif variable.kind == LIST:
        for element in decode_rows(raw):
            expiry, row = _split(variable, element)
            yield StateRecord(partition, name, kind, key, None, row, expiry)
    else:
        user_key, after = decode_key(stored, end)
        if after != len(stored):
            raise CorruptionError(f"map entry {stored.hex()} of state {name!r} has bytes after its key")
        expiry, row = _split(variable, decode_row(raw))
        yield StateRecord(partition, name, kind, key, user_key, row, expiry)


def _gather(whole: StateRecord | None, element: StateRecord) -> StateRecord:
    """``whole`` (a list's or map's record so far, or None) with ``element`` added."""
    item = element.value if element.kind == "list" else (element.user_key, element.value)
    if whole is None:
        return StateRecord(element.partition, element.name, element.kind, element.key, None, [item],
                           element.expiry_ms)
    whole.value.append(item)
    expiries = [e for e in (whole.expiry_ms, element.expiry_ms) if e is not None]
    return StateRecord(whole.partition, whole.name, whole.kind, whole.key, None, whole.value,
                       min(expiries) if expiries else None)


def fold_records(records, into: dict | None = None) -> dict:
    """``{state name: {grouping key: state}}`` from flattened records: a value state's row, a
    list state's list of rows, a map state's dict from user key to row (expiries dropped)."""
    out = {} if into is None else into
    for r in records:
        states = out.setdefault(r.name, {})
        if r.kind == "value":
            states[r.key] = r.value
        elif r.kind == "list":
            states.setdefault(r.key, []).append(r.value)
        elif r.kind == "map":
            states.setdefault(r.key, {})[r.user_key] = r.value
        else:
            raise InvalidArgumentError(f"a {r.kind} record is not state: fold state variables only")
    return out
