"""A flush with nothing older below it is bottommost: it drops deletions no snapshot needs.

A database with no table and no older memtable waiting has nothing a deletion could hide, so
its flush writes only live entries (a state's first snapshot, a rebuilt working copy, a bulk
load).  Every other flush keeps its deletions: they hide versions in older tables.
"""

from __future__ import annotations

import threading

import antkv
from antkv.compaction.worker import JobRunner


def _table_entries(db) -> int:
    return sum(f.num_entries for _, f in db._versions.current.all_files())


def _open(tmp_path, **kw):
    return antkv.open(str(tmp_path / "db"), create_if_missing=True, **kw)


def test_the_first_flush_writes_no_deletion(tmp_path):
    with _open(tmp_path) as db:
        for i in range(1000):
            db.put(b"k%04d" % i, b"v%d" % i)
        for i in range(0, 1000, 2):
            db.delete(b"k%04d" % i)
        db.delete(b"never-written")
        db.flush()
        assert _table_entries(db) == 500  # the live keys only
        assert db.get(b"k0000") is None and db.get(b"k0001") == b"v1"
    with _open(tmp_path) as db:  # and so after a reopen
        assert len(list(db.keys())) == 500 and db.get(b"k0002") is None


def test_a_flush_above_a_table_keeps_its_deletions(tmp_path):
    with _open(tmp_path) as db:
        for i in range(100):
            db.put(b"k%04d" % i, b"old")
        db.flush()
        for i in range(0, 100, 2):
            db.delete(b"k%04d" % i)
        db.flush()
        assert _table_entries(db) == 150  # the deletions hide the first table's versions
        assert db.get(b"k0000") is None and db.get(b"k0001") == b"old"
    with _open(tmp_path) as db:
        assert db.get(b"k0000") is None and len(list(db.keys())) == 50


def test_a_bottommost_flush_keeps_what_a_live_snapshot_still_sees(tmp_path):
    with _open(tmp_path) as db:
        db.put(b"a", b"1")
        db.put(b"b", b"1")
        snap = db.snapshot()
        db.delete(b"a")  # newer than the snapshot: the snapshot still sees a = 1
        db.put(b"b", b"2")
        db.delete(b"c")  # hides nothing anywhere
        db.flush()
        assert db.get(b"a") is None and db.get(b"b") == b"2" and db.get(b"c") is None
        assert snap.get(b"a") == b"1" and snap.get(b"b") == b"1"
        assert dict(snap.items()) == {b"a": b"1", b"b": b"1"}
        snap.release()


def test_a_bottommost_flush_drops_range_tombstones_and_what_they_cover(tmp_path):
    with _open(tmp_path) as db:
        for i in range(100):
            db.put(b"k%04d" % i, b"v")
        db.delete_range(b"k0010", b"k0090")
        db.put(b"k0050", b"back")
        db.flush()
        files = [f for _, f in db._versions.current.all_files()]
        assert len(files) == 1 and files[0].num_entries == 21 and not files[0].largest_exclusive
        assert sorted(db.keys()) == [b"k%04d" % i for i in list(range(10)) + [50] + list(range(90, 100))]


def test_only_the_oldest_memtable_on_an_empty_database_flushes_bottommost(tmp_path, monkeypatch):
    """The older memtable's flush is held while a newer one, which deletes its keys, is flushed
    beside it: the newer one is not bottommost (the older one's table will be below it)."""
    flags = {}  # "oldest" / "newer" -> the bottommost flag its flush was given
    release = threading.Event()
    real_flush = JobRunner.flush
    oldest = []

    def recording_flush(self, mem, snapshots, bottommost=False):
        # the two flushes run on two background threads, in either order
        which = "oldest" if mem is oldest[0] else "newer"
        flags[which] = bottommost
        if which == "oldest":
            assert release.wait(10)
        return real_flush(self, mem, snapshots, bottommost)

    monkeypatch.setattr(JobRunner, "flush", recording_flush)
    with _open(tmp_path, max_background_jobs=2) as db:
        for i in range(50):
            db.put(b"k%04d" % i, b"first")
        oldest.append(db._mem)
        db.flush(wait=False)  # the oldest memtable: its flush waits on `release`
        for i in range(50):
            db.delete(b"k%04d" % i)
        waiter = threading.Thread(target=db.flush)  # the newer memtable, flushed beside it
        waiter.start()
        waiter.join(0.5)
        release.set()
        waiter.join(10)
        assert not waiter.is_alive()
        assert flags == {"oldest": True, "newer": False}
        assert list(db.keys()) == []
    with _open(tmp_path) as db:
        assert list(db.keys()) == []
