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
