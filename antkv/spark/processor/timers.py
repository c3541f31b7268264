"""Timers of a stateful processor, stored in the partition's store: one timer set per key group.

A timer is ``(grouping key, time in ms)``; a key has at most one timer per time.  The timers of
a key group are one entry, in a key space of its own (a reserved state id), inside the key
group like every other stored key (so a rescale moves timers with their keys)::

    key group | TIMER_SET_ID  ->  timer set

A *timer set* (:func:`encode_timer_set`) is ``n`` (4 bytes, big-endian), the ``n`` times
(8 bytes each: :func:`antkv.spark.processor.variables.encode_time`, whose byte order is the
numeric order), the ``n`` encoded keys' lengths (4 bytes each), then the keys
(:func:`antkv.spark.state.codec.encode_key`), sorted by time then key.  A key group without
timers has no entry.

**In memory.**  A batch works on the sets decoded, ``{encoded key: time, or a set of times}``
per key group, kept with the working copy across batches (``StateStore.memo``: decoded once per
copy, from one point read per key group).  Registering, deleting and listing a timer act on the
current key's set, as dict operations; the sets a batch changed are encoded and written to the
store (one write per key group) whenever the store settles its writes
(``StateStore.add_settle_hook``): before a commit, a scan or a key count, so every reader of
the store sees them.  A batch that fails leaves nothing: its working copy, memo included, is
dropped with it.

**Floors.**  The working copy also keeps, per key group whose set it decoded, a *floor*: no
live timer of the key group is earlier.  Decoding sets it to the earliest time (past every
time when there is none), a registration lowers it, a deletion leaves it (still a lower
bound); ``expired`` skips a key group whose floor is above the threshold and otherwise reads
its set, in memory.

**The layout's version** is ``TIMER_LAYOUT`` (``03``) under ``TIMER_LAYOUT_KEY`` in the store's
metadata area.  Layout ``02`` stored each timer as one empty-valued entry
``key group | TIMER_BY_TIME_ID | time (8 B) | encoded key``; the layout before it (no version
key) also stored each under ``TIMER_BY_KEY_ID`` as ``key group | TIMER_BY_KEY_ID | encoded key
| time``.  The first handle on a store of either moves the by-time entries of the partition's
key groups into their sets and deletes them and the by-key entries (two scans per key group,
once), and writes the version key, in its batch.  The state reader reads all three layouts
(:mod:`antkv.spark.tools.state_records`).
"""

from __future__ import annotations

import struct
from itertools import accumulate, repeat
from operator import add

from antkv import CorruptionError

from antkv.spark.state.codec import decode_key
from antkv.spark.store.keygroups import KEY_GROUP_BYTES, METADATA_PREFIX, STATE_ID_BYTES, key_group_prefix, state_id_bytes
from antkv.spark.processor.variables import TIME_BIAS, decode_time

TIMER_SET_ID = 0xFFF3  # part of the stored layout: a key group's timer set
TIMER_BY_TIME_ID = 0xFFF0  # layout 02's entries, one per timer (the module docstring)
TIMER_BY_KEY_ID = 0xFFF1  # the layout before 02: each timer a second time, by key
_SET = state_id_bytes(TIMER_SET_ID)
_BY_TIME = state_id_bytes(TIMER_BY_TIME_ID)
_BY_TIME_END = state_id_bytes(TIMER_BY_TIME_ID + 1)  # above every by-time key of a key group
_BY_KEY = state_id_bytes(TIMER_BY_KEY_ID)
_HEAD = KEY_GROUP_BYTES + STATE_ID_BYTES
_SETS = "timer_sets"  # StateStore.memo: key group prefix -> its timer set, decoded
_FLOORS = "timer_floors"  # StateStore.memo: key group prefix -> no live timer there is earlier
_LAID_OUT = "timer_layout_03"  # StateStore.memo: the store's timers are in layout 03
TIMER_LAYOUT_KEY = METADATA_PREFIX + b"timer-layout"  # part of the stored layout: -> TIMER_LAYOUT
TIMER_LAYOUT = b"\x03"  # a timer set per key group; b"\x02" or absent: the earlier layouts
_COUNT = struct.Struct(">I")

_LOW, _HIGH = -(1 << 63), 1 << 63  # _HIGH: the floor of a key group without timers
_INT_ONLY = frozenset((int,))


def encode_timer_set(timers: dict) -> bytes:
    """The stored form of ``timers`` (``{encoded key: time, or a set of times}``, not empty;
    the module docstring)."""
    if _INT_ONLY.issuperset(map(type, timers.values())):  # one timer per key, the common case
        # sorted by key, then (stably) by time: no tuple per timer, and a set written in key
        # order, as a batch writes it, is sorted by key in one pass
        get = timers.__getitem__
        keys = sorted(timers)
        keys.sort(key=get)
        times = map(get, keys)
    else:
        pairs = sorted([(t, k) for k, v in timers.items() for t in ((v,) if type(v) is int else v)])
        keys = [k for _, k in pairs]
        times = [t for t, _ in pairs]
    n = len(keys)
    head = struct.pack(f">I{n}Q{n}I", n, *map(add, times, repeat(TIME_BIAS)), *map(len, keys))
    return b"".join([head, *keys])


def decode_timer_set(raw: bytes, where: str = "") -> dict:
    """``{encoded key: time, or a set of times}`` of a stored timer set; CorruptionError if
    ``raw`` is not one (``where`` names it in the message)."""
    if len(raw) < 4:
        raise CorruptionError(f"timer set{where} is {len(raw)} bytes, too short")
    n = _COUNT.unpack_from(raw)[0]
    start = 4 + 12 * n
    if len(raw) < start:
        raise CorruptionError(f"timer set{where} of {n} timers is {len(raw)} bytes, too short")
    fields = struct.unpack_from(f">{n}Q{n}I", raw, 4)
    ends = list(accumulate(fields[n:], initial=start))
    if ends[-1] != len(raw):
        raise CorruptionError(f"timer set{where}: its keys end at byte {ends[-1]}, not at {len(raw)}")
    keys = list(map(raw.__getitem__, map(slice, ends, ends[1:])))
    times = [t - TIME_BIAS for t in fields[:n]]
    timers = dict(zip(keys, times))
    if len(timers) < n:  # a key with several timers
        timers = {}
        for key, ms in zip(keys, times):
            _add(timers, key, ms)
    return timers


def timer_set_records(raw: bytes, where: str = "") -> list[tuple[int, bytes]]:
    """``[(time, encoded key)]`` of a stored timer set, in its order (time, then key)."""
    timers = decode_timer_set(raw, where)
    return sorted([(t, k) for k, v in timers.items() for t in ((v,) if type(v) is int else v)])


def _add(timers: dict, key: bytes, ms: int) -> None:
    held = timers.get(key)
    if held is None:
        timers[key] = ms
    elif type(held) is int:
        if held != ms:
            timers[key] = {held, ms}
    else:
        held.add(ms)


def _remove(timers: dict, key: bytes, ms: int) -> bool:
    """Remove ``key``'s timer at ``ms``; whether there was one."""
    held = timers.get(key)
    if held is None:
        return False
    if type(held) is int:
        if held != ms:
            return False
        del timers[key]
        return True
    if ms not in held:
        return False
    held.discard(ms)
    if len(held) == 1:
        timers[key] = next(iter(held))
    return True


def _earliest(timers: dict) -> int:
    """The earliest time of a key group's ``timers`` (past every time when there is none)."""
    ints = [v for v in timers.values() if type(v) is int]
    floor = min(ints, default=_HIGH)
    if len(ints) < len(timers):
        floor = min(floor, *[min(v) for v in timers.values() if type(v) is not int])
    return floor


def _time(ms) -> int:
    """``ms`` as a 64-bit int, refused clearly otherwise (callers check the usual case first)."""
    if isinstance(ms, bool) or not hasattr(ms, "__index__"):
        raise TypeError(f"a timer time is an int (ms), not {type(ms).__name__}")
    ms = int(ms)
    if not _LOW <= ms < _HIGH:
        raise OverflowError(f"timer time {ms} is outside the 64-bit range")
    return ms


def _expiry(stored: bytes) -> int:
    """The time of a layout 02 timer entry ``stored`` (its encoded key follows at ``_HEAD + 8``)."""
    if len(stored) < _HEAD + 8:
        raise CorruptionError(f"timer entry {stored.hex()} is too short")
    return decode_time(stored, _HEAD)


class Timers:
    """The timers of one partition's store for one batch; ``handle`` gives the current key
    and the partition's key groups (``handle.owned``).  REQUIRES: not used after the store
    ingests a range (the memo it works on is then emptied; a new handle takes the new one)."""

    def __init__(self, store, handle):
        self._store = store
        self._handle = handle
        memo = store.memo
        self._sets = memo.setdefault(_SETS, {})
        self._floors = memo.setdefault(_FLOORS, {})
        self._changed: set[bytes] = set()  # key groups whose set this batch changed, not yet written
        store.add_settle_hook(self.write_changed)
        if not memo.get(_LAID_OUT):
            if store.get(TIMER_LAYOUT_KEY) != TIMER_LAYOUT:
                self._move_to_sets(handle.owned)
                store.put(TIMER_LAYOUT_KEY, TIMER_LAYOUT)
            memo[_LAID_OUT] = True

    def _move_to_sets(self, key_groups) -> None:
        """Move the earlier layouts' entries of ``key_groups`` into their timer sets (the
        module docstring)."""
        store = self._store
        keys, delete = store.keys, store.delete
        for _ in keys(stop=METADATA_PREFIX):
            break
        else:
            return  # no state at all (a new store): one seek, not two per key group
        for kg in key_groups:
            prefix = key_group_prefix(kg)
            for stored in list(keys(prefix=prefix + _BY_KEY)):
                delete(stored)
            entries = list(keys(prefix + _BY_TIME, prefix + _BY_TIME_END))
            if entries:
                timers = self._set_of(prefix)
                for stored in entries:
                    ms = _expiry(stored)
                    _add(timers, stored[_HEAD + 8:], ms)
                    if ms < self._floors[prefix]:
                        self._floors[prefix] = ms
                    delete(stored)
                self._changed.add(prefix)

    def _set_of(self, prefix: bytes) -> dict:
        """Key group ``prefix``'s timer set, decoded (from the store the first time the working
        copy needs it), its floor known."""
        timers = self._sets.get(prefix)
        if timers is None:
            raw = self._store.get(prefix + _SET)
            timers = {} if raw is None else decode_timer_set(raw, f" of key group {prefix.hex()}")
            self._sets[prefix] = timers
            self._floors[prefix] = _earliest(timers)
        return timers

    def write_changed(self) -> None:
        """Write the timer sets this batch changed into the store (a set emptied: deleted)."""
        changed, self._changed = self._changed, set()
        store = self._store
        for prefix in sorted(changed):
            timers = self._sets[prefix]
            if timers:
                store.put(prefix + _SET, encode_timer_set(timers))
            else:
                store.delete(prefix + _SET)

    def register(self, ms) -> None:
        if type(ms) is not int or not _LOW <= ms < _HIGH:
            ms = _time(ms)
        handle = self._handle  # the current key (inlined here and in delete: a call per key each)
        kg = handle.current_kg
        if kg is None:
            handle.current_key_bytes()  # raises: no current key
        key = handle.current_key
        timers = self._sets.get(kg)
        if timers is None:
            timers = self._set_of(kg)
        held = timers.get(key)
        if held is None:
            timers[key] = ms
        elif held != ms:
            _add(timers, key, ms)
        else:
            return
        self._changed.add(kg)
        if ms < self._floors[kg]:
            self._floors[kg] = ms

    def delete(self, ms) -> None:
        if type(ms) is not int or not _LOW <= ms < _HIGH:
            ms = _time(ms)
        handle = self._handle
        kg = handle.current_kg
        if kg is None:
            handle.current_key_bytes()  # raises: no current key
        key = handle.current_key
        timers = self._sets.get(kg)
        if timers is None:
            timers = self._set_of(kg)
        if timers.get(key) == ms:  # (the common case: the key's one timer)
            del timers[key]
            self._changed.add(kg)
        elif _remove(timers, key, ms):
            self._changed.add(kg)

    def list(self) -> list[int]:
        """The current key's timers, earliest first."""
        kg, key = self._handle.current_key_bytes()
        held = self._set_of(kg).get(key)
        return [] if held is None else [held] if type(held) is int else sorted(held)

    def expired(self, key_groups, threshold: int) -> list[tuple[int, bytes, int, tuple]]:
        """Every timer of ``key_groups`` with time ``<= threshold``, as ``(time, encoded key,
        key group, key tuple)`` sorted by time, then encoded key: the order they fire in."""
        floors = self._floors
        out = []
        for kg in key_groups:
            prefix = key_group_prefix(kg)
            if floors.get(prefix, _LOW) > threshold:
                continue  # nothing there expired (the module docstring: floors)
            timers = self._set_of(prefix)
            if floors[prefix] > threshold:
                continue
            due = [(t, k) for k, t in timers.items() if type(t) is int and t <= threshold]
            if len(due) < len(timers):
                due += [(t, k) for k, v in timers.items() if type(v) is not int for t in v if t <= threshold]
            # the expired ones stay live until fired and deleted: until then the floor is theirs
            floors[prefix] = min(due)[0] if due else _earliest(timers)
            out += [(t, k, kg, decode_key(k, 0)[0]) for t, k in due]
        out.sort(key=lambda timer: (timer[0], timer[1]))
        return out
