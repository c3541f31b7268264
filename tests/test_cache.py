"""The block cache: every rule of issue 3, a stateful test against a reference model, threads.

Rules that do not depend on the eviction policy run under every policy (the ``policy``
fixture); the LRU list and its pools are checked under the LRU policy, the clock's sweep under
the clock policy, each against a reference model of its own."""

from __future__ import annotations

import random
import threading

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import antkv
from antkv.memory.cache import POLICIES, Cache, Handle, default_shard_bits
from antkv.errors import InvalidArgumentError, MemoryLimitError

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB


@pytest.fixture(params=sorted(POLICIES))
def policy(request) -> str:
    return request.param


def listed(cache: Cache, shard: int = 0) -> list:
    """Keys of the unpinned entries of a shard, in the policy's list (LRU list or clock ring)."""
    return cache.shards[shard].listed()


def lru_order(cache: Cache, shard: int = 0) -> tuple[list, list]:
    """(low pool keys, high pool keys), oldest first, read from the shard's LRU list."""
    s = cache.shards[shard]
    low, high = [], []
    e = s.lru.next
    while e is not s.lru:
        (high if e.in_high_pool else low).append(e.key)
        e = e.next
    return low, high


# --------------------------------------------------------------------------- construction
def test_validation(policy):
    with pytest.raises(TypeError):
        Cache("10", policy=policy)
    with pytest.raises(TypeError):
        Cache(True, policy=policy)
    with pytest.raises(InvalidArgumentError):
        Cache(-1, policy=policy)
    with pytest.raises(InvalidArgumentError):
        Cache(100, num_shard_bits=20, policy=policy)
    with pytest.raises(InvalidArgumentError):
        Cache(100, num_shard_bits=-2, policy=policy)
    with pytest.raises(TypeError):
        Cache(100, num_shard_bits=1.0, policy=policy)
    with pytest.raises(TypeError):
        Cache(100, strict_capacity_limit=1, policy=policy)
    with pytest.raises(InvalidArgumentError):
        Cache(100, high_pri_pool_ratio=1.5, policy=policy)
    with pytest.raises(InvalidArgumentError):
        Cache(100, high_pri_pool_ratio=-0.1, policy=policy)
    with pytest.raises(TypeError):
        Cache(100, high_pri_pool_ratio="0.5", policy=policy)
    with pytest.raises(InvalidArgumentError, match="policy"):
        Cache(100, policy="fifo")
    with pytest.raises(TypeError):
        Cache(100, policy=None)
    assert Cache(100, policy=policy).policy == policy == Cache(100, policy=policy).stats()["policy"]
    assert issubclass(InvalidArgumentError, ValueError)
    c = Cache(100, 0, policy=policy)
    with pytest.raises(TypeError):
        c.put(1, b"v", 1.5)
    with pytest.raises(InvalidArgumentError):
        c.insert(1, b"v", -1)
    with pytest.raises(InvalidArgumentError):
        c.put(1, b"v", 1, priority="urgent")
    with pytest.raises(TypeError):
        c.insert(1, b"v", 1, priority=1)
    with pytest.raises(TypeError):
        c.get([1])  # unhashable key
    with pytest.raises(TypeError):
        c.release("not a handle")
    with pytest.raises(TypeError):
        c.set_capacity(None)
    with pytest.raises(InvalidArgumentError):
        c.set_capacity(-5)
    assert c.usage == 0 and len(c) == 0


def test_one_default_policy_for_every_cache():
    """``antkv.Cache(capacity)``, ``shared_memory()``'s cache and a database's own cache all use
    the clock: a user who passes a bigger cache keeps the lock-free hit (docs/memory.md)."""
    import antkv
    from antkv.db import DEFAULT_CACHE_POLICY

    assert Cache(1 << 20).policy == antkv.shared_memory(1 << 24)[0].policy == DEFAULT_CACHE_POLICY == "clock"


def test_default_shard_bits_follow_rocksdb():
    """One shard per 512 KiB for the LRU (RocksDB's ``LRUCache``), per 32 MiB for the clock
    (its ``HyperClockCache``), at most 64."""
    lru = POLICIES["lru"].min_shard_size
    assert lru == 512 * KiB and POLICIES["clock"].min_shard_size == 32 * MiB
    assert default_shard_bits(0, lru) == 0
    assert default_shard_bits(512 * KiB, lru) == 0
    assert default_shard_bits(1 * MiB, lru) == 1
    assert default_shard_bits(4 * MiB, lru) == 3
    assert default_shard_bits(16 * MiB, lru) == 5
    assert default_shard_bits(32 * MiB, lru) == 6
    assert default_shard_bits(1 << 40, lru) == 6
    assert Cache(8 * MiB, policy="lru").num_shards == 16
    assert Cache(8 * MiB).num_shards == 1 and Cache(31 * MiB).num_shards == 1
    assert Cache(64 * MiB).num_shards == 2 and Cache(256 * MiB).num_shards == 8
    assert Cache(8 * GiB).num_shards == 64
    assert Cache(8 * MiB, num_shard_bits=2).num_shards == 4


def test_shard_capacities_add_up_exactly(policy):
    c = Cache(1003, num_shard_bits=2, policy=policy)
    caps = [s["capacity"] for s in c.stats()["shards"]]
    assert caps == [251, 251, 251, 250] and sum(caps) == 1003 == c.capacity
    c.set_capacity(10)
    assert [s["capacity"] for s in c.stats()["shards"]] == [3, 3, 2, 2]


def test_shard_routing_uses_hash_of_key():
    c = Cache(1 << 20, num_shard_bits=3)
    keys = [(5, off) for off in range(0, 64 * 4096, 4096)]
    for k in keys:
        c.put(k, b"", 10)
    per_shard = [0] * 8
    for k in keys:
        per_shard[hash(k) & 7] += 1
    assert [s["entries"] for s in c.stats()["shards"]] == per_shard
    assert all(n > 0 for n in per_shard)  # tuple hashes spread over the shards
    # A shard fills on its own: capacity is per shard.
    small = Cache(8 * 100, num_shard_bits=3, high_pri_pool_ratio=0.0, policy="lru")
    same_shard = [k for k in range(0, 80, 8)]  # hash(int) == int: all in shard 0
    for k in same_shard:
        small.put(k, k, 40)
    assert [s["entries"] for s in small.stats()["shards"]] == [2, 0, 0, 0, 0, 0, 0, 0]
    assert small.get(72) == 72 and small.get(64) == 64 and small.get(0) is None


def test_new_id_is_unique_across_threads():
    c = Cache(100)
    got: list[int] = []

    def take():
        ids = [c.new_id() for _ in range(500)]
        got.extend(ids)

    ts = [threading.Thread(target=take) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert len(set(got)) == 2000 and min(got) >= 1


def test_block_key_ranges_are_disjoint_across_threads_and_stay_small():
    c = Cache(100)
    got: list[range] = []

    def take():
        got.extend(range(b, b + n) for n in (1, 7, 300) * 100 for b in [c.new_block_keys(n)])

    ts = [threading.Thread(target=take) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    keys = [k for r in got for k in r]
    assert len(keys) == len(set(keys)) == 4 * 100 * 308
    assert min(keys) == 0 and max(keys) == len(keys) - 1  # packed from 0: one-digit ints


# --------------------------------------------------------------------------- LRU and pools
def test_eviction_takes_the_least_recently_used():
    c = Cache(300, 0, high_pri_pool_ratio=0.0, policy="lru")
    for k in "abc":
        assert c.put(k, k.upper(), 100)
    assert c.get("a") == "A"  # a becomes the newest
    assert c.put("d", "D", 100)  # evicts b, the oldest
    assert lru_order(c) == (["c", "a", "d"], [])
    assert c.get("b") is None
    assert c.put("e", "E", 150)  # needs two evictions: c then a
    assert lru_order(c) == (["d", "e"], [])
    st_ = c.stats()
    assert st_["evictions"] == 3 and st_["usage"] == 250 == c.usage
    c._check()


def test_high_priority_pool_and_demotion():
    c = Cache(400, 0, high_pri_pool_ratio=0.5, policy="lru")  # high pool: 200 bytes
    c.put("h1", 1, 100, priority="high")
    c.put("h2", 2, 100, priority="high")
    c.put("l1", 3, 100)
    c.put("l2", 4, 100)
    assert lru_order(c) == (["l1", "l2"], ["h1", "h2"])
    # A third high entry overflows the pool: the oldest high entry is demoted to the newest
    # end of the low pool.
    c.put("h3", 5, 100, priority="high")  # evicts l1 first (low pool goes first)
    assert lru_order(c) == (["l2", "h1"], ["h2", "h3"])
    assert c.stats()["high_pri_pool_usage"] == 200
    # Eviction starts with the low pool even though h2 is older than l3.
    c.put("l3", 6, 100)
    assert lru_order(c) == (["h1", "l3"], ["h2", "h3"])
    c._check()


def test_a_hit_promotes_to_the_high_pool():
    c = Cache(400, 0, high_pri_pool_ratio=0.5, policy="lru")
    for k in ("a", "b", "c"):
        c.put(k, k, 100)
    assert c.get("a") == "a"  # hit: a moves to the high pool
    assert lru_order(c) == (["b", "c"], ["a"])
    h = c.lookup("b")  # pinned: out of the list; it goes to the high pool when released
    assert lru_order(c) == (["c"], ["a"])
    c.release(h)
    assert lru_order(c) == (["c"], ["a", "b"])
    assert c.get("c") == "c"  # pool full (200): the oldest high entry (a) is demoted
    assert lru_order(c) == (["a"], ["b", "c"])
    assert c.get("b") == "b"  # refresh inside the high pool
    assert lru_order(c) == (["a"], ["c", "b"])
    c._check()


def test_without_a_high_pool_hits_only_refresh():
    c = Cache(300, 0, high_pri_pool_ratio=0.0, policy="lru")
    c.put("x", 1, 100, priority="high")  # no high pool: everything is low
    c.put("y", 2, 100)
    c.get("x")
    assert lru_order(c) == (["y", "x"], [])
    c._check()


# --------------------------------------------------------------------------- pinning
def test_pinned_entries_are_never_evicted(policy):
    c = Cache(300, 0, high_pri_pool_ratio=0.0, policy=policy)
    h = c.insert("p", "P", 100)
    assert isinstance(h, Handle) and h.key == "p" and h.value == "P" and h.charge == 100
    assert c.pinned_usage == 100 and listed(c) == []
    for i in range(10):
        c.put(i, i, 100)
    assert c.get("p") == "P"  # survived every eviction
    assert c.usage == 300 and c.pinned_usage == 100
    c.release(h)
    assert c.pinned_usage == 0 and "p" in listed(c)
    # Two handles: pinned until both are released.
    h1 = c.lookup("p")
    h2 = c.lookup("p")
    assert h1 is h2 and h1.refs == 2
    assert c.release(h1) is False and c.pinned_usage == 100
    assert c.release(h2) is False and c.pinned_usage == 0  # back in the LRU, not freed
    with pytest.raises(InvalidArgumentError):
        c.release(h2)  # one release too many
    other = Cache(300, 0, policy=policy)
    h3 = c.lookup("p")
    with pytest.raises(InvalidArgumentError):
        other.release(h3)
    c.release(h3)
    c._check()


def test_non_strict_insert_goes_over_capacity_and_release_drops(policy):
    c = Cache(200, 0, high_pri_pool_ratio=0.0, policy=policy)
    a = c.insert("a", 1, 150)
    b = c.insert("b", 2, 150)  # nothing evictable: inserted over capacity
    assert c.usage == 300 > c.capacity and c.pinned_usage == 300
    c._check()
    assert c.release(a) is True  # released while over capacity: dropped, not kept
    assert c.get("a") is None and c.usage == 150
    assert c.release(b) is False  # now it fits: back in the LRU
    assert c.get("b") == 2 and c.usage == 150 and c.pinned_usage == 0
    c._check()


def test_strict_capacity_limit(policy):
    c = Cache(200, 0, strict_capacity_limit=True, high_pri_pool_ratio=0.0, policy=policy)
    a = c.insert("a", 1, 150)
    with pytest.raises(MemoryLimitError):
        c.insert("b", 2, 100)
    assert isinstance(MemoryLimitError("x"), antkv.Error)
    # Without a handle the entry is simply not kept.
    assert c.put("b", 2, 100) is False
    assert c.get("b") is None and c.usage == 150
    assert c.stats()["rejected"] == 2
    # Unpinned entries are still evicted to make room.
    c.release(a)
    assert c.put("b", 2, 100) is True and c.get("a") is None
    c._check()


def test_put_that_cannot_fit_is_not_kept_even_when_not_strict(policy):
    # RocksDB: an insert without a handle that cannot fit is dropped "as if inserted and
    # evicted immediately", strict or not.
    c = Cache(200, 0, high_pri_pool_ratio=0.0, policy=policy)
    h = c.insert("pinned", 0, 150)
    assert c.put("x", 1, 100) is False and c.get("x") is None
    assert c.put("huge", 1, 201) is False
    assert c.put("y", 1, 50) is True
    c.release(h)
    zero = Cache(0, policy=policy)
    assert zero.put("k", 1, 1) is False and zero.put("k0", 1, 0) is True
    c._check()
    zero._check()


# --------------------------------------------------------------------------- erase, replace, capacity
def test_erase(policy):
    c = Cache(300, 0, policy=policy)
    c.put("a", 1, 100)
    assert c.erase("a") is True and c.erase("a") is False
    assert c.get("a") is None and c.usage == 0
    h = c.insert("b", 2, 100)
    assert c.erase("b") is True
    assert c.get("b") is None and c.lookup("b") is None
    assert c.usage == 100 and c.pinned_usage == 100 and len(c) == 0  # charged until released
    c._check()
    assert h.value == 2
    assert c.release(h) is True and c.usage == 0
    c._check()


def test_insert_replaces_an_entry(policy):
    c = Cache(1000, 0, policy=policy)
    c.put("k", "old", 100)
    c.put("k", "new", 30)
    assert c.get("k") == "new" and c.usage == 30 and len(c) == 1
    h = c.lookup("k")
    c.put("k", "newer", 50)  # the pinned old entry is detached but still charged
    assert c.get("k") == "newer" and c.usage == 80 and c.pinned_usage == 30
    assert h.value == "new"
    c._check()
    c.release(h)
    assert c.usage == 50 and c.pinned_usage == 0
    c._check()


def test_set_capacity(policy):
    c = Cache(400, 0, high_pri_pool_ratio=0.5, policy=policy)
    for i in range(4):
        c.put(i, i, 100, priority="high" if i % 2 else "low")
    h = c.lookup(3)
    c.set_capacity(200)
    assert c.capacity == 200 and c.usage <= 200
    assert c.get(3) == 3  # pinned: kept
    assert c.stats()["high_pri_pool_usage"] <= 100
    c._check()
    c.set_capacity(50)  # only the pinned entry remains, over capacity
    assert c.usage == 100 and len(c) == 1
    c._check()
    c.release(h)  # over capacity: dropped
    assert c.usage == 0
    c.set_capacity(1000)
    assert c.put("big", 0, 900)
    c._check()


def test_stats_counts(policy):
    c = Cache(1000, num_shard_bits=1, policy=policy)
    for i in range(6):
        c.put(i, i, 100)
    for i in range(8):
        c.get(i)
    h = c.lookup(0)
    c.release(h)
    assert c.lookup(99) is None
    s = c.stats()
    assert (s["hits"], s["misses"], s["inserts"]) == (7, 3, 6)
    assert s["num_shards"] == 2 and len(s["shards"]) == 2
    assert sum(x["usage"] for x in s["shards"]) == s["usage"] == 600
    assert s["capacity"] == 1000 and s["pinned_usage"] == 0
    assert s["strict_capacity_limit"] is False and s["high_pri_pool_ratio"] == 0.5
    assert "usage=600" in repr(c)


# --------------------------------------------------------------------------- stateful
class Reference:
    """The RocksDB LRUCacheShard algorithm written the slow, obvious way (two Python lists)."""

    def __init__(self, capacity, ratio, strict):
        self.capacity, self.ratio, self.strict = capacity, ratio, strict
        self.high_capacity = int(capacity * ratio)
        self.table = {}  # key -> entry dict
        self.low, self.high = [], []  # entries, oldest first
        self.usage = 0

    def _lru_remove(self, e):
        (self.high if e["in_high"] else self.low).remove(e)
        e["in_high"] = False

    def _lru_insert(self, e):
        if self.ratio > 0 and (e["high"] or e["hit"]):
            self.high.append(e)
            e["in_high"] = True
            self._maintain()
        else:
            self.low.append(e)

    def _maintain(self):
        while sum(x["charge"] for x in self.high) > self.high_capacity:
            d = self.high.pop(0)
            d["in_high"] = False
            self.low.append(d)

    def _evict(self, charge):
        while self.usage + charge > self.capacity and (self.low or self.high):
            e = self.low.pop(0) if self.low else self.high.pop(0)
            e["in_high"] = False
            del self.table[e["key"]]
            e["in_cache"] = False
            self.usage -= e["charge"]

    def insert(self, key, value, charge, high, pin):
        self._evict(charge)
        if self.usage + charge > self.capacity and (self.strict or not pin):
            return "full"
        e = dict(key=key, value=value, charge=charge, high=high, hit=False, refs=0,
                 in_cache=True, in_high=False)
        old = self.table.get(key)
        self.table[key] = e
        self.usage += charge
        if old is not None:
            old["in_cache"] = False
            if not old["refs"]:
                self._lru_remove(old)
                self.usage -= old["charge"]
        if pin:
            e["refs"] = 1
        else:
            self._lru_insert(e)
        return e

    def lookup(self, key, pin):
        e = self.table.get(key)
        if e is None:
            return None
        if not e["refs"]:
            self._lru_remove(e)
        e["hit"] = True
        if pin:
            e["refs"] += 1
        elif not e["refs"]:
            self._lru_insert(e)
        return e

    def release(self, e):
        e["refs"] -= 1
        if e["refs"]:
            return
        if e["in_cache"]:
            if self.usage <= self.capacity:
                self._lru_insert(e)
                return
            del self.table[e["key"]]
            e["in_cache"] = False
        self.usage -= e["charge"]

    def erase(self, key):
        e = self.table.pop(key, None)
        if e is not None:
            e["in_cache"] = False
            if not e["refs"]:
                self._lru_remove(e)
                self.usage -= e["charge"]

    def set_capacity(self, capacity):
        self.capacity = capacity
        self.high_capacity = int(capacity * self.ratio)
        self._evict(0)
        self._maintain()


KEYS = st.integers(0, 11)
CHARGES = st.sampled_from([0, 1, 7, 30, 64, 100, 250])
PRIORITIES = st.sampled_from(["low", "high"])


class CacheMachine(RuleBasedStateMachine):
    """Random operations on a 2-shard cache, compared step by step with the reference."""

    def __init__(self):
        super().__init__()
        self.cache = None
        self.refs: list[Reference] = []
        self.handles: list[tuple[Handle, dict]] = []
        self.version = 0

    @precondition(lambda self: self.cache is None)
    @rule(capacity=st.integers(0, 800), ratio=st.sampled_from([0.0, 0.25, 0.5, 1.0]),
          strict=st.booleans(), bits=st.sampled_from([0, 1]))
    def create(self, capacity, ratio, strict, bits):
        self.cache = Cache(capacity, bits, strict, ratio, policy="lru")
        caps = [s["capacity"] for s in self.cache.stats()["shards"]]
        self.refs = [Reference(cap, ratio, strict) for cap in caps]
        self.mask = (1 << bits) - 1

    def ref(self, key):
        return self.refs[hash(key) & self.mask]

    @precondition(lambda self: self.cache is not None)
    @rule(key=KEYS, charge=CHARGES, priority=PRIORITIES)
    def put(self, key, charge, priority):
        self.version += 1
        kept = self.cache.put(key, self.version, charge, priority)
        expected = self.ref(key).insert(key, self.version, charge, priority == "high", False)
        assert kept == (expected != "full")

    @precondition(lambda self: self.cache is not None)
    @rule(key=KEYS, charge=CHARGES, priority=PRIORITIES)
    def insert(self, key, charge, priority):
        self.version += 1
        expected = self.ref(key).insert(key, self.version, charge, priority == "high", True)
        if expected == "full":
            with pytest.raises(MemoryLimitError):
                self.cache.insert(key, self.version, charge, priority)
        else:
            h = self.cache.insert(key, self.version, charge, priority)
            assert h.value == self.version
            self.handles.append((h, expected))

    @precondition(lambda self: self.cache is not None)
    @rule(key=KEYS)
    def get(self, key):
        e = self.ref(key).lookup(key, pin=False)
        assert self.cache.get(key) == (None if e is None else e["value"])

    @precondition(lambda self: self.cache is not None)
    @rule(key=KEYS)
    def lookup(self, key):
        e = self.ref(key).lookup(key, pin=True)
        h = self.cache.lookup(key)
        if e is None:
            assert h is None
        else:
            assert h is not None and h.value == e["value"]
            self.handles.append((h, e))

    @precondition(lambda self: self.handles)
    @rule(data=st.data())
    def release(self, data):
        i = data.draw(st.integers(0, len(self.handles) - 1))
        h, e = self.handles.pop(i)
        self.ref(h.key).release(e)
        self.cache.release(h)

    @precondition(lambda self: self.cache is not None)
    @rule(key=KEYS)
    def erase(self, key):
        expected = key in self.ref(key).table
        self.ref(key).erase(key)
        assert self.cache.erase(key) == expected

    @precondition(lambda self: self.cache is not None)
    @rule(capacity=st.integers(0, 800))
    def set_capacity(self, capacity):
        self.cache.set_capacity(capacity)
        for r, s in zip(self.refs, self.cache.stats()["shards"]):
            r.set_capacity(s["capacity"])

    @invariant()
    def matches_reference(self):
        if self.cache is None:
            return
        self.cache._check()
        for i, r in enumerate(self.refs):
            low, high = lru_order(self.cache, i)
            assert low == [e["key"] for e in r.low]
            assert high == [e["key"] for e in r.high]
            sh = self.cache.shards[i]
            assert sh.usage == r.usage
            assert sorted(sh.table) == sorted(r.table)
            if sh.usage > sh.capacity:
                assert not low and not high  # over capacity only when everything is pinned
        pinned = {id(h): h.charge for h, _ in self.handles}
        assert self.cache.pinned_usage == sum(pinned.values())

    def teardown(self):
        for h, e in self.handles:
            self.cache.release(h)
        if self.cache is not None:
            self.cache._check()
            assert self.cache.pinned_usage == 0


CacheMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40,
                                          deadline=None, derandomize=True)
TestCacheStateful = CacheMachine.TestCase


# --------------------------------------------------------------------------- threads
def test_threads_hammering_one_cache_keep_exact_accounting(policy):
    c = Cache(64 * 100, num_shard_bits=2, high_pri_pool_ratio=0.25, policy=policy)
    n_threads, steps = 4, 3000
    counts = [{"gets": 0, "lookups": 0} for _ in range(n_threads)]
    errors: list[BaseException] = []

    def work(t):
        rnd = random.Random(t)
        held = []
        try:
            for _ in range(steps):
                k = rnd.randrange(128)
                op = rnd.random()
                if op < 0.35:
                    c.put(k, k, rnd.choice((10, 50, 100)), rnd.choice(("low", "high")))
                elif op < 0.7:
                    v = c.get(k)
                    assert v is None or v == k
                    counts[t]["gets"] += 1
                elif op < 0.8:
                    h = c.lookup(k)
                    counts[t]["lookups"] += 1
                    if h is not None:
                        assert h.value == k
                        held.append(h)
                elif op < 0.9 and held:
                    c.release(held.pop(rnd.randrange(len(held))))
                elif op < 0.95:
                    c.erase(k)
                else:
                    held.append(c.insert(k, k, 20))
            for h in held:
                c.release(h)
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    ts = [threading.Thread(target=work, args=(t,)) for t in range(n_threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors
    c._check()
    s = c.stats()
    assert s["pinned_usage"] == 0
    assert s["usage"] == sum(sum(sh.charges()) for sh in c.shards)
    assert s["usage"] <= c.capacity
    assert s["hits"] + s["misses"] == sum(x["gets"] + x["lookups"] for x in counts)


def test_handles_compare_and_hash_by_identity(policy):
    """Two handles to entries of equal contents are two handles: a caller may keep them in a set."""
    c = Cache(1000, 0, policy=policy)
    a, b = c.insert("a", "V", 10), c.insert("b", "V", 10)
    assert a != b and a == a and len({a, b}) == 2
    assert c.lookup("a") is a  # a second handle to the same entry is the same object
    for h in (a, a, b):
        c.release(h)
    assert c.pinned_usage == 0
    c._check()
