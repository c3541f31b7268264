"""The fused point read (``DB.get``, antkv/db/read_api.py) against the general path it falls back to.

Each case reads the same database through a clock cache (the fused path: lock-free hit and
inline search) and through an LRU cache (every table through ``TableReader.find``), cold and
then warm, and compares both with what was written."""

from __future__ import annotations

import errno
import os
import random

import pytest

import antkv
from antkv.fs import RandomAccessFile, default_file_system
from antkv.fs.delegating import DelegatingFileSystem
from antkv.sst.reader import TableReader


def read_all(path, keys, snapshots_at=()):
    """``{policy: [answers cold, answers warm]}`` for ``keys`` (and each snapshot's view)."""
    out = {}
    for policy in ("clock", "lru"):
        with antkv.open(path, block_cache=antkv.Cache(1 << 20, policy=policy)) as db:
            runs = []
            for _ in range(2):
                runs.append([db.get(k) for k in keys])
            out[policy] = runs
    return out


def test_fixed_width_keys_versions_and_misses(tmp_path):
    path = str(tmp_path / "db")
    rnd = random.Random(7)
    keys = sorted({rnd.randbytes(8) for _ in range(3000)})
    expect = {}
    with antkv.open(path, write_buffer_size=64 * 1024, max_background_jobs=0) as db:
        for k in keys:
            db.put(k, k * 3)
            expect[k] = k * 3
        db.flush()
        for k in keys[::7]:  # newer versions in a newer table, some deleted
            if rnd.random() < 0.3:
                db.delete(k)
                expect[k] = None
            else:
                db.put(k, b"new" + k)
                expect[k] = b"new" + k
        db.flush()
    probes = keys + [rnd.randbytes(8) for _ in range(500)] + [b"", b"short", b"longer-than-eight"]
    want = [expect.get(k) for k in probes]
    for policy, runs in read_all(path, probes).items():
        for answers in runs:
            assert answers == want, policy


def test_empty_key_in_a_block_of_keys_of_several_widths(tmp_path):
    # such a block has no single key width (its layout says 0), which is also the empty key's
    path = str(tmp_path / "db")
    with antkv.open(path, max_background_jobs=0) as db:
        db.put(b"", b"empty")
        db.put(b"abc", b"3")
        db.flush()
        db.put(b"a", b"1")
        db.flush()
    for policy, runs in read_all(path, [b"", b"a", b"abc", b"b"]).items():
        for answers in runs:
            assert answers == [b"empty", b"1", b"3", None], policy


def test_older_version_under_a_snapshot_and_blocks_split_inside_a_key(tmp_path):
    path = str(tmp_path / "db")
    with antkv.open(path, block_cache=antkv.Cache(1 << 20, policy="clock"), block_size=64,
                    max_background_jobs=0) as db:
        snaps = []
        for i in range(40):  # 40 versions of one key: its run spans many tiny blocks
            db.put(b"key-0001", b"v%02d" % i)
            snaps.append(db.snapshot())
        db.put(b"key-0000", b"x")
        db.flush()
        for _ in range(2):  # cold, then warm
            assert db.get(b"key-0001") == b"v39"
            for i, s in enumerate(snaps):
                assert db.get(b"key-0001", snapshot=s) == b"v%02d" % i
            assert db.get(b"key-0000") == b"x" and db.get(b"key-0002") is None
        for s in snaps:
            s.release()


@pytest.mark.parametrize("policy", ["clock", "lru"])
def test_range_tombstones_hide_table_entries(tmp_path, policy):
    path = str(tmp_path / "db")
    with antkv.open(path, block_cache=antkv.Cache(1 << 20, policy=policy), max_background_jobs=0) as db:
        for i in range(100):
            db.put(b"k%03d" % i, b"v")
        db.flush()
        db.delete_range(b"k010", b"k020")
        db.flush()
        for _ in range(2):
            got = [db.get(b"k%03d" % i) for i in range(100)]
            assert got == [None if 10 <= i < 20 else b"v" for i in range(100)]


@pytest.mark.parametrize("policy", ["clock", "lru"])
def test_a_cold_read_counts_one_miss_and_leaves_the_block_for_the_next(tmp_path, policy):
    """The fused path reads a missing block itself (as ``TableReader.load_searchable`` does): one miss
    counted, the block cached, and the next read of the block one hit."""
    path = str(tmp_path / "db")
    with antkv.open(path, max_background_jobs=0) as db:
        for i in range(200):
            db.put(b"key%05d" % i, b"v%d" % i)
        db.flush()
    cache = antkv.Cache(1 << 20, policy=policy)
    with antkv.open(path, block_cache=cache) as db:
        before = cache.stats()
        assert db.get(b"key00007") == b"v7"
        cold = cache.stats()
        assert (cold["misses"] - before["misses"], cold["hits"] - before["hits"]) == (1, 0)
        assert db.get(b"key00008") == b"v8"  # the same block
        warm = cache.stats()
        assert (warm["misses"] - cold["misses"], warm["hits"] - cold["hits"]) == (0, 1)


def test_an_ingested_table_is_read_through_its_translation(tmp_path):
    """A table brought in by ``ingest_database`` keeps its source's sequence numbers and value
    pointers, translated as it is read: the fused path, which returns entries as stored, must
    leave it to ``find``.  Fixed-width keys (the fused path's case), values inline and in the
    value log, and a snapshot taken before the ingest."""
    rnd = random.Random(3)
    keys = [rnd.randbytes(16) for _ in range(300)]
    value = {k: (k * 20 if i % 2 else k[:4]) for i, k in enumerate(keys)}  # 320 B in the value log, 4 B inline
    src = str(tmp_path / "src")
    with antkv.open(src, min_blob_size=64) as db:
        for k in keys:
            db.put(k, value[k])
        db.checkpoint(str(tmp_path / "ckpt"))
    dst = str(tmp_path / "dst")
    with antkv.open(dst, min_blob_size=64, block_cache=antkv.Cache(1 << 20, policy="clock")) as db:
        for i in range(1000):  # the destination's own sequence numbers and value-log file
            db.put(b"\x00own%05d" % i, b"own" * 40)
        db.flush()
        before = db.snapshot()
        db.ingest_database(str(tmp_path / "ckpt"), b"\x01", b"\xff" * 17)
        for _ in range(2):  # cold, then from the cache
            assert [db.get(k) for k in keys if k >= b"\x01"] == [value[k] for k in keys if k >= b"\x01"]
            assert all(db.get(k, snapshot=before) is None for k in keys)


class _FlakyPositional(RandomAccessFile):
    """A table file whose positional read misbehaves as ``os.pread`` may: ``mode`` "short"
    returns one byte less, "oserror" raises a bare ``OSError``; ``read`` fails too when
    ``read_fails``."""

    def __init__(self, handle, state):
        self.path, self._handle, self._state = handle.path, handle, state

    def read(self, offset, n):
        if self._state["read_fails"]:
            raise antkv.IOError("read failed: injected", OSError(errno.EIO, "injected"), self.path)
        return self._handle.read(offset, n)

    def positional_read(self, checked):
        state, pread = self._state, self._handle.positional_read(checked)

        def flaky(n, offset):
            state["positional_reads"] += 1
            if state["mode"] == "short":
                return pread(n, offset)[:-1]
            if state["mode"] == "oserror":
                raise OSError(errno.EIO, "injected")
            return pread(n, offset)

        return flaky

    def size(self):
        return self._handle.size()

    def close(self):
        self._handle.close()


class _FlakyFS(DelegatingFileSystem):
    def __init__(self, state):
        super().__init__(default_file_system())
        self.state = state

    def open_random(self, path):
        handle = self.base.open_random(path)
        return _FlakyPositional(handle, self.state) if path.endswith(".sst") else handle


@pytest.mark.parametrize("mode", ["short", "oserror"])
def test_a_short_or_failed_positional_read_is_read_again_through_the_file(tmp_path, mode):
    """A block that missed the cache is read with the file's positional read (``os.pread`` on
    the descriptor); a short read or a bare ``OSError`` is read again through the file's
    ``read``, which gives the block, or reports the failure as ``antkv.IOError``."""
    path = str(tmp_path / "db")
    with antkv.open(path, max_background_jobs=0, block_size=256) as db:
        for i in range(200):
            db.put(b"key%05d" % i, b"v%d" % i)
        db.flush()
    state = {"mode": mode, "read_fails": False, "positional_reads": 0}
    with antkv.open(path, file_system=_FlakyFS(state), block_cache=antkv.Cache(1 << 20, policy="clock")) as db:
        db.approximate_size()  # every table open
        assert db.get(b"key00007") == b"v7"
        assert state["positional_reads"] == 1
        state["read_fails"] = True
        with pytest.raises(antkv.IOError):
            db.get(b"key00190")  # another block, not cached


def test_a_closed_table_reads_nothing_through_its_positional_read(tmp_path):
    """``TableReader.close`` swaps the positional read for one that fails before it closes the
    descriptor, whose number the OS may give to another file: a read that still reaches the
    table is reported as closed."""
    path = str(tmp_path / "db")
    with antkv.open(path, max_background_jobs=0) as db:
        db.put(b"a", b"1")
        db.flush()

    sst = [f for f in os.listdir(path) if f.endswith(".sst")][0]
    r = TableReader.open(default_file_system(), os.path.join(path, sst), 1, cache=antkv.Cache(1 << 20))
    pread, _verify, _path = r.block_source
    _keys, _negs, offsets, sizes = r.index()
    assert len(pread(sizes[0] + 5, offsets[0])) == sizes[0] + 5
    r.close()
    other = os.open(os.path.join(path, sst), os.O_RDONLY)  # most likely the number just closed
    try:
        pread, _verify, _path = r.block_source
        with pytest.raises(OSError):
            pread(sizes[0] + 5, offsets[0])
        with pytest.raises(antkv.DBClosedError):
            r.read_checked(offsets[0], sizes[0])
    finally:
        os.close(other)


def test_an_unchecked_tables_read_under_way_at_close_never_reads_another_file(tmp_path):
    """Without checksums nothing would tell a block of another file apart, so a reader that
    does not verify gets a positional read through the file's own ``read``: one taken before
    ``close`` and called after it fails, even when the descriptor number names a file opened
    since."""
    path = str(tmp_path / "db")
    with antkv.open(path, max_background_jobs=0) as db:
        db.put(b"a", b"1")
        db.flush()

    sst = [f for f in os.listdir(path) if f.endswith(".sst")][0]
    r = TableReader.open(default_file_system(), os.path.join(path, sst), 1, cache=antkv.Cache(1 << 20),
                         verify_checksums=False)
    pread, verify, _path = r.block_source
    assert verify is False
    _keys, _negs, offsets, sizes = r.index()
    assert len(pread(sizes[0] + 5, offsets[0])) == sizes[0] + 5
    r.close()
    other = os.open(os.path.join(path, sst), os.O_RDONLY)  # most likely the number just closed
    try:
        with pytest.raises(antkv.IOError):
            pread(sizes[0] + 5, offsets[0])  # the callable taken before close
    finally:
        os.close(other)
