"""``Options.cache_index_and_filter_blocks``: a table's index and filter charged to the block
cache (pinned at high priority while the table is open) or held by the open table outside it
(RocksDB's default, and antkv's); reads give the same answers either way, and the Spark state
store keeps charging them to its process's one budget."""

from __future__ import annotations

import random

import pytest

import antkv
from antkv.spark import Location, StoreOptions, open_store, release_idle_stores

READERS_MEM = "antkv.estimate-table-readers-mem"


def build(path, rnd):
    """A database of several tables and a memtable with every kind of entry a point read
    resolves: values inline and in the value log, deletions, range deletions, merge operands;
    returns ``(model, keys)``."""
    model = {}
    keys = [b"key%05d" % i for i in range(3000)]
    with antkv.open(path, max_background_jobs=0, block_size=512, min_blob_size=200,
                    merge_operator="append", level0_file_num_compaction_trigger=100) as db:
        for round_ in range(3):
            for k in rnd.sample(keys, 1500):
                v = b"%d-" % round_ + k * rnd.choice([1, 30])  # 30 copies: past min_blob_size
                db.put(k, v)
                model[k] = v
            for k in rnd.sample(keys, 100):
                db.delete(k)
                model[k] = None
            for k in rnd.sample(keys, 100):
                db.merge(k, b"+m")
                model[k] = (model.get(k) or b"") + b"+m"  # "append": no delimiter
            db.flush()
        db.delete_range(b"key01000", b"key01100")
        for i in range(1000, 1100):
            model[b"key%05d" % i] = None
        db.flush()
        db.put(b"key00001", b"in the memtable")  # left in the WAL: replayed into the memtable
        model[b"key00001"] = b"in the memtable"
    return model, keys


@pytest.mark.parametrize("policy", ["clock", "lru"])
def test_index_and_filter_outside_the_cache_or_charged_to_it(tmp_path, policy):
    path = str(tmp_path / "db")
    model, keys = build(path, random.Random(5))
    probes = keys + [b"absent%d" % i for i in range(200)]
    want = [model.get(k) for k in probes]
    held = {}
    for charged in (False, True):
        cache = antkv.Cache(8 << 20, policy=policy)
        with antkv.open(path, block_cache=cache, merge_operator="append", max_background_jobs=0,
                        level0_file_num_compaction_trigger=100, cache_index_and_filter_blocks=charged) as db:
            assert db.options.cache_index_and_filter_blocks is charged
            for _ in range(2):  # cold, then from the cache
                assert [db.get(k) for k in probes] == want
            held[charged] = (cache.pinned_usage, int(db.property(READERS_MEM)))
            assert db.stats()["block_cache"]["pinned_usage"] == cache.pinned_usage
            cache._check()
        assert cache.usage == 0 and cache.pinned_usage == 0  # closed: nothing stays charged
    (pinned_off, outside_off), (pinned_on, outside_on) = held[False], held[True]
    assert pinned_off == 0 and outside_off > 0  # charged to no cache, estimated by the property
    assert outside_on == 0 and pinned_on == outside_off  # the same bytes, pinned in the cache


def test_the_default_keeps_them_outside_as_rocksdb_does():
    assert antkv.Options().cache_index_and_filter_blocks is False
    with pytest.raises(antkv.InvalidArgumentError):
        antkv.Options(cache_index_and_filter_blocks=1)


def test_an_index_larger_than_the_cache_starves_it_only_when_charged(tmp_path):
    """A pinned index larger than its shard's share leaves no room for data blocks: every read
    misses.  Held outside the cache, the same index leaves the whole capacity to data blocks,
    and a block read twice is a hit the second time."""
    path = str(tmp_path / "db")
    with antkv.open(path, max_background_jobs=0, block_size=256) as db:
        for i in range(20_000):
            db.put(b"key%06d" % i, b"v%d" % i)
        db.flush()
    for charged, hits in ((True, 0), (False, 9)):
        cache = antkv.Cache(64 << 10, num_shard_bits=0)
        with antkv.open(path, block_cache=cache, cache_index_and_filter_blocks=charged) as db:
            for _ in range(10):
                assert db.get(b"key012345") == b"v12345"
            s = cache.stats()
            assert (s["hits"], s["misses"]) == (hits, 10 - hits), charged
            assert (cache.pinned_usage > cache.capacity) is charged


def test_the_state_store_charges_index_and_filter_to_its_budget(tmp_path):
    """The state store's databases share the process's cache, whose capacity is the memory
    budget of every store in the process: their tables' index and filter are charged to it."""
    release_idle_stores()
    loc = Location(str(tmp_path / "loc"))
    options = StoreOptions(cache_dir=str(tmp_path / "cache"), engine=dict(write_buffer_size=16 << 10))
    assert options.engine_options().cache_index_and_filter_blocks is True
    s = open_store(loc, "op", 0, 0, options=options)
    for i in range(2000):
        s.put(b"k%05d" % i, b"v%d" % i)
    manifest = s.commit().manifest
    s = open_store(loc, "op", 0, 1, manifest=manifest, options=options)
    try:
        assert s.get(b"k01234") == b"v1234"  # read from the committed tables
        assert s._db.property(READERS_MEM) == "0"
        assert s._db.stats()["block_cache"]["pinned_usage"] > 0
    finally:
        s.abort()
        release_idle_stores()
