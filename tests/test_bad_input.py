"""Bad input gets a clear error and loses nothing: wrong types, closed databases, bad ranges,
a second opener, damaged WAL records, bad options."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import antkv
from antkv.fs.memory import MemoryFileSystem


@pytest.fixture
def db(tmp_path):
    d = antkv.open(str(tmp_path / "db"), max_background_jobs=0)
    yield d
    d.close()


WRONG = ["text", 1, 1.5, None, object(), ["a"]]


@pytest.mark.parametrize("bad", WRONG)
def test_wrong_key_types_raise_type_error(db, bad):
    calls = [
        lambda: db.put(bad, b"v"),
        lambda: db.get(bad),
        lambda: db.delete(bad),
        lambda: db.delete_range(bad, b"z"),
        lambda: db.delete_range(b"a", bad),
        lambda: db[bad],
        lambda: db.__setitem__(bad, b"v"),
        lambda: bad in db,
        lambda: antkv.WriteBatch().put(bad, b"v"),
        lambda: antkv.WriteBatch().delete(bad),
        lambda: antkv.WriteBatch().delete_range(bad, b"z"),
    ]
    if bad is not None:  # None means "unbounded" for these
        calls += [
            lambda: list(db.items(start=bad)),
            lambda: list(db.items(stop=bad)),
            lambda: list(db.items(prefix=bad)),
            lambda: db.iterator(lower_bound=bad),
            lambda: db.compact_range(bad, None),
        ]
    it = db.iterator()
    calls += [lambda: it.seek(bad), lambda: it.seek_for_prev(bad)]
    for call in calls:
        with pytest.raises(TypeError):
            call()


def test_str_error_says_bytes_are_needed(db):
    with pytest.raises(TypeError, match="bytes"):
        db.put("key", b"v")
    with pytest.raises(TypeError, match="bytes"):
        db.put(b"key", "v")


def test_wrong_value_and_misc_types(db):
    for bad in ("v", 3, None):
        with pytest.raises(TypeError):
            db.put(b"k", bad)
    with pytest.raises(TypeError):
        db.write([("put", b"k", b"v")])
    with pytest.raises(TypeError):
        db.put(b"k", b"v", sync="yes")
    with pytest.raises(TypeError):
        db.get(b"k", snapshot="snap")
    with pytest.raises(TypeError):
        db.property(5)
    with pytest.raises(TypeError):
        antkv.open(5)
    with pytest.raises(TypeError):
        antkv.open("x", options={"write_buffer_size": 5})


def test_bytes_like_keys_accepted(db):
    db.put(bytearray(b"ba"), memoryview(b"mv"))
    assert db.get(b"ba") == b"mv"
    assert db.get(memoryview(b"ba")) == b"mv"


def test_delete_range_begin_after_end(db):
    db.put(b"b", b"1")
    with pytest.raises(antkv.InvalidArgumentError):
        db.delete_range(b"c", b"a")
    with pytest.raises(ValueError):  # InvalidArgumentError is also a ValueError
        db.delete_range(b"c", b"a")
    with pytest.raises(antkv.InvalidArgumentError):
        antkv.WriteBatch().delete_range(b"c", b"a")
    db.delete_range(b"b", b"b")  # empty range: a no-op
    assert db.get(b"b") == b"1"


def test_closed_db_raises_closed_error(tmp_path):
    db = antkv.open(str(tmp_path / "db"))
    db.put(b"k", b"v")
    it = db.iterator()
    it.seek_to_first()
    snap = db.snapshot()
    db.close()
    db.close()  # closing twice is fine
    calls = [
        lambda: db.put(b"k", b"v"),
        lambda: db.get(b"k"),
        lambda: db.delete(b"k"),
        lambda: db.delete_range(b"a", b"b"),
        lambda: db.write(antkv.WriteBatch().put(b"a", b"b")),
        lambda: list(db.items()),
        lambda: db.iterator(),
        lambda: db.snapshot(),
        lambda: db.flush(),
        lambda: db.compact_range(),
        lambda: db.checkpoint(str(tmp_path / "cp")),
        lambda: db.stats(),
        lambda: db.verify(),
        lambda: db.property("antkv.stats"),
        lambda: db[b"k"],
        lambda: it.valid(),
        lambda: it.next(),
        lambda: snap.get(b"k"),
    ]
    for call in calls:
        with pytest.raises(antkv.DBClosedError):
            call()
    with antkv.open(str(tmp_path / "db")) as db2:
        assert db2.get(b"k") == b"v"


def test_released_snapshot_and_closed_iterator(db):
    db.put(b"a", b"1")
    snap = db.snapshot()
    snap.release()
    with pytest.raises(antkv.DBClosedError):
        snap.get(b"a")
    with pytest.raises(antkv.InvalidArgumentError):
        db.get(b"a", snapshot=snap)
    it = db.iterator()
    it.close()
    with pytest.raises(antkv.DBClosedError):
        it.seek_to_first()
    it2 = db.iterator()
    it2.seek(b"zzz")
    assert not it2.valid()
    with pytest.raises(antkv.InvalidArgumentError):
        it2.key()
    with pytest.raises(antkv.InvalidArgumentError):
        it2.next()


def test_mapping_protocol(db):
    db[b"k"] = b"v"
    assert db[b"k"] == b"v"
    assert b"k" in db and b"x" not in db
    with pytest.raises(KeyError):
        db[b"x"]
    with pytest.raises(KeyError):
        del db[b"x"]
    del db[b"k"]
    assert b"k" not in db
    db.put(b"", b"")
    assert db[b""] == b"" and b"" in db


def test_second_opener_in_process_gets_lock_error(tmp_path):
    path = str(tmp_path / "db")
    with antkv.open(path) as db:
        db.put(b"k", b"v")
        with pytest.raises(antkv.LockError):
            antkv.open(path)
        assert db.get(b"k") == b"v"
    with antkv.open(path) as db:  # the lock is released on close
        assert db.get(b"k") == b"v"


def test_second_opener_in_another_process_gets_lock_error(tmp_path):
    path = str(tmp_path / "db")
    code = (
        "import antkv,sys\n"
        "try:\n    antkv.open(sys.argv[1])\nexcept antkv.LockError as e:\n    print('LockError', e); sys.exit(3)\n"
    )
    with antkv.open(path) as db:
        db.put(b"k", b"v")
        r = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True, timeout=60)
        assert r.returncode == 3, r.stderr
        assert "LockError" in r.stdout


def test_missing_db_without_create_and_error_if_exists(tmp_path):
    with pytest.raises(antkv.InvalidArgumentError):
        antkv.open(str(tmp_path / "nope"), create_if_missing=False)
    assert not os.path.exists(tmp_path / "nope")
    with antkv.open(str(tmp_path / "db")):
        pass
    with pytest.raises(antkv.InvalidArgumentError):
        antkv.open(str(tmp_path / "db"), error_if_exists=True)
    open(tmp_path / "file", "w").close()
    with pytest.raises(antkv.InvalidArgumentError):
        antkv.open(str(tmp_path / "file"))


def test_options_validation():
    with pytest.raises(TypeError):
        antkv.Options(no_such_option=1)
    with pytest.raises(antkv.InvalidArgumentError, match="write_buffer_size"):
        antkv.Options(write_buffer_size=0)
    with pytest.raises(antkv.InvalidArgumentError, match="compression"):
        antkv.Options(compression="snappy")
    with pytest.raises(antkv.InvalidArgumentError, match="blob_gc_threshold"):
        antkv.Options(blob_gc_threshold=1.5)
    with pytest.raises(antkv.InvalidArgumentError, match="block_cache"):
        antkv.Options(block_cache=5)
    with pytest.raises(antkv.InvalidArgumentError, match="create_if_missing"):
        antkv.Options(create_if_missing="yes")
    with pytest.raises(TypeError):
        antkv.open("x", no_such_option=1)


def _wal_path(fs, name="db"):
    logs = [n for n in fs.listdir(name) if n.endswith(".log")]
    assert len(logs) == 1
    return f"{name}/{logs[0]}"


def test_flipped_byte_in_middle_of_wal_is_corruption_and_loses_nothing():
    fs = MemoryFileSystem()
    db = antkv.open("db", file_system=fs, max_background_jobs=0)
    for i in range(20):
        db.put(b"key%02d" % i, b"value%02d" % i)
    db.close()
    wal = _wal_path(fs)
    original = fs.read_all(wal)
    damaged = bytearray(original)
    damaged[len(original) // 2] ^= 0x01
    fs.write_all(wal, bytes(damaged))
    with pytest.raises(antkv.CorruptionError) as e:
        antkv.open("db", file_system=fs, max_background_jobs=0)
    assert wal in str(e.value) and e.value.path == wal and e.value.offset is not None
    assert fs.read_all(wal) == bytes(damaged)  # the failed open changed nothing
    fs.write_all(wal, original)  # repair: every write is still there
    with antkv.open("db", file_system=fs, max_background_jobs=0) as db:
        assert dict(db.items()) == {b"key%02d" % i: b"value%02d" % i for i in range(20)}


def test_torn_wal_tail_is_dropped():
    fs = MemoryFileSystem()
    db = antkv.open("db", file_system=fs, max_background_jobs=0)
    for i in range(5):
        db.put(b"key%d" % i, b"v" * 10)
    db.close()
    wal = _wal_path(fs)
    data = fs.read_all(wal)
    fs.write_all(wal, data[:-7])  # the last record is torn
    with antkv.open("db", file_system=fs, max_background_jobs=0) as db:
        assert sorted(db.keys()) == [b"key0", b"key1", b"key2", b"key3"]


def test_write_batch_context_manager_and_atomicity(db):
    with db.write_batch() as b:
        b.put(b"a", b"1").put(b"b", b"2").delete(b"a")
    assert db.get(b"a") is None and db.get(b"b") == b"2"
    with pytest.raises(RuntimeError):
        with db.write_batch() as b:
            b.put(b"c", b"3")
            raise RuntimeError("abort the batch")
    assert db.get(b"c") is None  # nothing of an aborted batch is written
    data = antkv.WriteBatch().put(b"x", b"y").delete_range(b"a", b"b").data()
    again = antkv.WriteBatch.from_data(data)
    assert again.ops() == antkv.WriteBatch().put(b"x", b"y").delete_range(b"a", b"b").ops()
    with pytest.raises(antkv.CorruptionError):
        antkv.WriteBatch.from_data(data[:-1])


def test_write_options_object(tmp_path):
    from antkv.fs.memory import MemoryFileSystem

    fs = MemoryFileSystem()
    db = antkv.open("db", file_system=fs, max_background_jobs=0)
    db.put(b"synced", b"1", write_options=antkv.WriteOptions(sync=True))
    db.put(b"no-wal", b"2", write_options=antkv.WriteOptions(disable_wal=True))
    db.delete(b"synced", write_options=antkv.WriteOptions(sync=True))
    db.write(antkv.WriteBatch().put(b"b", b"3"), write_options=antkv.WriteOptions(sync=True))
    with pytest.raises(TypeError):
        db.put(b"k", b"v", write_options={"sync": True})
    fs.crash("kill")  # the WAL-less write was never logged: a crash loses it (documented as unsafe)
    with antkv.open("db", file_system=fs, max_background_jobs=0) as db:
        assert db.get(b"no-wal") is None
        assert db.get(b"synced") is None and db.get(b"b") == b"3"


def test_writes_too_large_to_store_are_refused_before_anything_is_written(tmp_path, monkeypatch):
    """A value a table block cannot hold (the block limit scaled down from 4 GiB to 1 MiB), a
    key too large for a block even with its value in the value log, and a batch whose WAL
    record would exceed its limit are InvalidArgumentErrors at put / merge / write; the
    database keeps working (a later flush and reopen succeed)."""
    from antkv.record import log_format
    from antkv.sst import format as sst_format

    monkeypatch.setattr(sst_format, "MAX_BLOCK_SIZE", 1 << 20)
    path = str(tmp_path / "db")
    big = b"v" * (2 << 20)
    with antkv.open(path, max_background_jobs=0, min_blob_size=1 << 30, merge_operator="append") as db:
        db.put(b"before", b"1")
        with pytest.raises(antkv.InvalidArgumentError, match="block limit"):
            db.put(b"inline", big)
        with pytest.raises(antkv.InvalidArgumentError, match="block limit"):
            db.merge(b"inline", big)
        with pytest.raises(antkv.InvalidArgumentError, match="block limit"):
            db.write(antkv.WriteBatch().put(b"a", b"small").put(b"inline", big))
        assert db.get(b"a") is None and db.get(b"inline") is None
        db.put(b"after", b"2")
        db.flush()
    with antkv.open(path, max_background_jobs=0, min_blob_size=100, merge_operator="append") as db:
        db.put(b"separated", big)  # the value goes to the value log: storable
        with pytest.raises(antkv.InvalidArgumentError, match="block limit"):
            db.put(big, b"a key no block can hold")
        db.flush()
    monkeypatch.setattr(log_format, "MAX_RECORD_SIZE", 1 << 20, raising=False)
    with antkv.open(path, max_background_jobs=0, min_blob_size=1 << 30, merge_operator="append") as db:
        batch = antkv.WriteBatch()
        for i in range(2000):
            batch.put(b"k%d" % i, b"x" * 1000)
        with pytest.raises(antkv.InvalidArgumentError, match="WAL record limit"):
            db.write(batch)
        assert db.get(b"k0") is None
    with antkv.open(path, max_background_jobs=0, merge_operator="append") as db:
        assert (db.get(b"before"), db.get(b"after"), len(db.get(b"separated"))) == (b"1", b"2", len(big))
        db.compact_range()


@pytest.mark.parametrize("seed", range(10))
def test_the_size_limits_shortcut_gives_the_full_checks_answer(monkeypatch, seed):
    """``check_ops`` given the batch's user bytes answers without looking at each pair only
    when the answer cannot differ: random batches, with the limits scaled down to just around
    each batch's size, are refused (or not) with and without the shortcut alike."""
    import random

    from antkv.base.dbformat import DELETION, EXPIRING, MERGE, RANGE_DELETION, VALUE
    from antkv.db.write_limits import ENTRY_OVERHEAD, check_ops
    from antkv.record import log_format
    from antkv.sst import format as sst_format
    from antkv.vlog import format as vlog_format

    rng = random.Random(seed)
    stored = refused = 0
    for _ in range(500):
        ops = [(rng.choice((VALUE, DELETION, MERGE, RANGE_DELETION, EXPIRING)), b"k" * rng.randrange(1, 40),
                b"v" * rng.choice((0, 3, 12, rng.randrange(20, 200)))) for _ in range(rng.randrange(1, 4))]
        user_bytes = sum(len(k) + len(v) for _, k, v in ops)
        near = user_bytes + 60 * len(ops)
        monkeypatch.setattr(sst_format, "MAX_BLOCK_SIZE", ENTRY_OVERHEAD + rng.randrange(near // 3, near + 40))
        monkeypatch.setattr(vlog_format, "MAX_RECORD_SIZE",
                            vlog_format.RECORD_HEADER_SIZE + rng.randrange(near // 3, near + 40))
        monkeypatch.setattr(log_format, "MAX_RECORD_SIZE", rng.randrange(near // 2, near + 40), raising=False)
        min_blob_size = rng.choice((1, 8, 64, 1 << 30))
        outcomes = []
        for given in (None, user_bytes):
            try:
                check_ops(ops, min_blob_size, given)
                outcomes.append("stored")
            except antkv.InvalidArgumentError as e:
                outcomes.append(str(e))
        assert outcomes[0] == outcomes[1], ops
        stored += outcomes[0] == "stored"
        refused += outcomes[0] != "stored"
    assert stored and refused  # both answers were given


def test_write_batch_from_data_validates_every_record(db):
    """Bytes that decode but that no write could have produced are refused, before a write: an
    expiring entry without a valid expiry, or wrapping a pointer; a deletion with a value; a
    range deletion whose begin is after its end."""
    from antkv.base.dbformat import DELETION, EXPIRING, RANGE_DELETION, VALUE_POINTER
    from antkv.base.expiry import encode_expiring
    from antkv.record.batch import encode_batch

    for ops in (
        [(EXPIRING, b"k", b"\x01\x02")],
        [(EXPIRING, b"k", encode_expiring(1, 7, b"v"))],
        [(EXPIRING, b"k", encode_expiring(1, VALUE_POINTER, b"p" * 25))],
        [(DELETION, b"k", b"a value")],
        [(RANGE_DELETION, b"z", b"a")],
    ):
        with pytest.raises(antkv.InvalidArgumentError, match="from_data"):
            antkv.WriteBatch.from_data(encode_batch(0, ops))
    good = encode_batch(0, [(EXPIRING, b"k", encode_expiring(1 << 60, 1, b"v")), (RANGE_DELETION, b"a", b"b")])
    db.write(antkv.WriteBatch.from_data(good))
    assert db.get(b"k") == b"v"
    db.compact_range()


def test_unusable_buffers_nul_paths_and_a_non_bool_reverse_are_clear_errors(db, tmp_path):
    released = memoryview(b"abc")
    released.release()
    writer = antkv.SstFileWriter(str(tmp_path / "x.sst"))
    for call in (lambda: db.put(released, b"v"), lambda: db.put(b"k", released), lambda: db.get(released),
                 lambda: antkv.WriteBatch().put(released, b"v"), lambda: db.multi_get([b"k", released]),
                 lambda: writer.put(released, b"v"), lambda: writer.put(b"k", released),
                 lambda: writer.delete_range(released, b"z")):
        with pytest.raises(antkv.InvalidArgumentError, match="not a usable buffer"):
            call()
    # the keys of multi_get are an iterable of keys: one key, a released buffer among them, is a TypeError
    for keys in (released, b"k", "k", memoryview(b"k")):
        with pytest.raises(TypeError, match="iterable of keys"):
            db.multi_get(keys)
        with db.snapshot() as snap:
            with pytest.raises(TypeError, match="iterable of keys"):
                db.multi_get(keys, snapshot=snap)
    for bad in (str(tmp_path / "a\x00b"), b"x\x00y"):
        with pytest.raises(antkv.InvalidArgumentError, match="NUL"):
            antkv.open(bad)
        with pytest.raises(antkv.InvalidArgumentError, match="NUL"):
            antkv.destroy(bad)
        with pytest.raises(antkv.InvalidArgumentError, match="NUL"):
            antkv.repair(bad)
    for call in (db.items, db.keys, db.values):
        with pytest.raises(TypeError, match="reverse"):
            call(reverse="x")
