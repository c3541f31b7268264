"""Timers in the store, without Spark: the timers that fire are exactly the model's, batch
after batch, on working copies reused (which read no timer set again, and whose key-group
floors skip key groups), rebuilt (which read each key group's set once) and ingested into;
the stored timer set; and the move from the earlier layouts."""

from __future__ import annotations

import itertools
import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import antkv
from antkv.spark import StoreOptions, open_store, release_idle_stores
from antkv.spark.state.codec import encode_key
from antkv.spark.store.keygroups import key_group_prefix, key_group_range, state_id_bytes
from antkv.spark.processor.handle import ProcessorHandle
from antkv.spark.processor.timers import (
    TIMER_BY_KEY_ID,
    TIMER_BY_TIME_ID,
    TIMER_LAYOUT,
    TIMER_LAYOUT_KEY,
    TIMER_SET_ID,
    decode_timer_set,
    encode_timer_set,
)
from antkv.spark.processor.variables import TIME_BIAS, encode_time
from antkv.spark.tools.state_records import partition_records

K = 128  # key groups, one partition
_SET = state_id_bytes(TIMER_SET_ID)


def _handle(store):
    return ProcessorHandle(store, key_group_range(K, 1, 0), "EventTime", 0)


class _SetReads:
    """Counts the key groups whose timer set the store is asked for (``with``)."""

    def __init__(self, store):
        self.store, self.groups = store, []

    def __enter__(self):
        get = self.store.get

        def counting(key, *args):
            if key[2:4] == _SET:
                self.groups.append(int.from_bytes(key[:2], "big"))
            return get(key, *args)

        self.store.get = counting
        return self

    def __exit__(self, *exc):
        del self.store.get


def _expired(store, handle, threshold):
    """``(timers expired at threshold as (time, key group, key), key groups whose set was read)``."""
    with _SetReads(store) as reads:
        fired = handle.timers.expired(key_group_range(K, 1, 0), threshold)
    assert [t for t, *_ in fired] == sorted(t for t, *_ in fired)
    return [(t, kg, key) for t, _encoded, kg, key in fired], reads.groups


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_expired_timers_are_the_models_across_reuse_and_rebuilds(tmp_path, seed):
    rng = random.Random(seed)
    loc, opts = f"file://{tmp_path}/loc", StoreOptions(cache_dir=str(tmp_path / "cache"))
    model: set[tuple[int, tuple, int]] = set()  # (key group, key, time)
    manifest, threshold, skipped = None, 0, 0
    for batch in range(16):
        store = open_store(loc, "t", 0, batch, manifest=manifest, options=opts)
        reused = store.copy_fate == "reused"
        handle = _handle(store)
        with _SetReads(store) as reads:
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
        assert len(reads.groups) == len(set(reads.groups))  # a key group's set is read once a copy
        threshold += rng.randrange(0, 80)
        handle.clear_current_key()
        fired, read = _expired(store, handle, threshold)
        assert sorted(fired) == sorted((t, kg, key) for kg, key, t in model if t <= threshold)
        if reused and batch > 1:
            assert read == []  # every key group's set and floor is the copy's already
        skipped += K - len(set(read) | set(reads.groups))
        for t, kg, key in fired:  # as the runner: fire, then delete
            handle.set_current_key(kg, key)
            handle.deleteTimer(t)
            model.discard((kg, key, t))
        manifest = store.commit().manifest
        if rng.random() < 0.3:
            release_idle_stores()  # the next batch rebuilds its copy: no sets, no floors
    release_idle_stores()
    assert skipped > 0  # the floors did spare reads


def test_an_ingest_forgets_the_sets_and_floors(tmp_path):
    """Timers brought in by an ingest are found although a floor said the key group had none."""
    loc, opts = f"file://{tmp_path}/loc", StoreOptions(cache_dir=str(tmp_path / "cache"))
    other = open_store(loc, "t", 1, 0, manifest=None, options=opts)
    h = _handle(other)
    h.set_current_key(3, ("late",))
    h.registerTimer(50)
    source = other.commit().manifest
    store = open_store(loc, "t", 0, 0, manifest=None, options=opts)
    assert _expired(store, _handle(store), 100) == ([], list(range(K)))  # no floors yet: all read
    manifest = store.commit().manifest
    store = open_store(loc, "t", 0, 1, manifest=manifest, options=opts)
    assert store.reused_working_copy
    assert _expired(store, _handle(store), 100) == ([], [])  # every floor is above 100
    store.ingest_version(source, key_group_prefix(3), key_group_prefix(4))
    assert _expired(store, _handle(store), 100) == ([(50, 3, ("late",))], list(range(K)))
    store.abort()
    release_idle_stores()


def test_a_key_groups_timers_are_one_stored_entry(tmp_path):
    """Each key group with timers holds one set entry, none once its timers are gone; the
    key count counts it once; the state reader lists every timer."""
    loc, opts = f"file://{tmp_path}/loc", StoreOptions(cache_dir=str(tmp_path / "cache"))
    store = open_store(loc, "t", 0, 0, manifest=None, options=opts)
    handle = _handle(store)
    for kg in (2, 9):
        for i in range(50):
            handle.set_current_key(kg, (f"k{i}",))
            handle.registerTimer(1000 + i)
            handle.registerTimer(5)
    handle.set_current_key(9, ("k3",))
    handle.deleteTimer(5)
    assert store.num_keys() == 3  # two sets and the layout's version
    manifest = store.commit().manifest
    release_idle_stores()
    store = open_store(loc, "t", 0, 1, manifest=manifest, options=opts)
    assert [k for k in store.keys() if k[2:4] == _SET] == [key_group_prefix(2) + _SET, key_group_prefix(9) + _SET]
    records = [(r.key, r.expiry_ms) for r in partition_records(store, 0, timers=True)]
    assert len(records) == 199 and records[:2] == [(("k0",), 5), (("k1",), 5)]
    handle = _handle(store)
    handle.set_current_key(9, ("k3",))
    assert list(handle.listTimers()) == [1003]
    for i in range(50):
        handle.set_current_key(2, (f"k{i}",))
        handle.deleteTimer(5)
        handle.deleteTimer(1000 + i)
    assert store.num_keys() == 2 and store.get(key_group_prefix(2) + _SET) is None
    store.abort()
    release_idle_stores()


TIMER_SETS = st.dictionaries(st.binary(max_size=12),
                             st.one_of(st.integers(-(1 << 63), (1 << 63) - 1),
                                       st.sets(st.integers(-(1 << 63), (1 << 63) - 1), min_size=2, max_size=4)),
                             min_size=1, max_size=30)


@settings(max_examples=200, deadline=None)
@given(timers=TIMER_SETS)
def test_a_timer_set_decodes_to_what_was_encoded_and_a_cut_one_is_corruption(timers):
    raw = encode_timer_set(timers)
    assert decode_timer_set(raw) == timers
    assert encode_timer_set(decode_timer_set(raw)) == raw  # one stored form per set
    for cut in range(len(raw)):
        with pytest.raises(antkv.CorruptionError):
            decode_timer_set(raw[:cut])


@settings(max_examples=200, deadline=None)
@given(timers=TIMER_SETS, ties=st.booleans())
def test_a_timer_set_is_stored_in_time_then_key_order(timers, ties):
    """The stored order is the module docstring's whatever the set's own order (keys with one
    timer each take a path of their own); ``ties`` gives many keys the same time."""
    if ties:
        timers = {k: (v if type(v) is int else min(v)) % 3 for k, v in reversed(list(timers.items()))}
    raw = encode_timer_set(timers)
    n = struct.unpack_from(">I", raw)[0]
    fields = struct.unpack_from(f">{n}Q{n}I", raw, 4)
    ends = list(itertools.accumulate(fields[n:], initial=4 + 12 * n))
    stored = [(t - TIME_BIAS, raw[a:b]) for t, a, b in zip(fields[:n], ends, ends[1:])]
    assert stored == sorted((t, k) for k, v in timers.items() for t in ((v,) if type(v) is int else v))


def _entries(store, sid: int) -> list[bytes]:
    return [k for g in range(K) for k in store.keys(prefix=key_group_prefix(g) + state_id_bytes(sid))]


@pytest.mark.parametrize("layout", ["by time and by key", "by time (02)"])
def test_a_store_of_an_earlier_layout_moves_its_timers_into_sets(tmp_path, layout):
    """Timers stored one entry each (by time, and by key in the earliest layout) are read by
    the state reader as they are; the first handle moves them into the key groups' sets,
    deletes every such entry and records the layout's version; they are then listed, fired
    and shown as before, and a later copy finds nothing left to move."""
    loc, opts = f"file://{tmp_path}/loc", StoreOptions(cache_dir=str(tmp_path / "cache"))
    model = {(kg, (f"k{i}",), t) for kg in (0, 5, 77) for i in range(3) for t in (10 * i, 10 * i + 200)}
    store = open_store(loc, "t", 0, 0, manifest=None, options=opts)
    for kg, key, t in model:  # as the earlier layouts wrote them
        prefix, encoded = key_group_prefix(kg), encode_key(key)
        store.put(prefix + state_id_bytes(TIMER_BY_TIME_ID) + encode_time(t) + encoded, b"")
        if layout == "by time and by key":
            store.put(prefix + state_id_bytes(TIMER_BY_KEY_ID) + encoded + encode_time(t), b"")
    if layout == "by time (02)":
        store.put(TIMER_LAYOUT_KEY, b"\x02")
    manifest = store.commit().manifest
    release_idle_stores()
    store = open_store(loc, "t", 0, 1, manifest=manifest, options=opts)
    assert sorted((r.expiry_ms, r.key) for r in partition_records(store, 0)) == []  # timers: not state
    assert sorted((r.expiry_ms, r.key) for r in partition_records(store, 0, timers=True)) == \
        sorted((t, key) for _, key, t in model)
    handle = _handle(store)
    assert _entries(store, TIMER_BY_KEY_ID) == [] and _entries(store, TIMER_BY_TIME_ID) == []
    assert store.get(TIMER_LAYOUT_KEY) == TIMER_LAYOUT and len(_entries(store, TIMER_SET_ID)) == 3
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
