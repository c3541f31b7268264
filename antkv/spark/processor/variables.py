"""The state variables of Spark's ``StatefulProcessorHandle`` over a partition's antkv store.

``ValueState``, ``ListState`` and ``MapState`` have the names, value shapes and rules of
``pyspark.sql.streaming.stateful_processor`` (values are tuples of Spark's Python types, checked
against the variable's schema by :mod:`antkv.spark.state.schema`; ``get`` of an absent value is
None, a list is never put empty, a map's iterator yields ``(key tuple, value tuple)`` and its
``getValue`` a ``Row`` of the value's fields, as Spark's client returns them), and
each may have a time to live, as ``ttlDurationMs`` gives it.

**After ``deleteIfExists``** of its name (and until ``init`` gets the name again), a state
object answers as Spark's client does: each call raises ``PySparkRuntimeError`` with the text
Spark's client gives it (``Error checking value state exists: Value state 'x' is not
initialized.``: :data:`SPARK_ERRORS`), while a list's ``get`` and a map's ``iterator``,
``keys`` and ``values`` are empty.

**TTL, as Spark defines it.**  An element written in a batch whose processing time is ``T``
expires at ``T + ttl``; it is expired in every batch whose processing time ``t`` has
``t >= T + ttl`` (Spark's ``StateTTL.isExpired``), so an update resets it, and it never
expires within the batch that wrote it.  Each list element and each map entry carries its own
expiry.  An expired element reads as absent at once; the end of each batch removes the
expired elements for good, reached through a TTL index, never by scanning the state.

The engine's own TTL (``db.put(..., ttl=)``) is not used: it compares with the reading clock,
while Spark's expiry is the batch's one processing time, the same in every partition and in a
rerun of the batch.

Stored layout (keys begin as :mod:`antkv.spark.store.keygroups` draws them; ``P = key group | state
id | encode_key(grouping key)``; values use :mod:`antkv.spark.state.codec`; ``e`` is the expiry in ms,
or None for no TTL)::

    value state   P                          -> encode_row((e, row))
    list state    P                          -> encode_row((e1, row1)) + encode_row((e2, row2)) ...
    map state     P | encode_key(user key)   -> encode_row((e, value))
    TTL index     key group | TTL_INDEX_ID | e (8 B, big-endian, sign flipped)
                  | state id | encode_key(grouping key) [| encode_key(user key)] -> b""

An index entry may be stale (its element was updated since, with a later expiry): the
cleanup checks the element's own expiry before removing anything, as Spark's first TTL
implementation did, so an update costs no read of the old value.
"""

from __future__ import annotations

import struct

from pyspark.errors import PySparkRuntimeError
from pyspark.sql import Row

from antkv import CorruptionError, InvalidArgumentError

from antkv.spark.state.codec import decode_key, decode_row, encode_key, encode_row
from antkv.spark.state.rows_codec import ROWS
from antkv.spark.state.schema import StateSchema
from antkv.spark.store.keygroups import KEY_GROUP_BYTES, STATE_ID_BYTES, key_group_prefix, state_id_bytes

TTL_INDEX_ID = 0xFFF2  # part of the stored layout: the state id of the TTL index
_TIME = struct.Struct(">Q")
_SIGN = 1 << 63
pack_time_field = _TIME.pack
"""``encode_time(ms)`` is ``pack_time_field(ms + TIME_BIAS)`` for an int ``ms`` in
``[-2**63, 2**63)``: a caller that checked the range packs without the call."""
TIME_BIAS = _SIGN


def encode_time(ms: int) -> bytes:
    """A signed 64-bit time in ms as 8 bytes whose byte order is the numeric order."""
    return _TIME.pack((int(ms) + _SIGN) & 0xFFFFFFFFFFFFFFFF)


def decode_time(data: bytes, pos: int) -> int:
    return _TIME.unpack_from(data, pos)[0] - _SIGN


class StateVariableError(InvalidArgumentError, PySparkRuntimeError):
    """A state variable, timer or handle call that Spark's ``StatefulProcessorHandle`` refuses:
    Spark raises ``PySparkRuntimeError`` (its message begins with what failed, then the JVM's
    error class in brackets), which processors catch; antkv raises this, which is both that and
    an :class:`antkv.InvalidArgumentError`."""

    def __init__(self, message: str, error_class: str | None = None):
        InvalidArgumentError.__init__(self, message)
        PySparkRuntimeError.__init__(self, message=message, errorClass=error_class)

    def __reduce__(self):
        return (type(self), (self._message, self._errorClass))


def spark_error(what: str, error_class: str, detail: str) -> StateVariableError:
    """The error Spark's Python client raises: ``Error <what>: [<error class>] <detail>``."""
    return StateVariableError(f"Error {what}: [{error_class}] {detail}", error_class)


# What Spark's client (pyspark.sql.streaming.*_state_client) says when the JVM refuses a call on
# a state variable, by kind and operation (its texts, its copy-pasted "value state" included);
# the JVM's reason for a variable deleteIfExists removed follows: "<Kind> state <name> is not
# initialized."  Operations missing here (a list's get, a map's iterators) come back empty.
SPARK_ERRORS = {
    "value": {"exists": "Error checking value state exists", "get": "Error getting value state",
              "update": "Error updating value state", "clear": "Error clearing value state"},
    "list": {"exists": "Error checking value state exists", "put": "Error updating value state",
             "appendValue": "Error updating value state", "appendList": "Error updating value state",
             "clear": "Error clearing value state"},
    "map": {"exists": "Error checking map state exists", "getValue": "Error getting value",
            "containsKey": "Error checking if map state contains key",
            "updateValue": "Error updating map state value", "removeKey": "Error removing key from map state",
            "clear": "Error clearing map state"},
}


class StateVariable:
    """What every state variable shares: its handle, name, id, schema arity and TTL.

    Each kind also has ``expire(stored key, now)``, which the end-of-batch TTL cleanup calls
    for an index entry: it removes what expired at ``now`` from that element, and only that."""

    kind = b"?"

    def __init__(self, handle, name: str, sid: int, schema: StateSchema, ttl_ms: int | None):
        self._handle = handle
        self._name = name
        self._sid = state_id_bytes(sid)
        self._schema = schema
        self._ttl = ttl_ms
        self._deleted = False  # deleteIfExists removed its name: calls answer as Spark's (SPARK_ERRORS)

    def deleted(self, gone: bool = True) -> None:
        """``deleteIfExists`` removed this variable's name (``gone``), or ``init`` got the name
        again (Spark's state objects act on a name, so an older one works again)."""
        self._deleted = gone

    def _unusable(self, operation: str):
        """Raise what Spark raises for ``operation`` on this variable: deleted, or no current key."""
        if self._deleted:
            kind = self._kind_name
            raise StateVariableError(f"{SPARK_ERRORS[kind][operation]}: {kind.capitalize()} state "
                                     f"{self._name} is not initialized.")
        self._handle.current_key_bytes()  # raises: no current key

    @property
    def state_id(self) -> bytes:
        return self._sid

    @property
    def name(self) -> str:
        return self._name

    def _key(self, operation: str) -> bytes:
        """The current grouping key's stored key: ``key group | state id | encoded key``, for
        Spark's ``operation`` (which names the error when there is none)."""
        handle = self._handle
        kg = handle.current_kg
        if kg is None or self._deleted:
            self._unusable(operation)
        return kg + self._sid + handle.current_key

    def _gone(self) -> bool:
        """Whether iterating this variable reads nothing: deleteIfExists removed it (Spark's
        iterators end at once), after the current key is checked."""
        if self._deleted:
            self._handle.current_key_bytes()  # raises: no current key
            return True
        return False

    def _expiry(self):
        return None if self._ttl is None else self._handle.batch_timestamp_ms + self._ttl

    def _live(self, expiry) -> bool:
        return expiry is None or self._handle.batch_timestamp_ms < expiry

    def _live_row(self, stored_key: bytes, where: str):
        """The one row a value (or a map entry) holds at ``stored_key``, restored, or None when
        absent or expired (:meth:`_stored_row`)."""
        row = self._stored_row(stored_key, where)
        if row is None or self._schema.flat:
            return row
        return self._schema.restore(row)

    def _stored_row(self, stored_key: bytes, where: str):
        """The one row a value (or a map entry) holds at ``stored_key``, as stored (not
        restored), or None when absent or expired; read through the store's decoded values.
        More rows than one is damage (``where`` names the place in the error)."""
        handle = self._handle
        stored = handle.store.get_decoded(stored_key, ROWS)
        if stored is None:
            return None
        if len(stored) != 1:
            raise CorruptionError(f"{self._kind_name} state {self._name!r} holds {len(stored)} rows{where}, not one")
        expiry, row = stored[0]
        if expiry is not None and handle.batch_timestamp_ms >= expiry:  # (_live, inlined: a read per call)
            return None
        return row

    def _index(self, key: bytes, expiry) -> None:
        """Enter ``key`` (a stored key of this variable) in the TTL index at ``expiry``."""
        if expiry is not None:
            kg = key[:KEY_GROUP_BYTES]
            suffix = key[KEY_GROUP_BYTES + STATE_ID_BYTES:]
            self._handle.store.put(kg + _TTL_ID + encode_time(expiry) + self._sid + suffix, b"")



_TTL_ID = state_id_bytes(TTL_INDEX_ID)


class ValueState(StateVariable):
    """One row per grouping key."""

    kind = b"v"
    _kind_name = "value"

    def exists(self) -> bool:
        """Whether the current key has a value.  The handle remembers the row read
        (``ProcessorHandle.value_read``), so that a ``get()`` next reads nothing -- Spark's
        ``if state.exists(): state.get()``: it is the row of this state id for this very
        current key (``set_current_key`` encodes each key anew), and every write of a value
        state forgets it."""
        handle = self._handle
        kg = handle.current_kg  # (_key("exists"), inlined: a read is one call per key)
        if kg is None or self._deleted:
            self._unusable("exists")
        key, sid = handle.current_key, self._sid
        row = self._stored_row(kg + sid + key, "")
        handle.value_read = (key, sid, row)
        return row is not None

    def get(self):
        handle = self._handle
        kg = handle.current_kg  # (_key("get"), inlined)
        if kg is None or self._deleted:
            self._unusable("get")
        key = handle.current_key
        last = handle.value_read  # (what exists() read, if it was called last for this key)
        if last is not None and last[0] is key and last[1] == self._sid:
            row = last[2]
        else:
            row = self._stored_row(kg + self._sid + key, "")
        if row is None or self._schema.flat:
            return row
        return self._schema.restore(row)

    def update(self, newValue) -> None:  # noqa: N803 - Spark's parameter name
        handle = self._handle
        kg = handle.current_kg  # (_key("update"), inlined: an update is one call per key)
        if kg is None or self._deleted:
            self._unusable("update")
        key = kg + self._sid + handle.current_key
        schema = self._schema
        row = schema.fit(newValue)
        handle.value_read = None
        expiry = None if self._ttl is None else self._expiry()
        if schema.plain:  # kept decoded, encoded when the batch's writes settle
            handle.store.put_decoded(key, ((expiry, row),), ROWS)
        else:
            handle.store.put(key, encode_row((expiry, row)))
        if expiry is not None:
            self._index(key, expiry)

    def clear(self) -> None:
        self._handle.value_read = None
        self._handle.store.delete(self._key("clear"))

    def expire(self, key: bytes, now: int) -> None:
        self._handle.value_read = None
        _expire_single(self._handle.store, key, now)


class ListState(StateVariable):
    """A list of rows per grouping key, stored as one value; appending reads and rewrites it."""

    kind = b"l"
    _kind_name = "list"

    def _elements(self, key: bytes):
        return self._handle.store.get_decoded(key, ROWS) or ()

    def exists(self) -> bool:
        return any(self._live(e) for e, _ in self._elements(self._key("exists")))

    def get(self):
        """An iterator over the rows (empty when there are none)."""
        if self._gone():
            return iter(())
        restore = self._schema.restore
        return iter([restore(row) for e, row in self._elements(self._key("get")) if self._live(e)])

    def _encode(self, rows, what: str) -> bytes:
        if rows is None:
            raise TypeError(f"{what} of list state {self._name!r}: 'NoneType' object is not iterable "
                            f"(a list of rows, as in Spark)")
        expiry = self._expiry()
        fit = self._schema.fit
        encoded = b"".join(encode_row((expiry, fit(r))) for r in rows)
        if not encoded:
            raise InvalidArgumentError(f"{what}: a list state cannot be given an empty list "
                                       f"(Spark refuses it too); use clear()")
        return encoded

    def put(self, newState) -> None:  # noqa: N803 - Spark's parameter name
        key = self._key("put")
        self._handle.store.put(key, self._encode(newState, "put"))
        self._index(key, self._expiry())

    def appendValue(self, newState) -> None:  # noqa: N802,N803 - Spark's names
        handle = self._handle
        kg = handle.current_kg  # (_key("appendValue"), inlined: an append is one call per row)
        if kg is None or self._deleted:
            self._unusable("appendValue")
        key = kg + self._sid + handle.current_key
        ttl = self._ttl
        expiry = None if ttl is None else handle.batch_timestamp_ms + ttl
        schema = self._schema
        row = schema.fit(newState)
        if schema.plain:  # appended decoded, encoded when the batch's writes settle (as update's)
            handle.store.append_decoded(key, ((expiry, row),), ROWS)
        else:
            handle.store.append(key, encode_row((expiry, row)))
        if expiry is not None:
            self._index(key, expiry)

    def appendList(self, newState) -> None:  # noqa: N802,N803 - Spark's names
        self._append(self._key("appendList"), self._encode(newState, "appendList"))

    def _append(self, key: bytes, encoded: bytes) -> None:
        self._handle.store.append(key, encoded)
        self._index(key, self._expiry())

    def clear(self) -> None:
        self._handle.store.delete(self._key("clear"))

    def expire(self, key: bytes, now: int) -> None:
        elements = self._elements(key)
        kept = [(e, row) for e, row in elements if e is None or now < e]
        if len(kept) == len(elements):
            return
        if kept:
            self._handle.store.put(key, b"".join(encode_row(el) for el in kept))
        else:
            self._handle.store.delete(key)


class MapState(StateVariable):
    """A map from user-key tuples to rows per grouping key, one stored entry per user key."""

    kind = b"m"
    _kind_name = "map"

    def __init__(self, handle, name, sid, schema, ttl_ms, key_schema: StateSchema):
        super().__init__(handle, name, sid, schema, ttl_ms)
        self._key_schema = key_schema
        self._row = None  # the Row class of the value schema's field names, made on first use

    def _entry(self, user_key, operation: str) -> bytes:
        prefix = self._key(operation)
        return prefix + encode_key(self._key_schema.fit(user_key))

    def _value(self, raw):
        if raw is None:
            return None
        expiry, row = decode_row(raw)
        return self._schema.restore(row) if self._live(expiry) else None

    def _decoded(self, entry: bytes):
        """The live value at stored key ``entry``, read through the store's decoded values."""
        return self._live_row(entry, " in one entry")

    def exists(self) -> bool:
        self._key("exists")
        return next(self.iterator(), None) is not None

    def getValue(self, key):  # noqa: N802 - Spark's name
        """The value of user key ``key`` as a ``Row`` of the value schema's fields, as Spark's
        client returns it (its ``get`` and iterators return tuples), or None."""
        value = self._decoded(self._entry(key, "getValue"))
        if value is None:
            return None
        if self._row is None:
            self._row = Row(*self._schema.names)
        return self._row(*value)

    def containsKey(self, key) -> bool:  # noqa: N802 - Spark's name
        return self._decoded(self._entry(key, "containsKey")) is not None

    def updateValue(self, key, value) -> None:  # noqa: N802 - Spark's name
        handle = self._handle
        kg = handle.current_kg  # (_entry(key, "updateValue"), inlined: one call per entry written)
        if kg is None or self._deleted:
            self._unusable("updateValue")
        entry = kg + self._sid + handle.current_key + encode_key(self._key_schema.fit(key))
        schema = self._schema
        row = schema.fit(value)
        expiry = None if self._ttl is None else self._expiry()
        if schema.plain:  # as ValueState.update
            handle.store.put_decoded(entry, ((expiry, row),), ROWS)
        else:
            handle.store.put(entry, encode_row((expiry, row)))
        if expiry is not None:
            self._index(entry, expiry)

    def removeKey(self, key) -> None:  # noqa: N802 - Spark's name
        self._handle.store.delete(self._entry(key, "removeKey"))

    def iterator(self):
        """``(user key, value)`` pairs in the order of the encoded user keys."""
        if self._gone():
            return
        prefix = self._key("iterator")
        start = len(prefix)
        for stored, raw in list(self._handle.store.items(prefix=prefix)):
            value = self._value(raw)
            if value is not None:
                yield self._key_schema.restore(decode_key(stored, start)[0]), value

    def keys(self):
        return (k for k, _ in self.iterator())

    def values(self):
        return (v for _, v in self.iterator())

    def clear(self) -> None:
        for stored in list(self._handle.store.keys(prefix=self._key("clear"))):
            self._handle.store.delete(stored)

    def expire(self, key: bytes, now: int) -> None:
        _expire_single(self._handle.store, key, now)


def _expire_single(store, key: bytes, now: int) -> None:
    """Delete the value or map entry at ``key`` if its expiry is at or before ``now``."""
    raw = store.get(key)
    if raw is not None:
        expiry = decode_row(raw)[0]
        if expiry is not None and now >= expiry:
            store.delete(key)


def expired_index_entries(store, key_groups, now: int):
    """``(index key, stored key, state id bytes)`` of every TTL index entry of ``key_groups``
    whose expiry is ``<= now``: one bounded scan per key group."""
    stop_time = encode_time(now + 1)
    for kg in key_groups:
        head = key_group_prefix(kg) + _TTL_ID
        for index_key in list(store.keys(head, head + stop_time)):
            pos = len(head) + 8
            sid = index_key[pos:pos + STATE_ID_BYTES]
            if len(sid) != STATE_ID_BYTES:
                raise CorruptionError(f"TTL index entry {index_key.hex()} is too short")
            yield index_key, head[:KEY_GROUP_BYTES] + sid + index_key[pos + STATE_ID_BYTES:], sid


def grouping_key_of(stored: bytes) -> tuple:
    """The grouping key of a stored key of a state variable."""
    return decode_key(stored, KEY_GROUP_BYTES + STATE_ID_BYTES)[0]
