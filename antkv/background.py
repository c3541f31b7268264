"""Background work: flushing immutable memtables, compacting, deleting obsolete files.

Background threads run :func:`do_one_step` while :func:`has_work` says so, each in a *role*:
with ``max_background_jobs >= 2`` one thread flushes and one compacts (so a long compaction
never holds up a flush), with 1 a single thread does both, flushes first; with 0 the writer
runs :func:`do_all_work` inline.  Flushes go oldest memtable first (the WAL log number only
moves forward); one compaction runs at a time (``_compaction_lock``: also taken by
``compact_range`` and ``gc_value_log``).  The jobs themselves may run in a worker process
(:mod:`antkv.worker`).

Obsolete files are deleted only when nothing can read them any more: a table when no live
super version (running read, open iterator, checkpoint in progress) holds a version listing it;
a WAL once its memtable is flushed; a value-log file when it is sealed, 100% garbage, referenced
by no table of any live version and older than every live memtable.
"""

from __future__ import annotations

import logging

from . import compaction
from .flush import write_level0_table
from .version_edit import VersionEdit
from .version_set import table_file_name, vlog_file_name, wal_file_name

log = logging.getLogger("antkv")


def has_work(db, role: str = "all") -> bool:
    """REQUIRES db._mutex.  ``role``: "flush", "compaction" or "all"."""
    if db._bg_error is not None or db._closed and not db._imms:
        return False
    if db._imms and role != "compaction":
        return True
    return role != "flush" and compaction.pick_compaction(db) is not None


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
    meta, garbage = write_level0_table(db, mem, snapshots)
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
            c = compaction.pick_compaction(db)
            if c is None:
                return False
        _run(db, c)
    return True


def _run(db, c) -> None:
    """REQUIRES db._compaction_lock."""
    snapshots = db._snapshots.sequences()
    edit = compaction.run_compaction(db, c, snapshots)
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
                c = compaction.manual_compactions(db, version, lo, hi, level)
            if c is not None:
                _run(db, c)
                if c.output_level == level:
                    return
        level += 1


def gc_value_log(db) -> dict:
    """Collect every sealed value-log file at or over the GC threshold now."""
    db.flush(wait=True)
    before = dict(db._stats)
    _seal_active_vlog_if_due(db)
    with db._compaction_lock:
        while True:
            with db._mutex:
                gc = compaction.gc_candidate_files(db)
                c = compaction.gc_compaction(db, db._versions.current, gc) if gc else None
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
    from .recovery import rotate_vlog

    with db._write_lock:
        vlog = db._vlog
        if vlog is None or not vlog.record_bytes:
            return
        st = db._versions.vlogs.get(vlog.file_number)
        if st is not None and st.garbage / vlog.record_bytes >= db.options.blob_gc_threshold:
            rotate_vlog(db)


def delete_obsolete_files(db) -> None:
    """Delete tables, WALs and value-log files nothing can read any more."""
    fs = db._fs
    with db._mutex:
        vs = db._versions
        live_views = list(db._live_views)
        live_tables = {f.number for _, f in vs.current.all_files()}
        live_refs: set[int] = set()
        oldest_mem = None
        for _, f in vs.current.all_files():
            live_refs.update(f.blob_refs)
        for sv in live_views:
            for _, f in sv.version.all_files():
                live_tables.add(f.number)
                live_refs.update(f.blob_refs)
            for m in sv.memtables:
                if m.first_vlog is not None and not m.is_empty() and (oldest_mem is None or m.first_vlog < oldest_mem):
                    oldest_mem = m.first_vlog
        # an empty memtable pins nothing: what it will hold points into the active file or later
        for m in (db._mem, *db._imms):
            if m.first_vlog is not None and not m.is_empty() and (oldest_mem is None or m.first_vlog < oldest_mem):
                oldest_mem = m.first_vlog
        dead_tables = [n for n in db._table_files if n not in live_tables]
        for n in dead_tables:
            db._table_files.discard(n)
        active_vlog = db._vlog.file_number if db._vlog is not None else None
        dead_vlogs = [
            n
            for n, st in vs.vlogs.items()
            if st.sealed
            and st.garbage >= st.total
            and n != active_vlog
            and n not in live_refs
            and (oldest_mem is None or n < oldest_mem)
        ]
        if dead_vlogs:
            vs.log_and_apply(VersionEdit(deleted_vlogs=sorted(dead_vlogs)))
        dead_wals = [n for n in db._wal_files if n < vs.log_number]
        for n in dead_wals:
            db._wal_files.discard(n)
    for n in dead_tables:
        db._close_table(n)
        _remove(fs, table_file_name(db.path, n))
    for n in dead_vlogs:
        db._vlog_reader.evict(n)
        _remove(fs, vlog_file_name(db.path, n))
        db._stats["vlog_files_deleted"] += 1
    for n in dead_wals:
        _remove(fs, wal_file_name(db.path, n))


def _remove(fs, path: str) -> None:
    if fs.exists(path):
        fs.remove(path)
