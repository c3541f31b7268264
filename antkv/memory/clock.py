"""The clock policy of the block cache: one shard of :class:`antkv.memory.cache.Cache`.

RocksDB's direction for a cache whose hits scale (``HyperClockCache``): a hit does not reorder
anything, it only sets the entry's *reference bit*; the work of telling hot from cold entries
moves to eviction, which sweeps a clock hand over the entries.  In Python this turns a hit into
a dictionary probe (or a list index, below) and one list store, with no lock:
:meth:`antkv.memory.cache.Cache.get` probes ``shard.table`` (through ``shard.find``, its
``get``) without the shard's lock, sets the entry's bit in ``shard.bits``
(``shard.bits[entry[SLOT]] = 1``), takes ``entry[VALUE]`` and counts the hit with
``shard.count_hit()``; the fused point read (:meth:`antkv.db.read_api.ReadAPI.get`) does the
same with the entry it finds in the entry's home.

An entry is a tuple ``(value, charge, key, slot)`` (fields :data:`VALUE`, :data:`CHARGE`,
:data:`KEY`, :data:`SLOT`): a block read's insert creates one small tuple, not an object with a
dozen attributes.  Its reference bit is not in the entry but item ``slot`` of the shard's
``bits``, a list of small ints (a slot is the entry's while it is in the table; freed slots
are reused; a list, as a hit's store into it is specialised by CPython and a ``bytearray``'s
is not), so that the entry holds only what the garbage collector can ignore: a tuple of a
cached block, an int charge and an int key is untracked at its first collection, where a
mutable list stays tracked, and a cache filling with blocks made every full collection walk
one list per cached block.  An entry that is pinned becomes a :class:`ClockHandle` -- the same
fields, plus the handle's ``refs``, ``in_cache`` and ``shard`` -- which replaces the plain tuple
in the table and stays the entry, pinned or not, until it leaves the cache.

An entry may also have a *home*: item ``index`` of a list its inserter keeps (a table keeps one
item per data block, :attr:`antkv.sst.reader.TableReader.point`), which holds the entry while
it is in the table, so that a point read finds a cached block by a list index instead of a
dictionary probe.  The home is recorded by slot (``homes[slot]`` and ``home_index[slot]``, lists
beside ``bits``), not in the entry, which stays a tuple the collector ignores.  Whenever an
entry leaves the table its home item is set to None, under the lock, so a home never keeps a
block the cache no longer charges; a home item may still hold the tuple of an entry since
pinned (its handle took the tuple's place in the table), which has the same slot and value.
A table inserts its data blocks only with their home (:meth:`antkv.memory.cache.Cache.put_block`),
so a key with a home is in the table exactly when its home item is set: the point read takes an
empty item for a block that is not cached, and an insert with a home replaces an entry only when
the item is set (two readers that missed the same block), without probing the table.

The table is also the ring: an ``OrderedDict`` from key to entry, in the order the hand meets
them, whose first entry is the one under the hand.  Moving the hand past an entry moves that
entry to the end, so every step of the clock is one C call on the ordered dict, and an insert
or an eviction touches one dict, not a table and a ring (a circular linked list of entry
objects would cost a Python attribute store per link).  The ring proper is the unpinned
entries: a pinned entry (one with handles) keeps its place in the table, the hand passes over
it, and it is never evicted, as in the LRU policy.  Its reference bit is never clear, so the
sweep tells it apart only among the entries it would spare anyway (an entry inserted pinned at
low priority carries :data:`FRESH`, a set bit that its last release clears).  The rules, under
the shard's lock:

* *Insert*: the entry joins the end of the ring -- just behind the hand, so it is looked at
  last.  A high-priority entry (index and filter blocks) starts with its reference bit set --
  it survives one more turn of the hand than a data block that nobody read again, the role the
  high-priority pool plays in the LRU policy.  ``high_pri_pool_ratio`` does not apply.
* *Evict* until the new entry fits: the first entry of the ring goes if its bit is clear; if
  set, the bit is cleared and the entry moves to the end (a second chance).  A sweep clears at
  most as many bits as there are entries in the table (counted once per sweep: when it starts,
  or in :meth:`ClockShard.put`, when it first meets a set bit); past that it evicts
  regardless, so lock-free hits landing during a sweep cannot make it run on.
* *Pin* (a handle from ``insert`` or ``lookup``) takes the entry out of the ring, *release*
  puts it back at the end (or drops it when the shard is over capacity), as in the LRU; a sweep
  that meets only pinned entries stops.

A lock-free hit races only with the sweep: the entry it found may be evicted a moment later
(the value stays valid: it is a Python object), and its bit may be set just after the sweep
cleared it, which gives it one more turn -- or, its slot freed and given to a newer entry,
gives that entry one more turn.  The counters stay exact: ``count_hit`` and
``count_miss`` are ``itertools.count`` steps, atomic under the GIL.

Invariants (checked by :func:`check_clock_shard`): the table's entries hold distinct slots,
none of them free, and every slot below ``len(bits)`` is an entry's or free; a free slot has no
home, and an entry's home item is the entry (or the tuple it replaced when pinned); ``usage`` = charges of the table's entries
+ charges of detached pinned entries; each entry is under its own key; ``pinned_usage`` =
charges of the table's pinned entries + ``detached_usage``, so ``usage - pinned_usage`` is the
ring's charge; ``pinned_entries`` counts the table's pinned entries; a pinned entry is a
:class:`ClockHandle` with ``refs > 0``, ``in_cache`` true and its bit set; only a pinned entry
carries :data:`FRESH`; ``usage > capacity`` only when every entry of the table is pinned.
"""

from __future__ import annotations

from collections import OrderedDict
from itertools import count
from operator import itemgetter

from .cache_entry import Handle, counter_value
from .mutex import TokenMutex

VALUE, CHARGE, KEY, SLOT = 0, 1, 2, 3
"""The fields of a clock entry, a tuple ``(value, charge, key, slot)``; its reference bit is
``shard.bits[slot]``."""
FRESH = 2
"""The bit of an entry inserted pinned at low priority and not read since: set, so that the
sweep passes over it while it is pinned (a pinned entry's bit is never clear), and cleared at
its last release (as if it had been inserted clear)."""


class ClockHandle(list, Handle):
    """A clock entry that is or was pinned: ``[value, charge, key, slot]`` with the handle's
    fields.  ``in_cache`` (in the shard's table) is kept while the entry is pinned."""

    __slots__ = ("refs", "in_cache", "shard")

    value = property(itemgetter(VALUE))
    charge = property(itemgetter(CHARGE))
    key = property(itemgetter(KEY))
    # a handle is compared and hashed by identity, as every handle is, not as a list
    __eq__, __ne__, __hash__ = object.__eq__, object.__ne__, object.__hash__

    def __repr__(self) -> str:
        return f"Handle(key={self[KEY]!r}, charge={self[CHARGE]}, refs={self.refs})"


class ClockShard:
    """One shard: a lock and one ordered table, which is also the ring.  Methods REQUIRE
    ``lock``, but :meth:`put`, which takes it."""

    lock_free_hits = True  # Cache.get and the fused point read probe ``table`` without the lock
    # Cache(num_shard_bits=-1) gives one shard per 32 MiB of capacity, RocksDB's rule for its
    # HyperClockCache.  A hit takes no lock, so shards only spread inserts, which the GIL runs
    # one at a time anyway; each shard more is another table, ring and set of lists a read
    # touches cold (out of cache, with 16 shards instead of one, a point read took about 5% longer).
    min_shard_size = 32 * 1024 * 1024

    __slots__ = (
        "owner", "strict", "lock", "tokens", "table", "find", "popitem", "setdefault", "bits", "homes", "home_index", "free_slots",
        "capacity", "usage",
        "pinned_usage", "detached_usage",
        "pinned_entries", "hit_counter", "count_hit", "miss_counter", "count_miss", "inserts",
        "removed", "rejected",
    )

    def __init__(self, owner, capacity, ratio, strict):
        self.owner = owner
        self.strict = strict
        self.lock = TokenMutex()  # an insert's lock is most of its bookkeeping: the cheapest one
        self.tokens = self.lock.tokens  # (put takes it inline)
        # every entry, in the order the hand meets them (the first is under the hand); the
        # pinned ones are passed over
        self.table: OrderedDict = OrderedDict()
        # its methods of the hot paths, bound once: CPython 3.11 does not specialise a method
        # looked up on an OrderedDict (its instances have a __dict__), and a lookup costs more
        # than the call
        self.find = self.table.get  # the lock-free hit's probe: shard.find(key)
        self.popitem = self.table.popitem
        self.setdefault = self.table.setdefault
        self.bits: list[int] = []  # the reference bit of the entry holding each slot: 0, 1 or FRESH
        self.homes: list = []  # the home list of the entry holding each slot, or None
        self.home_index: list[int] = []  # the entry's item in its home list
        self.free_slots: list[int] = []  # slots below len(bits) that no entry holds
        self.capacity = capacity
        self.usage = 0  # every charged entry, pinned or not, in the table or detached
        self.pinned_usage = 0  # entries with handles, in the table or detached
        self.detached_usage = 0  # pinned entries no longer in the table (erased or replaced)
        self.pinned_entries = 0  # entries with handles in the table
        self.hit_counter = count()
        self.count_hit = self.hit_counter.__next__
        self.miss_counter = count()
        self.count_miss = self.miss_counter.__next__
        # entries that left the table other than by eviction (erased, replaced, dropped at their
        # last release): evictions are inserts - entries - removed, so the sweep counts nothing
        self.inserts = self.removed = self.rejected = 0

    def evict(self, charge: int) -> None:
        """Sweep until ``usage + charge <= capacity`` or only pinned entries are left."""
        table = self.table
        popitem = self.popitem
        chances = len(table)  # reference bits this sweep may clear before it stops sparing entries
        limit = self.capacity - charge
        usage = self.usage
        bits = self.bits
        while usage > limit and table:
            k, e = popitem(False)  # the entry under the hand
            slot = e[3]  # e[SLOT]
            if bits[slot]:  # a pinned entry's bit is never clear
                if type(e) is ClockHandle and e.refs:  # pinned: the hand moves past it
                    table[k] = e
                    if self.pinned_entries == len(table):
                        break
                    continue
                if chances > 0:
                    bits[slot] = 0
                    chances -= 1
                    table[k] = e  # the hand moves past it
                    continue
            usage -= e[1]  # e[CHARGE]
            self._free(slot)
        self.usage = usage

    def put(self, key, value, charge: int, high: bool, home: list | None = None, index: int = 0) -> bool:
        """Insert an unpinned entry, taking the lock; False, and nothing kept, when it cannot
        fit.  ``home[index]`` (a list's item) holds the entry while it is in the table.  Every
        block read that misses the cache runs this, so it is one frame: the sweep of
        :meth:`evict` and the entry inline."""
        tokens = self.tokens  # TokenMutex.acquire, inline
        try:
            tokens.pop()
        except IndexError:
            self.lock.wait()
        try:  # try/finally is cheaper than ``with`` on CPython 3.11
            usage = self.usage + charge
            capacity = self.capacity
            bits, homes = self.bits, self.homes
            if usage > capacity:  # evict(charge), inline
                slot = -1  # the new entry's: the first slot the sweep frees (not through the
                # free list: a list emptied and refilled at every insert reallocates)
                popitem = self.popitem
                chances = -1  # len(table) at the sweep's start, counted when first needed
                try:
                    while usage > capacity:
                        k, e = popitem(False)  # KeyError: the table is empty
                        if bits[e[3]]:  # (the table is loaded only on this path: most sweeps evict at once)
                            table = self.table
                            if type(e) is ClockHandle and e.refs:
                                table[k] = e
                                if self.pinned_entries == len(table):
                                    raise KeyError(k)  # only pinned entries are left
                                continue
                            if chances < 0:  # the entries still to sweep, this one included
                                chances = len(table) + 1
                            if chances:
                                bits[e[3]] = 0
                                chances -= 1
                                table[k] = e
                                continue
                        usage -= e[1]
                        k = e[3]  # the evicted entry's slot: _free(k), inline
                        if homes[k] is not None:
                            homes[k][self.home_index[k]] = homes[k] = None
                        if slot < 0:
                            slot = k
                        else:
                            self.free_slots.append(k)
                except KeyError:  # what is left is pinned: the entry cannot fit
                    self.usage = usage - charge
                    self.rejected += 1
                    if slot >= 0:
                        self.free_slots.append(slot)
                    return False
                # (usage fell: the sweep evicted an entry, so slot is set)
            else:
                free = self.free_slots
                if free:
                    slot = free.pop()
                else:
                    slot = len(bits)
                    bits.append(0)
                    homes.append(None)
                    self.home_index.append(0)
            self.usage = usage
            e = (value, charge, key, slot)
            bits[slot] = high  # a high entry starts referenced
            if home is None:
                setdefault = self.setdefault  # (loaded, then called: see find)
                if setdefault(key, e) is not e:  # cached meanwhile by another reader: replace
                    self.take_out(key)
                    self.table[key] = e
            else:  # a key with a home has an entry only when its home item is set (the class docstring)
                if home[index] is not None:  # cached meanwhile by another reader: replace
                    self.take_out(key)  # (which empties the home item)
                self.table[key] = e
                homes[slot] = home
                self.home_index[slot] = index
                home[index] = e
            self.inserts += 1
            return True
        finally:
            tokens.append(None)

    def take_out(self, key) -> None:
        """Remove ``key``'s entry from the table: uncharged if unpinned, detached and still
        charged if pinned.  REQUIRES: ``key`` in the table."""
        old = self.table.pop(key)
        self.removed += 1
        self._free(old[SLOT])
        if type(old) is ClockHandle:
            old.in_cache = False
            if old.refs:
                self.pinned_entries -= 1
                self.detached_usage += old[CHARGE]
                return
        self.usage -= old[CHARGE]

    def _free(self, slot: int) -> None:
        """Give back ``slot``, whose entry left the table, emptying its home item."""
        home = self.homes[slot]
        if home is not None:
            home[self.home_index[slot]] = self.homes[slot] = None
        self.free_slots.append(slot)

    def insert_pinned(self, key, value, charge: int, high: bool) -> ClockHandle:
        """Insert with one handle (the caller made room or may go over capacity)."""
        if key in self.table:
            self.take_out(key)
        free, bits = self.free_slots, self.bits
        if free:
            slot = free.pop()
        else:
            slot = len(bits)
            bits.append(0)
            self.homes.append(None)
            self.home_index.append(0)
        bits[slot] = 1 if high else FRESH
        h = ClockHandle((value, charge, key, slot))
        h.refs = 1
        h.in_cache = True
        h.shard = self
        self.table[key] = h
        self.usage += charge
        self.pinned_usage += charge
        self.pinned_entries += 1
        self.inserts += 1
        return h

    def pin(self, key, e) -> ClockHandle:
        """One more handle to ``e``, the table's entry of ``key`` (a plain entry becomes a
        handle, in its place)."""
        if type(e) is not ClockHandle:
            h = ClockHandle(e)
            h.refs = 0
            h.in_cache = True
            h.shard = self
            self.table[key] = e = h
        if not e.refs:
            self.pinned_entries += 1
            self.pinned_usage += e[CHARGE]
        e.refs += 1
        self.bits[e[SLOT]] = 1
        return e

    def release_last(self, h: ClockHandle, erase_if_last_ref: bool) -> bool:
        """Give back the entry's last handle; True if that freed it (no longer charged)."""
        h.refs = 0
        charge = h[CHARGE]
        self.pinned_usage -= charge
        if h.in_cache:
            self.pinned_entries -= 1
            if self.usage <= self.capacity and not erase_if_last_ref:
                if self.bits[h[SLOT]] == FRESH:  # inserted pinned at low priority and not read since
                    self.bits[h[SLOT]] = 0
                self.table.move_to_end(h[KEY])
                return False
            del self.table[h[KEY]]
            self._free(h[SLOT])
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
        """The keys of the ring -- the unpinned entries -- from the one under the hand (the
        order the sweep meets them)."""
        return [k for k, e in self.table.items() if type(e) is tuple or not e.refs]

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
    pinned = pinned_entries = 0
    slots = [e[SLOT] for e in s.table.values()]
    assert len(set(slots)) == len(slots), "two entries hold one slot"
    assert sorted(slots + s.free_slots) == list(range(len(s.bits))), "a slot both held and free, or lost"
    assert len(s.homes) == len(s.home_index) == len(s.bits)
    assert all(s.homes[slot] is None for slot in s.free_slots), "a free slot with a home"
    for e in s.table.values():
        home = s.homes[e[SLOT]]
        if home is not None:
            held = home[s.home_index[e[SLOT]]]
            assert held is e or (type(e) is ClockHandle and held == tuple(e)), f"{e!r} not in its home"
    for k, e in s.table.items():
        assert type(e) in (tuple, ClockHandle) and len(e) == 4 and e[KEY] == k, f"bad entry {e!r}"
        bit = s.bits[e[SLOT]]
        if type(e) is ClockHandle:
            assert e.in_cache and e.shard is s and e.refs >= 0
            if e.refs:
                assert bit, f"{e!r} pinned with a clear bit"
                pinned += e[CHARGE]
                pinned_entries += 1
            else:
                assert bit != FRESH, f"{e!r} released, still fresh"
        else:
            assert bit != FRESH, f"{e!r} unpinned, fresh"
    assert s.pinned_entries == pinned_entries
    assert s.detached_usage >= 0
    assert s.pinned_usage == pinned + s.detached_usage
    assert s.usage == sum(e[CHARGE] for e in s.table.values()) + s.detached_usage
    assert s.usage <= s.capacity or pinned_entries == len(s.table), "over capacity only when everything is pinned"
