"""The clock policy of the block cache: one shard of :class:`antkv.memory.cache.Cache`.

RocksDB's direction for a cache whose hits scale (``HyperClockCache``): a hit does not reorder
anything, it only sets the entry's *reference bit*; the work of telling hot from cold entries
moves to eviction, which sweeps a clock hand over the entries.  In Python this turns a hit into
a dictionary probe and one attribute store, with no lock: :meth:`antkv.memory.cache.Cache.get`
(and the fused point-read path of :mod:`antkv.read.point_get`) read ``shard.table`` without the
shard's lock, set ``entry.hit = True`` and count the hit with ``shard.count_hit()``.

The ring is a circular doubly linked list of the unpinned entries around the sentinel
``ring``; ``hand`` is the next entry the sweep looks at (possibly the sentinel, which it steps
over).  A pinned entry (one with handles) sits in no list and is never evicted, as in the LRU
policy.  The rules, under the shard's lock:

* *Insert*: the entry joins the ring just behind the hand, so it is looked at last.  A
  high-priority entry (index and filter blocks) starts with its reference bit set -- it
  survives one more turn of the hand than a data block that nobody read again, the role the
  high-priority pool plays in the LRU policy.  ``high_pri_pool_ratio`` does not apply.
* *Evict* until the new entry fits: the entry under the hand goes if its bit is clear; if set,
  the bit is cleared and the hand moves on (a second chance).  A sweep clears at most as many
  bits as it started with entries in the ring; past that it evicts regardless, so lock-free
  hits landing during a sweep cannot make it run on.
* *Pin* (a handle from ``insert`` or ``lookup``) takes the entry out of the ring, *release*
  puts it back behind the hand (or drops it when the shard is over capacity), as in the LRU.

A lock-free hit races only with the sweep: the entry it found may be evicted a moment later
(the value stays valid: it is a Python object), and its bit may be set just after the sweep
cleared it, which gives it one more turn.  The counters stay exact: ``count_hit`` and
``count_miss`` are ``itertools.count`` steps, atomic under the GIL.

Invariants (checked by :func:`check_clock_shard`): ``usage`` = charges of the table's entries
+ charges of detached pinned entries; the ring holds exactly the table's entries without
handles; ``ring_usage`` = their charges; ``hand`` is in the ring or is the sentinel; ``usage >
capacity`` only when the ring is empty.
"""

from __future__ import annotations

import threading
from itertools import count

from .cache_entry import Handle, counter_value
from .shard import Shard


class ClockShard(Shard):
    """One shard: a lock, a hash table and one ring.  Methods REQUIRE ``lock``."""

    lock_free_hits = True  # Cache.get and the fused point read probe ``table`` without the lock
    referenced_on_insert_if_high = True

    __slots__ = (
        "owner", "strict", "lock", "table", "ring", "hand", "capacity", "usage", "ring_usage",
        "detached_usage", "hit_counter", "count_hit", "miss_counter", "count_miss", "inserts",
        "evictions", "rejected",
    )

    def __init__(self, owner, capacity, ratio, strict):
        self.owner = owner
        self.strict = strict
        self.lock = threading.Lock()
        self.table: dict = {}
        ring = self.ring = self.hand = Handle(None, None, 0, False, self)
        ring.in_cache = False
        ring.prev = ring.next = ring
        self.capacity = capacity
        self.usage = 0  # every charged entry, pinned or not, in the table or detached
        self.ring_usage = 0  # entries in the ring
        self.detached_usage = 0  # pinned entries no longer in the table (erased or replaced)
        self.hit_counter = count()
        self.count_hit = self.hit_counter.__next__
        self.miss_counter = count()
        self.count_miss = self.miss_counter.__next__
        self.inserts = self.evictions = self.rejected = 0

    def link(self, e: Handle) -> None:
        """Put an unpinned in-cache entry into the ring, just behind the hand."""
        hand = self.hand
        p = hand.prev
        e.prev = p
        e.next = hand
        p.next = hand.prev = e
        self.ring_usage += e.charge

    def unlink(self, e: Handle) -> None:
        if self.hand is e:
            self.hand = e.next
        p, n = e.prev, e.next
        p.next = n
        n.prev = p
        e.prev = e.next = None
        self.ring_usage -= e.charge

    def evict(self, charge: int) -> None:
        """Sweep until ``usage + charge <= capacity`` or the ring is empty (:meth:`unlink`
        inline: a block read that misses the cache runs this once per insert)."""
        ring, table = self.ring, self.table
        chances = len(table)  # reference bits this sweep may clear before it stops sparing entries
        limit = self.capacity - charge
        usage, ring_usage, evicted = self.usage, self.ring_usage, 0
        e = self.hand
        while usage > limit and ring.next is not ring:
            if e is ring:
                e = e.next
                continue
            if e.hit and chances > 0:
                e.hit = False
                chances -= 1
                e = e.next
                continue
            p, n = e.prev, e.next
            p.next = n
            n.prev = p
            e.prev = e.next = None
            del table[e.key]
            e.in_cache = False
            usage -= e.charge
            ring_usage -= e.charge
            evicted += 1
            e = n
        self.hand = e
        self.usage, self.ring_usage = usage, ring_usage
        self.evictions += evicted

    def put(self, key, value, charge: int, high: bool) -> bool:
        """:meth:`Shard.insert` of an unpinned entry, in one frame (a block read's insert: the
        sweep, the entry and its link inline); False, and nothing kept, when it cannot fit."""
        if self.usage + charge > self.capacity:
            self.evict(charge)
            if self.usage + charge > self.capacity:
                self.rejected += 1
                return False
        table = self.table
        if key in table:  # a replacement: the general path detaches or unlinks the old entry
            e = self.new_entry(key, value, charge, high)
        else:
            e = Handle(key, value, charge, high, self)
            if high:
                e.hit = True
            table[key] = e
            self.usage += charge
            self.inserts += 1
        hand = self.hand
        p = hand.prev
        e.prev = p
        e.next = hand
        p.next = hand.prev = e
        self.ring_usage += charge
        return True

    def set_capacity(self, capacity: int) -> None:
        self.capacity = capacity
        self.evict(0)

    def figures(self) -> dict:
        return {
            "capacity": self.capacity,
            "usage": self.usage,
            "pinned_usage": self.usage - self.ring_usage,
            "high_pri_pool_usage": 0,  # the clock has no high-priority pool
            "entries": len(self.table),
            "hits": counter_value(self.hit_counter),
            "misses": counter_value(self.miss_counter),
            "inserts": self.inserts,
            "evictions": self.evictions,
            "rejected": self.rejected,
        }


def check_clock_shard(s: ClockShard) -> None:
    ring = s.ring
    listed = []
    e = ring
    while True:
        n = e.next
        assert n.prev is e, "ring links broken"
        if n is ring:
            break
        listed.append(n)
        e = n
        assert len(listed) <= len(s.table), "ring longer than the table (a cycle?)"
    assert s.hand is ring or s.hand in listed, "the hand is off the ring"
    in_ring = set()
    for e in listed:
        assert s.table.get(e.key) is e and e.refs == 0 and e.in_cache, f"{e!r} in the ring"
        in_ring.add(id(e))
    for k, e in s.table.items():
        assert e.key == k and e.in_cache and e.shard is s and e.refs >= 0
        assert (id(e) in in_ring) == (e.refs == 0), f"{e!r}: pinned iff not in the ring"
        assert e.refs == 0 or (e.prev is None and e.next is None)
    assert s.ring_usage == sum(e.charge for e in listed)
    assert s.detached_usage >= 0
    assert s.usage == sum(e.charge for e in s.table.values()) + s.detached_usage
    pinned_in_table = sum(e.charge for e in s.table.values() if e.refs)
    assert s.usage - s.ring_usage == pinned_in_table + s.detached_usage
    assert s.usage <= s.capacity or not listed, "over capacity only when everything is pinned"
