"""``DB.put`` is written out flat: it builds the WAL frame and inserts into the memtable itself
instead of calling ``encode_batch``/``frame`` and ``MemTable.add_batch`` as every other write
does (``antkv/db/database.py``).  These tests pin that copy to the general path: the same puts,
one through ``db.put`` and one as a one-put ``WriteBatch`` through ``db.write``, must leave the
same WAL bytes, the same value-log bytes and the same memtable entries (versions, older
versions, pending keys, memory, the write buffer manager's count), whatever the keys, values
and earlier kinds under a key."""

from __future__ import annotations

import os
import random

import pytest

import antkv
from antkv.base.dbformat import VALUE, VALUE_POINTER
from antkv.memtable.memtable import TUPLE_VERSIONS

MIN_BLOB = 64  # values at least this long go to the value log (VALUE_POINTER entries)


def _open(path: str) -> antkv.DB:
    return antkv.open(
        path, max_background_jobs=0, write_buffer_size=64 << 20, min_blob_size=MIN_BLOB,
        enable_blob_files=True, write_buffer_manager=antkv.WriteBufferManager(1 << 30),
        merge_operator=antkv.AppendOperator(), clock=lambda: 1_800_000_000.0,  # the same expiries on both
    )


def _memtable(db: antkv.DB) -> dict:
    mem = db._mem
    return {
        "versions": dict(mem.versions),
        "older": {k: list(v) for k, v in mem.older.items()},
        "older_types": {k: type(v).__name__ for k, v in mem.older.items()},
        "pending": list(mem.pending),
        "memory": mem.memory,
        "last_seq": db._last_seq,
        "user_bytes": db._user_bytes,
        "wbm_counted": db._wbm_reserved + db._wbm_pending,
    }


def _files(path: str, suffix: str) -> dict[str, bytes]:
    out = {}
    for name in sorted(os.listdir(path)):
        if name.endswith(suffix):
            with open(os.path.join(path, name), "rb") as fh:
                out[name] = fh.read()
    return out


def _ops(rng: random.Random, n: int) -> list[tuple]:
    hot = [bytes(rng.randrange(256) for _ in range(rng.randrange(0, 12))) for _ in range(30)]
    cold = [rng.randbytes(rng.randrange(4, 16)) for _ in range(n // 3)]
    ops = []
    for _ in range(n):
        key = rng.choice(hot) if rng.random() < 0.5 else rng.choice(cold)  # many or a few versions
        r = rng.random()
        if r < 0.75:  # a put: small, empty or large (to the value log)
            size = rng.choice((0, 1, rng.randrange(2, MIN_BLOB), MIN_BLOB, rng.randrange(MIN_BLOB, 3000)))
            ops.append(("put", key, rng.randbytes(size), rng.random() < 0.1))
        elif r < 0.85:
            ops.append(("delete", key))
        elif r < 0.93:
            ops.append(("merge", key, rng.randbytes(rng.randrange(0, 20))))
        else:
            ops.append(("put_ttl", key, rng.randbytes(rng.randrange(0, 100))))
    return ops


@pytest.mark.parametrize("seed", range(4))
def test_put_writes_what_a_one_put_batch_writes(tmp_path, seed):
    rng = random.Random(seed)
    ops = _ops(rng, 1500)
    fast, general = _open(str(tmp_path / "fast")), _open(str(tmp_path / "general"))
    try:
        for op in ops:
            if op[0] == "put":
                _, key, value, sync = op
                fast.put(key, value, sync=sync)  # the flat copy
                batch = antkv.WriteBatch()
                batch.put(key, value)
                general.write(batch, sync=sync)  # encode_batch + frame + MemTable.add_batch
            else:  # the same call on both: the kinds the puts then overwrite
                for db in (fast, general):
                    if op[0] == "delete":
                        db.delete(op[1])
                    elif op[0] == "merge":
                        db.merge(op[1], op[2])
                    else:
                        db.put(op[1], op[2], ttl=3600)
            if rng.random() < 0.02:
                assert _memtable(fast) == _memtable(general)
        mem_fast, mem_general = _memtable(fast), _memtable(general)
        assert mem_fast == mem_general
        # the run covered what the copy has to get right
        kinds = {e[1] for e in mem_fast["versions"].values()}
        assert {VALUE, VALUE_POINTER} <= kinds
        assert any(len(v) > TUPLE_VERSIONS for v in mem_fast["older"].values())  # grown into a list
        assert "tuple" in mem_fast["older_types"].values() and "list" in mem_fast["older_types"].values()
    finally:
        fast.close()
        general.close()
    wal_fast, wal_general = _files(str(tmp_path / "fast"), ".log"), _files(str(tmp_path / "general"), ".log")
    assert wal_fast and wal_fast == wal_general
    assert sum(map(len, wal_fast.values())) > 30_000  # every write is in it
    vlog_fast, vlog_general = _files(str(tmp_path / "fast"), ".vlog"), _files(str(tmp_path / "general"), ".vlog")
    assert vlog_fast and vlog_fast == vlog_general


@pytest.mark.parametrize("mix", ["puts", "deletions", "mixed", "not bytes"])
def test_write_batch_update_is_put_and_delete_of_each_entry(mix):
    """``WriteBatch.update(dict)`` builds its entries in bulk (puts only and deletions only
    without a Python step per entry): the same entries, in the dict's order, and the same data
    size as ``put`` / ``delete`` of each entry."""
    rng = random.Random(mix)
    changes = {}
    for i in range(300):
        key = b"k%05d" % rng.randrange(10_000)
        value = os.urandom(rng.randrange(0, 40))
        if mix == "deletions" or (mix == "mixed" and i % 3 == 0):
            value = None
        elif mix == "not bytes" and i % 5 == 0:
            value = bytearray(value)  # taken through put's conversion
        changes[key] = value
    bulk = antkv.WriteBatch().update(changes)
    each = antkv.WriteBatch()
    for key, value in changes.items():
        if value is None:
            each.delete(key)
        else:
            each.put(key, value)
    assert bulk.ops() == each.ops() and len(bulk) == len(changes)
    assert bulk.data_size == each.data_size and bulk.data() == each.data()


@pytest.mark.parametrize("mix", ["puts", "deletions", "mixed"])
def test_a_batch_of_changes_writes_what_update_writes(tmp_path, mix):
    """``batch_of_changes`` (the Spark state store's settled writes) makes its entries only as
    ``DB.write`` iterates them: the same entries each time, in the dict's order, as
    ``WriteBatch.update``; the same database contents once written; and any other use of the
    batch (another put, ``ops()``, ``data()``) sees a plain batch's list."""
    from antkv.record.batch import batch_of_changes, updates_to_write

    rng = random.Random(mix)
    changes = {}
    for i in range(300):
        value = os.urandom(rng.randrange(0, 2 * MIN_BLOB))  # some to the value log
        if mix == "deletions" or (mix == "mixed" and i % 3 == 0):
            value = None
        changes[b"k%05d" % rng.randrange(10_000)] = value
    size = sum(map(len, changes)) + sum(len(v) for v in changes.values() if v is not None)
    plain = antkv.WriteBatch().update(changes)
    lazy = batch_of_changes(changes, size)
    assert len(lazy) == len(changes) and lazy.data_size == plain.data_size
    assert list(updates_to_write(lazy)) == list(updates_to_write(lazy)) == plain.ops()
    dbs = [_open(str(tmp_path / name)) for name in ("plain", "lazy")]
    try:
        for db in dbs:
            db.write(antkv.WriteBatch().put(b"k00000", b"old").put(b"k99999", b"kept"))
        dbs[0].write(plain, disable_wal=True)
        dbs[1].write(lazy, disable_wal=True)
        assert list(dbs[0].items()) == list(dbs[1].items())
    finally:
        for db in dbs:
            db.close()
    lazy.put(b"extra", b"x")
    assert lazy.ops() == plain.put(b"extra", b"x").ops() and lazy.data() == plain.data()
    assert len(lazy) == len(changes) + 1 and lazy.data_size == plain.data_size
    spilled = batch_of_changes(changes, size)
    assert spilled.data() == antkv.WriteBatch().update(changes).data() and len(spilled) == len(changes)
