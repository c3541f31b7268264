"""Background jobs in worker processes (antkv.compaction.worker), on the real file system.

The workers are real processes; failures are real too: a worker killed in the middle of a job
(the job reruns in-process and its partial outputs are removed), a corrupt input table (the
error reaches the database with its file name), and the database's process killed while a
worker runs (the kernel kills the worker, and the database reopens with every write).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import antkv


def _opts(**kw):
    base = dict(write_buffer_size=64 * 1024, level0_file_num_compaction_trigger=2, target_file_size_base=32 * 1024)
    base.update(kw)
    return base


def _settle(db) -> None:
    db.flush(wait=False)  # nobody waits for the flush itself: it goes to the worker (JobRunner.flush)
    db._wait_for_background(lambda: not db._imms and db._bg_running == 0 and not db._has_work())


def _fill(db, n: int, model: dict, tag: bytes = b"") -> None:
    for i in range(n):
        k = b"key%06d" % ((i * 7919) % n)
        v = tag + b"value%d-" % i * 8
        db.put(k, v)
        model[k] = v
        if i % 97 == 0:
            db.delete(b"key%06d" % i)
            model.pop(b"key%06d" % i, None)


def _check(db, model: dict) -> None:
    assert dict(db.items()) == model
    for k in list(model)[::50]:
        assert db.get(k) == model[k]


def test_flush_and_compaction_run_in_workers_and_give_the_same_data(tmp_path):
    model: dict = {}
    db = antkv.open(str(tmp_path / "db"), **_opts())
    _fill(db, 20_000, model)
    _settle(db)
    st = db._jobs.stats
    assert st["worker_jobs"] >= 4 and st["worker_fallbacks"] == 0
    assert db.stats()["compactions"] >= 1
    assert db._stats.get("subcompactions", 0) >= 2  # big compactions were split across workers
    workers = db._jobs.worker_processes()
    assert len(workers) == 3  # flush thread: 1; compaction thread: max_subcompactions (2)
    _check(db, model)
    db.close()
    assert all(p.poll() is not None for p in workers)  # closed with the database
    db = antkv.open(str(tmp_path / "db"), **_opts())
    assert [f for f in db.stats()["files_removed_at_open"] if ".sst" in f] == []
    _check(db, model)
    db.verify()
    db.close()


def test_workers_start_when_the_first_memtable_is_half_full(tmp_path):
    """The flushing thread starts its worker ahead of the first flush, once the first memtable
    reaches half the write buffer (not before: a small database starts none); the compacting
    thread's workers start with the first compaction."""
    db = antkv.open(str(tmp_path / "db"), **_opts(write_buffer_size=256 * 1024))
    value = b"v" * 100
    n = 0
    while db._mem.memory < 100 * 1024:
        db.put(b"k%06d" % n, value)
        n += 1
    time.sleep(0.2)
    assert db._jobs.worker_processes() == []
    while db._mem.memory < 128 * 1024:
        db.put(b"k%06d" % n, value)
        n += 1
    db.put(b"k%06d" % n, value)  # the write that finds the memtable half full
    deadline = time.monotonic() + 30
    while not db._jobs.worker_processes() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(db._jobs.worker_processes()) == 1
    assert db.stats()["flushes"] == 0 and db._write_buffer_size == 256 * 1024
    _settle(db)
    assert db._jobs.stats["worker_jobs"] >= 1 and len(db._jobs.worker_processes()) == 1
    assert db.get(b"k%06d" % n) == value
    db.close()


def test_a_small_memtable_is_flushed_without_starting_a_worker(tmp_path):
    """A short job (open, a few writes, flush, close) never starts a process: a memtable that
    did not reach the warm-up point is flushed by the background thread itself.  Once the
    worker runs, flushes go to it whatever their size -- except one a ``flush(wait=True)``
    call waits for, which the background thread runs itself (no shipping to the worker)."""
    db = antkv.open(str(tmp_path / "db"))  # default options: a 64 MiB write buffer
    model: dict = {}
    _fill(db, 1000, model)
    db.flush()
    assert db.stats()["flushes"] == 1 and db._jobs.worker_processes() == []
    assert db._jobs.stats["worker_jobs"] == 0
    _check(db, model)
    db.close()
    no_compactions = dict(level0_file_num_compaction_trigger=100, level0_slowdown_writes_trigger=1000,
                          level0_stop_writes_trigger=1000)  # worker_jobs counts flushes only
    db = antkv.open(str(tmp_path / "db2"), **_opts(write_buffer_size=256 * 1024, **no_compactions))
    n = 0
    while not db._jobs.worker_processes():  # past the warm-up point: the worker starts
        db.put(b"k%06d" % n, b"v" * 100)
        n += 1
    _settle(db)
    jobs = db._jobs.stats["worker_jobs"]
    db.put(b"small", b"x")
    _settle(db)
    assert db._jobs.stats["worker_jobs"] == jobs + 1
    flushes = db.stats()["flushes"]
    for i in range(500):  # ~170 KB: fits the 256 KiB buffer, so only flush() switches
        db.put(b"waited%05d" % i, b"w" * 100)
    db.flush()  # waited for: flushed by the background thread itself
    assert db.stats()["flushes"] == flushes + 1 and db._jobs.stats["worker_jobs"] == jobs + 1
    assert db.get(b"small") == b"x" and db.get(b"k%06d" % (n - 1)) == b"v" * 100
    assert db.get(b"waited00499") == b"w" * 100
    db.close()


def test_a_worker_that_cannot_start_leaves_the_jobs_in_process(tmp_path, monkeypatch):
    """No process can be started (here: no interpreter at sys.executable): the background
    threads run their jobs themselves, and every write stays readable."""
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-such-python"))
    model: dict = {}
    db = antkv.open(str(tmp_path / "db"), **_opts())
    _fill(db, 5_000, model)
    _settle(db)
    assert db._jobs.stats["worker_fallbacks"] >= 1 and db._jobs.stats["worker_jobs"] == 0
    assert db._jobs.worker_processes() == []
    assert db.stats()["flushes"] >= 2 and db.stats()["compactions"] >= 1
    _check(db, model)
    db.close()


def test_background_process_off_runs_jobs_in_threads(tmp_path):
    model: dict = {}
    db = antkv.open(str(tmp_path / "db"), **_opts(background_process=False))
    _fill(db, 5_000, model)
    _settle(db)
    assert db._jobs.stats["worker_jobs"] == 0 and not db._jobs._workers
    _check(db, model)
    db.close()


def test_a_worker_killed_mid_job_is_replaced_and_the_job_rerun(tmp_path):
    """The compaction worker is SIGKILLed when it asks for its second output file number (its
    first output table is on disk by then): the job reruns in-process, that table is removed,
    and the next job starts a new worker."""
    model: dict = {}
    db = antkv.open(str(tmp_path / "db"), **_opts())
    jobs = db._jobs
    real_new_number = jobs._new_file_number
    calls = []

    def kill_on_second_compaction_request():
        if threading.current_thread().name.startswith("antkv-compaction"):
            calls.append(1)
            if len(calls) == 2:
                w = jobs._workers[(threading.get_ident(), 0)]  # slot 0 talks in this thread
                w.proc.kill()
                w.proc.wait()
        return real_new_number()

    jobs._new_file_number = kill_on_second_compaction_request
    _fill(db, 20_000, model)
    _settle(db)
    assert len(calls) > 2
    assert jobs.stats["worker_fallbacks"] == 1
    assert jobs.stats["worker_restarts"] == 1  # the next compaction started a new worker
    _check(db, model)
    db.close()
    db = antkv.open(str(tmp_path / "db"), **_opts())
    assert [f for f in db.stats()["files_removed_at_open"] if ".sst" in f] == []  # the partial output was removed
    _check(db, model)
    db.close()


def test_a_corrupt_input_table_fails_the_worker_job_with_corruption(tmp_path):
    path = str(tmp_path / "db")
    db = antkv.open(path, **_opts(level0_file_num_compaction_trigger=100, level0_slowdown_writes_trigger=1000,
                                  level0_stop_writes_trigger=1000))
    model: dict = {}
    _fill(db, 4_000, model)
    db.flush()
    _fill(db, 4_000, model, tag=b"again")
    db.flush()
    db.close()
    tables = sorted(n for n in os.listdir(path) if n.endswith(".sst"))
    victim = os.path.join(path, tables[0])
    with open(victim, "r+b") as f:
        f.seek(10)
        b = f.read(1)
        f.seek(10)
        f.write(bytes([b[0] ^ 0xFF]))
    db = antkv.open(path, **_opts(level0_file_num_compaction_trigger=2))
    deadline = time.monotonic() + 60
    while db._bg_error is None and time.monotonic() < deadline:
        time.sleep(0.01)
    err = db._bg_error
    assert isinstance(err, antkv.CorruptionError), err
    assert tables[0] in str(err) and err.path == victim
    assert db._jobs.stats["worker_fallbacks"] == 0
    try:
        db.put(b"k", b"v")
        raise AssertionError("a database with a background error accepted a write")
    except antkv.Error:
        pass
    db.close()


_CHILD = textwrap.dedent(
    """
    import sys, time, antkv
    db = antkv.open(sys.argv[1], write_buffer_size=64 * 1024, level0_file_num_compaction_trigger=2,
                    target_file_size_base=32 * 1024)
    i = 0
    while True:
        db.put(b"key%08d" % i, b"v" * 200, sync=(i % 100 == 0))
        if i % 100 == 0:
            print(i, flush=True)  # acknowledged: synced
        workers = [p.pid for p in db._jobs.worker_processes() if p.poll() is None]
        if workers and i > 3000:
            print("workers", *workers, flush=True)
            time.sleep(30)
        i += 1
    """
)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_killing_the_database_process_kills_its_workers(tmp_path):
    path = str(tmp_path / "db")
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, path], stdout=subprocess.PIPE, text=True)
    acked = -1
    workers: list[int] = []
    for line in proc.stdout:
        parts = line.split()
        if parts[0] == "workers":
            workers = [int(p) for p in parts[1:]]
            break
        acked = int(parts[0])
    assert workers, "the database never started a worker"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in workers) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not any(_alive(p) for p in workers)
    db = antkv.open(path)
    for i in range(0, acked + 1, 37):
        assert db.get(b"key%08d" % i) == b"v" * 200
    db.close()
