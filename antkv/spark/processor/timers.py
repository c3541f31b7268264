"""Timers of a stateful processor, stored in the partition's store, ordered by time then key.

A timer is ``(grouping key, time in ms)``; a key has at most one timer per time.  Each timer
is one empty-valued entry, in a key space of its own (a reserved state id), inside the timer's
key group like every other stored key (so a rescale moves timers with their keys)::

    key group | TIMER_BY_TIME_ID | time (8 B) | encode_key(grouping key)   -> b""

(time: :func:`antkv.spark.processor.variables.encode_time`, whose byte order is the numeric
order).  It answers "which timers expired at ``t``" with one bounded scan per key group,
``[kg | BY_TIME, kg | BY_TIME | encode_time(t + 1))``, reading only expired timers and never
the state.  Registering and deleting a timer write that one entry: the key and the time name
it.  Registering, deleting and listing act on the current key of the handle.

**Listing.**  ``listTimers()`` for a key of key group ``kg`` scans ``kg``'s timers once per
batch and keeps them as ``{encoded key: times}`` for the rest of the batch (the handle's
lifetime), kept up to date by the batch's registrations and deletions; the first listing in a
key group costs one scan of its timers, the next ones a dict lookup.

**The layout's version** is ``TIMER_LAYOUT`` (``02``) under ``TIMER_LAYOUT_KEY`` in the
store's metadata area.  The earlier layout (no such key) also wrote each timer under
``TIMER_BY_KEY_ID`` as ``key group | TIMER_BY_KEY_ID | encode_key(grouping key) | time -> b""``.
Its by-time entries are the same, so a store written with it is read as is; the first handle
on a store without the version key deletes the by-key entries of the partition's key groups
(one scan per key group) and writes the key, in its batch.  Nothing reads by-key entries.

**Floors.**  A batch fires expired timers with one scan per key group, a seek into every
source of the database even when nothing expired.  The working copy therefore keeps, across
batches, a *floor* per key group it scanned (``StateStore.memo``): no live timer of the key
group is earlier.  A scan sets it to the key group's first timer (past every time when there
is none), a registration lowers it, a deletion leaves it (still a lower bound); a key group
whose floor is above the threshold is not scanned.  A rebuilt or ingested copy knows no floors:
those of the key groups its row cache holds whole (``StateStore.keys_held_whole``) come from one
pass over the cached keys, the others from one scan each.
"""

from __future__ import annotations

from antkv import CorruptionError

from antkv.spark.state.codec import decode_key
from antkv.spark.store.keygroups import KEY_GROUP_BYTES, METADATA_PREFIX, STATE_ID_BYTES, key_group_prefix, state_id_bytes
from antkv.spark.processor.variables import TIME_BIAS, decode_time, pack_time_field

TIMER_BY_TIME_ID = 0xFFF0  # part of the stored layout
TIMER_BY_KEY_ID = 0xFFF1  # the earlier layout's by-key entries (the module docstring)
_BY_TIME = state_id_bytes(TIMER_BY_TIME_ID)
_BY_KEY = state_id_bytes(TIMER_BY_KEY_ID)
_BY_TIME_END = state_id_bytes(TIMER_BY_TIME_ID + 1)  # above every by-time key of a key group
_HEAD = KEY_GROUP_BYTES + STATE_ID_BYTES
_FLOORS = "timer_floors"  # StateStore.memo: key group prefix -> no live timer there is earlier
_BY_KEY_GONE = "timer_by_key_gone"  # StateStore.memo: the owned key groups hold no by-key entry
TIMER_LAYOUT_KEY = METADATA_PREFIX + b"timer-layout"  # part of the stored layout: -> TIMER_LAYOUT
TIMER_LAYOUT = b"\x02"  # one entry per timer; absent: the earlier layout, or no handle yet
_FLOORS_FROM_CACHE = 64  # unknown floors from which one pass over the row cache beats a scan each


_LOW, _HIGH = -(1 << 63), 1 << 63  # _HIGH: the floor of a key group without timers


def _time(ms) -> int:
    """``ms`` as a 64-bit int, refused clearly otherwise (callers check the usual case first)."""
    if isinstance(ms, bool) or not hasattr(ms, "__index__"):
        raise TypeError(f"a timer time is an int (ms), not {type(ms).__name__}")
    ms = int(ms)
    if not _LOW <= ms < _HIGH:
        raise OverflowError(f"timer time {ms} is outside the 64-bit range")
    return ms


def _expiry(stored: bytes) -> int:
    """The time of the stored timer entry ``stored`` (its encoded key follows at ``_HEAD + 8``)."""
    if len(stored) < _HEAD + 8:
        raise CorruptionError(f"timer entry {stored.hex()} is too short")
    return decode_time(stored, _HEAD)


class Timers:
    """The timers of one partition's store for one batch; ``handle`` gives the current key
    and the partition's key groups (``handle.owned``)."""

    def __init__(self, store, handle):
        self._store = store
        self._handle = handle
        memo = store.memo
        self._floors = memo.setdefault(_FLOORS, {})
        # key group prefix -> {encoded key: set of times}: the key groups listed this batch
        self._listed: dict[bytes, dict[bytes, set]] = {}
        if not memo.get(_BY_KEY_GONE):
            if store.get(TIMER_LAYOUT_KEY) != TIMER_LAYOUT:
                self._drop_by_key_entries(handle.owned)
                store.put(TIMER_LAYOUT_KEY, TIMER_LAYOUT)
            memo[_BY_KEY_GONE] = True

    def _drop_by_key_entries(self, key_groups) -> None:
        """Delete the earlier layout's by-key entries of ``key_groups`` (the module docstring)."""
        keys, delete = self._store.keys, self._store.delete
        for _ in keys(stop=METADATA_PREFIX):
            break
        else:
            return  # no state at all (a new store): one seek, not one per key group
        for kg in key_groups:
            for stored in list(keys(prefix=key_group_prefix(kg) + _BY_KEY)):
                delete(stored)

    def _entry(self, ms) -> tuple[int, bytes, bytes, bytes]:
        """``(ms, key group prefix, encoded key, by-time key)`` of the current key's timer at ``ms``."""
        if type(ms) is not int or not _LOW <= ms < _HIGH:
            ms = _time(ms)
        handle = self._handle
        kg, key = handle.current_kg, handle.current_key
        if kg is None:
            handle.current_key_bytes()  # raises: no current key
        return ms, kg, key, kg + _BY_TIME + pack_time_field(ms + TIME_BIAS) + key  # = encode_time(ms)

    def register(self, ms) -> None:
        ms, kg, key, by_time = self._entry(ms)
        self._store.put(by_time, b"")
        floors = self._floors
        if ms < floors.get(kg, _LOW):
            floors[kg] = ms
        if self._listed and kg in self._listed:
            self._listed[kg].setdefault(key, set()).add(ms)

    def delete(self, ms) -> None:
        ms, kg, key, by_time = self._entry(ms)
        self._store.delete(by_time)
        if self._listed and kg in self._listed:
            self._listed[kg].get(key, set()).discard(ms)

    def list(self) -> list[int]:
        """The current key's timers, earliest first."""
        kg, key = self._handle.current_key_bytes()
        listed = self._listed.get(kg)
        if listed is None:
            listed = self._listed[kg] = {}
            for stored in self._store.keys(kg + _BY_TIME, kg + _BY_TIME_END):
                listed.setdefault(stored[_HEAD + 8:], set()).add(_expiry(stored))
        return sorted(listed.get(key, ()))

    def expired(self, key_groups, threshold: int) -> list[tuple[int, bytes, int, tuple]]:
        """Every timer of ``key_groups`` with time ``<= threshold``, as ``(time, encoded key,
        key group, key tuple)`` sorted by time, then encoded key: the order they fire in."""
        floors = self._floors
        unknown = [p for p in map(key_group_prefix, key_groups) if p not in floors]
        if len(unknown) >= _FLOORS_FROM_CACHE:
            self._floors_from_cache(unknown)
        out = []
        for kg in key_groups:
            prefix = key_group_prefix(kg)
            if floors.get(prefix, _LOW) > threshold:
                continue  # nothing there expired (the module docstring: floors)
            floor, before = _HIGH, len(out)
            for stored in self._store.keys(prefix + _BY_TIME, prefix + _BY_TIME_END):
                expiry = _expiry(stored)
                if expiry > threshold:
                    floor = expiry
                    break
                encoded = stored[_HEAD + 8:]
                out.append((expiry, encoded, kg, decode_key(encoded, 0)[0]))
            # the expired ones stay live until fired and deleted: until then the floor is theirs
            floors[prefix] = out[before][0] if len(out) > before else floor
        out.sort(key=lambda timer: (timer[0], timer[1]))
        return out

    def _floors_from_cache(self, prefixes) -> None:
        """The floors of those of ``prefixes`` the store's row cache holds whole: the earliest
        of their cached timers, past every time when they cache none."""
        whole, keys = self._store.keys_held_whole()
        wanted = whole.intersection(prefixes)
        if not wanted:
            return
        found = dict.fromkeys(wanted, _HIGH)
        for stored in keys:
            prefix = stored[:KEY_GROUP_BYTES]
            if stored[KEY_GROUP_BYTES:_HEAD] == _BY_TIME and prefix in found and len(stored) >= _HEAD + 8:
                expiry = decode_time(stored, _HEAD)
                if expiry < found[prefix]:
                    found[prefix] = expiry
        self._floors.update(found)
