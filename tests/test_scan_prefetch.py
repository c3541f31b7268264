"""Scan prefetch of value-log values (AntKV's scan prefetch): scans resolve values inline while
reads are fast, and switch to resolving chunks in parallel threads once reads are slow.  The
switch is forced here (every read counts as slow) so the parallel path is checked against a
model in every shape a scan can take."""

from __future__ import annotations

import random

import pytest

import antkv
import antkv.read.read_view as read_view
from antkv.fs.memory import MemoryFileSystem


@pytest.fixture
def every_read_is_slow(monkeypatch):
    monkeypatch.setattr(read_view, "SLOW_READ_SECONDS", -1.0)


@pytest.mark.parametrize("readahead", [2, 8, 64])
def test_parallel_prefetch_gives_the_same_scans(every_read_is_slow, readahead):
    fs = MemoryFileSystem()
    db = antkv.open("db", file_system=fs, max_background_jobs=0, min_blob_size=50,
                    blob_file_size=20_000, write_buffer_size=16_384, blob_readahead=readahead)
    rng = random.Random(readahead)
    model = {}
    for i in range(1500):
        k = b"k%04d" % rng.randrange(800)
        v = bytes([i % 256]) * rng.choice([0, 10, 49, 50, 300, 2000])  # inline and separated
        db.put(k, v)
        model[k] = v
    db.delete_range(b"k0100", b"k0150")
    for k in [k for k in model if b"k0100" <= k < b"k0150"]:
        del model[k]
    want = sorted(model.items())
    assert list(db.items()) == want
    assert list(db.items(reverse=True)) == want[::-1]
    assert list(db.values(b"k0200", b"k0600")) == [v for k, v in want if b"k0200" <= k < b"k0600"]
    with db.snapshot() as snap:
        db.put(b"k0300", b"changed after the snapshot" * 10)
        assert list(db.items(b"k0250", b"k0350", snapshot=snap)) == [(k, v) for k, v in want if b"k0250" <= k < b"k0350"]
    assert db._pool is not None  # the parallel path really ran
    db.close()


def test_fast_reads_stay_inline():
    fs = MemoryFileSystem()
    db = antkv.open("db", file_system=fs, max_background_jobs=0, min_blob_size=10, blob_readahead=8)
    for i in range(200):
        db.put(b"k%03d" % i, b"v" * 100)
    assert len(list(db.items())) == 200
    assert db._pool is None  # in-memory reads are fast: no thread was ever asked
    db.close()
