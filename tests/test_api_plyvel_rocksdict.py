"""API items plyvel and rocksdict users expect: a cursor used as a Python iterator,
``iterator(prefix=, reverse=)``, ``multi_get``, ``approximate_size``, ``antkv.destroy``."""

from __future__ import annotations

import os

import pytest

import antkv

OPTS = dict(max_background_jobs=0, min_blob_size=100, write_buffer_size=8192)


@pytest.fixture
def db(tmp_path):
    with antkv.open(str(tmp_path / "db"), **OPTS) as db:
        for i in range(300):
            db.put(b"%s%03d" % (b"ab"[i % 2 : i % 2 + 1], i), b"v%d" % i * (1 + i % 60))
        db.delete_range(b"a010", b"a020")
        yield db


def test_a_fresh_cursor_iterates_from_its_first_key(db):
    want = list(db.items())
    assert len(want) > 100
    assert list(db.iterator()) == want
    assert list(db.iterator(reverse=True)) == want[::-1]
    assert list(db.iterator(lower_bound=b"b", upper_bound=b"b100")) == [kv for kv in want if b"b" <= kv[0] < b"b100"]
    it = db.iterator()
    it.seek(b"b250")
    assert list(it) == [kv for kv in want if kv[0] >= b"b250"]  # a positioned cursor continues
    it = db.iterator(reverse=True)
    it.seek_for_prev(b"a005")
    assert list(it) == [kv for kv in want if kv[0] <= b"a005"][::-1]


def test_iterator_prefix_and_reverse(db):
    want = [kv for kv in db.items() if kv[0].startswith(b"a1")]
    assert want and list(db.iterator(prefix=b"a1")) == want
    assert list(db.iterator(prefix=b"a1", reverse=True)) == want[::-1]
    assert list(db.iterator(prefix=b"\xff")) == []
    with pytest.raises(TypeError):
        db.iterator(prefix="a")
    with pytest.raises(TypeError):
        db.iterator(reverse=1)


def test_multi_get_reads_one_consistent_state(db):
    keys = [b"a000", b"a011", b"b001", b"missing", bytearray(b"b299")]
    assert db.multi_get(keys) == [db.get(bytes(k)) for k in keys]
    assert db.multi_get(keys)[1] is None and db.multi_get(keys)[3] is None
    snap = db.snapshot()
    db.put(b"a000", b"new")
    assert db.multi_get([b"a000"], snapshot=snap) == [b"v0"]
    snap.release()
    assert db.multi_get([]) == []
    with pytest.raises(TypeError):
        db.multi_get(["a000"])


def test_approximate_size(db):
    db.compact_range()
    total = db.approximate_size()
    on_disk = db.stats()["bytes_on_disk"]
    assert 0 < total <= on_disk * 1.1
    half = db.approximate_size(b"a", b"b")
    assert 0 < half < total
    assert db.approximate_size(b"c", b"d") == 0
    assert db.approximate_size(b"a", b"a") == 0
    with pytest.raises(antkv.InvalidArgumentError):
        db.approximate_size(b"b", b"a")
    with pytest.raises(TypeError):
        db.approximate_size("a", "b")


def test_destroy(tmp_path):
    path = tmp_path / "db"
    with antkv.open(str(path), **OPTS) as db:
        db.put(b"k", b"v" * 500)
        db.flush()
        with pytest.raises(antkv.LockError):
            antkv.destroy(str(path))  # open: nothing removed
        assert db.get(b"k") == b"v" * 500
    removed = antkv.destroy(str(path))
    assert any(n.endswith(".sst") for n in removed) and "CURRENT" in removed
    assert not path.exists()
    assert antkv.destroy(str(path)) == []  # nothing there: nothing to do
    # a file that is not the database's keeps the directory
    with antkv.open(str(path), **OPTS) as db:
        db.put(b"k", b"v")
    (path / "notes.txt").write_text("mine")
    antkv.destroy(path)
    assert os.listdir(path) == ["notes.txt"]
    (tmp_path / "file").write_text("x")
    with pytest.raises(antkv.InvalidArgumentError):
        antkv.destroy(str(tmp_path / "file"))
    with pytest.raises(TypeError):
        antkv.destroy(3)


# --- the range arguments: one set for iterator(), items(), keys() and values() ---


def _expected(keys, lo=None, hi=None, inc_lo=True, inc_hi=False, prefix=None):
    out = []
    for k in keys:
        if lo is not None and (k < lo or (k == lo and not inc_lo)):
            continue
        if hi is not None and (k > hi or (k == hi and not inc_hi)):
            continue
        if prefix is not None and not k.startswith(prefix):
            continue
        out.append(k)
    return out


@pytest.mark.parametrize("inc_lo", [True, False])
@pytest.mark.parametrize("inc_hi", [True, False])
@pytest.mark.parametrize("reverse", [False, True])
def test_plyvel_range_arguments_agree_everywhere(db, inc_lo, inc_hi, reverse):
    pairs = dict(db.items())
    keys = sorted(pairs)
    for lo, hi, prefix in [(b"a005", b"a030", None), (b"b100", b"b101", None), (b"a", None, b"b"),
                           (None, b"a021", b"a0"), (b"a009", b"a020", None)]:
        want = _expected(keys, lo, hi, inc_lo, inc_hi, prefix)
        if reverse:
            want = want[::-1]
        ranges = dict(include_start=inc_lo, include_stop=inc_hi, prefix=prefix, reverse=reverse)
        assert list(db.keys(lo, hi, **ranges)) == want
        assert list(db.keys(lower_bound=lo, upper_bound=hi, **ranges)) == want
        assert list(db.values(start=lo, stop=hi, **ranges)) == [pairs[k] for k in want]
        assert list(db.items(start=lo, stop=hi, **ranges)) == [(k, pairs[k]) for k in want]
        assert list(db.iterator(start=lo, stop=hi, **ranges)) == [(k, pairs[k]) for k in want]
        assert list(db.iterator(lo, hi, **ranges)) == [(k, pairs[k]) for k in want]
        assert list(db.iterator(start=lo, stop=hi, include_value=False, **ranges)) == want
        assert list(db.iterator(start=lo, stop=hi, include_key=False, **ranges)) == [pairs[k] for k in want]
        assert list(db.items(start=lo, stop=hi, include_value=False, **ranges)) == want
        assert list(db.items(start=lo, stop=hi, include_key=False, **ranges)) == [pairs[k] for k in want]


def test_range_arguments_bad_input(db):
    with pytest.raises(TypeError, match="not both"):
        db.iterator(b"a", start=b"b")
    with pytest.raises(TypeError, match="not both"):
        db.items(b"a", lower_bound=b"b")
    with pytest.raises(TypeError, match="not both"):
        db.keys(stop=b"a", upper_bound=b"b")
    with pytest.raises(TypeError):
        db.items(include_start=1)
    with pytest.raises(TypeError):
        db.iterator(include_value=None)
    with pytest.raises(TypeError):
        db.items(start="a")
    with pytest.raises(TypeError):
        db.values(reverse="yes")
    with pytest.raises(antkv.InvalidArgumentError):
        db.iterator(include_key=False, include_value=False)
    with pytest.raises(antkv.InvalidArgumentError):
        db.items(include_key=False, include_value=False)
    with db.snapshot() as snap:  # a snapshot's cursor takes them too
        assert list(snap.iterator(start=b"b297", include_start=False, include_value=False)) == [b"b299"]


def test_a_key_only_cursor_reads_no_value_until_asked(tmp_path):
    from antkv.fs.fault import FaultInjectionFileSystem
    from antkv.fs.memory import MemoryFileSystem

    fs = FaultInjectionFileSystem(MemoryFileSystem())
    with antkv.open("/db", file_system=fs, **OPTS) as db:
        for i in range(20):
            db.put(b"k%02d" % i, bytes([i]) * 5000)
        db.flush()
        before = _vlog_bytes_read(fs)
        assert list(db.iterator(include_value=False)) == [b"k%02d" % i for i in range(20)]
        it = db.iterator(start=b"k05", include_stop=True, stop=b"k06", include_value=False)
        it.seek_to_first()
        assert it.key() == b"k05"
        assert _vlog_bytes_read(fs) == before  # no value was read
        assert it.value() == bytes([5]) * 5000  # ... until asked for
        assert _vlog_bytes_read(fs) > before
        it.next()
        assert it.key() == b"k06" and it.value() == bytes([6]) * 5000
        it.next()
        assert not it.valid()


def _vlog_bytes_read(fs) -> int:
    return sum(n for path, n in fs.bytes_read.items() if path.endswith(".vlog"))


# --- membership and deletion answer from the entry, never reading the value log ---


def test_membership_and_deletion_do_not_read_the_value_log():
    from antkv.fs.fault import FaultInjectionFileSystem
    from antkv.fs.memory import MemoryFileSystem

    fs = FaultInjectionFileSystem(MemoryFileSystem())
    clock = [1000.0]
    with antkv.open("/db", file_system=fs, merge_operator="append", clock=lambda: clock[0], **OPTS) as db:
        big = b"x" * (1 << 16)
        for i in range(8):
            db.put(b"big%d" % i, big)
        db.put(b"small", b"s")
        db.put(b"ttl", big, ttl=10)
        db.merge(b"merged", b"m")
        db.flush()
        db.put(b"big7", big)  # one in the memtable too
        db.delete(b"big6")
        db.delete_range(b"big5", b"big6")
        before = _vlog_bytes_read(fs)
        assert all(b"big%d" % i in db for i in range(5))
        assert b"big7" in db and b"small" in db and b"ttl" in db and b"merged" in db
        assert b"big5" not in db and b"big6" not in db and b"nothing" not in db
        assert db.key_may_exist(b"big0") and not db.key_may_exist(b"big6")
        with db.snapshot() as snap:
            del db[b"big0"]
            assert db.key_may_exist(b"big0", snapshot=snap)
        assert b"big0" not in db
        with pytest.raises(KeyError):
            del db[b"big0"]
        with pytest.raises(KeyError):
            del db[b"big6"]
        clock[0] += 11
        assert b"ttl" not in db  # expired: reads as deleted
        assert _vlog_bytes_read(fs) == before  # not one byte of the value log read
        assert db.get(b"big1") == big  # while get reads it
        assert _vlog_bytes_read(fs) >= before + len(big)
        with pytest.raises(TypeError):
            db.key_may_exist("big1")
    with pytest.raises(antkv.DBClosedError):
        db.key_may_exist(b"big1")


# --- rocksdict's names, checked against rocksdict itself ---


def test_rocksdict_scan_names_match_rocksdict(db, tmp_path):
    import rocksdict

    rdb = rocksdict.Rdict(str(tmp_path / "rocks"))
    try:
        for k, v in db.items():
            rdb[k] = v
        for backwards in (False, True):
            for from_key in (None, b"a", b"a015", b"a100", b"b101", b"b2", b"c"):
                want = list(rdb.items(backwards=backwards, from_key=from_key))
                assert list(db.items(backwards=backwards, from_key=from_key)) == want, (backwards, from_key)
                assert list(db.keys(backwards=backwards, from_key=from_key)) == [k for k, _ in want]
                assert list(db.values(backwards=backwards, from_key=from_key)) == [v for _, v in want]
        keys = [b"a000", b"nope", b"b299", b"a015"]
        assert db.get(keys) == rdb.get(keys)
        assert db.get(keys, b"-") == [v if v is not None else b"-" for v in rdb.get(keys)]
        assert db.key_may_exist(b"a000", fetch=True) == (True, db[b"a000"])
        assert db.key_may_exist(b"nope", fetch=True) == (False, None)
    finally:
        rdb.close()
        rocksdict.Rdict.destroy(str(tmp_path / "rocks"))
    with pytest.raises(TypeError):
        db.items(backwards=1)
    with pytest.raises(TypeError):
        db.items(backwards=True, reverse=True)
    with pytest.raises(TypeError):
        db.keys(from_key=b"a", start=b"b")
    with pytest.raises(TypeError):
        db.key_may_exist(b"a", fetch="yes")


def test_next_on_a_cursor_as_on_a_plyvel_iterator(db):
    want = list(db.items(start=b"b290"))
    it = db.iterator(start=b"b290")
    assert next(it) == want[0] and next(it) == want[1]
    assert list(it) == want[2:]
    with pytest.raises(StopIteration):
        next(it)
    it = db.iterator(stop=b"a004", reverse=True, include_value=False)
    assert [next(it), next(it)] == [b"a002", b"a000"]
    with pytest.raises(StopIteration):
        next(it)
