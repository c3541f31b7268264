"""The clock policy of the block cache: one shard of :class:`antkv.memory.cache.Cache`.

RocksDB's direction for a cache whose hits scale (``HyperClockCache``): a hit does not reorder
anything, it only sets the entry's *reference bit*; the work of telling hot from cold entries
moves to eviction, which sweeps a clock hand over the entries.  In Python this turns a hit into
a dictionary probe and one list store, with no lock: :meth:`antkv.memory.cache.Cache.get` (and
the fused point-read path of :mod:`antkv.read.point_get`) read ``shard.table`` without the
shard's lock, set ``entry[HIT] = True``, take ``entry[VALUE]`` and count the hit with
``shard.count_hit()``.

An entry is a plain list ``[value, hit, charge, key]`` (fields :data:`VALUE`, :data:`HIT`,
:data:`CHARGE`, :data:`KEY`): a block read's insert creates one list, not an object with a
dozen attributes.  An entry that is pinned becomes a :class:`ClockHandle` -- the same list
fields, plus the handle's ``refs``, ``in_cache`` and ``shard`` -- which replaces the plain list
in the table and stays the entry, pinned or not, until it leaves the cache.

The ring holds the unpinned entries in the order the hand meets them: an ``OrderedDict`` from
key to entry, whose first entry is the one under the hand.  Moving the hand past an entry
moves that entry to the end, so every step of the clock is one C call on the ordered dict (a
circular linked list of entry objects would cost a Python attribute store per link).  A pinned
entry (one with handles) sits in no ring and is never evicted, as in the LRU policy.  The
rules, under the shard's lock:

* *Insert*: the entry joins the end of the ring -- just behind the hand, so it is looked at
  last.  A high-priority entry (index and filter blocks) starts with its reference bit set --
  it survives one more turn of the hand than a data block that nobody read again, the role the
  high-priority pool plays in the LRU policy.  ``high_pri_pool_ratio`` does not apply.
* *Evict* until the new entry fits: the first entry of the ring goes if its bit is clear; if
  set, the bit is cleared and the entry moves to the end (a second chance).  A sweep clears at
  most as many bits as it started with entries in the table; past that it evicts regardless,
  so lock-free hits landing during a sweep cannot make it run on.
* *Pin* (a handle from ``insert`` or ``lookup``) takes the entry out of the ring, *release*
  puts it back at the end (or drops it when the shard is over capacity), as in the LRU.

A lock-free hit races only with the sweep: the entry it found may be evicted a moment later
(the value stays valid: it is a Python object), and its bit may be set just after the sweep
cleared it, which gives it one more turn.  The counters stay exact: ``count_hit`` and
``count_miss`` are ``itertools.count`` steps, atomic under the GIL.

Invariants (checked by :func:`check_clock_shard`): ``usage`` = charges of the table's entries
+ charges of detached pinned entries; the ring holds exactly the table's entries without
handles, each under its own key; ``pinned_usage`` = charges of the table's pinned entries +
``detached_usage``, so ``usage - pinned_usage`` is the ring's charge; a pinned entry is a
:class:`ClockHandle` with ``refs > 0`` and ``in_cache`` true; ``usage > capacity`` only when the
ring is empty.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from itertools import count
from operator import itemgetter

from .cache_entry import Handle, counter_value

VALUE, HIT, CHARGE, KEY = 0, 1, 2, 3
"""The fields of a clock entry, a list ``[value, hit, charge, key]``."""


class ClockHandle(list, Handle):
    """A clock entry that is or was pinned: ``[value, hit, charge, key]`` with the handle's
    fields.  ``in_cache`` (in the shard's table) is kept while the entry is pinned."""

    __slots__ = ("refs", "in_cache", "shard")

    value = property(itemgetter(VALUE))
    hit = property(itemgetter(HIT))
    charge = property(itemgetter(CHARGE))
    key = property(itemgetter(KEY))
    # a handle is compared and hashed by identity, as every handle is, not as a list
    __eq__, __ne__, __hash__ = object.__eq__, object.__ne__, object.__hash__

    def __repr__(self) -> str:
        return f"Handle(key={self[KEY]!r}, charge={self[CHARGE]}, refs={self.refs})"


class ClockShard:
    """One shard: a lock, a hash table and one ring.  Methods REQUIRE ``lock``, but
    :meth:`put`, which takes it."""

    lock_free_hits = True  # Cache.get and the fused point read probe ``table`` without the lock

    __slots__ = (
        "owner", "strict", "lock", "table", "ring", "capacity", "usage", "pinned_usage",
        "detached_usage", "hit_counter", "count_hit", "miss_counter", "count_miss", "inserts",
        "removed", "rejected",
    )

    def __init__(self, owner, capacity, ratio, strict):
        self.owner = owner
        self.strict = strict
        self.lock = threading.Lock()
        self.table: dict = {}
        self.ring: OrderedDict = OrderedDict()  # unpinned entries; the first is under the hand
        self.capacity = capacity
        self.usage = 0  # every charged entry, pinned or not, in the table or detached
        self.pinned_usage = 0  # entries with handles, in the table or detached
        self.detached_usage = 0  # pinned entries no longer in the table (erased or replaced)
        self.hit_counter = count()
        self.count_hit = self.hit_counter.__next__
        self.miss_counter = count()
        self.count_miss = self.miss_counter.__next__
        # entries that left the table other than by eviction (erased, replaced, dropped at their
        # last release): evictions are inserts - entries - removed, so the sweep counts nothing
        self.inserts = self.removed = self.rejected = 0

    def evict(self, charge: int) -> None:
        """Sweep until ``usage + charge <= capacity`` or the ring is empty."""
        ring, table = self.ring, self.table
        popitem = ring.popitem
        chances = len(table)  # reference bits this sweep may clear before it stops sparing entries
        limit = self.capacity - charge
        usage = self.usage
        while usage > limit and ring:
            k, e = popitem(False)  # the entry under the hand
            if e[1] and chances > 0:  # e[HIT]
                e[1] = False
                chances -= 1
                ring[k] = e  # the hand moves past it
                continue
            del table[k]
            usage -= e[2]  # e[CHARGE]
        self.usage = usage

    def put(self, key, value, charge: int, high: bool) -> bool:
        """Insert an unpinned entry, taking the lock; False, and nothing kept, when it cannot
        fit.  Every block read that misses the cache runs this, so it is one frame: the sweep
        of :meth:`evict` and the entry inline."""
        lock = self.lock
        lock.acquire()  # try/finally is cheaper than ``with`` on CPython 3.11
        try:
            table = self.table
            usage = self.usage + charge
            capacity = self.capacity
            if usage > capacity:  # evict(charge), inline
                ring = self.ring
                popitem = ring.popitem
                chances = len(table)
                try:
                    while usage > capacity:
                        k, e = popitem(False)  # KeyError: the ring is empty
                        if e[1] and chances:
                            e[1] = False
                            chances -= 1
                            ring[k] = e
                            continue
                        del table[k]
                        usage -= e[2]
                except KeyError:  # what is left is pinned: the entry cannot fit
                    self.usage = usage - charge
                    self.rejected += 1
                    return False
            self.usage = usage
            if key in table:
                self.take_out(key)
            table[key] = self.ring[key] = [value, high, charge, key]  # a high entry starts referenced
            self.inserts += 1
            return True
        finally:
            lock.release()

    def take_out(self, key) -> None:
        """Remove ``key``'s entry from the table: uncharged if unpinned (and out of the ring),
        detached and still charged if pinned.  REQUIRES: ``key`` in the table."""
        old = self.table.pop(key)
        self.removed += 1
        if type(old) is ClockHandle:
            old.in_cache = False
            if old.refs:
                self.detached_usage += old[CHARGE]
                return
        del self.ring[key]
        self.usage -= old[CHARGE]

    def insert_pinned(self, key, value, charge: int, high: bool) -> ClockHandle:
        """Insert with one handle (the caller made room or may go over capacity)."""
        if key in self.table:
            self.take_out(key)
        h = ClockHandle((value, high, charge, key))
        h.refs = 1
        h.in_cache = True
        h.shard = self
        self.table[key] = h
        self.usage += charge
        self.pinned_usage += charge
        self.inserts += 1
        return h

    def pin(self, key, e) -> ClockHandle:
        """One more handle to ``e``, the table's entry of ``key`` (out of the ring if it was
        unpinned; a plain entry becomes a handle, in its place)."""
        if type(e) is not ClockHandle:
            h = ClockHandle(e)
            h.refs = 0
            h.in_cache = True
            h.shard = self
            self.table[key] = e = h
        if not e.refs:
            del self.ring[key]
            self.pinned_usage += e[CHARGE]
        e.refs += 1
        e[HIT] = True
        return e

    def release_last(self, h: ClockHandle, erase_if_last_ref: bool) -> bool:
        """Give back the entry's last handle; True if that freed it (no longer charged)."""
        h.refs = 0
        charge = h[CHARGE]
        self.pinned_usage -= charge
        if h.in_cache:
            if self.usage <= self.capacity and not erase_if_last_ref:
                self.ring[h[KEY]] = h
                return False
            del self.table[h[KEY]]
            self.removed += 1
            h.in_cache = False
        else:
            self.detached_usage -= charge
        self.usage -= charge
        return True

    def erase(self, key) -> bool:
        """Remove ``key``; a pinned entry stays charged until its last release.  True if found."""
        if key not in self.table:
            return False
        self.take_out(key)
        return True

    def set_capacity(self, capacity: int) -> None:
        self.capacity = capacity
        self.evict(0)

    def listed(self) -> list:
        """The keys of the ring, from the one under the hand (the order the sweep meets them)."""
        return list(self.ring)

    def charges(self) -> list:
        """The charges of the table's entries."""
        return [e[CHARGE] for e in self.table.values()]

    def figures(self) -> dict:
        return {
            "capacity": self.capacity,
            "usage": self.usage,
            "pinned_usage": self.pinned_usage,
            "high_pri_pool_usage": 0,  # the clock has no high-priority pool
            "entries": len(self.table),
            "hits": counter_value(self.hit_counter),
            "misses": counter_value(self.miss_counter),
            "inserts": self.inserts,
            "evictions": self.inserts - len(self.table) - self.removed,
            "rejected": self.rejected,
        }


def check_clock_shard(s: ClockShard) -> None:
    table = s.table
    for k, e in s.ring.items():
        assert e[KEY] == k and table.get(k) is e, f"{e!r} in the ring, not in the table"
        assert type(e) is list or (type(e) is ClockHandle and e.refs == 0 and e.in_cache), f"{e!r} pinned in the ring"
    pinned = 0
    for k, e in table.items():
        assert type(e) in (list, ClockHandle) and len(e) == 4 and e[KEY] == k, f"bad entry {e!r}"
        if type(e) is ClockHandle:
            assert e.in_cache and e.shard is s and e.refs >= 0
            if e.refs:
                pinned += e[CHARGE]
        assert (k in s.ring) == (type(e) is list or not e.refs), f"{e!r}: pinned iff not in the ring"
    assert s.detached_usage >= 0
    assert s.pinned_usage == pinned + s.detached_usage
    assert s.usage == sum(e[CHARGE] for e in table.values()) + s.detached_usage
    assert s.usage <= s.capacity or not s.ring, "over capacity only when everything is pinned"
