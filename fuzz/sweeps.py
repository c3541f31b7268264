"""Robustness sweeps: corrupted files, failing file-system calls, SIGKILLed processes.

    python -m fuzz.sweeps --seconds 600                 # all three sweeps, time shared
    python -m fuzz.sweeps --only corruption             # the full byte-flip sweep
    python -m fuzz.sweeps --only io --seed 7            # I/O-error sweep from seed 7
    python -m fuzz.sweeps --only blackbox --seconds 120 # SIGKILL rounds for two minutes
    python -m fuzz.sweeps --corruption-case 3:000012.sst:flip01:417     # one mutation

Three sweeps, each deterministic given its seed (the blackbox one up to the moment of the
kill), each printing a one-line reproducer on failure:

**Corruption.** A small database (tables on several levels, sealed and active value-log files,
a WAL holding unflushed records, a MANIFEST, CURRENT) is built on a ``MemoryFileSystem``.
Every file is then damaged -- each byte XOR 0x01 and XOR 0xFF, and truncation at many
offsets -- one mutation at a time on a fresh copy.  After each the database is opened, every
key is read with ``get`` and scanned forward and backward.  Allowed outcomes:

* an ``antkv.Error`` (``CorruptionError`` is the expected one; others are counted apart);
* the correct state;
* the *torn-tail rule*: damage to the last record of the WAL, or truncation of the WAL,
  drops the damaged record and everything after it; damage to the tail of the active
  (unsealed) value-log file drops the WAL records pointing into the lost part and everything
  after them.  The state is then exactly that prefix of the history.

Never a wrong value, never an exception outside ``antkv.Error``.  Every answer read before an
error must also agree with an allowed state.

**I/O errors.** A workload runs on a ``FaultInjectionFileSystem`` armed with
``fail_at(n, persistent)`` for n = 1, 2, ... through one chosen operation (put with and
without sync, flush, compaction, value-log GC, checkpoint, open).  The failing operation
must raise an ``antkv.Error``; ``close()`` must return without hanging or raising anything
but an ``antkv.Error``; reopening on the same inner file system without faults must give a
database that passes ``verify()`` and holds the state from before or after the failed
operation.

**Blackbox kill.** A child process (``python -m fuzz.blackbox_child DIR SEED``) runs a random
workload on the real file system and logs ``pending``/``acked`` lines; the parent SIGKILLs
it at a random moment, reopens the directory and checks that every key holds its last
acknowledged value or the value of the write in flight.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass

import antkv
from antkv.record.batch import decode_batch
from antkv.base.dbformat import VALUE_POINTER
from antkv.fs.fault import FaultInjectionFileSystem
from antkv.fs.memory import MemoryFileSystem
from antkv.record.log_format import LogReader
from antkv.record.wal import HEADER_RECORD_SIZE, is_header_record
from antkv.base.filenames import parse_file_name
from antkv.vlog.pointer import decode_pointer
from antkv.vlog.reader import ValueLogScan

DB = "db"

# ---------------------------------------------------------------------------------------------
# Corruption sweep
# ---------------------------------------------------------------------------------------------

CORRUPTION_OPTIONS = dict(
    max_background_jobs=0,
    write_buffer_size=16 * 1024,  # flushes are explicit: the WAL keeps phase 2
    block_size=96,
    target_file_size_base=700,
    max_bytes_for_level_base=1500,
    level0_file_num_compaction_trigger=3,
    num_levels=4,
    min_blob_size=60,
    blob_file_size=1200,
    blob_gc_threshold=1.0,
    max_manifest_file_size=64 * 1024,
)


@dataclass
class CorruptionDB:
    """A built database and what the oracle needs to judge a damaged copy of it."""

    seed: int
    options: dict
    files: dict[str, bytes]  # name -> bytes, every file of the directory
    keys: list[bytes]  # every key ever written, plus a few never written
    full: dict[bytes, bytes]  # the state of the whole acknowledged history
    wal_name: str | None  # the one WAL holding records
    wal_records: list[tuple[int, int, list]]  # (start, end, ops) of each WAL record
    wal_states: list[dict]  # wal_states[k] = the state with only the first k WAL records
    active_vlog: str | None  # name of the unsealed value-log file


def _apply(model: dict, ops) -> None:
    for op in ops:
        if op[0] == "put":
            model[op[1]] = op[2]
        elif op[0] == "delete":
            model.pop(op[1], None)
        else:
            for k in [k for k in model if op[1] <= k < op[2]]:
                del model[k]


def _write(db, ops, sync: bool = False) -> None:
    if len(ops) == 1:
        op = ops[0]
        if op[0] == "put":
            db.put(op[1], op[2], sync=sync)
        elif op[0] == "delete":
            db.delete(op[1], sync=sync)
        else:
            db.delete_range(op[1], op[2], sync=sync)
        return
    b = antkv.WriteBatch()
    for op in ops:
        if op[0] == "put":
            b.put(op[1], op[2])
        elif op[0] == "delete":
            b.delete(op[1])
        else:
            b.delete_range(op[1], op[2])
    db.write(b, sync=sync)


def _random_write(rng: random.Random, keys: list[bytes]) -> list[tuple]:
    """One write (a single op or a batch) with inline and separated values."""
    def one():
        r = rng.random()
        k = rng.choice(keys)
        if r < 0.7:
            size = rng.choice([0, 3, 20, 59, 60, 100, 250])
            return ("put", k, rng.randbytes(size))
        if r < 0.88:
            return ("delete", k)
        a, b = sorted(rng.sample(keys, 2))
        return ("delete_range", a, b)
    if rng.random() < 0.2:
        return [one() for _ in range(rng.randint(2, 4))]
    return [one()]


def snapshot_files(fs: MemoryFileSystem, directory: str = DB) -> dict[str, bytes]:
    return {name: fs.read_all(os.path.join(directory, name)) for name in fs.listdir(directory)}


def restore_files(files: dict[str, bytes], directory: str = DB) -> MemoryFileSystem:
    fs = MemoryFileSystem()
    fs.mkdirs(directory)
    for name, data in files.items():
        fs.write_all(os.path.join(directory, name), data, sync=True)
    fs.sync_dir(directory)
    return fs


def build_corruption_db(seed: int = 0) -> CorruptionDB:
    """Tables on several levels, sealed and active value logs, a WAL with records, closed."""
    rng = random.Random(seed)
    keys = [b"k%02d" % i for i in range(28)] + [b""]
    fs = MemoryFileSystem()
    db = antkv.open(DB, file_system=fs, **CORRUPTION_OPTIONS)
    model: dict = {}
    # phase 1: flushed and compacted history -> tables on the bottom and upper levels
    for round_ in range(3):
        for _ in range(30):
            ops = _random_write(rng, keys)
            _write(db, ops)
            _apply(model, ops)
        db.flush()
        if round_ == 1:
            db.compact_range()
    # phase 2: writes that stay in the WAL (none may trigger a flush)
    wal_ops: list[list] = []
    base = dict(model)
    for _ in range(9):
        ops = _random_write(rng, keys)
        _write(db, ops, sync=rng.random() < 0.5)
        _apply(model, ops)
        wal_ops.append(ops)
    levels = [int(db.property(f"antkv.num-files-at-level{i}") or 0) for i in range(4)]
    active = db._vlog.file_number if db._vlog is not None else None  # oracle only: whitebox
    db.close()
    files = snapshot_files(fs)
    assert sum(1 for lv in levels if lv) >= 2, f"build wanted tables on several levels, got {levels}"
    wals = []
    for name in sorted(files):
        parsed = parse_file_name(name)
        if parsed and parsed[0] == "log" and len(files[name]) > HEADER_RECORD_SIZE:
            wals.append(name)
    assert len(wals) == 1, f"build wanted one WAL with records, got {wals}"
    wal_name = wals[0]
    records = []
    for offset, payload in LogReader(files[wal_name], wal_name):
        _, ops = decode_batch(payload, wal_name, offset)
        if is_header_record(offset, ops):
            continue
        records.append((offset, offset + 16 + len(payload), ops))
    assert len(records) == len(wal_ops), (len(records), len(wal_ops))
    states = [dict(base)]
    m = dict(base)
    for ops in wal_ops:
        _apply(m, ops)
        states.append(dict(m))
    assert states[-1] == model
    return CorruptionDB(
        seed=seed,
        options=dict(CORRUPTION_OPTIONS),
        files=files,
        keys=keys + [b"k", b"k99", b"\xff"],
        full=model,
        wal_name=wal_name,
        wal_records=records,
        wal_states=states,
        active_vlog=None if active is None else f"{active:06d}.vlog",
    )


@dataclass(frozen=True)
class Mutation:
    """One damage to one file: ``kind`` is flip01, flipFF or truncate; ``offset`` a byte."""

    name: str
    kind: str
    offset: int

    def apply(self, data: bytes) -> bytes:
        if self.kind == "truncate":
            return data[: self.offset]
        x = 0x01 if self.kind == "flip01" else 0xFF
        return data[: self.offset] + bytes([data[self.offset] ^ x]) + data[self.offset + 1 :]

    def spec(self, seed: int) -> str:
        return f"{seed}:{self.name}:{self.kind}:{self.offset}"


def mutations(cdb: CorruptionDB, stride_over: int | None = None, truncations: int | None = None) -> list[Mutation]:
    """Every mutation of every file.  ``stride_over``: flip every byte of files up to that
    size, and a deterministic stride over bigger ones; ``truncations``: that many offsets
    per file (always including 0 and size-1), else every offset."""
    out = []
    for name in sorted(cdb.files):
        size = len(cdb.files[name])
        if size == 0:
            continue
        if stride_over is None or size <= stride_over:
            flip_offsets = range(size)
        else:
            step = max(2, size // stride_over)
            flip_offsets = sorted(set(range(size % step, size, step)) | {0, size - 1} | set(range(max(0, size - 64), size)))
        for o in flip_offsets:
            out.append(Mutation(name, "flip01", o))
            out.append(Mutation(name, "flipFF", o))
        if truncations is None or size <= truncations:
            cut_offsets = range(size)
        else:
            step = size / truncations
            cut_offsets = sorted({int(i * step) for i in range(truncations)} | {0, size - 1, size - 16})
        out.extend(Mutation(name, "truncate", o) for o in cut_offsets if 0 <= o < size)
    return out


def allowed_states(cdb: CorruptionDB, m: Mutation) -> list[dict]:
    """The states a correct engine may show after ``m`` (besides raising an antkv.Error)."""
    states = [cdb.full]
    n = len(cdb.wal_records)
    if m.name == cdb.wal_name:
        if m.kind == "truncate":
            k = sum(1 for _, end, _ in cdb.wal_records if end <= m.offset)
            states.append(cdb.wal_states[k])
        else:
            # None: inside the WAL's header record, which intact records follow (damage)
            i = next((i for i, (s, e, _) in enumerate(cdb.wal_records) if s <= m.offset < e), None)
            if i == n - 1:
                states.append(cdb.wal_states[i])
    elif m.name == cdb.active_vlog:
        fnum = parse_file_name(m.name)[1]
        cut = _vlog_record_start(cdb.files[m.name], m.name, m.offset)
        for i, (_, _, ops) in enumerate(_wal_pointer_ops(cdb)):
            if any(f == fnum and off + size > cut for f, off, size in ops):
                states.append(cdb.wal_states[i])
                break
    return states


def _wal_pointer_ops(cdb: CorruptionDB) -> list[tuple[int, int, list]]:
    """The value pointers ``(file, offset, size)`` of each WAL record."""
    out = []
    for start, end, _ in cdb.wal_records:
        payload = cdb.files[cdb.wal_name][start + 16 : end]
        _, ops = decode_batch(payload, cdb.wal_name, start)
        out.append((start, end, [decode_pointer(v) for kind, _, v in ops if kind == VALUE_POINTER]))
    return out


def _vlog_record_start(data: bytes, name: str, offset: int) -> int:
    """Start of the value-log record holding byte ``offset`` (0 inside the file header)."""
    fs = restore_files({name: data})
    start = 0
    for rec_offset, size, _, _, _ in ValueLogScan(fs, os.path.join(DB, name)):
        if rec_offset > offset:
            break
        start = rec_offset
        if offset < rec_offset + size:
            return rec_offset
        start = rec_offset + size
    return start


class SweepFailure(AssertionError):
    pass


def _consistent(cands: list[dict], pred) -> list[dict]:
    return [s for s in cands if pred(s)]


def check_mutation(cdb: CorruptionDB, m: Mutation) -> str:
    """Apply ``m`` to a fresh copy, open, read everything; returns the outcome name
    (``correct``, ``torn-tail``, or ``error:<Class>@<stage>``) or raises SweepFailure."""
    files = dict(cdb.files)
    files[m.name] = m.apply(files[m.name])
    fs = restore_files(files)
    allowed = allowed_states(cdb, m)
    cands = list(allowed)
    stage = "open"
    db = None
    where = f"mutation {m.spec(cdb.seed)}"
    removed = None
    try:
        db = antkv.open(DB, file_system=fs, **cdb.options)
        opened = db.stats()
        removed = opened["files_removed_at_open"]
        # value-log files the open found 100% garbage: deleted after a MANIFEST edit records it
        collected = opened["vlog_files_deleted"]
        stage = "get"
        for k in cdb.keys:
            v = db.get(k)
            cands = _consistent(cands, lambda s: s.get(k) == v)
            if not cands:
                raise SweepFailure(f"{where}: get({k!r}) = {_short(v)}, allowed {[_short(s.get(k)) for s in allowed]}")
        for stage, reverse in (("scan", False), ("reverse-scan", True)):
            got = []
            err = None
            try:
                for item in db.items(reverse=reverse):
                    got.append(item)
            except antkv.Error as e:
                err = e
            cands = _consistent(cands, lambda s: _scan_matches(s, got, reverse, err is not None))
            if not cands:
                raise SweepFailure(f"{where}: {stage} returned {len(got)} items not matching any allowed state"
                                   f" (first {[(k, _short(v)) for k, v in got[:4]]})")
            if err is not None:
                raise err
    except SweepFailure:
        raise
    except antkv.Error as e:
        return f"error:{type(e).__name__}@{stage}"
    except Exception as e:  # noqa: BLE001 - exactly what the sweep exists to catch
        raise SweepFailure(f"{where}: {stage} raised {type(e).__name__}: {e} (not an antkv.Error)") from e
    finally:
        if db is not None:
            try:
                db.close()
            except antkv.Error:
                pass  # closing a database whose files are damaged may report it
            except Exception as e:  # noqa: BLE001
                raise SweepFailure(f"{where}: close raised {type(e).__name__}: {e}") from e
        if removed is not None:
            _check_nothing_vanished(fs, files, removed, collected, where)
    return "correct" if cdb.full in cands else "torn-tail"


def _check_nothing_vanished(fs, files: dict[str, bytes], removed: list[str], collected: int, where: str) -> None:
    """Every numbered file of the damaged directory is still there, or in lost/ byte for byte,
    or the open reported deleting it as its own debris (a WAL it replayed whole, the MANIFEST
    it recovered from, a file the LOG or the MANIFEST proves was the database's), or it is one
    of the ``collected`` value-log files the open found 100% garbage."""
    from antkv.base.filenames import parse_file_name

    lost = os.path.join(DB, "lost")
    kept = set()
    if fs.is_dir(lost):
        kept = {fs.read_all(os.path.join(lost, n)) for n in fs.listdir(lost)}
    for name, data in files.items():
        if parse_file_name(name) is None or fs.exists(os.path.join(DB, name)) or data in kept:
            continue
        reason = next((r for r in removed if r.startswith(name + ":")), None)
        if reason is None and name.endswith(".vlog") and collected > 0:
            collected -= 1
            continue
        if reason is None or "moved to" in reason:
            raise SweepFailure(f"{where}: {name} vanished: not in the directory, not in lost/, reported as {reason!r}")


def _scan_matches(state: dict, got: list, reverse: bool, partial: bool) -> bool:
    want = sorted(state.items(), reverse=reverse)
    return want[: len(got)] == got if partial else want == got


def _short(v) -> str:
    if v is None:
        return "None"
    return repr(v[:12]) + (f"..({len(v)}B)" if len(v) > 12 else "")


def run_corruption_sweep(cdb: CorruptionDB, muts: list[Mutation], deadline: float | None = None,
                         out=None) -> Counter:
    """Check every mutation (until ``deadline``); returns outcome counts per file kind.
    Raises SweepFailure with a reproducer on the first violation."""
    counts: Counter = Counter()
    for m in muts:
        if deadline is not None and time.monotonic() > deadline:
            break
        try:
            outcome = check_mutation(cdb, m)
        except SweepFailure as e:
            raise SweepFailure(f"{e}\n  reproduce: {sys.executable} -m fuzz.sweeps --corruption-case {m.spec(cdb.seed)}") from None
        counts[(_file_kind(m.name), m.kind, outcome)] += 1
    return counts


def _file_kind(name: str) -> str:
    parsed = parse_file_name(name)
    return parsed[0] if parsed else name


def summarize(counts: Counter) -> str:
    by_outcome: Counter = Counter()
    by_file: Counter = Counter()
    for (kind, _, outcome), n in counts.items():
        by_outcome[outcome] += n
        by_file[kind] += n
    return (f"{sum(counts.values())} mutations; by file {dict(sorted(by_file.items()))}; "
            f"outcomes {dict(sorted(by_outcome.items()))}")


# ---------------------------------------------------------------------------------------------
# I/O-error sweep
# ---------------------------------------------------------------------------------------------

IO_OPTIONS = dict(
    max_background_jobs=0,
    write_buffer_size=1200,
    block_size=128,
    target_file_size_base=800,
    max_bytes_for_level_base=2000,
    level0_file_num_compaction_trigger=3,
    num_levels=4,
    min_blob_size=80,
    blob_file_size=1500,
    blob_gc_threshold=0.3,
    max_manifest_file_size=1500,
)

# operation name -> (what it does to the model, what it does to the database)
IO_OPERATIONS = (
    "put", "put-sync", "put-blob", "put-blob-sync", "batch-sync", "delete-range",
    "fill-memtable", "flush", "compact", "gc", "checkpoint", "open",
)


def _io_op_writes(name: str, rng: random.Random) -> list[tuple[list, bool]]:
    """The writes of a write operation: ``[(ops, sync), ...]``."""
    small, blob = rng.randbytes(20), rng.randbytes(150)
    if name == "put":
        return [([("put", b"k03", small)], False)]
    if name == "put-sync":
        return [([("put", b"k04", small)], True)]
    if name == "put-blob":
        return [([("put", b"k05", blob)], False)]
    if name == "put-blob-sync":
        return [([("put", b"k06", blob)], True)]
    if name == "batch-sync":
        return [([("put", b"k07", blob), ("delete", b"k08"), ("delete_range", b"k10", b"k12")], True)]
    if name == "delete-range":
        return [([("delete_range", b"k01", b"k09")], False)]
    if name == "fill-memtable":  # enough writes to switch the memtable: flush (and compaction) inline
        return [([("put", b"k%02d" % (i % 20), rng.randbytes(rng.choice([30, 120])))], i % 3 == 0) for i in range(14)]
    return []


def _io_op_setup(name: str) -> list[tuple[list, bool]]:
    """Unflushed writes made (without faults) before a flush, compaction, GC or checkpoint,
    so the operation has a memtable to write out; overwrites add value-log garbage."""
    writes = [([("put", b"k%02d" % i, bytes([i]) * (30 if i % 4 else 140))], False) for i in range(0, 20, 2)]
    if name == "gc":  # overwrite every separated value and compact: most value-log bytes are garbage
        blobs = [([("put", b"k%02d" % i, bytes([i]) * 100)], False) for i in range(20)]
        return blobs + ["compact"] + [([("put", b"k%02d" % i, b"x")], False) for i in range(20)] + ["compact"] + writes
    if name in ("flush", "compact", "checkpoint"):
        return writes
    return []


def _setup(db, model: dict | None, name: str) -> None:
    for step in _io_op_setup(name):
        if step == "compact":
            db.compact_range()
        else:
            _write(db, step[0], sync=step[1])
            if model is not None:
                _apply(model, step[0])


@dataclass
class IOBase:
    """The preloaded database every I/O-error case starts from."""

    seed: int
    files: dict[str, bytes]
    model: dict


def build_io_base(seed: int = 0) -> IOBase:
    """Tables on several levels, value-log files with garbage, unflushed WAL records."""
    rng = random.Random(seed)
    fs = MemoryFileSystem()
    db = antkv.open(DB, file_system=fs, **IO_OPTIONS)
    model: dict = {}
    keys = [b"k%02d" % i for i in range(20)]
    for i in range(90):
        ops = _random_write(rng, keys)
        _write(db, ops, sync=i % 7 == 0)
        _apply(model, ops)
    db.close()
    return IOBase(seed, snapshot_files(fs), model)


@dataclass
class IOCase:
    op: str
    n: int  # the n-th file-system call of the operation fails
    persistent: bool

    def spec(self, seed: int) -> str:
        return f"{seed}:{self.op}:{self.n}:{'persistent' if self.persistent else 'once'}"


@dataclass
class IOEnv:
    """Where a case runs: the preloaded files on an inner file system, and the paths.

    Checkpoints run on the real file system in a temporary directory: ``MemoryFileSystem``
    cannot rename the checkpoint's temporary directory (it renames files only)."""

    inner: object
    db: str
    ckpt: str
    tmp: tempfile.TemporaryDirectory | None = None

    def cleanup(self) -> None:
        if self.tmp is not None:
            self.tmp.cleanup()


def _io_env(base: IOBase, op: str) -> IOEnv:
    if op != "checkpoint":
        return IOEnv(restore_files(base.files), DB, "ckpt")
    from antkv.fs.os_file_system import OSFileSystem

    tmp = tempfile.TemporaryDirectory(prefix="antkv-io-")
    db = os.path.join(tmp.name, DB)
    os.mkdir(db)
    for name, data in base.files.items():
        with open(os.path.join(db, name), "wb") as f:
            f.write(data)
    return IOEnv(OSFileSystem.instance(), db, os.path.join(tmp.name, "ckpt"), tmp)


def _run_io_op(db_holder: list, fs, op: str, writes, env: IOEnv) -> None:
    """Run ``op``; ``db_holder[0]`` is the open database (or None for ``open``)."""
    db = db_holder[0]
    if op == "open":
        db_holder[0] = antkv.open(env.db, file_system=fs, **IO_OPTIONS)
    elif writes:
        for ops, sync in writes:
            _write(db, ops, sync=sync)
    elif op == "flush":
        db.flush()
    elif op == "compact":
        db.compact_range()
    elif op == "gc":
        db.gc_value_log()
    elif op == "checkpoint":
        db.checkpoint(env.ckpt)
    else:
        raise ValueError(op)


def count_io_calls(base: IOBase, op: str) -> int:
    """How many file-system calls ``op`` makes when nothing fails."""
    env = _io_env(base, op)
    try:
        fs = FaultInjectionFileSystem(env.inner)
        holder = [None if op == "open" else antkv.open(env.db, file_system=fs, **IO_OPTIONS)]
        _setup(holder[0], None, op)
        start = fs.calls
        _run_io_op(holder, fs, op, _io_op_writes(op, random.Random(base.seed)), env)
        n = fs.calls - start
        if op == "gc":
            assert holder[0].stats()["gc_bytes_relocated"] > 0, "the GC case must relocate values"
        holder[0].close()
        return n
    finally:
        env.cleanup()


def _close_with_timeout(db, where: str, timeout: float = 20.0) -> str | None:
    """Close ``db`` in a thread; returns the antkv.Error class name it raised, if any."""
    result: list = []

    def run():
        try:
            db.close()
            result.append(None)
        except antkv.Error as e:
            result.append(type(e).__name__)
        except BaseException as e:  # noqa: BLE001 - reported as a failure below
            result.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        raise SweepFailure(f"{where}: close() hangs")
    if isinstance(result[0], BaseException):
        e = result[0]
        raise SweepFailure(f"{where}: close raised {type(e).__name__}: {e} (not an antkv.Error)") from e
    return result[0]


def check_io_case(base: IOBase, case: IOCase) -> str:
    """Run one case; returns an outcome name or raises SweepFailure."""
    env = _io_env(base, case.op)
    try:
        return _check_io_case(base, case, env)
    finally:
        env.cleanup()


def _check_io_case(base: IOBase, case: IOCase, env: IOEnv) -> str:
    where = f"io case {case.spec(base.seed)}"
    inner = env.inner
    fs = FaultInjectionFileSystem(inner)
    writes = _io_op_writes(case.op, random.Random(base.seed))
    before = dict(base.model)
    holder = [None if case.op == "open" else antkv.open(env.db, file_system=fs, **IO_OPTIONS)]
    if holder[0] is not None:
        _setup(holder[0], before, case.op)
    after = dict(before)
    for ops, _ in writes:
        _apply(after, ops)
    # the states a sequence of writes may leave: every prefix of it (the writes before the
    # failing one were acknowledged and must survive)
    allowed = [dict(before)]
    m = dict(before)
    for ops, _ in writes:
        _apply(m, ops)
        allowed.append(dict(m))
    acked = 0
    fs.fail_at(fs.calls + case.n, case.persistent)
    outcome = "ok"
    try:
        if writes:
            for ops, sync in writes:
                _write(holder[0], ops, sync=sync)
                acked += 1
        else:
            _run_io_op(holder, fs, case.op, writes, env)
    except antkv.Error as e:
        outcome = f"raised:{type(e).__name__}"
    except Exception as e:  # noqa: BLE001 - exactly what the sweep exists to catch
        raise SweepFailure(f"{where}: {case.op} raised {type(e).__name__}: {e} (not an antkv.Error)") from e
    if writes:
        allowed = allowed[acked:]  # every acknowledged write must survive
        if outcome == "ok":
            allowed = [after]
    closed = None
    if holder[0] is not None:
        closed = _close_with_timeout(holder[0], where)
    fs.disarm()
    try:
        db = antkv.open(env.db, file_system=inner, **IO_OPTIONS)
    except antkv.Error as e:
        raise SweepFailure(f"{where}: reopen without faults failed: {type(e).__name__}: {e}"
                           f" ({case.op} {outcome}, close {closed or 'ok'})") from e
    try:
        try:
            db.verify()
        except antkv.Error as e:
            raise SweepFailure(f"{where}: verify after reopen failed: {type(e).__name__}: {e}") from e
        got = dict(db.items())
        if got not in allowed:
            diff = sorted(k for k in set(got) | set(after) if got.get(k) != after.get(k))[:6]
            raise SweepFailure(f"{where}: after reopen the state is neither before nor after {case.op}"
                               f" ({outcome}); keys differing from 'after': {diff}")
        for k, v in list(got.items())[:30]:
            if db.get(k) != v:
                raise SweepFailure(f"{where}: get({k!r}) disagrees with the scan")
        if case.op == "checkpoint" and outcome == "ok":
            with antkv.open(env.ckpt, file_system=inner, **IO_OPTIONS) as ck:
                ck.verify()
                if dict(ck.items()) != after:
                    raise SweepFailure(f"{where}: the checkpoint does not hold the state")
    finally:
        db.close()
    return outcome + ("" if closed is None else f"+close:{closed}")


def io_cases(base: IOBase, ops=IO_OPERATIONS, step: int = 1) -> list[IOCase]:
    cases = []
    for op in ops:
        total = count_io_calls(base, op)
        for n in list(range(1, total + 1, step)) + ([total] if (total - 1) % step else []):
            for persistent in (False, True):
                cases.append(IOCase(op, n, persistent))
    return cases


def run_io_sweep(base: IOBase, cases: list[IOCase], deadline: float | None = None) -> Counter:
    counts: Counter = Counter()
    for case in cases:
        if deadline is not None and time.monotonic() > deadline:
            break
        try:
            outcome = check_io_case(base, case)
        except SweepFailure as e:
            raise SweepFailure(f"{e}\n  reproduce: {sys.executable} -m fuzz.sweeps --io-case {case.spec(base.seed)}") from None
        counts[(case.op, outcome)] += 1
    return counts


# ---------------------------------------------------------------------------------------------
# Blackbox SIGKILL test
# ---------------------------------------------------------------------------------------------

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def read_expected(path: str) -> tuple[list[list], list | None]:
    """``(acknowledged writes, the write in flight or None)`` from a child's expected log."""
    from .blackbox_child import decode_pairs

    acked: list[list] = []
    pending = None
    with open(path, "rb") as f:
        data = f.read().decode()
    for line in data.split("\n")[:-1]:  # a last line without "\n" was cut by the kill: ignore it
        fields = line.split(" ")
        if fields[0] == "pending":
            if pending is not None:
                raise SweepFailure(f"{path}: two pending lines without an acked between them")
            pending = decode_pairs(fields[1:])
        elif fields[0] == "acked":
            acked.append(pending)
            pending = None
        else:
            raise SweepFailure(f"{path}: bad line {line[:60]!r}")
    return acked, pending


def _apply_pairs(model: dict, pairs) -> None:
    for k, v in pairs:
        if v is None:
            model.pop(k, None)
        else:
            model[k] = v


def start_child(directory: str, seed: int, seconds: float = 60.0) -> subprocess.Popen:
    """Start the workload process and wait until it has the database open."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "fuzz.blackbox_child", directory, str(seed), "--seconds", str(seconds)],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    line = proc.stdout.readline()
    if line.strip() != "ready":
        proc.kill()
        _, err = proc.communicate()
        raise SweepFailure(f"blackbox child {seed} did not start: {line!r} {err[-2000:]}")
    return proc


def blackbox_round(directory: str, seed: int, model: dict, kill_after: float) -> tuple[dict, str]:
    """One child run killed after ``kill_after`` seconds; returns (recovered state, outcome)."""
    where = f"blackbox seed {seed} (kill after {kill_after:.3f}s)"
    proc = start_child(directory, seed)
    time.sleep(kill_after)
    proc.send_signal(signal.SIGKILL)
    _, err = proc.communicate()
    if proc.returncode != -signal.SIGKILL:
        raise SweepFailure(f"{where}: the child exited with {proc.returncode} before the kill: {err[-2000:]}")
    return check_after_kill(directory, seed, model, where)


def check_after_kill(directory: str, seed: int, model: dict, where: str) -> tuple[dict, str]:
    """Reopen after child ``seed`` was killed; the state must be ``model`` plus its
    acknowledged writes, optionally plus the write in flight.  Returns (state, outcome)."""
    from .blackbox_child import CHILD_OPTIONS

    acked, pending = read_expected(os.path.join(directory, f"expected-{seed}.log"))
    old = dict(model)
    for pairs in acked:
        _apply_pairs(old, pairs)
    new = None
    if pending is not None:
        new = dict(old)
        _apply_pairs(new, pending)
    try:
        db = antkv.open(os.path.join(directory, "db"), **CHILD_OPTIONS)
    except antkv.Error as e:
        raise SweepFailure(f"{where}: reopen after the kill failed: {type(e).__name__}: {e}") from e
    try:
        db.verify()
        got = dict(db.items())
        for k in list(got)[:20]:
            if db.get(k) != got[k]:
                raise SweepFailure(f"{where}: get({k!r}) disagrees with the scan")
    except antkv.Error as e:
        raise SweepFailure(f"{where}: reading after the kill failed: {type(e).__name__}: {e}") from e
    finally:
        db.close()
    if got == old:
        return got, f"old ({len(acked)} acked)"
    if new is not None and got == new:
        return got, f"in-flight applied ({len(acked)} acked)"
    bad = [k for k in sorted(set(got) | set(old)) if got.get(k) != old.get(k) and (new is None or got.get(k) != new.get(k))]
    torn = new is not None and not bad
    raise SweepFailure(
        f"{where}: after {len(acked)} acknowledged writes "
        + ("the in-flight batch was applied in part" if torn else
           f"keys hold neither their acknowledged nor their in-flight value: {[(k, _short(got.get(k)), _short(old.get(k))) for k in bad[:5]]}")
    )


def run_blackbox(rounds: int, seed: int, deadline: float | None = None, out=None) -> Counter:
    """``rounds`` kill rounds on one directory, each child continuing the last one's data."""
    rng = random.Random(seed)
    counts: Counter = Counter()
    with tempfile.TemporaryDirectory(prefix="antkv-blackbox-") as d:
        model: dict = {}
        for i in range(rounds):
            if deadline is not None and time.monotonic() > deadline:
                break
            child_seed = seed * 1000 + i
            kill_after = rng.choice([0.0, 0.01, 0.05]) + rng.random() * 0.6
            try:
                model, outcome = blackbox_round(d, child_seed, model, kill_after)
            except SweepFailure as e:
                raise SweepFailure(f"{e}\n  reproduce (timing varies): {sys.executable} -m fuzz.sweeps --only blackbox"
                                   f" --seed {seed} --rounds {i + 1}") from None
            counts[outcome.split(" (")[0]] += 1
            if out is not None:
                print(f"  round {i}: {outcome}, {len(model)} keys", file=out)
    return counts


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------


def _parse_case(spec: str, parts: int) -> list[str]:
    fields = spec.split(":")
    if len(fields) != parts:
        raise SystemExit(f"bad case {spec!r}")
    return fields


def main(argv: list[str] | None = None) -> int:
    import logging

    ap = argparse.ArgumentParser(prog="python -m fuzz.sweeps", description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=None,
                    help="run until this much time is used (shared: corruption 1/2, io 1/4, blackbox 1/4)")
    ap.add_argument("--seed", type=int, default=None, help="first seed (default: from the clock, printed)")
    ap.add_argument("--only", choices=("corruption", "io", "blackbox"), default=None)
    ap.add_argument("--rounds", type=int, default=None, help="blackbox kill rounds (default: until time is up)")
    ap.add_argument("--corruption-case", default=None, metavar="SEED:FILE:KIND:OFFSET", help="one mutation")
    ap.add_argument("--io-case", default=None, metavar="SEED:OP:N:once|persistent", help="one I/O-error case")
    ap.add_argument("--verbose", action="store_true", help="show the engine's recovery warnings")
    args = ap.parse_args(argv)
    if not args.verbose:
        logging.getLogger("antkv").setLevel(logging.ERROR)
    try:
        if args.corruption_case:
            seed, name, kind, offset = _parse_case(args.corruption_case, 4)
            cdb = build_corruption_db(int(seed))
            print(check_mutation(cdb, Mutation(name, kind, int(offset))))
            return 0
        if args.io_case:
            seed, op, n, mode = _parse_case(args.io_case, 4)
            print(check_io_case(build_io_base(int(seed)), IOCase(op, int(n), mode == "persistent")))
            return 0
        return _long_run(args)
    except SweepFailure as e:
        print(f"FAILURE: {e}", flush=True)
        return 1


def _long_run(args) -> int:
    seed = args.seed if args.seed is not None else int(time.time()) % 100000
    seconds = args.seconds
    print(f"sweeps: seed {seed}" + (f", {seconds:.0f} s" if seconds else ", one pass"), flush=True)
    start = time.monotonic()
    kinds = [args.only] if args.only else ["corruption", "io", "blackbox"]
    # cumulative deadlines: time one sweep leaves unused goes to the next
    ends = {"corruption": 0.5, "io": 0.75, "blackbox": 1.0} if len(kinds) == 3 else {args.only: 1.0}
    for kind in kinds:
        deadline = None if seconds is None else start + seconds * ends[kind]
        if kind == "corruption":
            total: Counter = Counter()
            s = seed
            while True:
                cdb = build_corruption_db(s)
                muts = mutations(cdb)
                random.Random(s).shuffle(muts)  # a run cut short by the deadline still samples every file
                counts = run_corruption_sweep(cdb, muts, deadline)
                total.update(counts)
                print(f"  corruption seed {s}: {summarize(counts)}", flush=True)
                s += 1
                if deadline is None or time.monotonic() > deadline:
                    break
            print(f"corruption: {summarize(total)}", flush=True)
        elif kind == "io":
            total = Counter()
            s = seed
            while True:
                base = build_io_base(s)
                counts = run_io_sweep(base, io_cases(base), deadline)
                total.update(counts)
                print(f"  io seed {s}: {sum(counts.values())} cases", flush=True)
                s += 1
                if deadline is None or time.monotonic() > deadline:
                    break
            outcomes: Counter = Counter()
            for (_, outcome), n in total.items():
                outcomes[outcome] += n
            print(f"io: {sum(total.values())} cases; outcomes {dict(sorted(outcomes.items()))}", flush=True)
        else:
            rounds = args.rounds if args.rounds is not None else (10 if deadline is None else 10 ** 9)
            counts = run_blackbox(rounds, seed, deadline, out=sys.stdout if args.rounds else None)
            print(f"blackbox: {sum(counts.values())} kills; {dict(counts)}", flush=True)
    print(f"sweeps: all passed in {time.monotonic() - start:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
