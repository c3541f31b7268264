"""Many databases under one memory budget (issue 3): one block cache and one write buffer
manager shared by 8 databases, as Flink shares RocksDB's managed memory between operators."""

from __future__ import annotations

import random

import antkv
from antkv.fs.memory import MemoryFileSystem


def test_eight_databases_stay_within_one_budget():
    total = 16 * 1024 * 1024
    cache, wbm = antkv.shared_memory(total, write_buffer_ratio=0.5, high_pri_pool_ratio=0.1)
    assert cache.capacity == int((3 - 0.5) * total / 3)
    assert wbm.buffer_size == int(2 * total * 0.5 / 3)
    fs = MemoryFileSystem()
    dbs = [
        antkv.open(f"db{i}", file_system=fs, block_cache=cache, write_buffer_manager=wbm,
                   max_background_jobs=0, write_buffer_size=64 << 20, block_size=1024,
                   cache_index_and_filter_blocks=True)  # the budget bounds them too
        for i in range(8)
    ]
    rng = random.Random(7)
    unit = wbm.dummy_entry_size
    worst = 0
    models = [dict() for _ in dbs]
    for step in range(40_000):
        i = rng.randrange(8) if step % 3 else step % 8
        k = b"key%06d" % rng.randrange(20_000)
        v = bytes([step % 256]) * rng.choice([10, 100, 400])
        dbs[i].put(k, v)
        models[i][k] = v
        if step % 500 == 0:
            for j in range(8):  # reads fill the cache with blocks
                for kk in list(models[j])[:20]:
                    assert dbs[j].get(kk) == models[j][kk]
            blocks = cache.usage - wbm.dummy_entries_in_cache_usage
            used = blocks + wbm.memory_usage
            worst = max(worst, used)
            assert used <= total + unit, (step, blocks, wbm.memory_usage, total)
            cache._check()
            wbm._check()
    flushes = sum(db.stats()["flushes"] for db in dbs)
    # the memtable limit (64 MiB each) was never reached: every flush came from the manager
    assert flushes > 0
    assert all(db.stats()["write_buffer_manager"]["buffer_size"] == wbm.buffer_size for db in dbs)
    for db, model in zip(dbs, models):
        assert dict(db.items()) == model
        db.close()
    assert wbm.memory_usage == 0  # every database gave its memory back on close
    assert worst > total // 4  # the budget was really exercised


def test_flush_goes_to_the_database_with_the_oldest_data():
    cache, wbm = antkv.shared_memory(6 * 1024 * 1024)
    fs = MemoryFileSystem()
    old = antkv.open("old", file_system=fs, block_cache=cache, write_buffer_manager=wbm, max_background_jobs=0)
    new = antkv.open("new", file_system=fs, block_cache=cache, write_buffer_manager=wbm, max_background_jobs=0)
    old.put(b"first", b"x" * 100)  # the oldest data lives in `old`
    i = 0
    while old.stats()["flushes"] == 0 and i < 100_000:
        new.put(b"k%08d" % i, b"y" * 200)
        i += 1
    assert old.stats()["flushes"] >= 1, "the manager should have flushed the oldest memtable"
    assert old.get(b"first") == b"x" * 100
    old.close()
    new.close()
    assert wbm.memory_usage == 0


def test_the_budget_holds_under_default_options(tmp_path):
    """Eight databases with default options (background flushes) share ``shared_memory(8 MiB)``
    and take 4,000 puts of 400-byte values each, in turn: the writers outrun the flushes, and
    the manager's memory must still stay within the budget plus one reservation unit plus the
    chunk one writer reports at once (docs/memory.md).  Before writers waited for flushes
    past the budget, the peak was 1.7-2x the budget."""
    from antkv.db.write_path import WBM_REPORT_BYTES

    cache, wbm = antkv.shared_memory(8 * 1024 * 1024)
    dbs = [antkv.open(str(tmp_path / f"db{i}"), block_cache=cache, write_buffer_manager=wbm) for i in range(8)]
    bound = wbm.buffer_size + wbm.dummy_entry_size + WBM_REPORT_BYTES + 1024  # + one entry
    rng = random.Random(19)
    peak = 0
    written = []
    for db in dbs:
        for _ in range(4000):
            k, v = rng.randbytes(16), rng.randbytes(400)
            db.put(k, v)
            peak = max(peak, wbm.memory_usage)
        written.append((db, k, v))
    assert peak <= bound, (peak, bound)
    assert peak > wbm.buffer_size // 2  # the budget was really exercised
    assert sum(db.stats()["flushes"] for db in dbs) >= 8
    for db, k, v in written:
        assert db.get(k) == v
        db.close()
    assert wbm.memory_usage == 0


def test_deleted_tables_and_closed_databases_leave_no_blocks_in_a_shared_cache():
    """A table's cached blocks leave the cache with the table (compacted away, or its database
    closed): dead blocks would otherwise fill a cache shared by short-lived databases (a Spark
    worker's working copies) to its capacity, whatever the live data."""
    cache = antkv.Cache(64 << 20)
    fs = MemoryFileSystem()
    opts = dict(file_system=fs, block_cache=cache, max_background_jobs=0, block_size=1024,
                level0_file_num_compaction_trigger=100)
    keys = [b"key%05d" % i for i in range(3000)]
    with antkv.open("db", **opts) as db:
        for round_ in range(4):  # four overlapping tables, every key in each
            for k in keys:
                db.put(k, b"v%d-" % round_ + k * 4)
            db.flush()
        for k in keys:
            db.get(k)  # the newest table's blocks
        for _, _ in db.items():
            pass  # and every table's, decoded by the merge
        before = cache.usage
        db.compact_range()  # one table remains
        assert cache.usage < before / 3, (before, cache.usage)
        for k in keys:
            db.get(k)
        live = cache.usage
        assert live > 0
    assert cache.usage == 0  # closed: nothing of it stays
    with antkv.open("db", **opts) as db:  # a reopened database reads and caches again
        assert db.get(keys[7]) == b"v3-" + keys[7] * 4
        assert 0 < cache.usage <= live
