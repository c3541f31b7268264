"""Timers in the store, without Spark: the timers that fire are exactly the model's, batch
after batch, on working copies reused (whose key-group floors skip scans), rebuilt (which
know no floors, but take those of the key groups their row cache holds whole from it) and
ingested into."""

from __future__ import annotations

import random

import pytest

from antkv.spark import StoreOptions, open_store, release_idle_stores
from antkv.spark.state.codec import encode_key
from antkv.spark.store.keygroups import key_group_prefix, key_group_range, state_id_bytes
from antkv.spark.processor.handle import ProcessorHandle
from antkv.spark.processor.timers import TIMER_BY_KEY_ID, TIMER_BY_TIME_ID, TIMER_LAYOUT, TIMER_LAYOUT_KEY
from antkv.spark.processor.variables import encode_time
from antkv.spark.tools.state_records import partition_records

K = 128  # key groups, one partition (enough for the floors from the row cache)


def _handle(store):
    return ProcessorHandle(store, key_group_range(K, 1, 0), "EventTime", 0)


def _expired(store, handle, threshold):
    """``(timers expired at threshold as (time, key group, key), key groups scanned)``."""
    scanned = []
    keys = store.keys
    store.keys = lambda *a, **k: (scanned.append(int.from_bytes(a[0][:2], "big")), keys(*a, **k))[1]
    try:
        fired = handle.timers.expired(key_group_range(K, 1, 0), threshold)
    finally:
        del store.keys
    assert [t for t, *_ in fired] == sorted(t for t, *_ in fired)
    return [(t, kg, key) for t, _encoded, kg, key in fired], scanned


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_expired_timers_are_the_models_across_reuse_and_rebuilds(tmp_path, seed):
    rng = random.Random(seed)
    loc, opts = f"file://{tmp_path}/loc", StoreOptions(cache_dir=str(tmp_path / "cache"))
    model: set[tuple[int, tuple, int]] = set()  # (key group, key, time)
    manifest, threshold, skipped, from_cache = None, 0, 0, 0
    for batch in range(16):
        store = open_store(loc, "t", 0, batch, manifest=manifest, options=opts)
        warmed = []
        if store.copy_fate != "reused" and rng.random() < 0.7:  # a copy without floors
            warmed = rng.sample(range(K), K // 2)  # held whole by the row cache: floors from it
            store.warm([key_group_prefix(g) for g in sorted(warmed)])
        handle = _handle(store)
        for _ in range(rng.randrange(0, 80)):
            kg, key = rng.randrange(K), (f"k{rng.randrange(12)}",)
            handle.set_current_key(kg, key)
            mine = sorted(t for g, k, t in model if (g, k) == (kg, key))
            assert list(handle.listTimers()) == mine
            if mine and rng.random() < 0.4:
                t = rng.choice(mine)
                handle.deleteTimer(t)
                model.discard((kg, key, t))
            else:  # some at or below the coming threshold: registered under a key group's floor
                t = rng.randrange(threshold - 20, threshold + 300)
                handle.registerTimer(t)
                model.add((kg, key, t))
        threshold += rng.randrange(0, 80)
        handle.clear_current_key()
        fired, scanned = _expired(store, handle, threshold)
        assert sorted(fired) == sorted((t, kg, key) for kg, key, t in model if t <= threshold)
        skipped += K - len(scanned)
        if warmed:
            from_cache += 1
            assert len(scanned) < K  # some warmed key group needed no scan
        for t, kg, key in fired:  # as the runner: fire, then delete
            handle.set_current_key(kg, key)
            handle.deleteTimer(t)
            model.discard((kg, key, t))
        manifest = store.commit().manifest
        if rng.random() < 0.3:
            release_idle_stores()  # the next batch rebuilds its copy: no floors
    release_idle_stores()
    assert skipped > 0 and from_cache > 0  # the floors did spare scans, some from the row cache


def test_an_ingest_forgets_the_floors(tmp_path):
    """Timers brought in by an ingest are found although a floor said the key group had none."""
    loc, opts = f"file://{tmp_path}/loc", StoreOptions(cache_dir=str(tmp_path / "cache"))
    other = open_store(loc, "t", 1, 0, manifest=None, options=opts)
    h = _handle(other)
    h.set_current_key(3, ("late",))
    h.registerTimer(50)
    source = other.commit().manifest
    store = open_store(loc, "t", 0, 0, manifest=None, options=opts)
    assert _expired(store, _handle(store), 100) == ([], list(range(K)))  # no floors yet: all scanned
    manifest = store.commit().manifest
    store = open_store(loc, "t", 0, 1, manifest=manifest, options=opts)
    assert store.reused_working_copy
    assert _expired(store, _handle(store), 100) == ([], [])  # every floor is above 100
    store.ingest_version(source, key_group_prefix(3), key_group_prefix(4))
    assert _expired(store, _handle(store), 100) == ([(50, 3, ("late",))], list(range(K)))
    store.abort()
    release_idle_stores()


def _by_key_entries(store) -> list[bytes]:
    return [k for g in range(K) for k in store.keys(prefix=key_group_prefix(g) + state_id_bytes(TIMER_BY_KEY_ID))]


def test_a_store_of_the_earlier_layout_is_read_and_loses_its_by_key_entries(tmp_path):
    """Timers written twice (by time and by key, the earlier layout) are listed, fired and shown
    from their by-time entries; the first handle deletes the by-key ones, which stay deleted,
    and records the layout's version."""
    loc, opts = f"file://{tmp_path}/loc", StoreOptions(cache_dir=str(tmp_path / "cache"))
    model = {(kg, (f"k{i}",), t) for kg in (0, 5, 77) for i in range(3) for t in (10 * i, 10 * i + 200)}
    store = open_store(loc, "t", 0, 0, manifest=None, options=opts)
    for kg, key, t in model:  # as the earlier layout wrote them
        prefix, encoded = key_group_prefix(kg), encode_key(key)
        store.put(prefix + state_id_bytes(TIMER_BY_TIME_ID) + encode_time(t) + encoded, b"")
        store.put(prefix + state_id_bytes(TIMER_BY_KEY_ID) + encoded + encode_time(t), b"")
    manifest = store.commit().manifest
    release_idle_stores()
    store = open_store(loc, "t", 0, 1, manifest=manifest, options=opts)
    assert len(_by_key_entries(store)) == len(model) and store.get(TIMER_LAYOUT_KEY) is None
    assert sorted((r.expiry_ms, r.key) for r in partition_records(store, 0)) == []  # by-key: not state
    assert sorted((r.expiry_ms, r.key) for r in partition_records(store, 0, timers=True)) == \
        sorted((t, key) for _, key, t in model)
    handle = _handle(store)
    assert _by_key_entries(store) == [] and store.get(TIMER_LAYOUT_KEY) == TIMER_LAYOUT
    for kg, key, _ in model:
        handle.set_current_key(kg, key)
        assert list(handle.listTimers()) == sorted(t for g, k, t in model if (g, k) == (kg, key))
    handle.set_current_key(5, ("k1",))
    handle.deleteTimer(210)
    handle.registerTimer(7)
    model = (model - {(5, ("k1",), 210)}) | {(5, ("k1",), 7)}
    assert list(handle.listTimers()) == [7, 10]
    handle.clear_current_key()
    fired, _ = _expired(store, handle, 100)
    assert sorted(fired) == sorted((t, kg, key) for kg, key, t in model if t <= 100)
    manifest = store.commit().manifest
    release_idle_stores()
    store = open_store(loc, "t", 0, 2, manifest=manifest, options=opts)
    assert _by_key_entries(store) == [] and store.get(TIMER_LAYOUT_KEY) == TIMER_LAYOUT
    scans = []
    keys = store.keys
    store.keys = lambda *a, **k: (scans.append(a or k), keys(*a, **k))[1]
    _handle(store)  # a fresh copy of a store of this layout: nothing to look for
    del store.keys
    assert scans == []
    assert sorted((r.expiry_ms, r.key) for r in partition_records(store, 0, timers=True)) == \
        sorted((t, key) for _, key, t in model)
    store.abort()
    release_idle_stores()
