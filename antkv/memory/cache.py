"""The block cache: a sharded cache charged in bytes, modelled on RocksDB's ``LRUCache`` and
``HyperClockCache``.

Concept
-------
The cache maps hashable keys to values, each with a *charge* (its size in bytes).  It is split
into ``2 ** num_shard_bits`` *shards*; ``hash(key) & (num_shards - 1)`` picks a key's shard.
Each shard has its own lock and its own hash table (a ``dict``), and owns an equal part of the
capacity (the remainder of the division goes one byte each to the first shards, so the shard
capacities add up to exactly ``capacity``).  Each user of a cache takes an id from
:meth:`Cache.new_id`, so one cache can serve many tables and many databases: a table keys its
data blocks with ints from a range of its own (:meth:`Cache.new_block_keys`), other users with
tuples starting with their id.  The hash of an int or a tuple of ints is the same in every process, so shard routing of such keys
is deterministic (the hash of ``str``/``bytes`` keys is salted per process: it works, but
routing then differs between runs).

Which entry goes when a shard is full is the *policy*, one module each:

* ``"lru"`` (:mod:`antkv.memory.lru`): RocksDB's ``LRUCache``, a least-recently-used list with a
  high-priority pool; a hit moves the entry in the list under the shard's lock.
* ``"clock"`` (:mod:`antkv.memory.clock`): the direction of RocksDB's ``HyperClockCache``; a hit
  sets a reference bit without any lock, eviction sweeps a clock hand.

A policy's shard supplies ``evict(charge)``, ``put`` (which takes the shard's lock) and, under
the lock, ``insert_pinned``, ``pin``, ``release_last`` and ``erase``, with the fields ``owner``,
``lock``, ``table``, ``usage``, ``capacity``, ``strict``, ``rejected``, ``count_hit``,
``count_miss``, ``min_shard_size`` (the capacity per shard ``num_shard_bits=-1`` aims at) and
``lock_free_hits`` (and, when that is true, ``find``: the table's ``get``,
probed without the lock).  :class:`Cache` routes a key to its shard, takes the lock, and does what is
the same under every policy: making room for a pinned insert (or refusing it), and counting a
handle back until the last one.

An entry is *pinned* while it has outstanding handles (:meth:`Cache.insert` and a hit of
:meth:`Cache.lookup` return one; :meth:`Cache.release` gives it back).  A pinned entry is never
evicted and sits outside the policy's list.

When nothing more can be evicted and the entry still does not fit (``usage + charge >
capacity``), :meth:`Cache.insert` raises :class:`~antkv.errors.MemoryLimitError` under
``strict_capacity_limit`` and otherwise inserts over capacity (the caller holds a handle, so the
entry must exist).  :meth:`Cache.put` asks for no handle: an entry that cannot fit is simply
not kept (RocksDB does this whether or not the limit is strict, "as if inserted and evicted
immediately") and ``put`` returns False.

An entry that is erased or replaced while pinned leaves the hash table at once but stays
charged (in ``usage`` and ``pinned_usage``) until its last handle is released.  Releasing the
last handle of an entry while the shard is over capacity drops the entry instead of putting it
back in the list.

Invariants (checked by :meth:`Cache._check`): each policy module states its shard's.

Speed
-----
:meth:`Cache.get` and :meth:`Cache.put` are the paths every block read takes.  A hit costs one
``hash`` and one ``dict`` probe, then, under the LRU policy, the shard's lock and a few pointer
moves; under the clock policy one list store and a counter step, with no lock.
``bench/bench_cache.py`` measures them.  Differences from RocksDB: no metadata charge (the
caller's charge is all that counts) and no deleter callbacks (Python frees the value).
"""

from __future__ import annotations

import threading
from typing import Any, Hashable

from ..errors import InvalidArgumentError, MemoryLimitError
from .clock import ClockShard, check_clock_shard
from .cache_entry import Handle
from .lru import LRUShard, check_lru_shard

POLICIES = {"lru": LRUShard, "clock": ClockShard}
"""The cache policies by name (see the module docstring)."""
DEFAULT_POLICY = "clock"
"""The policy of ``Cache(...)`` when none is named."""

__all__ = ["Cache", "Handle", "POLICIES", "DEFAULT_POLICY", "default_shard_bits"]

MAX_DEFAULT_SHARD_BITS = 6
"""``num_shard_bits=-1`` gives at most 2**6 = 64 shards."""
MAX_SHARD_BITS = 19
"""RocksDB refuses ``num_shard_bits >= 20``."""


def default_shard_bits(capacity: int, min_shard_size: int) -> int:
    """RocksDB's ``GetDefaultCacheShardBits``: one shard per ``min_shard_size`` bytes of
    capacity (a policy's ``min_shard_size``), at most 64 shards."""
    bits = 0
    num_shards = capacity // min_shard_size
    while True:
        num_shards >>= 1
        if not num_shards:
            return bits
        bits += 1
        if bits >= MAX_DEFAULT_SHARD_BITS:
            return bits


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
    """A sharded cache of ``capacity`` bytes (see the module docstring for the rules).

    ``num_shard_bits=-1`` picks one shard per ``min_shard_size`` of the policy's shard (32 MiB
    for the clock, 512 KiB for the LRU: RocksDB's rules), at most 64 shards.  ``strict_capacity_limit`` makes an insert that cannot fit raise ``MemoryLimitError``.
    ``high_pri_pool_ratio`` (0..1) is the share of each shard reserved for high-priority (index
    and filter) and re-read entries (LRU policy only).  ``policy`` is ``"lru"`` or ``"clock"``.
    Thread-safe: one lock per shard; under the clock policy a hit takes none.
    """

    def __init__(
        self,
        capacity: int,
        num_shard_bits: int = -1,
        strict_capacity_limit: bool = False,
        high_pri_pool_ratio: float = 0.5,
        policy: str = DEFAULT_POLICY,
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
        shard_class = POLICIES.get(policy) if isinstance(policy, str) else None
        if shard_class is None:
            if not isinstance(policy, str):
                raise TypeError(f"policy must be a str, not {type(policy).__name__}")
            raise InvalidArgumentError(f"policy must be one of {', '.join(map(repr, POLICIES))}, got {policy!r}")
        if num_shard_bits < 0:
            num_shard_bits = default_shard_bits(capacity, shard_class.min_shard_size)
        n = 1 << num_shard_bits
        self.mask = n - 1
        self._strict = strict_capacity_limit
        self._ratio = float(r)
        self._capacity = capacity
        self._policy = policy
        self.shards = tuple(shard_class(self, c, self._ratio, strict_capacity_limit) for c in _split(capacity, n))
        # the fused point read (antkv.read.point_get) repeats get's lock-free hit inline
        self.lock_free_hits = shard_class.lock_free_hits
        self._capacity_lock = threading.Lock()
        self._id_lock = threading.Lock()
        self._last_id = 0
        self._next_block_key = 0

    # ----------------------------------------------------------------- configuration
    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def num_shards(self) -> int:
        return len(self.shards)

    @property
    def strict_capacity_limit(self) -> bool:
        return self._strict

    @property
    def high_pri_pool_ratio(self) -> float:
        return self._ratio

    @property
    def policy(self) -> str:
        return self._policy

    def set_capacity(self, capacity: int) -> None:
        """Change the capacity; shrinking evicts unpinned entries at once."""
        _check_int("capacity", capacity, 0)
        with self._capacity_lock:
            self._capacity = capacity
            for s, c in zip(self.shards, _split(capacity, len(self.shards))):
                with s.lock:
                    s.set_capacity(c)

    def new_id(self) -> int:
        """A unique id for one user of the cache (a table): its blocks are ``(id, offset)``."""
        with self._id_lock:
            self._last_id += 1
            return self._last_id

    def new_block_keys(self, n: int) -> int:
        """The first of ``n`` int keys that no other user of the cache holds: a table caches
        its data block ``i`` under ``base + i``.  Ranges are handed out in ascending order from
        0, so keys stay small: below ``2**30`` an int is one machine digit, which CPython adds
        and hashes on its fast paths on every block a read looks up (a larger key works the same,
        a little slower).  An int key's shard is its low bits (``hash`` of a non-negative int
        below ``2**61 - 1`` is the int): a table's consecutive blocks go to consecutive shards.
        Tuple keys never equal an int."""
        with self._id_lock:
            base = self._next_block_key
            self._next_block_key = base + n
            return base

    # ----------------------------------------------------------------- fast path
    def get(self, key: Hashable) -> Any:
        """The value for ``key``, or None; counts a hit or a miss and marks the entry used.

        Does not pin: the value stays usable (it is a Python object), but the entry may be
        evicted at any time afterwards.  Clock policy: a hit sets the entry's reference bit,
        without the lock.  LRU policy: a hit moves the entry to the newest end, promoting an
        unpinned low-pool entry to the high pool when the cache has one (RocksDB's rule for
        hit entries).
        """
        s = self.shards[hash(key) & self.mask]
        if s.lock_free_hits:  # the clock: an entry is a tuple (value, charge, key, slot)
            find = s.find  # a slot's value, then a call: a method lookup would not be specialised
            e = find(key)
            if e is None:
                s.count_miss()
                return None
            s.bits[e[3]] = 1  # the entry's reference bit
            s.count_hit()
            return e[0]
        lock = s.lock
        lock.acquire()  # try/finally is cheaper than ``with`` on CPython 3.11
        try:
            e = s.table.get(key)
            if e is None:
                s.count_miss()
                return None
            s.count_hit()
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
        """Insert without a handle; False (and nothing kept) if it cannot fit.  (Every block
        read that misses the cache ends here; the shard's ``put`` takes its lock.)"""
        if type(charge) is not int or charge < 0:
            _check_int("charge", charge, 0)
        high = _PRIORITIES.get(priority)
        if high is None:
            high = _priority(priority)
        return self.shards[hash(key) & self.mask].put(key, value, charge, high)

    def put_block(self, key: int, value: Any, charge: int, home: list | None, index: int) -> bool:
        """:meth:`put` of a table's data block (low priority) under its key from
        :meth:`new_block_keys`; under the clock policy ``home[index]`` holds the entry while
        it is cached (:mod:`antkv.memory.clock`), so that a point read finds it by index."""
        return self.shards[hash(key) & self.mask].put(key, value, charge, False, home, index)

    # ----------------------------------------------------------------- handles
    def insert(self, key: Hashable, value: Any, charge: int, priority: str = "low") -> Handle:
        """Insert and return a pinned handle (``release`` it).

        Raises ``MemoryLimitError`` under ``strict_capacity_limit`` if it cannot fit; without
        the strict limit the entry is inserted over capacity.
        """
        if type(charge) is not int or charge < 0:
            _check_int("charge", charge, 0)
        high = _PRIORITIES.get(priority)
        if high is None:
            high = _priority(priority)
        s = self.shards[hash(key) & self.mask]
        with s.lock:
            if s.usage + charge > s.capacity:
                s.evict(charge)
                if s.usage + charge > s.capacity and s.strict:
                    s.rejected += 1
                    raise MemoryLimitError(
                        f"cache shard full: usage {s.usage} + charge {charge} > capacity "
                        f"{s.capacity} and the rest is pinned"
                    )
            return s.insert_pinned(key, value, charge, high)

    def lookup(self, key: Hashable) -> Handle | None:
        """A pinned handle to ``key``'s entry, or None on a miss."""
        s = self.shards[hash(key) & self.mask]
        lock = s.lock
        lock.acquire()
        try:
            e = s.table.get(key)
            if e is None:
                s.count_miss()
                return None
            s.count_hit()
            return s.pin(key, e)
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
            if refs > 1:
                handle.refs = refs - 1
                return False
            return s.release_last(handle, erase_if_last_ref)
        finally:
            lock.release()

    def erase(self, key: Hashable) -> bool:
        """Remove ``key``; a pinned entry stays charged until its last release.  True if found."""
        s = self.shards[hash(key) & self.mask]
        with s.lock:
            return s.erase(key)

    # ----------------------------------------------------------------- observation
    @property
    def usage(self) -> int:
        """Bytes charged: every entry, pinned or not."""
        return sum(s.usage for s in self.shards)

    @property
    def pinned_usage(self) -> int:
        """Bytes charged for entries with outstanding handles."""
        return sum(s.figures()["pinned_usage"] for s in self.shards)

    def stats(self) -> dict:
        """Totals and a per-shard list of capacity, usage, pinned usage, hits, misses, ..."""
        shards = []
        for s in self.shards:
            with s.lock:
                shards.append(s.figures())
        out = {k: sum(f[k] for f in shards) for k in shards[0]}
        out["capacity"] = self._capacity
        out["num_shards"] = len(shards)
        out["strict_capacity_limit"] = self._strict
        out["high_pri_pool_ratio"] = self._ratio
        out["policy"] = self._policy
        out["shards"] = shards
        return out

    def __len__(self) -> int:
        return sum(len(s.table) for s in self.shards)

    def __repr__(self) -> str:
        return (
            f"Cache(capacity={self._capacity}, num_shards={len(self.shards)}, "
            f"usage={self.usage}, strict_capacity_limit={self._strict}, policy={self._policy!r})"
        )

    def _check(self) -> None:
        """Assert every invariant of every shard (see the module docstring)."""
        for s in self.shards:
            with s.lock:
                (check_clock_shard if s.lock_free_hits else check_lru_shard)(s)


def _split(capacity: int, n: int) -> list[int]:
    """``capacity`` in ``n`` parts adding up exactly to it (the first ones one byte larger)."""
    q, r = divmod(capacity, n)
    return [q + 1 if i < r else q for i in range(n)]
