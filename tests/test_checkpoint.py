"""Checkpoints: a consistent, openable copy sharing immutable files by hard link."""

from __future__ import annotations

import os

import pytest

import antkv


def test_checkpoint_of_empty_database_opens(tmp_path):
    # found by the differential fuzzer: the copy's MANIFEST named a WAL it did not contain
    with antkv.open(str(tmp_path / "db")) as db:
        db.checkpoint(str(tmp_path / "cp"))
    with antkv.open(str(tmp_path / "cp"), create_if_missing=False) as cp:
        assert list(cp.items()) == []


def test_checkpoint_is_consistent_and_independent(tmp_path):
    opts = dict(max_background_jobs=0, write_buffer_size=8192, min_blob_size=100, blob_file_size=20000)
    db = antkv.open(str(tmp_path / "db"), **opts)
    model = {}
    for i in range(500):
        k, v = b"k%04d" % i, bytes([i % 251]) * (i % 300)
        db.put(k, v)
        model[k] = v
    db.delete_range(b"k0100", b"k0200")
    for i in range(100, 200):
        model.pop(b"k%04d" % i)
    db.checkpoint(str(tmp_path / "cp"))
    shared = [
        n for n in os.listdir(tmp_path / "cp")
        if n.endswith((".sst", ".vlog")) and os.stat(tmp_path / "cp" / n).st_nlink == 2
    ]
    assert any(n.endswith(".sst") for n in shared) and any(n.endswith(".vlog") for n in shared)
    with pytest.raises(antkv.InvalidArgumentError):
        db.checkpoint(str(tmp_path / "cp"))  # the directory exists
    db.put(b"after", b"checkpoint")  # not in the copy
    db.delete(b"k0000")
    db.compact_range()
    db.gc_value_log()
    with antkv.open(str(tmp_path / "cp"), create_if_missing=False, **opts) as cp:
        assert dict(cp.items()) == model
        cp.verify()
        cp.put(b"written", b"in the copy")
    assert db.get(b"written") is None and db.get(b"after") == b"checkpoint"
    db.close()
    with antkv.open(str(tmp_path / "db"), **opts) as db:
        assert db.get(b"after") == b"checkpoint"


def test_checkpoint_never_touches_a_directory_it_did_not_create(tmp_path):
    """``DIR.tmp`` is a name a user may own: a checkpoint into DIR stages elsewhere and leaves
    it as it is; a failed checkpoint leaves nothing behind but what was there."""
    import antkv

    path = tmp_path / "db"
    mine = tmp_path / "cp.tmp"
    mine.mkdir()
    (mine / "notes.txt").write_bytes(b"the user's")
    (mine / "000001.sst").write_bytes(b"the user's too")
    with antkv.open(str(path), max_background_jobs=0) as db:
        db.put(b"k", b"v")
        db.checkpoint(str(tmp_path / "cp"))
        before = sorted(os.listdir(tmp_path))
        with pytest.raises(antkv.InvalidArgumentError):
            db.checkpoint(str(tmp_path / "cp"))  # exists
        assert sorted(os.listdir(tmp_path)) == before
    assert (mine / "notes.txt").read_bytes() == b"the user's"
    assert (mine / "000001.sst").read_bytes() == b"the user's too"
    assert sorted(os.listdir(tmp_path)) == ["cp", "cp.tmp", "db"]
    with antkv.open(str(tmp_path / "cp"), read_only=True) as cp:
        assert cp.get(b"k") == b"v"
