"""The block cache: a sharded LRU cache charged in bytes, modelled on RocksDB's ``LRUCache``.

Concept
-------
The cache maps hashable keys to values, each with a *charge* (its size in bytes).  It is split
into ``2 ** num_shard_bits`` *shards*; ``hash(key) & (num_shards - 1)`` picks a key's shard.
Each shard has its own lock, its own hash table (a ``dict``) and its own LRU lists, and owns an
equal part of the capacity (the remainder of the division goes one byte each to the first
shards, so the shard capacities add up to exactly ``capacity``).  Tables key their blocks as
``(cache_id, block_offset)`` where ``cache_id`` comes from :meth:`Cache.new_id`, so one cache
can serve many tables and many databases; the hash of a tuple of ints is the same in every
process, so shard routing of such keys is deterministic (the hash of ``str``/``bytes`` keys is
salted per process: it works, but routing then differs between runs).

An entry is *pinned* while it has outstanding handles (:meth:`Cache.insert` and a hit of
:meth:`Cache.lookup` return one; :meth:`Cache.release` gives it back).  A pinned entry is never
evicted and sits in no LRU list.  An unpinned entry sits in exactly one of two LRU lists::

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

When nothing more can be evicted and the entry still does not fit (``usage + charge >
capacity``), :meth:`Cache.insert` raises :class:`~antkv.errors.MemoryLimitError` under
``strict_capacity_limit`` and otherwise inserts over capacity (the caller holds a handle, so the
entry must exist).  :meth:`Cache.put` asks for no handle: an entry that cannot fit is simply
not kept (RocksDB does this whether or not the limit is strict, "as if inserted and evicted
immediately") and ``put`` returns False.

An entry that is erased or replaced while pinned leaves the hash table at once but stays
charged (in ``usage`` and ``pinned_usage``) until its last handle is released.  Releasing the
last handle of an entry while the shard is over capacity drops the entry instead of putting it
back in an LRU list.

Invariants (checked by :meth:`Cache._check`)
--------------------------------------------
Per shard: ``usage`` = charges of the hash table's entries + charges of detached pinned
entries; every table entry with no handle is in exactly one LRU list and every entry in an LRU
list is in the table with no handle; ``high_pool_usage`` = charges in the high list <= the high
pool capacity; ``lru_usage`` = charges of both lists; ``pinned_usage = usage - lru_usage``; and
``usage > capacity`` only when both LRU lists are empty (everything left is pinned).

Speed
-----
:meth:`Cache.get` and :meth:`Cache.put` are the paths every block read takes: one ``hash``,
one lock, one ``dict`` probe and a few pointer moves in the shard's circular LRU list for a
hit.
``bench/bench_cache.py`` measures them.  Differences from RocksDB: no metadata charge (the
caller's charge is all that counts) and no deleter callbacks (Python frees the value).
"""

from __future__ import annotations

import threading
from typing import Any, Hashable

from ..errors import InvalidArgumentError, MemoryLimitError

MIN_SHARD_SIZE = 512 * 1024
"""``num_shard_bits=-1`` gives one shard per 512 KiB of capacity (RocksDB's rule)."""
MAX_DEFAULT_SHARD_BITS = 6
"""... and at most 2**6 = 64 shards."""
MAX_SHARD_BITS = 19
"""RocksDB refuses ``num_shard_bits >= 20``."""


def default_shard_bits(capacity: int) -> int:
    """RocksDB's ``GetDefaultCacheShardBits``: one shard per 512 KiB, at most 64 shards."""
    bits = 0
    num_shards = capacity // MIN_SHARD_SIZE
    while True:
        num_shards >>= 1
        if not num_shards:
            return bits
        bits += 1
        if bits >= MAX_DEFAULT_SHARD_BITS:
            return bits


class Handle:
    """A cache entry; a handle to it is the entry itself (as in RocksDB).

    ``key``, ``value`` and ``charge`` are for the caller to read.  The rest is the shard's
    bookkeeping, only touched under the shard's lock.
    """

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
        self.hit = False  # looked up while in the cache: goes to the high pool when unpinned
        self.in_cache = True  # in the shard's hash table
        self.in_high_pool = False  # in the high part of the LRU list (only if refs == 0)
        self.shard = shard
        self.prev = self.next = None  # LRU list links; None when not in the list

    def __repr__(self) -> str:
        return f"Handle(key={self.key!r}, charge={self.charge}, refs={self.refs})"


class _Shard:
    """One shard: a lock, a hash table and one circular LRU list.  Methods REQUIRE ``lock``.

    As in RocksDB, the list is ``lru.next`` (oldest) ... ``lru.prev`` (newest) around the
    sentinel ``lru``, and ``low_pri`` points at the newest low-pool entry (the sentinel when the
    low pool is empty): entries after it are the high pool.  Demotion just moves ``low_pri``
    one step towards the newest end.
    """

    __slots__ = (
        "owner", "lock", "table", "lru", "low_pri", "capacity", "high_capacity", "ratio",
        "usage", "lru_usage", "high_usage", "detached_usage", "hits", "misses", "inserts",
        "evictions", "rejected",
    )

    def __init__(self, owner, capacity, ratio):
        self.owner = owner
        self.lock = threading.Lock()
        self.table: dict = {}
        lru = self.lru = Handle(None, None, 0, False, self)
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
        self.hits = self.misses = self.inserts = self.evictions = self.rejected = 0

    def lru_insert(self, e: Handle) -> None:
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

    def lru_remove(self, e: Handle) -> None:
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
            self.lru_remove(e)
            del table[e.key]
            e.in_cache = False
            self.usage -= e.charge
            self.evictions += 1

    def insert(self, key, value, charge: int, high: bool, pin: bool):
        """Insert; returns the entry, or None if it was not kept (only when ``pin`` is False)."""
        if self.usage + charge > self.capacity:
            self.evict(charge)
            if self.usage + charge > self.capacity and (not pin or self.owner._strict):
                self.rejected += 1
                if pin:
                    raise MemoryLimitError(
                        f"cache shard full: usage {self.usage} + charge {charge} > capacity "
                        f"{self.capacity} and the rest is pinned"
                    )
                return None
        e = Handle(key, value, charge, high, self)
        table = self.table
        old = table.get(key)
        table[key] = e
        self.usage += charge
        self.inserts += 1
        if old is not None:
            old.in_cache = False
            if old.refs:
                self.detached_usage += old.charge
            else:
                self.lru_remove(old)
                self.usage -= old.charge
        if pin:
            e.refs = 1
        else:
            self.lru_insert(e)
        return e

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
            "hits": self.hits,
            "misses": self.misses,
            "inserts": self.inserts,
            "evictions": self.evictions,
            "rejected": self.rejected,
        }


def _check_int(name: str, v: Any, lowest: int) -> None:
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"{name} must be an int, not {type(v).__name__}")
    if v < lowest:
        raise InvalidArgumentError(f"{name} must be >= {lowest}, got {v}")


_PRIORITIES = {"low": False, "high": True}


def _priority(priority: Any) -> bool:
    try:
        return _PRIORITIES[priority]
    except (KeyError, TypeError):
        if not isinstance(priority, str):
            raise TypeError(f"priority must be 'high' or 'low', not {type(priority).__name__}") from None
        raise InvalidArgumentError(f"priority must be 'high' or 'low', got {priority!r}") from None


class Cache:
    """A sharded LRU cache of ``capacity`` bytes (see the module docstring for the rules).

    ``num_shard_bits=-1`` picks one shard per 512 KiB of capacity, at most 64 shards.
    ``strict_capacity_limit`` makes an insert that cannot fit raise ``MemoryLimitError``.
    ``high_pri_pool_ratio`` (0..1) is the share of each shard reserved for high-priority (index
    and filter) and re-read entries.  Thread-safe: one lock per shard.
    """

    def __init__(
        self,
        capacity: int,
        num_shard_bits: int = -1,
        strict_capacity_limit: bool = False,
        high_pri_pool_ratio: float = 0.5,
    ):
        _check_int("capacity", capacity, 0)
        _check_int("num_shard_bits", num_shard_bits, -1)
        if num_shard_bits > MAX_SHARD_BITS:
            raise InvalidArgumentError(f"num_shard_bits must be <= {MAX_SHARD_BITS}, got {num_shard_bits}")
        if not isinstance(strict_capacity_limit, bool):
            raise TypeError("strict_capacity_limit must be a bool")
        r = high_pri_pool_ratio
        if isinstance(r, bool) or not isinstance(r, (int, float)):
            raise TypeError(f"high_pri_pool_ratio must be a number, not {type(r).__name__}")
        if not 0.0 <= r <= 1.0:
            raise InvalidArgumentError(f"high_pri_pool_ratio must be in [0, 1], got {r!r}")
        if num_shard_bits < 0:
            num_shard_bits = default_shard_bits(capacity)
        n = 1 << num_shard_bits
        self._mask = n - 1
        self._strict = strict_capacity_limit
        self._ratio = float(r)
        self._capacity = capacity
        self._shards = tuple(_Shard(self, c, self._ratio) for c in _split(capacity, n))
        self._capacity_lock = threading.Lock()
        self._id_lock = threading.Lock()
        self._last_id = 0

    # ----------------------------------------------------------------- configuration
    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def num_shards(self) -> int:
        return len(self._shards)

    @property
    def strict_capacity_limit(self) -> bool:
        return self._strict

    @property
    def high_pri_pool_ratio(self) -> float:
        return self._ratio

    def set_capacity(self, capacity: int) -> None:
        """Change the capacity; shrinking evicts unpinned entries at once."""
        _check_int("capacity", capacity, 0)
        with self._capacity_lock:
            self._capacity = capacity
            for s, c in zip(self._shards, _split(capacity, len(self._shards))):
                with s.lock:
                    s.set_capacity(c)

    def new_id(self) -> int:
        """A unique id for one user of the cache (a table): its blocks are ``(id, offset)``."""
        with self._id_lock:
            self._last_id += 1
            return self._last_id

    # ----------------------------------------------------------------- fast path
    def get(self, key: Hashable) -> Any:
        """The value for ``key``, or None; counts a hit or a miss and refreshes LRU position.

        Does not pin: the value stays usable (it is a Python object), but the entry may be
        evicted at any time afterwards.  A hit on an unpinned low-pool entry promotes it to
        the high pool when the cache has one (RocksDB's rule for hit entries).
        """
        s = self._shards[hash(key) & self._mask]
        lock = s.lock
        lock.acquire()  # try/finally is cheaper than ``with`` on CPython 3.11
        try:
            e = s.table.get(key)
            if e is None:
                s.misses += 1
                return None
            s.hits += 1
            if e.refs:
                e.hit = True
                return e.value
            lru = s.lru
            if e.in_high_pool or s.ratio > 0:
                # To the newest end of the high pool: a hit promotes a low-pool entry there.
                if e.next is not lru:
                    if s.low_pri is e:
                        s.low_pri = e.prev
                    p = e.prev
                    n = e.next
                    p.next = n
                    n.prev = p
                    last = lru.prev
                    e.prev = last
                    e.next = lru
                    last.next = lru.prev = e
                elif s.low_pri is e:  # the newest entry, and the only low one after the boundary
                    s.low_pri = e.prev
                if not e.in_high_pool:
                    e.hit = e.in_high_pool = True
                    s.high_usage += e.charge
                    if s.high_usage > s.high_capacity:
                        s.demote()
            elif e is not s.low_pri:
                # No high pool: the low pool is the whole list; to its newest end.
                p = e.prev
                n = e.next
                p.next = n
                n.prev = p
                last = lru.prev
                e.prev = last
                e.next = lru
                last.next = lru.prev = e
                s.low_pri = e
            return e.value
        finally:
            lock.release()

    def put(self, key: Hashable, value: Any, charge: int, priority: str = "low") -> bool:
        """Insert without a handle; False (and nothing kept) if it cannot fit."""
        return self._insert(key, value, charge, priority, False) is not None

    def _insert(self, key: Hashable, value: Any, charge: int, priority: str, pin: bool):
        if type(charge) is not int or charge < 0:
            _check_int("charge", charge, 0)
        high = _PRIORITIES.get(priority)
        if high is None:
            high = _priority(priority)
        s = self._shards[hash(key) & self._mask]
        lock = s.lock
        lock.acquire()
        try:
            return s.insert(key, value, charge, high, pin)
        finally:
            lock.release()

    # ----------------------------------------------------------------- handles
    def insert(self, key: Hashable, value: Any, charge: int, priority: str = "low") -> Handle:
        """Insert and return a pinned handle (``release`` it).

        Raises ``MemoryLimitError`` under ``strict_capacity_limit`` if it cannot fit; without
        the strict limit the entry is inserted over capacity.
        """
        return self._insert(key, value, charge, priority, True)

    def lookup(self, key: Hashable) -> Handle | None:
        """A pinned handle to ``key``'s entry, or None on a miss."""
        s = self._shards[hash(key) & self._mask]
        lock = s.lock
        lock.acquire()
        try:
            e = s.table.get(key)
            if e is None:
                s.misses += 1
                return None
            s.hits += 1
            if not e.refs:
                s.lru_remove(e)
            e.refs += 1
            e.hit = True
            return e
        finally:
            lock.release()

    def release(self, handle: Handle, erase_if_last_ref: bool = False) -> bool:
        """Give a handle back; True if that freed the entry (it is no longer charged)."""
        if not isinstance(handle, Handle):
            raise TypeError(f"release() takes a cache Handle, not {type(handle).__name__}")
        s = handle.shard
        if s.owner is not self:
            raise InvalidArgumentError("release(): the handle belongs to another cache")
        lock = s.lock
        lock.acquire()
        try:
            refs = handle.refs
            if refs <= 0:
                raise InvalidArgumentError(f"release(): {handle!r} was already released")
            handle.refs = refs = refs - 1
            if refs:
                return False
            if handle.in_cache:
                if s.usage <= s.capacity and not erase_if_last_ref:
                    s.lru_insert(handle)
                    return False
                del s.table[handle.key]
                handle.in_cache = False
            else:
                s.detached_usage -= handle.charge
            s.usage -= handle.charge
            return True
        finally:
            lock.release()

    def erase(self, key: Hashable) -> bool:
        """Remove ``key``; a pinned entry stays charged until its last release.  True if found."""
        s = self._shards[hash(key) & self._mask]
        with s.lock:
            e = s.table.pop(key, None)
            if e is None:
                return False
            e.in_cache = False
            if e.refs:
                s.detached_usage += e.charge
            else:
                s.lru_remove(e)
                s.usage -= e.charge
            return True

    # ----------------------------------------------------------------- observation
    @property
    def usage(self) -> int:
        """Bytes charged: every entry, pinned or not."""
        return sum(s.usage for s in self._shards)

    @property
    def pinned_usage(self) -> int:
        """Bytes charged for entries with outstanding handles."""
        return sum(s.usage - s.lru_usage for s in self._shards)

    def stats(self) -> dict:
        """Totals and a per-shard list of capacity, usage, pinned usage, hits, misses, ..."""
        shards = []
        for s in self._shards:
            with s.lock:
                shards.append(s.figures())
        out = {k: sum(f[k] for f in shards) for k in shards[0]}
        out["capacity"] = self._capacity
        out["num_shards"] = len(shards)
        out["strict_capacity_limit"] = self._strict
        out["high_pri_pool_ratio"] = self._ratio
        out["shards"] = shards
        return out

    def __len__(self) -> int:
        return sum(len(s.table) for s in self._shards)

    def __repr__(self) -> str:
        return (
            f"Cache(capacity={self._capacity}, num_shards={len(self._shards)}, "
            f"usage={self.usage}, strict_capacity_limit={self._strict})"
        )

    def _check(self) -> None:
        """Assert every invariant of every shard (see the module docstring)."""
        for s in self._shards:
            with s.lock:
                _check_shard(s)


def _split(capacity: int, n: int) -> list[int]:
    """``capacity`` in ``n`` parts adding up exactly to it (the first ones one byte larger)."""
    q, r = divmod(capacity, n)
    return [q + 1 if i < r else q for i in range(n)]


def _check_shard(s: _Shard) -> None:
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
