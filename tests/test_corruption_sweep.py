"""Corruption sweep (issue 7): every file of a small database, byte-flipped and truncated.

A database with tables on two levels, sealed and active value-log files, a WAL holding
unflushed records, a MANIFEST and CURRENT is built in memory; each mutation (XOR 0x01, XOR
0xFF, truncation) is applied to a fresh copy, which is opened, read key by key and scanned in
both directions.  Allowed: an ``antkv.Error``, the correct state, or the torn-tail rule (see
``fuzz/sweeps.py``).  Never a wrong value, never another exception.  ``make test`` runs every
byte of small files and a stride over bigger ones; ``python -m fuzz.sweeps --only corruption``
runs every byte of every file for many seeds.

The regression tests at the end pin the engine bugs the sweep found: damage that made
recovery silently return an older state instead of raising ``CorruptionError``.
"""

from __future__ import annotations

import os

import pytest

import antkv
from antkv.record.batch import decode_batch
from antkv.base.dbformat import VALUE_POINTER
from antkv.record.log_format import LogReader
from antkv.vlog.pointer import decode_pointer
from fuzz.sweeps import (
    DB,
    Mutation,
    build_corruption_db,
    check_mutation,
    mutations,
    restore_files,
    run_corruption_sweep,
    summarize,
)




# seed 0: the last MANIFEST edit is a flush; seed 3: a value-log file was sealed while the WAL
# still pointed into it, and the last MANIFEST edit is a value-log rotation
@pytest.mark.parametrize("seed", [0, 3])
def test_corruption_sweep(seed):
    cdb = build_corruption_db(seed)
    kinds = {n.split(".")[-1].split("-")[0] for n in cdb.files}
    assert {"sst", "vlog", "log", "MANIFEST", "CURRENT"} <= kinds
    assert cdb.active_vlog in cdb.files and len(cdb.wal_records) >= 5
    muts = mutations(cdb, stride_over=100, truncations=30)
    counts = run_corruption_sweep(cdb, muts)
    print(f"seed {seed}: {summarize(counts)}")
    outcomes = {outcome for (_, _, outcome) in counts}
    assert sum(counts.values()) == len(muts) > 2000
    # the sweep exercises every allowed outcome, not only one
    assert {"correct", "torn-tail", "error:CorruptionError@open", "error:CorruptionError@get"} <= outcomes
    for file_kind in ("sst", "vlog", "log", "manifest", "CURRENT"):
        assert any(k == file_kind for (k, _, _) in counts), file_kind


def test_every_byte_of_the_wal_and_current():
    """The small files whose rules are subtle (torn tail) get every byte and every offset."""
    cdb = build_corruption_db(1)
    muts = [m for m in mutations(cdb) if m.name in (cdb.wal_name, "CURRENT")]
    counts = run_corruption_sweep(cdb, muts)
    wal_cuts = {o: n for (k, kind, o), n in counts.items() if k == "log" and kind == "truncate"}
    # a truncated WAL is always a torn tail: recovery keeps the intact prefix, never fails
    assert set(wal_cuts) <= {"torn-tail", "correct"} and sum(wal_cuts.values()) == len(cdb.files[cdb.wal_name])
    assert wal_cuts["torn-tail"] > len(cdb.files[cdb.wal_name]) // 2
    assert {o for (k, _, o) in counts if k == "CURRENT"} == {"error:CorruptionError@open"}


@pytest.mark.parametrize("where", ["full", "torn"])
def test_check_mutation_catches_a_wrong_value(where):
    """The oracle itself: an engine answer that matches no allowed state is a failure."""
    cdb = build_corruption_db(0)
    key = next(k for k in sorted(cdb.full) if k)
    if where == "full":  # an untouched database read back against a wrong expectation
        cdb.full = cdb.full | {key: cdb.full[key] + b"!"}
        m = Mutation("CURRENT", "truncate", len(cdb.files["CURRENT"]))  # a no-op
        with pytest.raises(AssertionError, match="allowed"):
            check_mutation(cdb, m)
    else:  # the torn tail of the WAL drops its last record: the full state is not allowed
        i = next(i for i, st in enumerate(cdb.wal_states) if st != cdb.full)
        cdb.wal_states[i] = cdb.wal_states[i] | {key: b"wrong"}
        m = Mutation(cdb.wal_name, "truncate", cdb.wal_records[i][0])
        with pytest.raises(AssertionError, match="allowed|not matching"):
            check_mutation(cdb, m)


# --- regressions: damage that used to come back as an older state ---------------------------


def _last_record(data: bytes, name: str) -> tuple[int, int]:
    last = None
    for offset, payload in LogReader(data, name):
        last = (offset, offset + 16 + len(payload))
    assert last is not None
    return last


def test_damaged_last_manifest_edit_is_corruption_not_lost_data():
    """The last MANIFEST edit (a flush) was dropped as a torn tail; the flushed table was then
    deleted as unreferenced and the WAL it replaced was gone: acknowledged keys vanished."""
    cdb = build_corruption_db(0)
    manifest = next(n for n in cdb.files if n.startswith("MANIFEST-"))
    start, end = _last_record(cdb.files[manifest], manifest)
    for m in (Mutation(manifest, "flip01", end - 1), Mutation(manifest, "truncate", start)):
        files = dict(cdb.files)
        files[manifest] = m.apply(files[manifest])
        with pytest.raises(antkv.CorruptionError, match="named by the MANIFEST is missing"):
            antkv.open(DB, file_system=restore_files(files), **cdb.options)


def test_wal_pointer_into_a_truncated_sealed_value_log_is_corruption():
    """Replay stopped quietly at a WAL record whose value lies past the end of a *sealed*
    value-log file, as if the crash had taken it; only the active file can lose a tail."""
    cdb = build_corruption_db(3)
    sealed_targets = set()
    for start, end, _ in cdb.wal_records:
        _, ops = decode_batch(cdb.files[cdb.wal_name][start + 16 : end], cdb.wal_name, start)
        for kind, _, v in ops:
            if kind == VALUE_POINTER:
                name = "%06d.vlog" % decode_pointer(v)[0]
                if name != cdb.active_vlog:
                    sealed_targets.add(name)
    assert sealed_targets, "seed 3 must have WAL records pointing into a sealed value-log file"
    for name in sorted(sealed_targets):
        files = dict(cdb.files)
        files[name] = b""
        with pytest.raises(antkv.CorruptionError, match="sealed and shorter"):
            antkv.open(DB, file_system=restore_files(files), **cdb.options)


def test_wal_pointer_into_a_value_log_missing_from_the_manifest_is_corruption():
    """The last MANIFEST edit (a value-log rotation) dropped as a torn tail: the new file was
    removed as unreferenced at open and replay stopped quietly at the first pointer into it."""
    cdb = build_corruption_db(3)
    manifest = next(n for n in cdb.files if n.startswith("MANIFEST-"))
    start, end = _last_record(cdb.files[manifest], manifest)
    files = dict(cdb.files)
    files[manifest] = files[manifest][:start]
    fs = restore_files(files)
    with pytest.raises(antkv.CorruptionError, match="not in the MANIFEST"):
        antkv.open(DB, file_system=fs, **cdb.options)
    assert fs.exists(os.path.join(DB, cdb.active_vlog))


pytestmark = pytest.mark.usefixtures("quiet_recovery")
