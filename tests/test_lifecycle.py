"""Lifecycle edges under threads: what ``close()`` waits for, who may touch the active
value-log file, how the write buffer manager re-triggers flushes, what recovery counts as
garbage.  Each test reproduces a bug found by driving the engine from several threads.

Races are made deterministic where the engine lets a test stand between two steps: a
:class:`GateFileSystem` (the fault-injection wrapper over the real OS file system, which also
makes flush and compaction run in-process) holds one thread at a chosen file-system call until
the test releases it.  Where no such point exists, the test repeats the race enough times that
the bug showed every run before its fix.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time

import pytest

import antkv
from antkv.fs.fault import FaultInjectionFileSystem
from antkv.fs.os_file_system import OSFileSystem

BIG = 300  # bytes: above min_blob_size below, so values go to the value log


class GateFileSystem(FaultInjectionFileSystem):
    """The OS file system, with one gate: the first call for which ``predicate(op, path,
    thread_name)`` is true blocks until :meth:`release`; ``reached`` is set when it arrives."""

    def __init__(self):
        super().__init__(OSFileSystem.instance())
        self._predicate = None
        self.reached = threading.Event()
        self._open = threading.Event()

    def arm(self, predicate) -> None:
        self.reached.clear()
        self._open.clear()
        self._predicate = predicate

    def release(self) -> None:
        self._predicate = None
        self._open.set()

    def _hook(self, op, path, data=None, inner_file=None):
        pred = self._predicate
        if pred is not None and pred(op, path, threading.current_thread().name):
            self._predicate = None
            self.reached.set()
            self._open.wait(30)
        super()._hook(op, path, data, inner_file)


def _try(fn, *args) -> tuple[str, object]:
    """``("ok", result)`` or ``("error", exception)``: for the test to inspect."""
    try:
        return ("ok", fn(*args))
    except BaseException as e:  # noqa: BLE001
        return ("error", e)


def _start(target, *args) -> tuple[threading.Thread, list]:
    """Run ``target(*args)`` in a thread; its ``_try`` outcome lands in the returned list."""
    out: list = []
    t = threading.Thread(target=lambda: out.append(_try(target, *args)), daemon=True)
    t.start()
    return t, out


def _load(db, n, prefix=b"k", size=BIG):
    for i in range(n):
        db.put(prefix + b"%05d" % i, os.urandom(size))


# ---------------------------------------------------------------------------- write buffer manager


def test_shared_budget_with_stalls_never_hangs_a_writer(tmp_path):
    """Two databases share a 128 KiB budget with allow_stall; B takes one tiny write and then
    idles.  The manager must flush the database that holds the memory (A), and keep asking for
    flushes while a writer is stalled, instead of flushing B once and waiting forever."""
    wbm = antkv.WriteBufferManager(128 * 1024, allow_stall=True)
    a = antkv.open(str(tmp_path / "a"), write_buffer_manager=wbm)
    b = antkv.open(str(tmp_path / "b"), write_buffer_manager=wbm)
    b.put(b"x", b"y")
    t, out = _start(_load, a, 2000, b"k", 1000)
    t.join(60)
    assert not t.is_alive(), f"writer stalled forever: memory_usage {wbm.memory_usage} > {wbm.buffer_size}"
    assert out == [("ok", None)]
    assert a.get(b"k01999") is not None and b.get(b"x") == b"y"
    a.close()
    b.close()


# ---------------------------------------------------------------------------- close() against jobs


@pytest.mark.parametrize("job", ["compact_range", "gc_value_log"])
def test_close_during_a_user_thread_job_leaves_the_next_opener_intact(tmp_path, job):
    """close() while another thread runs compact_range() or gc_value_log(): once close()
    returns, the closed handle must write and delete nothing, so a second opener is safe."""
    fs = GateFileSystem()
    path = str(tmp_path / "db")
    # inline mode: no background compaction relocates the files before the job under test does
    opts = dict(file_system=fs, write_buffer_size=32 * 1024, min_blob_size=200, blob_file_size=16 * 1024,
                blob_gc_threshold=0.2, max_background_jobs=0)
    # every third value overwritten and compacted with GC held off: the first value-log files
    # are a third garbage (GC has work); a fresh L0 table on top gives compact_range work too
    db = antkv.open(path, **{**opts, "blob_gc_threshold": 1.0})
    expected = {}
    for i in list(range(300)) + list(range(0, 300, 3)) + [None] + list(range(0, 300, 5)):
        if i is None:
            db.flush()
            db.compact_range()
            continue
        k, v = b"k%05d" % i, os.urandom(BIG)
        db.put(k, v)
        expected[k] = v
    db.close()
    db = antkv.open(path, **opts)
    db.flush()
    fs.arm(lambda op, p, th: op == "create" and (p.endswith(".sst") or p.endswith(".vlog")) and th != "closer")
    worker, out = _start(getattr(db, job))
    assert fs.reached.wait(30), f"{job} never wrote a file"
    closer = threading.Thread(target=db.close, name="closer", daemon=True)
    closer.start()
    closer.join(0.5)
    if not closer.is_alive():
        # close() returned while the job is held: the job must not touch the files of the
        # next opener once released
        db2 = antkv.open(path, **{**opts, "file_system": OSFileSystem.instance()})
        fs.release()
        worker.join(30)
        assert dict(db2.items()) == expected
        db2.close()
    else:
        fs.release()  # close() waits for the job: let it finish
        closer.join(30)
        worker.join(30)
        assert not closer.is_alive() and not worker.is_alive()
    assert len(out) == 1
    if out[0][0] == "error":
        assert isinstance(out[0][1], antkv.DBClosedError), out[0][1]
    for _ in range(2):
        with antkv.open(path) as db3:
            assert dict(db3.items()) == expected
            db3.verify()


def test_disable_wal_writes_racing_close_fail_or_survive(tmp_path):
    """A write acknowledged without the WAL is made durable by a clean close(); one that races
    close() must either raise DBClosedError or be there after reopen."""
    path = str(tmp_path / "db")
    db = antkv.open(path)
    acked: list[bytes] = []
    wo = antkv.WriteOptions(disable_wal=True)

    def writer():
        i = 0
        while True:
            k = b"k%08d" % i
            try:
                db.put(k, b"v%d" % i, write_options=wo)
            except antkv.DBClosedError:
                return
            acked.append(k)
            i += 1

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    while len(acked) < 2000:
        time.sleep(0.005)
    db.close()
    t.join(30)
    assert not t.is_alive()
    with antkv.open(path) as db:
        missing = [k for k in acked if db.get(k) is None]
    assert not missing, f"{len(missing)} of {len(acked)} acknowledged writes lost"


def test_scan_racing_close_raises_only_antkv_errors(tmp_path):
    """A scan of large values (read ahead on a thread pool) racing close() ends normally or
    with DBClosedError, never a raw RuntimeError from the pool."""
    path = str(tmp_path / "db")
    for round_ in range(15):
        db = antkv.open(path, min_blob_size=100, blob_readahead=4)
        if round_ == 0:
            _load(db, 3000, size=150)
            db.flush()
        errors: list[BaseException] = []

        def scan():
            try:
                for _ in range(50):
                    for _kv in db.items():
                        pass
            except antkv.DBClosedError:
                pass
            except BaseException as e:  # noqa: BLE001
                errors.append(e)

        t = threading.Thread(target=scan, daemon=True)
        t.start()
        time.sleep(0.01 * (round_ % 5))
        db.close()
        t.join(30)
        assert not errors, repr(errors[0])


def test_tables_pinned_by_open_iterators_go_at_close(tmp_path, caplog):
    """Tables a compaction made obsolete while an iterator pinned them are deleted by close(),
    not left for the next open to remove with a warning about an interrupted job."""
    path = str(tmp_path / "db")
    opts = dict(write_buffer_size=16 * 1024, max_background_jobs=0)
    for cycle in range(3):
        db = antkv.open(path, **opts)
        _load(db, 500, b"c%d-" % cycle, 50)
        db.flush()
        it = db.iterator()
        it.seek_to_first()
        assert it.valid()
        db.compact_range()
        db.close()  # the iterator is still open
        with caplog.at_level(logging.WARNING, logger="antkv"):
            caplog.clear()
            db = antkv.open(path, **opts)
            removed = [r for r in db.stats()["files_removed_at_open"] if ".sst" in r or ".vlog" in r]
            db.close()
        assert removed == [], f"left on disk by close(): {removed}"
        assert not [r for r in caplog.records if "interrupted" in r.getMessage()]
        with pytest.raises(antkv.DBClosedError):
            it.next()


# ---------------------------------------------------------------------------- the value log


def test_background_flush_never_syncs_a_sealed_value_log_file(tmp_path):
    """A background flush held in its sync of the active value-log file while a writer keeps
    writing and rotating it: the flush must sync what its memtable points into without touching
    the writer's state.  (The sync holds the file's lock, so a writer's next record waits for
    it; the race of a writer sealing the file between the flush taking it and syncing it is
    ``test_syncing_a_just_sealed_value_log_file_is_a_no_op`` below.)"""
    fs = GateFileSystem()
    path = str(tmp_path / "db")
    db = antkv.open(path, file_system=fs, write_buffer_size=16 * 1024, min_blob_size=100, blob_file_size=8 * 1024)
    fs.arm(lambda op, p, th: op == "sync" and p.endswith(".vlog") and th.startswith("antkv-flush"))

    def hold_then_release():  # a writer waiting on the held sync waits this long, not the gate's 30 s
        if fs.reached.wait(60):
            time.sleep(0.5)
        fs.release()

    releaser = threading.Thread(target=hold_then_release, daemon=True)
    releaser.start()
    i = 0
    while not fs.reached.is_set() and i < 5000:
        db.put(b"k%05d" % i, os.urandom(200))
        i += 1
    assert fs.reached.is_set(), "no background flush synced the value log"
    _load(db, 100, b"r", 200)  # rotates the active file (8 KiB)
    releaser.join()
    db.flush()
    _load(db, 100, b"s", 200)
    db.close()
    with antkv.open(path) as db:
        assert db.get(b"r00099") is not None and db.get(b"s00099") is not None


def test_syncing_a_just_sealed_value_log_file_is_a_no_op(tmp_path):
    """The race behind a background flush turning the database read-only: the flush took the
    active writer, a writer sealed it (rotation) before the flush's sync() ran.  Sealing made
    every record durable, so that sync() must succeed, not refuse a sealed file."""
    from antkv.vlog.writer import ValueLogWriter

    fs = OSFileSystem.instance()
    w = ValueLogWriter.create_in(fs, str(tmp_path), 7)
    w.add(b"k", b"v" * 100)
    w.seal()
    w.sync()  # what the flush does after losing the race
    w.close()
    with pytest.raises(antkv.InvalidArgumentError):
        w.add(b"k2", b"v")


CHILD = r"""
import os, sys, antkv
db = antkv.open(sys.argv[1], min_blob_size=100)
db.put(b"a", b"x" * 5000)
db.put(b"lost", b"y" * 5000, write_options=antkv.WriteOptions(disable_wal=True))
db._vlog.sync()
os._exit(0)  # dies without close(): the second record is in the value log, not in the WAL
"""


def test_value_log_record_that_never_became_durable_is_garbage(tmp_path):
    """After a process death, a value-log record no WAL record points to counts as garbage,
    so deleting every key and collecting frees the file."""
    path = str(tmp_path / "db")
    subprocess.run([sys.executable, "-c", CHILD, path], check=True)
    with antkv.open(path, min_blob_size=100) as db:
        assert db.get(b"lost") is None and db.get(b"a") == b"x" * 5000
        db.delete(b"a")
        db.flush()
        db.compact_range()
        db.gc_value_log()
        vlogs = db.stats()["vlog_files"]
        # every sealed file left is 100% garbage (it goes once no reader pins it); before the
        # fix the crashed file stayed at half garbage forever
        stuck = [f for f in vlogs if f["sealed"] and f["garbage_bytes"] < f["total_bytes"]]
        assert not stuck, f"value-log files that can never be collected: {vlogs}"


@pytest.fixture
def tiny_switch_interval():
    """Switch threads every microsecond: the races below need a thread switch between two
    bytecodes, which the default 5 ms interval makes rare."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(old)


def _rotating_writer(db, stop: threading.Event) -> threading.Thread:
    """Writes 400-byte values into 1 KiB value-log files: a rotation every other write."""

    def run():
        i = 0
        while not stop.is_set():
            db.put(b"k%06d" % i, os.urandom(400))
            i += 1

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


class _LateLock:
    """The database's write lock; before one thread takes it, ``meanwhile()`` runs: that thread
    loses the race for the lock to whatever ``meanwhile`` does, every time."""

    def __init__(self, lock, late_thread, meanwhile):
        self._lock, self._late, self._meanwhile = lock, late_thread, meanwhile
        self._inside = False

    def acquire(self, blocking=True, timeout=-1):
        if blocking and threading.current_thread() is self._late and not self._inside:
            self._inside = True
            try:
                self._meanwhile()
            finally:
                self._inside = False
        return self._lock.acquire(blocking, timeout)

    def release(self):
        self._lock.release()

    def __enter__(self):
        self.acquire()

    def __exit__(self, *exc):
        self.release()


class _SlowValuesDict(dict):
    """A dict whose ``values()`` walks the live dict slowly, so a writer changing it meanwhile
    is seen (RuntimeError: dictionary changed size during iteration)."""

    def values(self):
        for v in dict.values(self):
            time.sleep(0.0005)
            yield v


def test_verify_during_writes_sees_a_healthy_database(tmp_path):
    """verify() read which file is active, then (under the lock) the active writer's size: a
    rotation in between -- here, writes that fill the active file, made just before verify()
    takes the lock -- made it check the old file against the new file's length."""
    db = antkv.open(str(tmp_path / "db"), min_blob_size=100, blob_file_size=1024)
    n = iter(range(10**6))
    # six writes of uneven sizes: at least one rotation, and record ends that do not line up
    # with the old file's
    fill = lambda: [db.put(b"k%06d" % i, os.urandom(200 + 37 * (i % 7))) for i in [next(n) for _ in range(6)]]  # noqa: E731
    real_lock = db._write_lock
    db._write_lock = _LateLock(real_lock, threading.current_thread(), fill)
    try:
        for _ in range(20):
            db.verify()
    finally:
        db._write_lock = real_lock
        db.close()


def test_property_during_writes_raises_nothing(tmp_path, tiny_switch_interval):
    """Properties summed over the value-log files while a writer rotated them (adding one to
    the dict being walked)."""
    db = antkv.open(str(tmp_path / "db"), min_blob_size=100, blob_file_size=1024)
    db._versions.vlogs = _SlowValuesDict(db._versions.vlogs)
    stop = threading.Event()
    t = _rotating_writer(db, stop)
    try:
        for _ in range(100):
            db.property("antkv.live-blob-file-size")
            db.property("antkv.num-blob-files")
        db.property("antkv.stats")
    finally:
        stop.set()
        t.join(60)
        db.close()


def test_checkpoint_while_an_iterator_releases_the_last_reference_to_a_value_log_file(tmp_path):
    """checkpoint() copies the value-log files its own pinned version references; a file that
    only an iterator kept alive may be deleted meanwhile without failing the checkpoint."""
    fs = GateFileSystem()
    path = str(tmp_path / "db")
    db = antkv.open(path, file_system=fs, max_background_jobs=0, min_blob_size=100, blob_file_size=4 * 1024,
                    blob_gc_threshold=0.5)
    _load(db, 100, b"old", 200)
    db.flush()
    it = db.iterator()
    it.seek_to_first()  # pins the current value-log files
    for i in range(100):
        db.delete(b"old%05d" % i)
    _load(db, 40, b"new", 200)
    db.flush()
    db.compact_range()
    db.gc_value_log()  # every "old" file is now 100% garbage, kept alive only by the iterator
    fs.arm(lambda op, p, th: op == "link")
    expected = dict(db.items())
    ck, out = _start(db.checkpoint, str(tmp_path / "ck"))
    assert fs.reached.wait(30)
    it.close()
    db.put(b"zz", b"1")
    db.flush()  # deletes what only the iterator kept alive, while the checkpoint is held
    fs.release()
    ck.join(30)
    assert out == [("ok", None)], out
    with antkv.open(str(tmp_path / "ck")) as c:
        assert dict(c.items()) == expected
        c.verify()
    db.close()


def test_two_checkpoints_into_one_directory(tmp_path):
    db = antkv.open(str(tmp_path / "db"))
    _load(db, 200)
    target = str(tmp_path / "ck")
    results = []
    threads = [threading.Thread(target=lambda: results.append(_try(db.checkpoint, target))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(r[0] for r in results) == ["error", "ok"], results
    err = next(r[1] for r in results if r[0] == "error")
    assert isinstance(err, antkv.InvalidArgumentError), err
    with antkv.open(target) as c:
        assert dict(c.items()) == dict(db.items())
    db.close()


# ---------------------------------------------------------------------------- open-time checks


def test_fewer_levels_than_the_database_uses_is_an_invalid_argument(tmp_path):
    path = str(tmp_path / "db")
    with antkv.open(path, num_levels=3, max_background_jobs=0, write_buffer_size=8 * 1024,
                    max_bytes_for_level_base=8 * 1024, target_file_size_base=4 * 1024) as db:
        _load(db, 600, size=60)
        db.compact_range()
        assert db.property("antkv.num-files-at-level2") != "0"
    with pytest.raises(antkv.InvalidArgumentError, match="num_levels"):
        antkv.open(path, num_levels=2)
    with antkv.open(path, num_levels=3) as db:
        assert db.get(b"k00599") is not None


def test_snapshot_released_from_two_threads(tmp_path, tiny_switch_interval):
    """Two snapshots share a sequence; one is released by two threads at once.  It must drop
    its sequence once: a second removal raised or dropped the other snapshot's protection."""
    with antkv.open(str(tmp_path / "db")) as db:
        for _ in range(300):
            keep = db.snapshot()
            snap = db.snapshot()
            errors: list[BaseException] = []
            barrier = threading.Barrier(2)

            def release():
                barrier.wait()
                try:
                    snap.release()
                except BaseException as e:  # noqa: BLE001 - checked below
                    errors.append(e)

            ts = [threading.Thread(target=release) for _ in range(2)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            assert not errors, errors[0]
            assert db.stats()["live_snapshots"] == 1
            keep.release()
