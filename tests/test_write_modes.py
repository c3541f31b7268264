"""What each write mode survives (docs/durability.md), on the in-memory file system:

* ``sync=False``: survives a process kill, not a power loss (until a later sync or flush);
* ``sync=True``: survives a power loss, and so does every write acknowledged before it;
* ``disable_wal=True``: survives neither crash until a flush, but a clean ``close()`` flushes it
  (as RocksDB does with ``avoid_flush_during_shutdown=false``); with
  ``Options.avoid_flush_during_shutdown`` a close drops it.
"""

from __future__ import annotations

import pytest

import antkv
from antkv.fs.memory import MemoryFileSystem

CONFIGS = {
    "inline": dict(max_background_jobs=0),
    "background": dict(max_background_jobs=2),
    "blobs": dict(max_background_jobs=0, min_blob_size=10),
}


def _reopen(fs, **opts) -> dict:
    with antkv.open("db", file_system=fs, **opts) as db:
        return dict(db.items())


def _unlogged_over_logged(opts):
    """A database where an unlogged batch overwrote a logged write: ``(fs, db)``."""
    fs = MemoryFileSystem()
    db = antkv.open("db", file_system=fs, **opts)
    db.put(b"logged", b"1")
    with db.write_batch(disable_wal=True) as b:
        b.put(b"unlogged", b"value-of-twenty-bytes")
        b.delete(b"logged")
    return fs, db


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_disable_wal_writes_survive_a_clean_close(config):
    opts = CONFIGS[config]
    fs, db = _unlogged_over_logged(opts)
    db.close()
    fs.crash("power")  # close() made everything durable
    assert _reopen(fs, **opts) == {b"unlogged": b"value-of-twenty-bytes"}


def test_disable_wal_writes_in_an_immutable_memtable_survive_close():
    fs = MemoryFileSystem()
    opts = dict(max_background_jobs=2, write_buffer_size=4096, max_write_buffer_number=4)
    db = antkv.open("db", file_system=fs, **opts)
    b = antkv.WriteBatch()
    for i in range(200):
        b.put(b"k%04d" % i, b"v" * 40)  # more than one write buffer: a switch follows
    db.write(b, disable_wal=True)
    db.put(b"after", b"x")
    db.close()
    fs.crash("power")
    got = _reopen(fs, **opts)
    assert len(got) == 201 and got[b"k0199"] == b"v" * 40


@pytest.mark.parametrize("config", ["inline", "blobs"])
def test_avoid_flush_during_shutdown_drops_only_the_unlogged_writes(config):
    opts = dict(CONFIGS[config], avoid_flush_during_shutdown=True)
    fs, db = _unlogged_over_logged(opts)
    db.put(b"later", b"value-logged-after-them")
    tables = [n for n in fs.listdir("db") if n.endswith(".sst")]
    db.close()
    assert [n for n in fs.listdir("db") if n.endswith(".sst")] == tables  # close flushed nothing
    fs.crash("power")
    assert _reopen(fs, **opts) == {b"logged": b"1", b"later": b"value-logged-after-them"}


def test_disable_wal_writes_are_lost_by_a_crash_until_flushed():
    fs = MemoryFileSystem()
    db = antkv.open("db", file_system=fs, max_background_jobs=0)
    db.put(b"a", b"1")
    db.write(antkv.WriteBatch().put(b"b", b"2"), disable_wal=True)
    fs.crash("kill")
    assert _reopen(fs, max_background_jobs=0) == {b"a": b"1"}  # the unlogged write is gone
    db = antkv.open("db", file_system=fs, max_background_jobs=0)
    db.write(antkv.WriteBatch().put(b"b", b"2"), disable_wal=True)
    db.flush()
    fs.crash("power")
    assert _reopen(fs, max_background_jobs=0) == {b"a": b"1", b"b": b"2"}


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_sync_false_survives_a_kill_not_a_power_loss(config):
    opts = CONFIGS[config]
    fs = MemoryFileSystem()
    db = antkv.open("db", file_system=fs, **opts)
    db.put(b"a", b"value-one-long-enough")
    db.delete_range(b"x", b"z")
    fs.crash("kill")
    assert _reopen(fs, **opts) == {b"a": b"value-one-long-enough"}
    fs = MemoryFileSystem()
    db = antkv.open("db", file_system=fs, **opts)
    db.put(b"a", b"value-one-long-enough", sync=True)
    db.put(b"b", b"value-two-long-enough")
    fs.crash("power")
    assert _reopen(fs, **opts) == {b"a": b"value-one-long-enough"}


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_sync_true_survives_a_power_loss_with_everything_before_it(config):
    opts = CONFIGS[config]
    fs = MemoryFileSystem()
    db = antkv.open("db", file_system=fs, **opts)
    db.put(b"a", b"unsynced-but-earlier")
    db.put(b"b", b"synced-value-long-enough", sync=True)
    db.put(b"c", b"unsynced-and-later-long")
    fs.crash("power")
    assert _reopen(fs, **opts) == {b"a": b"unsynced-but-earlier", b"b": b"synced-value-long-enough"}


def test_replay_stops_at_a_wal_record_whose_value_log_bytes_were_lost():
    """A power loss may keep an unsynced WAL record but not the value-log record it points to
    (each file keeps its own prefix of unsynced bytes).  Recovery then ends the replay at that
    record: what follows was never durable either, and the result stays a prefix of history."""
    opts = dict(max_background_jobs=0, min_blob_size=50)
    fs = MemoryFileSystem()
    db = antkv.open("db", file_system=fs, **opts)
    db.put(b"a", b"small")
    db.put(b"b", b"B" * 100, sync=True)  # value log and WAL synced up to here
    db.put(b"c", b"C" * 100)  # value log record 2, WAL record 3
    db.put(b"d", b"small")
    vlog = next(n for n in fs.listdir("db") if n.endswith(".vlog"))
    size_after_b = 24 + 25 + 1 + 100  # file header + record of b
    fs.crash("kill")
    fs.truncate(f"db/{vlog}", size_after_b)  # c's value is lost, the WAL survived whole
    assert _reopen(fs, **opts) == {b"a": b"small", b"b": b"B" * 100}


def test_sync_write_right_after_a_memtable_switch_survives_a_power_loss():
    """The switch creates a new WAL; its name must be durable before a synced write to it is
    acknowledged, not only once the background flush fsyncs the directory."""
    fs = MemoryFileSystem()
    db = antkv.open("db", file_system=fs, max_background_jobs=1, write_buffer_size=1000, enable_blob_files=False)
    db.put(b"a", b"1", sync=True)
    with db._mutex:  # holds the background flush off: the window between switch and flush
        db.put(b"fill", b"x" * 1200)  # the memtable is full now
        db.put(b"b", b"2", sync=True)  # switches to a new WAL, then syncs it
        fs.crash("power")
        # the crashed process's threads die with it: the flush it held off must not run
        # against the file system the reopen uses (it would reuse the reopen's file numbers)
        db._bg_shutdown = True
    for t in db._bg_threads:
        t.join()
    got = _reopen(fs, max_background_jobs=0)
    assert got[b"a"] == b"1" and got[b"b"] == b"2"



def test_a_clean_close_makes_a_new_wal_name_durable():
    """A switch leaves its new WAL's name to the next directory sync.  Here the switch happens
    while a flush job runs (after the job's directory sync) and the database closes before the
    new memtable is flushed: ``close()`` must leave the name durable, or a power loss after a
    clean close would lose the writes in that WAL."""
    import threading

    from antkv.fs.fault import FaultInjectionFileSystem

    switched, state = threading.Event(), {}

    class SwitchDuringFlush(FaultInjectionFileSystem):
        def sync_dir(self, path):
            super().sync_dir(path)
            db = state.pop("db", None)  # once (the switch below syncs the directory too)
            if db is not None and threading.current_thread() in db._bg_threads:
                db.put(b"fill2", b"y" * 1200)  # from the flushing thread, after its directory sync
                db.put(b"c", b"3")  # lands in the WAL the switch created
                switched.set()
                for _ in range(500):  # hold the job until close() asked the threads to stop
                    if db._bg_shutdown:
                        break
                    threading.Event().wait(0.01)

    inner = MemoryFileSystem()
    db = antkv.open("db", file_system=SwitchDuringFlush(inner), max_background_jobs=1, write_buffer_size=1000,
                    max_write_buffer_number=4,  # the put in the flushing thread must not stall on it
                    enable_blob_files=False)
    db.put(b"a", b"1")
    state["db"] = db
    db.put(b"fill", b"x" * 1200)
    db.put(b"b", b"2")  # switches: the flush of the first memtable starts
    assert switched.wait(10)
    db.close()
    inner.crash("power")
    got = _reopen(inner, max_background_jobs=0)
    assert (got[b"a"], got[b"b"], got[b"c"]) == (b"1", b"2", b"3")


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_a_checkpoint_opens_with_every_acknowledged_write(config, tmp_path):
    """On the real file system: MemoryFileSystem cannot rename the checkpoint's directory."""
    opts = CONFIGS[config]
    with antkv.open(str(tmp_path / "db"), **opts) as db:
        db.put(b"a", b"value-one-long-enough")
        db.write(antkv.WriteBatch().put(b"b", b"unlogged-value-long"), disable_wal=True)
        db.delete_range(b"x", b"z")
        db.checkpoint(str(tmp_path / "cp"))
        db.put(b"c", b"after the checkpoint")
    with antkv.open(str(tmp_path / "cp"), create_if_missing=False, **opts) as cp:
        assert dict(cp.items()) == {b"a": b"value-one-long-enough", b"b": b"unlogged-value-long"}
        cp.verify()
