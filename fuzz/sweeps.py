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
from dataclasses import dataclass, field

import antkv
from antkv.batch import decode_batch
from antkv.dbformat import VALUE_POINTER
from antkv.fs.fault import FaultInjectionFileSystem
from antkv.fs.memory import MemoryFileSystem
from antkv.log_format import LogReader
from antkv.version_set import parse_file_name
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
        if parsed and parsed[0] == "log" and files[name]:
            wals.append(name)
    assert len(wals) == 1, f"build wanted one WAL with records, got {wals}"
    wal_name = wals[0]
    records = []
    for offset, payload in LogReader(files[wal_name], wal_name):
        _, ops = decode_batch(payload, wal_name, offset)
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
            i = next(i for i, (s, e, _) in enumerate(cdb.wal_records) if s <= m.offset < e)
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
    try:
        db = antkv.open(DB, file_system=fs, **cdb.options)
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
    return "correct" if cdb.full in cands else "torn-tail"


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
