"""The LRU policy of the block cache: one shard of :class:`antkv.memory.cache.Cache`.

An unpinned entry sits in exactly one of two LRU lists (a pinned entry, one with handles, sits
in none and is never evicted)::

      evicted first                                            most recently used
      |                                                                         |
      [ low-priority pool: oldest ... newest ][ high-priority pool: oldest ... newest ]
                                             ^ demotion boundary

* The *high-priority pool* holds up to ``high_pri_pool_ratio * shard capacity`` bytes of
  entries inserted with ``priority="high"`` (index and filter blocks) **or that were hit while
  in the cache** (RocksDB's rule: ``IsHighPri() || HasHit()``; new data blocks enter in the
  middle of the list, so a scan cannot flush out blocks that are actually re-read).  When the
  pool is over its share, its oldest entries are *demoted* to the newest end of the low pool.
  With ``high_pri_pool_ratio == 0`` there is only the low pool.
* Eviction takes unpinned entries from the cold end -- the low pool first, then the high pool --
  until the new entry fits.
* A hit moves the entry to the newest end of the high pool, under the shard's lock.

Invariants (checked by :func:`check_lru_shard`): ``usage`` = charges of the hash table's entries
+ charges of detached pinned entries; every table entry with no handle is in exactly one list
and every entry in a list is in the table with no handle; ``high_usage`` = charges in the high
list <= the high pool capacity; ``lru_usage`` = charges of both lists; ``pinned_usage = usage -
lru_usage``; and ``usage > capacity`` only when both lists are empty (everything left is
pinned).
"""

from __future__ import annotations

import threading
from itertools import count

from .cache_entry import Handle, counter_value


class LRUHandle(Handle):
    """An LRU entry, which is also the handle to it.  The fields beyond ``key``, ``value`` and
    ``charge`` are the shard's bookkeeping, touched only under the shard's lock."""

    __slots__ = (
        "key", "value", "charge", "high", "refs", "hit", "in_cache", "in_high_pool", "shard",
        "prev", "next",
    )

    def __init__(self, key, value, charge, high, shard):
        self.key = key
        self.value = value
        self.charge = charge
        self.high = high  # inserted with priority "high"
        self.refs = 0  # outstanding handles; > 0 means pinned
        self.hit = False  # looked up while in the cache: goes to the high pool
        self.in_cache = True  # in the shard's hash table
        self.in_high_pool = False  # in the high part of the list (only if refs == 0)
        self.shard = shard
        self.prev = self.next = None  # the shard's list links; None when not in the list

    def __repr__(self) -> str:
        return f"Handle(key={self.key!r}, charge={self.charge}, refs={self.refs})"


class LRUShard:
    """One shard: a lock, a hash table and one circular LRU list.  Methods REQUIRE ``lock``,
    but :meth:`put`, which takes it.

    As in RocksDB, the list is ``lru.next`` (oldest) ... ``lru.prev`` (newest) around the
    sentinel ``lru``, and ``low_pri`` points at the newest low-pool entry (the sentinel when the
    low pool is empty): entries after it are the high pool.  Demotion just moves ``low_pri``
    one step towards the newest end.
    """

    lock_free_hits = False  # a hit moves the entry in the list: Cache.get takes the lock
    min_shard_size = 512 * 1024  # Cache(num_shard_bits=-1): RocksDB's rule for its LRUCache

    __slots__ = (
        "owner", "strict", "lock", "table", "lru", "low_pri", "capacity", "high_capacity", "ratio",
        "usage", "lru_usage", "high_usage", "detached_usage", "hit_counter", "count_hit", "miss_counter",
        "count_miss", "inserts", "evictions", "rejected",
    )

    def __init__(self, owner, capacity, ratio, strict):
        self.owner = owner
        self.strict = strict
        self.lock = threading.Lock()
        self.table: dict = {}
        lru = self.lru = LRUHandle(None, None, 0, False, self)
        lru.in_cache = False
        lru.prev = lru.next = lru
        self.low_pri = lru
        self.ratio = ratio
        self.capacity = capacity
        self.high_capacity = int(capacity * ratio)
        self.usage = 0  # every charged entry, pinned or not, in the table or detached
        self.lru_usage = 0  # entries in the LRU list
        self.high_usage = 0  # entries in its high-pool part
        self.detached_usage = 0  # pinned entries no longer in the table (erased or replaced)
        self.hit_counter = count()  # hits: see antkv.memory.cache_entry.counter_value
        self.count_hit = self.hit_counter.__next__
        self.miss_counter = count()
        self.count_miss = self.miss_counter.__next__
        self.inserts = self.evictions = self.rejected = 0

    def link(self, e: LRUHandle) -> None:
        """Put an unpinned in-cache entry at the newest end of its pool."""
        c = e.charge
        if self.ratio > 0 and (e.high or e.hit):
            lru = self.lru
            last = lru.prev
            e.prev = last
            e.next = lru
            last.next = lru.prev = e
            e.in_high_pool = True
            self.high_usage += c
            if self.high_usage > self.high_capacity:
                self.demote()
        else:
            b = self.low_pri
            nxt = b.next
            e.prev = b
            e.next = nxt
            b.next = nxt.prev = e
            self.low_pri = e
        self.lru_usage += c

    def unlink(self, e: LRUHandle) -> None:
        if self.low_pri is e:
            self.low_pri = e.prev
        p, n = e.prev, e.next
        p.next = n
        n.prev = p
        e.prev = e.next = None
        c = e.charge
        if e.in_high_pool:
            e.in_high_pool = False
            self.high_usage -= c
        self.lru_usage -= c

    def demote(self) -> None:
        """Turn the high pool's oldest entries into the low pool's newest until the pool fits."""
        b = self.low_pri
        while self.high_usage > self.high_capacity:
            b = b.next
            b.in_high_pool = False
            self.high_usage -= b.charge
        self.low_pri = b

    def evict(self, charge: int) -> None:
        """Evict from the cold end until ``usage + charge <= capacity`` or nothing is left."""
        lru, table = self.lru, self.table
        while self.usage + charge > self.capacity and lru.next is not lru:
            e = lru.next
            self.unlink(e)
            del table[e.key]
            e.in_cache = False
            self.usage -= e.charge
            self.evictions += 1

    def new_entry(self, key, value, charge: int, high: bool) -> LRUHandle:
        """A new entry for ``key``, in the table and charged, not yet in a list (replacing any
        entry of ``key``: an unpinned one leaves the list, a pinned one is detached)."""
        e = LRUHandle(key, value, charge, high, self)
        table = self.table
        old = table.get(key)
        table[key] = e
        self.usage += charge
        self.inserts += 1
        if old is not None:
            self.left_table(old)
        return e

    def left_table(self, e: LRUHandle) -> None:
        """``e`` has just left the table (replaced or erased): uncharged if unpinned (and out of
        its list), detached and still charged if pinned."""
        e.in_cache = False
        if e.refs:
            self.detached_usage += e.charge
        else:
            self.unlink(e)
            self.usage -= e.charge

    def insert_pinned(self, key, value, charge: int, high: bool) -> LRUHandle:
        """Insert with one handle (the caller made room or may go over capacity)."""
        e = self.new_entry(key, value, charge, high)
        e.refs = 1
        return e

    def put(self, key, value, charge: int, high: bool, home: list | None = None, index: int = 0) -> bool:
        """Insert an unpinned entry, taking the lock; False (and nothing kept) if it cannot fit.
        ``home`` is the clock policy's (:meth:`antkv.memory.clock.ClockShard.put`): a shard
        whose hits take the lock keeps none."""
        with self.lock:
            if self.usage + charge > self.capacity:
                self.evict(charge)
                if self.usage + charge > self.capacity:
                    self.rejected += 1
                    return False
            self.link(self.new_entry(key, value, charge, high))
            return True

    def pin(self, key, e: LRUHandle) -> LRUHandle:
        """One more handle to ``e``, the table's entry of ``key`` (out of its list if it was
        unpinned)."""
        if not e.refs:
            self.unlink(e)
        e.refs += 1
        e.hit = True
        return e

    def release_last(self, handle: LRUHandle, erase_if_last_ref: bool) -> bool:
        """Give back the entry's last handle; True if that freed it (no longer charged)."""
        handle.refs = 0
        if handle.in_cache:
            if self.usage <= self.capacity and not erase_if_last_ref:
                self.link(handle)
                return False
            del self.table[handle.key]
            handle.in_cache = False
        else:
            self.detached_usage -= handle.charge
        self.usage -= handle.charge
        return True

    def erase(self, key) -> bool:
        """Remove ``key``; a pinned entry stays charged until its last release.  True if found."""
        e = self.table.pop(key, None)
        if e is None:
            return False
        self.left_table(e)
        return True

    def listed(self) -> list:
        """The keys of the LRU list, oldest first."""
        out = []
        e = self.lru.next
        while e is not self.lru:
            out.append(e.key)
            e = e.next
        return out

    def charges(self) -> list:
        """The charges of the table's entries."""
        return [e.charge for e in self.table.values()]

    def set_capacity(self, capacity: int) -> None:
        self.capacity = capacity
        self.high_capacity = int(capacity * self.ratio)
        self.evict(0)
        self.demote()

    def figures(self) -> dict:
        return {
            "capacity": self.capacity,
            "usage": self.usage,
            "pinned_usage": self.usage - self.lru_usage,
            "high_pri_pool_usage": self.high_usage,
            "entries": len(self.table),
            "hits": counter_value(self.hit_counter),
            "misses": counter_value(self.miss_counter),
            "inserts": self.inserts,
            "evictions": self.evictions,
            "rejected": self.rejected,
        }




def check_lru_shard(s: LRUShard) -> None:
    lru = s.lru
    listed = []  # the LRU list, oldest first, checking links both ways
    e = lru
    while True:
        n = e.next
        assert n.prev is e, "LRU list links broken"
        if n is lru:
            break
        listed.append(n)
        e = n
        assert len(listed) <= len(s.table), "LRU list longer than the table (a cycle?)"
    highs = [e.in_high_pool for e in listed]
    n_low = highs.count(False)
    assert highs == [False] * n_low + [True] * (len(listed) - n_low), "low pool, then high pool"
    assert s.low_pri is (listed[n_low - 1] if n_low else lru), "low_pri is the newest low entry"
    in_list = set()
    for e in listed:
        assert s.table.get(e.key) is e and e.refs == 0 and e.in_cache, f"{e!r} listed"
        in_list.add(id(e))
    for k, e in s.table.items():
        assert e.key == k and e.in_cache and e.shard is s and e.refs >= 0
        assert (id(e) in in_list) == (e.refs == 0), f"{e!r}: pinned iff not in the LRU list"
        assert e.refs == 0 or (e.prev is None and e.next is None and not e.in_high_pool)
    assert s.high_usage == sum(e.charge for e in listed if e.in_high_pool)
    assert s.lru_usage == sum(e.charge for e in listed)
    assert s.high_usage <= s.high_capacity
    assert s.ratio > 0 or n_low == len(listed)
    assert s.detached_usage >= 0
    assert s.usage == sum(e.charge for e in s.table.values()) + s.detached_usage
    pinned_in_table = sum(e.charge for e in s.table.values() if e.refs)
    assert s.usage - s.lru_usage == pinned_in_table + s.detached_usage
    assert s.usage <= s.capacity or not listed, "over capacity only when everything is pinned"
