"""Background work: flushing immutable memtables, compacting, value-log GC, ``compact_range``.

:class:`Background` is part of :class:`~antkv.db.DB`.  Background threads run ``_do_one_step``
while ``_has_work`` says so, each in a *role*: with ``max_background_jobs >= 2`` one thread
flushes and one compacts (so a long compaction never holds up a flush), with 1 a single thread
does both, flushes first; with 0 the writer runs ``_do_all_work`` inline.  Flushes go oldest memtable first (the WAL log number only
moves forward); one compaction runs at a time (``_compaction_lock``: also taken by
``compact_range`` and ``gc_value_log``).  The jobs themselves may run in a worker process
(:mod:`antkv.compaction.worker`).  After each step, ``_delete_obsolete_files``
(:mod:`antkv.db.obsolete_files`) deletes the files nothing can read any more.
"""

from __future__ import annotations

import logging
import time

from ..base.filenames import table_file_name
from ..base.progress import progress_callback
from ..compaction import picker
from ..compaction.flush import write_level0_table
from ..compaction.run import run_compaction
from ..errors import BackgroundError, DBClosedError
from ..errors import IOError as AntIOError
from ..manifest.version_edit import VersionEdit
from .obsolete_files import ObsoleteFiles

log = logging.getLogger("antkv")


class Background(ObsoleteFiles):
    """Part of :class:`~antkv.db.DB`: the background work (calls
    :class:`~antkv.db.obsolete_files.ObsoleteFiles`)."""

    def _schedule_work(self) -> None:
        """REQUIRES _mutex.  Wake the background thread if there is anything to do."""
        self._bg_cv.notify_all()

    def _run_inline_work(self) -> None:
        """max_background_jobs == 0: flush and compact now, in the caller's thread."""
        try:
            self._do_all_work()
        except AntIOError as e:
            self._set_bg_error(e)
            raise

    def _warm_up_workers(self) -> None:
        """Have the flushing background thread start its worker process now, ahead of the first
        flush: starting a worker takes far longer than a write, and the first flush would otherwise
        wait for it while the writers fill the next memtable (and stall when it is full;
        ``python -m bench.bench_small --workloads fillrandom`` measures the load it protects)."""
        with self._mutex:
            self._warm_up_pending = True
            self._bg_cv.notify_all()

    def _bg_loop(self, role: str) -> None:
        flushes = role != "compaction"  # the thread whose worker is started ahead of time
        while True:
            with self._mutex:
                while not self._bg_shutdown and not self._has_work(role) and not (flushes and self._warm_up_pending):
                    self._bg_cv.wait()
                if self._bg_shutdown:
                    return
                warm_up = flushes and self._warm_up_pending
                if warm_up:
                    self._warm_up_pending = False
                else:
                    self._bg_running += 1
            if warm_up:
                self._jobs.start_worker()
                continue
            try:
                self._do_one_step(role)
            except BaseException as e:  # noqa: BLE001 - recorded; writers see it as BackgroundError
                self._set_bg_error(e)
            finally:
                with self._mutex:
                    self._bg_running -= 1
                    self._bg_cv.notify_all()
                if self._bg_error is not None:
                    # idle until resume() clears the error (then go on) or the database closes
                    with self._mutex:
                        while not self._bg_shutdown and self._bg_error is not None:
                            self._bg_cv.wait()

    def _wait_for_background(self, condition) -> None:
        with self._mutex:
            while not condition():
                if self._bg_error is not None:
                    raise BackgroundError(
                        f"database is read-only after an earlier error: {self._bg_error}", None, self.path
                    ) from self._bg_error
                if self._closed:
                    raise DBClosedError(f"database {self.path} is closed")
                self._bg_cv.wait(0.05)


    def _has_work(self, role: str = "all") -> bool:
        """REQUIRES self._mutex.  ``role``: "flush", "compaction" or "all"."""
        if self._bg_error is not None or self._closed and not self._imms:
            return False
        if self._next_flush(role) is not None:
            return True
        return role != "flush" and self._pick_compaction() is not None

    def _next_flush(self, role: str):
        """REQUIRES self._mutex.  The immutable memtable thread ``role`` should flush now, or None.

        Memtables are flushed oldest first, and their edits are logged in that order.  The
        flushing thread (or the only one) takes the oldest one nobody is flushing.  The
        compaction thread also flushes, but only the next memtable in line after the one the
        flushing thread is working on, and only when a ``flush(wait=True)`` call waits for it
        (its caller writes nothing meanwhile), so it runs in this process alongside the oldest
        one's flush in the worker; its edit waits until the oldest one's is logged
        (``_flush_oldest``).  A settle after a bulk load ends with both memtables' flushes at
        once instead of one after the other.  (As with a compaction running beside a flush, a
        crash between the two edits leaves the newer table unnamed below the recorded next file
        number: the next open moves it to ``lost/``.)"""
        imms = self._imms
        if role != "compaction":
            for mem in reversed(imms):
                if not mem.flushing:
                    return mem
            return None
        if len(imms) >= 2 and imms[-1].flushing and not imms[-2].flushing and imms[-2].flush_waited:
            if not any(m.flushing for m in imms[:-2]):
                return imms[-2]
        return None

    def _pick_compaction(self):
        """REQUIRES self._mutex.  The most urgent compaction now (nothing changes: asking is free)."""
        vlog = self._vlog
        vs = self._versions
        return picker.pick_compaction(
            vs.current, self.options, vs.vlogs, vlog.file_number if vlog is not None else None, self._compact_cursor
        )

    def _do_one_step(self, role: str = "all") -> None:
        with self._mutex:
            flush = self._next_flush(role) is not None
        if flush:
            self._flush_oldest(role)
        else:
            self._compact_once()

    def _do_all_work(self) -> None:
        while self._imms:
            self._flush_oldest()
        while self._compact_once():
            pass

    def _flush_oldest(self, role: str = "all") -> None:
        """Flush the memtable :meth:`_next_flush` names for ``role``; log its edit once every
        older memtable's edit is logged (nothing is logged if one of those flushes failed: its
        table is removed, the database has a background error)."""
        with self._mutex:
            mem = self._next_flush(role)
            if mem is None:
                return
            mem.flushing = True
            created = set(self._wal_names_unsynced)  # WALs the job's directory sync will cover
            self._bg_cv.notify_all()  # the compaction thread may flush the next memtable now
        try:
            self._flush_memtable(mem, created)
        finally:
            with self._mutex:
                mem.flushing = False
                self._bg_cv.notify_all()

    def _flush_memtable(self, mem, created: set[int]) -> None:
        started = time.monotonic()
        snapshots = self._snapshots.sequences()
        with self._mutex:
            # nothing older anywhere: while an immutable memtable waits no ingest adds a table,
            # and tables come from older memtables' flushes only, which would come first
            bottommost = self._imms[-1] is mem and next(self._versions.current.all_files(), None) is None
        meta, garbage = write_level0_table(self._jobs, self._vlog, mem, snapshots, self._stats, bottommost)
        with self._mutex:
            self._wal_names_unsynced.difference_update(created)
            while self._imms[-1] is not mem and self._bg_error is None:  # an older flush runs
                self._bg_cv.wait()
            if self._imms[-1] is not mem:  # the older flush failed: this table is never logged
                if meta is not None:
                    self._fs.remove(table_file_name(self.path, meta.number))
                return
            edit = VersionEdit()
            if meta is not None:
                edit.new_tables.append((0, meta))
            edit.vlog_garbage.extend(sorted(garbage.items()))
            remaining = self._imms[:-1]
            edit.log_number = remaining[-1].log_number if remaining else self._mem.log_number
            if edit.log_number in self._wal_names_unsynced:  # created during the job
                self._sync_wal_names()  # a durable edit must never name a WAL a power loss can take
            self._apply_edit(edit, on_success=self._imms.pop)
            if self._wbm is not None:
                self._wbm_reserved -= mem.memory
                self._wbm.free_mem(mem.memory)
            self._bg_cv.notify_all()
        self._event(
            "flush", f"memtable of {mem.memory} B -> "
            + (f"L0 {meta.number:06d}.sst {meta.size} B, {meta.num_entries} entries" if meta is not None else "no table")
            + f", {time.monotonic() - started:.3f} s"
        )
        self._delete_obsolete_files()

    def _compact_once(self) -> bool:
        """Run the most urgent compaction, if any; True when one ran."""
        with self._compaction_lock:
            with self._mutex:
                c = self._pick_compaction()
                if c is None:
                    return False
                if c.cursor is not None:
                    self._compact_cursor[c.level] = c.cursor  # it runs now: the round-robin moves on
            self._run_picked(c)
        return True

    def _run_picked(self, c) -> None:
        """REQUIRES self._compaction_lock."""
        snapshots = self._snapshots.sequences()
        started = time.monotonic()
        edit = run_compaction(self._compaction_env, self._versions.current, c, snapshots)
        with self._mutex:
            self._apply_edit(edit)
            self._bg_cv.notify_all()
        self._event(
            "compaction", f"L{c.level} -> L{c.output_level}: {len(edit.deleted_tables)} tables in, "
            f"{len(edit.new_tables)} out ({sum(m.size for _, m in edit.new_tables)} B), {time.monotonic() - started:.3f} s"
        )
        self._delete_obsolete_files()

    def _compact_range_levels(self, lo, hi, progress=None) -> None:
        """Compact ``[lo, hi]`` level by level down to the last level holding data (a step of
        ``progress``: one level)."""
        report = progress_callback(progress)
        nlevels = len(self._versions.current.levels)
        report(0, nlevels)
        level = 0
        while level < nlevels:
            with self._compaction_lock:
                with self._mutex:
                    self._stop_if_closing()
                    version = self._versions.current
                    c = picker.manual_compactions(version, lo, hi, level, lambda f: self._table_has_deletions(f))
                if c is not None:
                    self._run_picked(c)
                    if c.output_level == level:
                        break
            level += 1
            report(level, nlevels)
        report(nlevels, nlevels)

    def _table_has_deletions(self, f) -> bool:
        props = (f.reader or self._open_table(f)).properties
        # merge operands too: at the bottom they become one value
        return props.num_deletions > 0 or props.num_range_deletions > 0 or props.num_expiring > 0 or props.num_merges > 0
