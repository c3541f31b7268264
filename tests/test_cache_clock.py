"""The clock policy of the block cache: its sweep, a stateful test against a reference model,
and lock-free hits racing eviction (the rules every policy shares are in test_cache.py)."""

from __future__ import annotations

import random
import threading

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from antkv.errors import MemoryLimitError
from antkv.memory.cache import Cache, Handle
from antkv.memory.clock import SLOT


def ring(cache: Cache, shard: int = 0) -> list:
    """Keys of the shard's ring, starting at the hand (the order the sweep looks at them)."""
    return cache.shards[shard].listed()


def test_a_hit_is_a_second_chance():
    c = Cache(300, 0, policy="clock")
    for k in "abc":
        assert c.put(k, k.upper(), 100)
    assert c.get("a") == "A"  # only the reference bit: nothing moves
    assert ring(c) == ["a", "b", "c"]
    assert c.put("d", "D", 100)  # a is spared (its bit cleared), b goes
    assert c.get("b") is None and ring(c) == ["c", "a", "d"]
    assert c.put("e", "E", 100)  # c has no bit: it goes, the hand stops at a
    assert sorted(c.shards[0].table) == ["a", "d", "e"]
    assert c.put("f", "F", 100)  # a's second chance is spent
    assert c.get("a") is None
    st_ = c.stats()
    assert (st_["evictions"], st_["hits"], st_["misses"]) == (3, 1, 2)
    c._check()


def test_high_priority_entries_survive_one_more_turn():
    c = Cache(300, 0, policy="clock")
    c.put("index", 1, 100, priority="high")
    c.put("d1", 2, 100)
    c.put("d2", 3, 100)
    c.put("d3", 4, 100)  # the index block is spared once, d1 goes
    assert c.get("index") == 1 and c.get("d1") is None
    c.put("d4", 5, 100)  # d2 goes; the index was hit again above
    c.put("d5", 6, 100)  # d3 goes
    assert c.get("index") == 1 and c.get("d2") is None and c.get("d3") is None
    c._check()


def test_a_sweep_over_referenced_entries_ends():
    # Every entry referenced: one turn clears the bits, then the oldest goes.
    c = Cache(400, 0, policy="clock")
    for k in range(4):
        c.put(k, k, 100)
        c.get(k)
    assert c.put(9, 9, 100)
    assert c.get(0) is None and [c.get(k) for k in (1, 2, 3, 9)] == [1, 2, 3, 9]
    c._check()


def test_pinned_entries_leave_the_ring():
    c = Cache(300, 0, policy="clock")
    h = c.insert("p", "P", 100)
    c.put("a", 1, 100)
    assert ring(c) == ["a"]
    for i in range(5):
        c.put(i, i, 100)
    assert c.get("p") == "P" and c.stats()["evictions"] == 4
    c.release(h)
    assert "p" in ring(c)
    c._check()


# --------------------------------------------------------------------------- stateful
class ClockReference:
    """The clock written with a Python list and an index: ``ring[h]`` is under the hand,
    ``h == len(ring)`` is the sentinel between the newest and the oldest entry."""

    def __init__(self, capacity, strict):
        self.capacity, self.strict = capacity, strict
        self.table, self.ring, self.h, self.usage = {}, [], 0, 0

    def _unlink(self, e):
        j = self.ring.index(e)
        del self.ring[j]
        if j < self.h:
            self.h -= 1

    def _link(self, e):
        self.ring.insert(self.h, e)
        self.h += 1

    def _evict(self, charge):
        chances = len(self.table)
        while self.usage + charge > self.capacity and self.ring:
            if self.h == len(self.ring):
                self.h = 0
                continue
            e = self.ring[self.h]
            if e["hit"] and chances > 0:
                e["hit"] = False
                chances -= 1
                self.h += 1
                continue
            del self.ring[self.h]
            del self.table[e["key"]]
            e["in_cache"] = False
            self.usage -= e["charge"]

    def insert(self, key, value, charge, high, pin):
        self._evict(charge)
        if self.usage + charge > self.capacity and (self.strict or not pin):
            return "full"
        e = dict(key=key, value=value, charge=charge, hit=high, refs=0, in_cache=True)
        old = self.table.get(key)
        self.table[key] = e
        self.usage += charge
        if old is not None:
            old["in_cache"] = False
            if not old["refs"]:
                self._unlink(old)
                self.usage -= old["charge"]
        if pin:
            e["refs"] = 1
        else:
            self._link(e)
        return e

    def lookup(self, key, pin):
        e = self.table.get(key)
        if e is None:
            return None
        e["hit"] = True
        if pin:
            if not e["refs"]:
                self._unlink(e)
            e["refs"] += 1
        return e

    def release(self, e):
        e["refs"] -= 1
        if e["refs"]:
            return
        if e["in_cache"]:
            if self.usage <= self.capacity:
                self._link(e)
                return
            del self.table[e["key"]]
            e["in_cache"] = False
        self.usage -= e["charge"]

    def erase(self, key):
        e = self.table.pop(key, None)
        if e is not None:
            e["in_cache"] = False
            if not e["refs"]:
                self._unlink(e)
                self.usage -= e["charge"]

    def set_capacity(self, capacity):
        self.capacity = capacity
        self._evict(0)


HOMED = 100  # keys HOMED.. are a table's data blocks: inserted only with their home (put_block)


class ClockMachine(RuleBasedStateMachine):
    """Random operations on a 2-shard clock cache, compared step by step with the reference."""

    def __init__(self):
        super().__init__()
        self.cache = None
        self.refs: list[ClockReference] = []
        self.handles: list[tuple[Handle, dict]] = []
        self.version = 0
        self.home: list = [None] * 6  # the home items of keys HOMED.., as a table keeps its blocks' entries

    @precondition(lambda self: self.cache is None)
    @rule(capacity=st.integers(0, 800), strict=st.booleans(), bits=st.sampled_from([0, 1]))
    def create(self, capacity, strict, bits):
        self.cache = Cache(capacity, bits, strict, policy="clock")
        self.refs = [ClockReference(s["capacity"], strict) for s in self.cache.stats()["shards"]]
        self.mask = (1 << bits) - 1

    def ref(self, key) -> ClockReference:
        return self.refs[hash(key) & self.mask]

    @precondition(lambda self: self.cache is not None)
    @rule(key=st.integers(0, 11), charge=st.sampled_from([0, 1, 7, 30, 64, 100, 250]),
          high=st.booleans(), pin=st.booleans())
    def insert(self, key, charge, high, pin):
        self.version += 1
        priority = "high" if high else "low"
        expected = self.ref(key).insert(key, self.version, charge, high, pin)
        if not pin:
            assert self.cache.put(key, self.version, charge, priority) == (expected != "full")
        elif expected == "full":
            with pytest.raises(MemoryLimitError):
                self.cache.insert(key, self.version, charge, priority)
        else:
            h = self.cache.insert(key, self.version, charge, priority)
            self.handles.append((h, expected))

    @precondition(lambda self: self.cache is not None)
    @rule(i=st.integers(0, 5), charge=st.sampled_from([0, 1, 7, 30, 64, 100, 250]))
    def insert_block(self, i, charge):
        """A table's data block: its key is the table's own, always inserted with its home."""
        self.version += 1
        key = HOMED + i
        expected = self.ref(key).insert(key, self.version, charge, False, False)
        assert self.cache.put_block(key, self.version, charge, self.home, i) == (expected != "full")
        if expected != "full":
            assert self.home[i][0] == self.version

    @precondition(lambda self: self.cache is not None)
    @rule(key=st.integers(0, 11) | st.integers(HOMED, HOMED + 5), pin=st.booleans())
    def lookup(self, key, pin):
        e = self.ref(key).lookup(key, pin)
        if pin:
            h = self.cache.lookup(key)
            assert (h is None) == (e is None)
            if h is not None:
                assert h.value == e["value"]
                self.handles.append((h, e))
        else:
            assert self.cache.get(key) == (None if e is None else e["value"])

    @precondition(lambda self: self.handles)
    @rule(data=st.data())
    def release(self, data):
        h, e = self.handles.pop(data.draw(st.integers(0, len(self.handles) - 1)))
        self.ref(h.key).release(e)
        self.cache.release(h)

    @precondition(lambda self: self.cache is not None)
    @rule(key=st.integers(0, 11) | st.integers(HOMED, HOMED + 5))
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
            s = self.cache.shards[i]
            keys = [e["key"] for e in r.ring]
            assert ring(self.cache, i) == keys[r.h :] + keys[: r.h]
            assert [bool(s.bits[s.table[k][SLOT]]) for k in keys] == [bool(e["hit"]) for e in r.ring]
            assert s.usage == r.usage and sorted(s.table) == sorted(r.table)
        for i, item in enumerate(self.home):  # a homed key is cached exactly when its home item is set
            e = self.cache.shards[hash(HOMED + i) & self.mask].table.get(HOMED + i)
            assert (e is None) == (item is None), (i, item, e)
            assert item is None or e is item or tuple(e) == item, (i, item, e)

    def teardown(self):
        for h, e in self.handles:
            self.cache.release(h)
        if self.cache is not None:
            self.cache._check()
            assert self.cache.pinned_usage == 0


ClockMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None, derandomize=True)
TestClockStateful = ClockMachine.TestCase


# --------------------------------------------------------------------------- lock-free hits
def test_lock_free_hits_under_concurrent_eviction():
    """Readers hit without any lock while writers insert and evict flat out in the same
    shards: every hit returns the value stored under its key, hits and misses are counted
    exactly, and the shards' accounting holds afterwards."""
    c = Cache(40 * 100, num_shard_bits=1, policy="clock")
    keys = 200  # five times what fits: constant eviction
    stop = threading.Event()
    errors: list[BaseException] = []
    gets = [0] * 3

    def writer(seed):
        rnd = random.Random(seed)
        try:
            while not stop.is_set():
                k = rnd.randrange(keys)
                if rnd.random() < 0.1:
                    h = c.insert(k, ("v", k), 100)
                    c.release(h)
                else:
                    c.put(k, ("v", k), rnd.choice((50, 100, 150)), rnd.choice(("low", "high")))
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    def reader(t):
        rnd = random.Random(100 + t)
        try:
            for _ in range(20_000):
                k = rnd.randrange(keys)
                v = c.get(k)
                assert v is None or v == ("v", k), (k, v)
                gets[t] += 1
        except BaseException as e:
            errors.append(e)

    writers = [threading.Thread(target=writer, args=(i,)) for i in range(2)]
    readers = [threading.Thread(target=reader, args=(t,)) for t in range(3)]
    for t in writers + readers:
        t.start()
    for t in readers:
        t.join()
    stop.set()
    for t in writers:
        t.join()
    assert not errors, errors
    c._check()
    s = c.stats()
    assert s["hits"] + s["misses"] == sum(gets) == 60_000
    assert s["hits"] > 0 and s["misses"] > 0 and s["evictions"] > 1000
    assert s["usage"] <= c.capacity and s["pinned_usage"] == 0


# --------------------------------------------------------------------------- garbage collector
def test_cached_blocks_add_nothing_the_garbage_collector_walks(tmp_path):
    """A clock entry is a tuple of the block and ints, its reference bit in the shard's
    ``bits``: once collected, the entries of a filled cache are untracked, so a cache filling
    with blocks does not make every full collection walk one more container per block."""
    import gc

    import antkv

    db = antkv.open(str(tmp_path / "db"), antkv.Options(block_cache=Cache(64 << 20, policy="clock")))
    try:
        keys = [b"k%07d" % i for i in range(20_000)]
        for k in keys:
            db.put(k, b"v" * 100)
        db.flush()
        before = len(gc.get_objects())
        for k in keys:
            assert db.get(k) == b"v" * 100
        for _ in range(3):  # a tuple is untracked once its items are: the block's own, then the block, then the entry
            gc.collect()
        entries = [e for s in db.options.block_cache.shards for e in s.table.values()]
        assert len(entries) > 400  # the data blocks read
        assert not any(gc.is_tracked(e) for e in entries)
        assert len(gc.get_objects()) - before < len(entries) // 4
    finally:
        db.close()


# --------------------------------------------------------------------------- homes
def test_a_table_finds_its_cached_blocks_by_index_and_the_cache_empties_what_it_drops(tmp_path):
    """The fused point read finds a table's cached block in the table's list of its blocks'
    entries; every block the cache evicts, and every block of a closed table, leaves that list,
    so the list never keeps a block the cache no longer charges."""
    import antkv

    cache = Cache(40 * 4096, num_shard_bits=2, policy="clock")  # room for ~36 of the table's blocks
    db = antkv.open(str(tmp_path / "db"), antkv.Options(block_cache=cache))
    try:
        keys = [b"k%07d" % i for i in range(20_000)]
        for k in keys:
            db.put(k, b"v" * 100)
        db.flush()
        rnd = random.Random(7)
        for k in rnd.sample(keys, 5_000):
            assert db.get(k) == b"v" * 100
        (f,) = db._sv.version.levels[0]
        reader = f.reader
        held = [(i, e) for i, e in enumerate(reader._cached) if e is not None]
        cached = {k: e for s in cache.shards for k, e in s.table.items()}
        assert 20 < len(held) == len(cached) < len(reader._cached) // 4  # evictions emptied the rest
        for i, e in held:
            assert cached[reader._key_base + i] is e
        i, e = held[0]
        last_key = reader.index()[0][i]  # the block's index key is its last key
        key = b"k%07d" % (int(last_key[1:]) - 1)  # in the same block (an index key's read looks twice)
        hits = cache.stats()["hits"]
        assert db.get(key) == b"v" * 100
        assert cache.stats()["hits"] == hits + 1  # found through the table's list, counted as a hit
        cache._check()
    finally:
        db.close()
    assert all(e is None for e in reader._cached)
    assert len(cache) == 0
