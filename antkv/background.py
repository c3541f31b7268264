"""Background work: flushing immutable memtables, compacting, deleting obsolete files.

Background threads run :func:`do_one_step` while :func:`has_work` says so, each in a *role*:
with ``max_background_jobs >= 2`` one thread flushes and one compacts (so a long compaction
never holds up a flush), with 1 a single thread does both, flushes first; with 0 the writer
runs :func:`do_all_work` inline.  Flushes go oldest memtable first (the WAL log number only
moves forward); one compaction runs at a time (``_compaction_lock``: also taken by
``compact_range`` and ``gc_value_log``).  The jobs themselves may run in a worker process
(:mod:`antkv.compaction.worker`).  After each step, :mod:`antkv.obsolete` deletes the
files nothing can read any more.
"""

from __future__ import annotations

import logging

from .compaction import picker
from .compaction.flush import write_level0_table
from .compaction.run import run_compaction
from .manifest.version_edit import VersionEdit
from .obsolete import delete_obsolete_files

log = logging.getLogger("antkv")


def has_work(db, role: str = "all") -> bool:
    """REQUIRES db._mutex.  ``role``: "flush", "compaction" or "all"."""
    if db._bg_error is not None or db._closed and not db._imms:
        return False
    if db._imms and role != "compaction":
        return True
    return role != "flush" and _pick(db) is not None


def _pick(db):
    """REQUIRES db._mutex.  The most urgent compaction now (nothing changes: asking is free)."""
    vlog = db._vlog
    vs = db._versions
    return picker.pick_compaction(
        vs.current, db.options, vs.vlogs, vlog.file_number if vlog is not None else None, db._compact_cursor
    )


def do_one_step(db, role: str = "all") -> None:
    if db._imms and role != "compaction":
        flush_oldest(db)
    else:
        compact_once(db)


def do_all_work(db) -> None:
    while db._imms:
        flush_oldest(db)
    while compact_once(db):
        pass


def flush_oldest(db) -> None:
    with db._mutex:
        if not db._imms:
            return
        mem = db._imms[-1]
    snapshots = db._snapshots.sequences()
    meta, garbage = write_level0_table(db._jobs, db._vlog, mem, snapshots, db._stats)
    with db._mutex:
        edit = VersionEdit()
        if meta is not None:
            edit.new_tables.append((0, meta))
        edit.vlog_garbage.extend(sorted(garbage.items()))
        remaining = db._imms[:-1]
        edit.log_number = remaining[-1].log_number if remaining else db._mem.log_number
        db._apply_edit(edit, on_success=db._imms.pop)
        if db._wbm is not None:
            db._wbm_reserved -= mem.memory
            db._wbm.free_mem(mem.memory)
        db._bg_cv.notify_all()
    delete_obsolete_files(db)


def compact_once(db) -> bool:
    """Run the most urgent compaction, if any; True when one ran."""
    with db._compaction_lock:
        with db._mutex:
            c = _pick(db)
            if c is None:
                return False
            if c.cursor is not None:
                db._compact_cursor[c.level] = c.cursor  # it runs now: the round-robin moves on
        _run(db, c)
    return True


def _run(db, c) -> None:
    """REQUIRES db._compaction_lock."""
    snapshots = db._snapshots.sequences()
    edit = run_compaction(db._compaction_env, db._versions.current, c, snapshots)
    with db._mutex:
        db._apply_edit(edit)
        db._bg_cv.notify_all()
    delete_obsolete_files(db)


def compact_range(db, lo, hi) -> None:
    """Compact ``[lo, hi]`` level by level down to the last level holding data."""
    level = 0
    while True:
        with db._compaction_lock:
            with db._mutex:
                version = db._versions.current
                nlevels = len(version.levels)
                if level >= nlevels:
                    return
                c = picker.manual_compactions(version, lo, hi, level, lambda f: _has_deletions(db, f))
            if c is not None:
                _run(db, c)
                if c.output_level == level:
                    return
        level += 1


def _has_deletions(db, f) -> bool:
    props = (f.reader or db._open_table(f)).properties
    return props.num_deletions > 0 or props.num_range_deletions > 0


def gc_value_log(db) -> dict:
    """Collect every sealed value-log file at or over the GC threshold now."""
    db.flush(wait=True)
    before = dict(db._stats)
    _seal_active_vlog_if_due(db)
    with db._compaction_lock:
        while True:
            with db._mutex:
                vs = db._versions
                active = db._vlog.file_number if db._vlog is not None else None
                gc = picker.gc_candidate_files(vs.vlogs, active, db.options.blob_gc_threshold)
                c = picker.gc_compaction(vs.current, gc) if gc else None
                if c is None:
                    break
            _run(db, c)
    delete_obsolete_files(db)
    return {
        "bytes_relocated": db._stats["gc_bytes_relocated"] - before["gc_bytes_relocated"],
        "files_deleted": db._stats["vlog_files_deleted"] - before["vlog_files_deleted"],
    }


def _seal_active_vlog_if_due(db) -> None:
    """An explicit GC also collects the active value-log file when it reached the threshold:
    it is sealed first (and a new one started), since only sealed files are collected."""
    with db._write_lock:
        vlog = db._vlog
        if vlog is None or not vlog.record_bytes:
            return
        st = db._versions.vlogs.get(vlog.file_number)
        if st is not None and st.garbage / vlog.record_bytes >= db.options.blob_gc_threshold:
            db._rotate_vlog()
