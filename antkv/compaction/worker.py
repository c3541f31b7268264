"""Worker processes: flush and compaction on another core.

CPython runs one thread at a time, so a background *thread* that flushes or compacts takes its
time from the writers.  A database on the operating system's file system therefore runs the
jobs of its background threads (:mod:`antkv.compaction.jobs`) in worker processes, one per background
thread, each started on first use with ``python -m antkv.compaction.worker_main`` (never ``multiprocessing``:
that would re-run the user's main module).  Jobs started from a user's thread (``compact_range``,
value-log GC) and every job under a simulated file system run in the calling thread, as does
everything when ``Options.background_process`` is off.

This module is the database's side; the worker process runs :mod:`antkv.compaction.worker_main`.

Protocol, over the worker's stdin/stdout (the worker's own ``sys.stdout`` goes to stderr)::

    frame   = u64 length (little-endian) | pickle of a tuple
    parent -> worker:  ("flush", path, TableOptions, memtable payload, snapshots, merge operator)
                       ("compact", path, TableOptions, CompactionJob)
                       ("number", n)            reply to a request
    worker -> parent:  ("number",)              "give me a new file number"
                       ("done", JobResult)
                       ("error", kind, args)    an antkv error, rebuilt in the parent

File numbers come from the database (its version set), so outputs never collide with its own
files.  The worker writes and syncs the output tables and the directory; the database logs them
to the MANIFEST, exactly as for a job run in-process.  If the worker dies or the pipe breaks,
the parent removes the files it handed numbers out for and runs the job itself; if no worker
can be started at all, the job runs in the calling thread (both logged and counted as
``worker_fallbacks``).

Lifetime: a worker must never write into the directory once its database's process is gone
(a new opener could hand out the same file numbers).  On Linux it asks the kernel to kill it
when the thread that started it ends (``PR_SET_PDEATHSIG``), which covers a crash of the
database's process, and it exits at once when its pipe breaks.  Elsewhere it also holds a
duplicate of the database's LOCK descriptor, so no other process can open the database until
the worker has finished its job and seen end-of-file.  (Not on Linux: there a restart right
after a crash would find the lock still held for the moments the kernel takes to kill the
worker.)  It exits when its stdin closes.
"""

from __future__ import annotations

import logging
import os
import pickle
import struct
import subprocess
import sys
import threading
from dataclasses import replace

from ..base.filenames import table_file_name
from ..base.merge_operator import is_builtin
from ..errors import CorruptionError, Error
from ..errors import IOError as AntIOError
from .jobs import (
    CompactionJob,
    JobResult,
    columnar_eligible,
    columnar_garbage,
    execute_compaction,
    execute_flush,
    memtable_payload,
    split_points,
)
from .outputs import OutputEnv, TableOptions

log = logging.getLogger("antkv")
_LEN = struct.Struct("<Q")
INLINE_FLUSH_ENTRIES = 50_000
"""A memtable of at most this many keys (and under half the write buffer) is flushed in the
background thread itself when its worker process is not running yet: starting a process costs
more CPU than flushing that many keys in-process (a flush's cost grows with its keys far more
than with their bytes).  ``python -m bench.bench_small --workloads shortjob fillrandom``
measures both sides: short jobs that flush small memtables, and a load whose flushes go to the
worker."""
HAS_PDEATHSIG = sys.platform.startswith("linux")


def send_frame(f, msg) -> None:
    data = pickle.dumps(msg, protocol=5)
    f.write(_LEN.pack(len(data)))
    f.write(data)
    f.flush()


def recv_frame(f):
    head = f.read(_LEN.size)
    if len(head) != _LEN.size:
        raise EOFError("worker pipe closed")
    n = _LEN.unpack(head)[0]
    data = f.read(n)
    if len(data) != n:
        raise EOFError("worker pipe closed mid-message")
    return pickle.loads(data)


def error_message(e: BaseException):
    if isinstance(e, CorruptionError):
        return ("error", "corruption", (str(e), e.path, e.offset))
    if isinstance(e, OSError):
        return ("error", "io", (e.errno, e.strerror or str(e), e.filename))
    return ("error", "other", (f"{type(e).__name__}: {e}",))


def rebuild_error(kind: str, args) -> Error:
    if kind == "corruption":
        message, path, offset = args
        err = CorruptionError.__new__(CorruptionError)
        Exception.__init__(err, message)
        err.path, err.offset = path, offset
        return err
    if kind == "io":
        code, message, path = args
        return AntIOError(message, OSError(code, message), path)
    return AntIOError(f"background worker failed: {args[0]}")


class WorkerDied(Exception):
    """The worker process is gone (killed, crashed, or its pipe broke)."""


class Worker:
    """One worker process, used by one thread at a time."""

    def __init__(self, lock_fd: int | None):
        # the directory holding the antkv package (antkv/compaction/worker.py, three levels up)
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = dict(os.environ)
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "antkv.compaction.worker_main", str(os.getpid())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            pass_fds=(lock_fd,) if lock_fd is not None and not HAS_PDEATHSIG else (),
            env=env,
        )

    def alive(self) -> bool:
        return self.proc.poll() is None

    def run(self, msg, new_file_number, handed_out: list[int]) -> JobResult:
        """Send job ``msg``; answer number requests; the result (or the job's error)."""
        try:
            send_frame(self.proc.stdin, msg)
            while True:
                reply = recv_frame(self.proc.stdout)
                if reply[0] == "number":
                    n = new_file_number()
                    handed_out.append(n)
                    send_frame(self.proc.stdin, ("number", n))
                elif reply[0] == "done":
                    return reply[1]
                elif reply[0] == "error":
                    raise rebuild_error(reply[1], reply[2])
                else:
                    raise WorkerDied(f"unexpected message {reply[0]!r}")
        except (EOFError, OSError, pickle.UnpicklingError, ValueError) as e:
            if isinstance(e, Error):
                raise
            self.close()
            raise WorkerDied(str(e)) from e

    def close(self) -> None:
        proc = self.proc
        try:
            proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        try:
            proc.stdout.close()
        except OSError:
            pass


class JobRunner:
    """Where one database's jobs run: a worker per background thread, or the calling thread."""

    def __init__(self, fs, path: str, options, new_file_number, open_table, lock_fd, in_background_thread):
        """``new_file_number()``: a fresh file number of the database; ``open_table(f)``: the
        reader of input table ``f``; ``lock_fd()``: the LOCK file's descriptor (None off the
        OS file system); ``in_background_thread()``: whether the caller is one of the
        database's background threads (only their jobs go to worker processes)."""
        self._fs = fs
        self._path = path
        self._options = options
        self._new_file_number = new_file_number
        self._open_table = open_table
        self._lock_fd = lock_fd
        self._in_background_thread = in_background_thread
        self._workers: dict[int, Worker] = {}  # thread ident -> its worker
        self._lock = threading.Lock()
        self.stats = {"worker_jobs": 0, "worker_restarts": 0, "worker_fallbacks": 0}

    def _env(self) -> OutputEnv:
        return OutputEnv(self._fs, self._path, TableOptions.of(self._options), self._new_file_number, {})

    def would_use_workers(self) -> bool:
        """Whether background jobs of this database would run in worker processes."""
        from ..fs.os_file_system import OSFileSystem

        o = self._options
        return (
            o.background_process and o.max_background_jobs > 0 and type(self._fs) is OSFileSystem
            and (o.merge_operator is None or is_builtin(o.merge_operator))
        )

    def start_worker(self) -> None:
        """Start the calling background thread's worker ahead of its first job (the flushing
        thread's, when the first memtable is half full; compaction workers start with the
        first compaction: a database may never need one).  If it cannot start, the jobs run
        in-process."""
        self._worker(0)

    def _uses_workers(self) -> bool:
        """Whether this thread's jobs go to worker processes."""
        from ..fs.os_file_system import OSFileSystem

        o = self._options
        return (
            o.background_process and type(self._fs) is OSFileSystem and self._in_background_thread()
            and (o.merge_operator is None or is_builtin(o.merge_operator))  # a user's may not pickle
        )

    def _worker(self, slot: int = 0) -> Worker | None:
        """This thread's worker number ``slot`` (started on first use), if jobs of this thread
        go to workers.  Always started from the background thread itself: the kernel ties its
        life to that thread."""
        if not self._uses_workers():
            return None
        ident = (threading.get_ident(), slot)
        with self._lock:
            w = self._workers.get(ident)
            if w is not None and not w.alive():
                self.stats["worker_restarts"] += 1
                w = None
            if w is None:
                try:
                    w = Worker(self._lock_fd())
                except (OSError, ValueError, subprocess.SubprocessError) as e:
                    # no process to hand the job to: the job runs in this thread instead
                    log.warning("antkv could not start a worker process (%s); running jobs in-process", e)
                    self.stats["worker_fallbacks"] += 1
                    return None
                self._workers[ident] = w
            return w

    def flush(self, mem, snapshots: list[int], bottommost: bool = False) -> JobResult:
        """Flush ``mem`` (:func:`~antkv.compaction.jobs.execute_flush`) in this thread's worker,
        or here when that is sooner: ``mem`` is small (:meth:`_small`) and the worker is not
        running, or a ``flush(wait=True)`` call waits for it.  A caller that waits writes
        nothing meanwhile, so its memtable is flushed in this process rather than shipped to
        the worker: serialising it there and back costs more than the flush itself
        (``python -m bench.bench_small --workloads fillrandom shortjob`` measures flushes both
        ways)."""
        op = self._options.merge_operator
        if mem.flush_waited:
            return execute_flush(mem, snapshots, self._env(), op, bottommost)
        w = self._running_worker() if self._small(mem) else self._worker()
        if w is not None:
            msg = ("flush", self._path, TableOptions.of(self._options), memtable_payload(mem), list(snapshots), op,
                   bottommost)
            result = self._in_worker(w, msg)
            if result is not None:
                return result
        return execute_flush(mem, snapshots, self._env(), op, bottommost)

    def _small(self, mem) -> bool:
        """Whether ``mem`` is cheaper to flush here than to start a worker process for: it never
        reached the point where the flushing thread starts its worker (half the write buffer)."""
        return len(mem.versions) <= INLINE_FLUSH_ENTRIES and mem.memory < self._options.write_buffer_size // 2

    def _running_worker(self) -> Worker | None:
        """This thread's worker if it is running already (never starts one)."""
        if not self._uses_workers():
            return None
        with self._lock:
            w = self._workers.get((threading.get_ident(), 0))
        return w if w is not None and w.alive() else None

    def compact(self, job: CompactionJob, relocate=None, readers=None) -> JobResult:
        """Run ``job``; ``readers`` (the DB's open readers of its inputs) let a big columnar job
        be split into subcompactions that run in parallel workers."""
        parts = self._subcompactions(job, relocate, readers)
        if parts > 1:
            cuts = split_points(readers, parts)
            if cuts:
                return self._compact_split(job, [None, *cuts, None])
        return self._compact_one(job, relocate, self._worker() if relocate is None else None)

    def _subcompactions(self, job: CompactionJob, relocate, readers) -> int:
        o = self._options
        if o.max_subcompactions < 2 or readers is None or not self._uses_workers():
            return 1
        if not columnar_eligible(job, readers, relocate):
            return 1
        # a part of at least half a target table is worth a worker of its own
        total = sum(f.size for _, f in job.inputs)
        return max(1, min(o.max_subcompactions, 2 * total // max(1, o.target_file_size_base)))

    def _compact_one(self, job: CompactionJob, relocate, w: Worker | None) -> JobResult:
        if w is not None:
            # table metadata travels without its open reader
            inputs = [(lvl, replace(f, reader=None, point=None)) for lvl, f in job.inputs]
            msg = ("compact", self._path, TableOptions.of(self._options), replace(job, inputs=inputs))
            result = self._in_worker(w, msg)
            if result is not None:
                return result
        return execute_compaction(job, self._env(), self._open_table, relocate)

    def _compact_split(self, job: CompactionJob, bounds: list) -> JobResult:
        """RocksDB's subcompactions: one columnar job per key range ``[bounds[i], bounds[i+1])``,
        each in its own worker, all at once; their outputs join in key order."""
        subjobs = [replace(job, lo=bounds[i], hi=bounds[i + 1]) for i in range(len(bounds) - 1)]
        workers = [self._worker(slot) for slot in range(len(subjobs))]
        results: list = [None] * len(subjobs)
        errors: list = [None] * len(subjobs)

        def run(i: int) -> None:
            try:
                results[i] = self._compact_one(subjobs[i], None, workers[i])
            except BaseException as e:  # noqa: BLE001 - re-raised below, after the others end
                errors[i] = e

        threads = [threading.Thread(target=run, args=(i,), name="antkv-subcompaction") for i in range(1, len(subjobs))]
        for t in threads:
            t.start()
        run(0)
        for t in threads:
            t.join()
        failed = next((e for e in errors if e is not None), None)
        if failed is not None:
            fs, path = self._fs, self._path
            for r in results:
                for t in r.tables if r is not None else ():
                    p = table_file_name(path, t.number)
                    if fs.exists(p):
                        fs.remove(p)
            raise failed
        tables = [t for r in results for t in r.tables]
        stats: dict[str, int] = {"subcompactions": len(subjobs)}
        for r in results:
            for name, n in r.stats.items():
                stats[name] = stats.get(name, 0) + n
        return JobResult(tables, columnar_garbage(job.inputs, tables), stats)

    def _in_worker(self, w: Worker, msg) -> JobResult | None:
        """The worker's result, or None when it died (its partial outputs are removed)."""
        handed_out: list[int] = []
        try:
            result = w.run(msg, self._new_file_number, handed_out)
        except WorkerDied as e:
            log.warning("antkv worker process failed (%s); running the job in-process", e)
            self.stats["worker_fallbacks"] += 1
            fs, path = self._fs, self._path
            for n in handed_out:
                p = table_file_name(path, n)
                if fs.exists(p):
                    fs.remove(p)
            return None
        self.stats["worker_jobs"] += 1
        return result

    def worker_processes(self) -> list:
        """The ``subprocess.Popen`` of every worker started so far (for tests and tools)."""
        with self._lock:
            return [w.proc for w in self._workers.values()]

    def close(self) -> None:
        with self._lock:
            workers, self._workers = list(self._workers.values()), {}
        for w in workers:
            w.close()
