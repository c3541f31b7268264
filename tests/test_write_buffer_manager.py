"""The write buffer manager: accounting, flush rule, flush choice, stalls, cache charging."""

from __future__ import annotations

import itertools
import random
import threading
import time

import pytest

from antkv.memory.cache import Cache
from antkv.errors import DBClosedError, InvalidArgumentError
from antkv.memory.write_buffer_manager import WriteBufferManager, shared_memory

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB
WAIT = 10.0  # seconds a test waits for a thread before failing (never reached when correct)

_clock = itertools.count(1)


class Memtables:
    """A database's memtable accounting as the engine does it, driving a shared manager.

    Mutable memory grows by ``write``; ``switch`` (the flush callback) makes it immutable;
    ``flush_one`` drops the oldest immutable memtable.  ``oldest`` is a cross-database clock.
    """

    def __init__(self, wbm: WriteBufferManager):
        self.wbm = wbm
        self.mutable = 0
        self.first_write = None
        self.immutables: list[int] = []
        self.lock = threading.Lock()
        self.switches = 0
        self.token = wbm.register(self.switch, self.oldest)

    def write(self, n):
        with self.lock:
            if self.first_write is None:
                self.first_write = next(_clock)
            self.mutable += n
            self.wbm.reserve_mem(n)

    def switch(self):
        with self.lock:
            if not self.mutable:
                return
            self.wbm.schedule_free_mem(self.mutable)
            self.immutables.append(self.mutable)
            self.mutable = 0
            self.first_write = None
            self.switches += 1

    def oldest(self):
        return self.first_write

    def flush_one(self):
        with self.lock:
            n = self.immutables.pop(0)
        self.wbm.free_mem(n)

    def close(self):
        self.switch()
        while self.immutables:
            self.flush_one()
        self.wbm.unregister(self.token)


def test_validation():
    with pytest.raises(TypeError):
        WriteBufferManager("1")
    with pytest.raises(TypeError):
        WriteBufferManager(1.5)
    with pytest.raises(InvalidArgumentError):
        WriteBufferManager(-1)
    with pytest.raises(TypeError):
        WriteBufferManager(100, cache="cache")
    with pytest.raises(TypeError):
        WriteBufferManager(100, allow_stall=1)
    w = WriteBufferManager(100)
    for fn in (w.reserve_mem, w.schedule_free_mem, w.free_mem):
        with pytest.raises(TypeError):
            fn(1.0)
        with pytest.raises(InvalidArgumentError):
            fn(-1)
    with pytest.raises(TypeError):
        w.register(None, lambda: None)
    w.reserve_mem(10)
    with pytest.raises(InvalidArgumentError):
        w.schedule_free_mem(11)  # more than the mutable memory
    with pytest.raises(InvalidArgumentError):
        w.free_mem(1)  # nothing is immutable yet
    w.schedule_free_mem(4)
    with pytest.raises(InvalidArgumentError):
        w.free_mem(5)
    assert (w.memory_usage, w.mutable_memory_usage) == (10, 6)
    w._check()


def test_accounting():
    w = WriteBufferManager(1000)
    assert w.enabled and not w.cost_to_cache and not w.allow_stall and w.buffer_size == 1000
    w.reserve_mem(300)
    w.reserve_mem(200)
    assert (w.memory_usage, w.mutable_memory_usage) == (500, 500)
    w.schedule_free_mem(300)
    assert (w.memory_usage, w.mutable_memory_usage) == (500, 200)
    w.free_mem(300)
    assert (w.memory_usage, w.mutable_memory_usage) == (200, 200)
    assert w.dummy_entries_in_cache_usage == 0
    s = w.stats()
    assert s["memory_usage"] == 200 and s["mutable_memory_usage"] == 200 and s["databases"] == 0
    w._check()


def test_flush_rule_mutable_over_seven_eighths():
    w = WriteBufferManager(800)
    w.reserve_mem(700)  # exactly 7/8: not yet
    assert not w.should_flush()
    w.reserve_mem(1)
    assert w.should_flush()


def test_flush_rule_total_over_budget_with_half_mutable():
    w = WriteBufferManager(800)
    w.reserve_mem(401)
    w.schedule_free_mem(401)  # 401 immutable
    w.reserve_mem(399)  # total 800 >= 800, but mutable 399 < 400
    assert w.memory_usage == 800 and not w.should_flush()
    w.reserve_mem(1)  # mutable 400 >= half, total 801
    assert w.should_flush()
    w2 = WriteBufferManager(800)
    w2.reserve_mem(500)
    w2.schedule_free_mem(500)
    w2.reserve_mem(299)  # mutable >= half is needed: total 799 < 800 anyway
    assert not w2.should_flush()
    w3 = WriteBufferManager(801)  # half is 400 (integer division, as in RocksDB)
    w3.reserve_mem(401)
    w3.schedule_free_mem(401)
    w3.reserve_mem(400)
    assert w3.memory_usage == 801 and w3.should_flush()


def test_disabled_manager_never_flushes_or_stalls_but_still_charges_the_cache():
    c = Cache(10 * MiB, 0)
    w = WriteBufferManager(0, c, allow_stall=True)
    assert not w.enabled and w.cost_to_cache
    db = Memtables(w)
    db.write(5 * MiB)
    assert not w.should_flush() and w.maybe_trigger_flush() is None and db.switches == 0
    assert w.maybe_stall() is False and w.stall_count == 0
    assert w.dummy_entries_in_cache_usage == 5 * MiB == c.usage
    w._check()


def test_flush_goes_to_the_database_with_the_oldest_data():
    w = WriteBufferManager(1000)
    a, b, c = Memtables(w), Memtables(w), Memtables(w)
    b.write(100)  # b's data is the oldest
    a.write(100)
    c.write(100)
    assert w.maybe_trigger_flush() is None  # cheap no-op: no flush needed
    assert (a.switches, b.switches, c.switches) == (0, 0, 0)
    c.write(600)  # mutable 900 > 875; the writer is c, but b holds the oldest data
    assert w.should_flush()
    assert w.maybe_trigger_flush() == b.token
    assert (a.switches, b.switches, c.switches) == (0, 1, 0)
    assert w.mutable_memory_usage == 800 and w.memory_usage == 900
    assert w.maybe_trigger_flush() is None  # 800 <= 875 and total 900 < 1000: enough
    c.write(100)  # total 1000 >= budget and mutable 900: a is now the oldest
    assert w.maybe_trigger_flush() == a.token
    assert w.stats()["flushes_triggered"] == 2
    w._check()


def test_databases_without_mutable_data_are_not_asked():
    w = WriteBufferManager(100)
    idle = Memtables(w)
    busy = Memtables(w)
    busy.write(90)
    busy.switch()  # all immutable: nobody holds mutable data
    assert idle.oldest() is None and busy.oldest() is None
    assert w.maybe_trigger_flush() is None
    busy.write(60)  # total 150 >= 100, mutable 60 >= 50
    assert w.maybe_trigger_flush() == busy.token
    w.unregister(busy.token)
    w.unregister(busy.token)  # idempotent
    assert w.stats()["databases"] == 1


def test_flush_callback_may_reenter_the_manager_and_triggers_do_not_pile_up():
    w = WriteBufferManager(100)
    inner: list = []
    db = Memtables(w)

    def callback():
        inner.append(w.maybe_trigger_flush())  # another trigger in progress: returns None
        db.switch()

    w.unregister(db.token)
    db.token = w.register(callback, db.oldest)
    db.write(95)
    assert w.maybe_trigger_flush() == db.token
    assert inner == [None] and db.switches == 1


def test_a_database_closing_concurrently_is_skipped():
    w = WriteBufferManager(100)

    def closed():
        raise DBClosedError("closing")

    w.register(closed, closed)  # raises from oldest_fn: skipped
    db = Memtables(w)
    db.write(95)
    assert w.maybe_trigger_flush() == db.token and db.switches == 1
    w.unregister(db.token)
    w2 = WriteBufferManager(100)
    w2.register(closed, lambda: 1)  # the oldest, but its callback raises: nothing flushed
    db2 = Memtables(w2)
    db2.write(95)
    assert w2.maybe_trigger_flush() is None and db2.switches == 0


def _start(fn, *args):
    out: dict = {}

    def run():
        out["result"] = fn(*args)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def _wait_until(pred):
    deadline = time.monotonic() + WAIT
    while not pred():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.001)


def test_stall_until_free_mem():
    w = WriteBufferManager(1000, allow_stall=True)
    db = Memtables(w)
    db.write(1)
    db.switch()
    db.write(998)
    assert w.maybe_stall() is False  # 999: under budget, no stall
    db.write(1)  # total 1000 >= budget
    assert w.should_stall()
    t, out = _start(w.maybe_stall)
    _wait_until(lambda: w.stats()["stalled_writers"] == 1)
    assert t.is_alive() and w.stall_count == 1
    w.reserve_mem(0)  # only memory going below the budget wakes the writer
    time.sleep(0.01)
    assert t.is_alive()
    db.flush_one()  # 1 byte freed: 999 < 1000
    t.join(WAIT)
    assert not t.is_alive() and out["result"] is True
    assert w.stats()["stalled_writers"] == 0 and w.stall_count == 1


def test_no_stall_without_allow_stall():
    w = WriteBufferManager(100)
    w.reserve_mem(500)
    assert not w.should_stall() and w.maybe_stall() is False and w.stall_count == 0


def test_hold_budget_waits_past_budget_plus_one_unit_for_immutable_memory():
    """Without allow_stall a writer still waits once memory passes the budget plus one unit,
    but only for memory a flush in flight will free, and not forever when none is freed."""
    w = WriteBufferManager(1000)
    limit = w.buffer_size + w.dummy_entry_size
    db = Memtables(w)
    db.write(limit)
    assert w.hold_budget() is False  # at the limit: no wait
    db.write(1)
    assert w.hold_budget() is False  # past it, but all mutable: only a flush can free it
    db.switch()
    db.write(1)
    t, out = _start(w.hold_budget, db.token)
    _wait_until(lambda: w.stats()["stalled_writers"] == 1)
    assert t.is_alive()
    db.flush_one()
    t.join(WAIT)
    assert not t.is_alive() and out["result"] is True and w.stats()["budget_holds"] == 1
    assert w.stall_count == 0  # not a stall: allow_stall is off
    db.switch()
    db.write(limit)  # past the limit again, part of it immutable, and no flush will come
    assert w.hold_budget(db.token, patience=0.05) is True  # gave up after patience
    assert w.hold_budget(db.token) is False  # and nobody waits again until memory is freed
    db.flush_one()
    db.switch()
    db.write(limit)
    t, out = _start(w.hold_budget, db.token)
    _wait_until(lambda: w.stats()["stalled_writers"] == 1)
    w.unregister(db.token)  # a database that leaves stops waiting
    t.join(WAIT)
    assert not t.is_alive() and out["result"] is True


def test_close_and_unregister_wake_stalled_writers():
    w = WriteBufferManager(100, allow_stall=True)
    a, b = Memtables(w), Memtables(w)
    a.write(200)
    ta, oa = _start(w.maybe_stall, a.token)
    tb, ob = _start(w.maybe_stall, b.token)
    tn, on = _start(w.maybe_stall)
    _wait_until(lambda: w.stats()["stalled_writers"] == 3)
    w.unregister(a.token)  # a's writer stops waiting; the others still wait
    ta.join(WAIT)
    assert not ta.is_alive() and oa["result"] is True
    time.sleep(0.01)
    assert tb.is_alive() and tn.is_alive()
    w.close()
    tb.join(WAIT)
    tn.join(WAIT)
    assert not tb.is_alive() and not tn.is_alive()
    assert w.closed and w.maybe_stall() is False and w.stall_count == 3


# --------------------------------------------------------------------------- cache charging
def test_dummy_entries_reserve_in_units_and_release_lazily():
    c = Cache(64 * MiB, 0)
    w = WriteBufferManager(16 * MiB, c)
    unit = 256 * KiB
    assert w.dummy_entry_size == unit
    w.reserve_mem(1)
    assert w.dummy_entries_in_cache_usage == unit == c.usage == c.pinned_usage
    w.reserve_mem(unit - 1)  # exactly one unit
    assert w.dummy_entries_in_cache_usage == unit
    w.reserve_mem(1)
    assert w.dummy_entries_in_cache_usage == 2 * unit
    w.reserve_mem(8 * unit - unit - 1)  # 8 units exactly
    assert w.dummy_entries_in_cache_usage == 8 * unit
    w.schedule_free_mem(8 * unit)
    w.free_mem(2 * unit)  # 6 units used >= 3/4 of 8 reserved: keep the reservation
    assert w.dummy_entries_in_cache_usage == 8 * unit
    w.free_mem(unit // 2)  # 5.5 units < 6 = 3/4 of 8: shrink to ceil(5.5) = 6 units
    assert w.dummy_entries_in_cache_usage == 6 * unit == c.usage
    w.free_mem(5 * unit + unit // 2)  # 0 used
    assert w.dummy_entries_in_cache_usage == 0 and c.usage == 0
    assert c.stats()["entries"] == 0  # dummies are erased, not left in the LRU
    w._check()
    c._check()


def test_large_buffers_use_one_mib_units():
    c = Cache(1 * GiB, 0)
    w = WriteBufferManager(64 * MiB, c)
    assert w.dummy_entry_size == MiB
    w.reserve_mem(3 * MiB + 1)
    assert w.dummy_entries_in_cache_usage == 4 * MiB == c.usage
    assert WriteBufferManager(64 * MiB - 1, c).dummy_entry_size == 256 * KiB


def test_memtable_memory_evicts_blocks_so_the_cache_stays_within_capacity():
    c = Cache(4 * MiB, 0, high_pri_pool_ratio=0.1)
    for off in range(0, 4 * MiB, 4 * KiB):
        c.put((1, off), b"block", 4 * KiB)
    assert c.usage == 4 * MiB
    w = WriteBufferManager(2 * MiB, c)
    db = Memtables(w)
    for _ in range(300):
        db.write(5 * KiB)
        assert c.usage <= c.capacity
        assert w.dummy_entries_in_cache_usage - w.memory_usage < w.dummy_entry_size
    assert w.memory_usage == 1500 * KiB
    assert c.pinned_usage == w.dummy_entries_in_cache_usage == 6 * 256 * KiB
    blocks = sum(1 for off in range(0, 4 * MiB, 4 * KiB) if c.get((1, off)) is not None)
    assert blocks * 4 * KiB + w.dummy_entries_in_cache_usage == c.usage <= c.capacity
    db.close()
    assert w.memory_usage == 0 and w.dummy_entries_in_cache_usage == 0
    c._check()
    w._check()


def test_strict_cache_refusing_a_dummy_is_retried():
    c = Cache(512 * KiB, 0, strict_capacity_limit=True)
    w = WriteBufferManager(1 * MiB, c)
    h = c.insert("pinned block", b"", 300 * KiB)
    w.reserve_mem(100 * KiB)  # 300 + 256 > 512: refused
    assert w.dummy_entries_in_cache_usage == 0 and w.stats()["cache_reservation_failures"] == 1
    w._check()
    c.release(h)
    w.reserve_mem(1)  # retried: the unpinned block is evicted for it
    assert w.dummy_entries_in_cache_usage == 256 * KiB and c.usage == 256 * KiB
    w._check()


def test_close_releases_the_reservation():
    c = Cache(8 * MiB, 0)
    w = WriteBufferManager(4 * MiB, c)
    w.reserve_mem(1 * MiB)
    assert c.usage == 1 * MiB
    w.close()
    assert c.usage == 0 and w.dummy_entries_in_cache_usage == 0
    w.reserve_mem(1)  # still counts, charges nothing
    assert w.memory_usage == 1 * MiB + 1 and c.usage == 0
    w._check()


# --------------------------------------------------------------------------- shared_memory
def test_shared_memory_sizes_as_flink_does():
    cache, wbm = shared_memory(3 * GiB)
    assert cache.capacity == int(2.5 * GiB) and wbm.buffer_size == 1 * GiB
    assert wbm.cache is cache and cache.high_pri_pool_ratio == 0.1
    assert not cache.strict_capacity_limit and cache.num_shards == 64
    cache2, wbm2 = shared_memory(300 * MiB, write_buffer_ratio=0.3, high_pri_pool_ratio=0.2)
    assert cache2.capacity == int((3 - 0.3) * 300 * MiB / 3)
    assert wbm2.buffer_size == int(2 * 300 * MiB * 0.3 / 3)
    with pytest.raises(TypeError):
        shared_memory("1g")
    with pytest.raises(InvalidArgumentError):
        shared_memory(0)
    with pytest.raises(InvalidArgumentError):
        shared_memory(MiB, write_buffer_ratio=1.0)
    with pytest.raises(InvalidArgumentError):
        shared_memory(MiB, write_buffer_ratio=0.0)
    with pytest.raises(InvalidArgumentError):
        shared_memory(MiB, high_pri_pool_ratio=-0.1)
    with pytest.raises(InvalidArgumentError):
        shared_memory(MiB, write_buffer_ratio=0.6, high_pri_pool_ratio=0.4)
    with pytest.raises(TypeError):
        shared_memory(MiB, write_buffer_ratio=None)


# --------------------------------------------------------------------------- threads
def test_threads_hammering_one_manager_and_its_cache_keep_exact_accounting():
    cache = Cache(8 * MiB, num_shard_bits=2, high_pri_pool_ratio=0.1)
    w = WriteBufferManager(2 * MiB, cache, allow_stall=True)
    dbs = [Memtables(w) for _ in range(4)]
    stop = threading.Event()
    flushed = [0]
    errors: list[BaseException] = []

    def flusher():  # the background flush job: drops immutable memtables as they appear
        try:
            while not stop.is_set():
                for db in dbs:
                    while db.immutables:
                        db.flush_one()
                        flushed[0] += 1
                time.sleep(0.0005)
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    def writer(i):
        rnd = random.Random(i)
        db = dbs[i]
        try:
            for _ in range(600):
                db.write(rnd.randrange(1, 8 * KiB))
                w.maybe_trigger_flush()
                w.maybe_stall(db.token)
                off = rnd.randrange(512) * 4 * KiB
                if cache.get((9, off)) is None:
                    cache.put((9, off), off, 4 * KiB)
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    bg = threading.Thread(target=flusher)
    bg.start()
    ts = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    stop.set()
    bg.join(60)
    assert not any(t.is_alive() for t in ts) and not bg.is_alive()
    assert not errors, errors
    assert sum(db.switches for db in dbs) > 0 and flushed[0] > 0
    expected_mutable = sum(db.mutable for db in dbs)
    expected_total = expected_mutable + sum(sum(db.immutables) for db in dbs)
    assert w.mutable_memory_usage == expected_mutable
    assert w.memory_usage == expected_total
    reserved = w.dummy_entries_in_cache_usage
    assert reserved >= w.memory_usage
    w._check()
    cache._check()
    assert cache.pinned_usage == reserved
    assert cache.usage <= cache.capacity
    for db in dbs:
        db.close()
    assert w.memory_usage == 0 and w.mutable_memory_usage == 0
    assert cache.pinned_usage == w.dummy_entries_in_cache_usage == 0
    w.close()
    cache._check()
