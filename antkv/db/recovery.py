"""Opening and closing a database: locking, MANIFEST recovery, WAL replay, file hygiene.

Open, step by step:

1. lock ``LOCK`` (a second opener gets ``LockError``); create the directory if allowed;
2. rebuild the version set from ``CURRENT`` and its MANIFEST;
3. check every table the version lists exists with its recorded size (else ``CorruptionError``);
4. cut back the torn tail of unsealed value-log files, and record their final size;
5. replay every WAL numbered >= the MANIFEST's log number, oldest first, into memtables, as
   ``Options.wal_recovery_mode`` says (:mod:`antkv.db.files.wal_replay`; by default replay stops at the first
   torn record, and at a record whose value pointer reaches past what survived of its value-log
   file: the result is a prefix of history);
6. flush what was replayed to L0 tables, start a new WAL and value-log file; move every file
   the MANIFEST does not list and that is not provably debris to ``lost/`` (a WAL the old
   state may still need is copied there), and save ``OPTIONS``;
7. write one MANIFEST edit recording all of it (the MANIFEST is rolled: a recovered MANIFEST
   is never appended to) -- the **commit point**;
8. delete the files that are provably debris (old WALs and MANIFESTs, outputs of interrupted
   jobs, the originals of WALs copied to ``lost/``; :mod:`antkv.db.files.unaccounted` says how
   debris is proven).  Each file removed or moved aside is *reported* in ``db.stats()``
   (``files_removed_at_open``) and with a warning in the ``antkv`` logger.

An open that refuses -- at any step up to the commit point -- leaves every file as it found
it: :mod:`antkv.db.files.open_changes` records each change before it is made and undoes them
all.  After the commit point nothing refuses the open: step 8 is best effort (what it could not
delete, the next open finds again), and a failing compaction at open
(``max_background_jobs=0``) becomes a background error, as one at any other time.

A directory with antkv files but no ``CURRENT`` is refused (CorruptionError; ``antkv.repair``
rebuilds it).  With ``Options.read_only`` steps 1, 6 and 7 are skipped: the WAL is replayed into
memtables that stay in memory, unsealed value-log files are read up to their valid length, and
nothing is written, deleted or locked.
"""

from __future__ import annotations

import logging
import os
import time

from .files import stats_file
from .files import options_file
from ..base.dbformat import MERGE
from ..base.merge_operator import missing_operator
from ..base.filenames import (
    CURRENT,
    CURRENT_TMP,
    OPTIONS,
    TABLE,
    VLOG,
    WAL,
    current_file_name,
    lock_file_name,
    manifest_file_name,
    parse_file_name,
    table_file_name,
    vlog_file_name,
    wal_file_name,
)
from ..compaction.flush import write_level0_table
from ..errors import CorruptionError, InvalidArgumentError
from ..errors import IOError as AntIOError
from .files.info_log import NEW_FILE, InfoLog
from .files.open_changes import OpenChanges
from .files.unaccounted import DELETE, OwnFiles, check_is_antkv, check_without_current, data_files, keep_copy, move_aside, sort_unlisted
from ..manifest.version_edit import VersionEdit
from ..memtable.memtable import MemTable
from .read_only import WriterMovedOn, manifest_state
from ..record.wal import create_wal
from .files.wal_replay import Replay, active_vlog_length
from .stats import Statistics
from .write_path import WritePath

log = logging.getLogger("antkv")


class Recovery(WritePath, Statistics):
    """Part of :class:`~antkv.db.DB`: opening and closing (calls :class:`~antkv.db.write_path.WritePath` and :class:`~antkv.db.stats.Statistics`)."""

    def _open_db(self) -> None:
        opts = self.options
        fs = self._fs
        path = self.path
        current = current_file_name(path)
        if fs.is_dir(path):
            check_is_antkv(fs, path, "open")  # another engine's directory is refused, unchanged
        if opts.read_only:
            if not fs.exists(current):
                if fs.is_dir(path) and data_files(fs, path):
                    check_without_current(fs, path)  # raises: files, but no CURRENT naming them
                raise InvalidArgumentError(f"no antkv database at {path} (read_only open creates nothing)")
            before = manifest_state(fs, path)
            try:
                self._open_locked(fs, True)
            except (CorruptionError, AntIOError) as e:
                moved_on = manifest_state(fs, path) != before
                self._release_resources(keep_pins=moved_on)
                if moved_on:
                    raise WriterMovedOn(e) from e  # a live writer moved on: open again (read_only.py)
                raise
            except BaseException:
                self._release_resources()
                raise
            return
        created_dir = not fs.is_dir(path)
        if created_dir:
            if fs.exists(path):
                raise InvalidArgumentError(f"{path} exists and is not a directory")
            if not opts.create_if_missing:
                raise InvalidArgumentError(f"database {path} does not exist (create_if_missing is False)")
            fs.mkdirs(path)
            fs.sync_dir(os.path.dirname(path) or ".")
        lock_existed = fs.exists(lock_file_name(path))
        try:
            self._lock = fs.lock(lock_file_name(path))
        except Exception:
            self._remove_created_dir(fs, created_dir)
            raise
        changes = None
        try:
            started = time.monotonic()
            changes = OpenChanges(fs, path)
            changes.replaces(CURRENT, CURRENT_TMP, OPTIONS, OPTIONS + ".tmp")
            exists = fs.exists(current)
            if not exists:
                moved = check_without_current(fs, path, changes.moved)  # raises when the directory holds data
                if moved:
                    log.warning("%s: no CURRENT; moved the data-less files of an interrupted creation to lost/: %s",
                                path, ", ".join(moved))
            self._info_log = InfoLog(fs, path)  # written from start(): a refused open writes nothing

            def announce(number: int) -> None:
                changes.handed_out(number)  # the open's own files: removed if it refuses
                self._announce_file_number(number)

            self._versions.announce = announce
            self._open_locked(fs, exists, changes)
            self._versions.announce = self._announce_file_number
            self._info_log.start()
            s = self._stats
            self._event(
                "open", f"{'recovered' if exists else 'created'} in {time.monotonic() - started:.3f} s: last sequence "
                f"{self._last_seq}, {len(self._versions.current.levels[0])} L0 tables; dropped by recovery: "
                f"{s['recovery_dropped'] or 'nothing'}; files removed or moved aside: {s['files_removed_at_open'] or 'none'}; "
                f"options changed: {s['options_changed'] or 'none'}"
            )
        except Exception:
            # before the commit point: put every file back, LOCK included
            self._release_resources(undo=changes, remove_lock=not lock_existed)
            self._remove_created_dir(fs, created_dir)
            raise
        except BaseException:
            self._release_resources()
            raise

    def _remove_created_dir(self, fs, created_dir: bool) -> None:
        """A refused open: remove the database directory it created, if it is empty."""
        try:
            if created_dir and fs.is_dir(self.path) and not fs.listdir(self.path):
                fs.rmdir(self.path)
        except Exception as e:  # noqa: BLE001 - best effort while failing an open
            log.warning("%s: undoing a refused open: %s", self.path, e)

    def _open_locked(self, fs, exists: bool, changes: OpenChanges | None = None) -> None:
        opts = self.options
        path = self.path
        if exists and opts.error_if_exists:
            raise InvalidArgumentError(f"database {path} already exists (error_if_exists is True)")
        if not exists and not opts.create_if_missing:
            raise InvalidArgumentError(f"database {path} does not exist (create_if_missing is False)")
        self._lifetime_base = stats_file.load(fs, path)
        vs = self._versions
        recovered_manifest = None
        if exists:
            # InvalidArgumentError when the MANIFEST has more levels than num_levels
            attempts = self._read_only_attempts
            progress = vs.recover(attempts.manifest if attempts is not None else None)
            if attempts is not None:
                attempts.manifest = progress  # a retry of this read-only open reads only the edits after it
            recovered_manifest = vs.manifest_number
            if self._pinned is not None:
                self._pin_recovered_state(vs)
            used_levels = 1 + max((level for level, _ in vs.current.all_files()), default=0)
            changed = options_file.check(options_file.load(fs, path), opts, used_levels)
            self._stats["options_changed"] = changed
        names = fs.listdir(path)
        on_disk = {}
        for name in names:
            parsed = parse_file_name(name)
            if parsed is not None:
                on_disk[parsed] = name
                vs.mark_file_number_used(parsed[1])
        for _, f in vs.current.all_files():
            if (TABLE, f.number) not in on_disk and not (self._pinned is not None and self._pinned.pinned(
                    table_file_name(path, f.number))):
                if vs.recovered_torn_tail is not None:
                    # the MANIFEST lost its last edits (e.g. truncated): the table was most
                    # likely deleted by one of them -- the damage is in the MANIFEST
                    raise CorruptionError(
                        f"the MANIFEST ends in a torn record, so its last edits are lost: it still lists table "
                        f"{f.number:06d}.sst, which a lost edit had replaced. Run `antkv repair {path}`",
                        manifest_file_name(path, vs.manifest_number), vs.recovered_torn_tail,
                    )
                raise CorruptionError(f"table {f.number:06d}.sst listed in the MANIFEST is missing", table_file_name(path, f.number))
            size = fs.size(table_file_name(path, f.number))
            if size != f.size:
                raise CorruptionError(
                    f"table {f.number:06d}.sst has {size} bytes, the MANIFEST says {f.size}", table_file_name(path, f.number)
                )
        edit = VersionEdit()
        wal_numbers = sorted(n for (kind, n) in on_disk if kind == WAL and n >= vs.log_number)
        own = OwnFiles(fs, path)  # read after the listing: a live writer logs a number first
        # a WAL after the one the MANIFEST names that the LOG does not record writing is
        # replayed only if its records continue the database's (files/wal_replay.py)
        unproven = {n for n in wal_numbers if n != vs.log_number and own.numbers and n not in own.numbers}
        # read-only, maybe beside a live writer: read the WALs BEFORE measuring the value-log
        # files, so every value a WAL record points to (appended before the record) is counted
        wal_data = ({n: fs.read_all(wal_file_name(path, n)) for n in wal_numbers}
                    if opts.read_only else None)
        # ... and, beside a writer that holds the LOCK, a torn last record of the newest WAL or
        # of the active value-log file is a write in flight, not a loss: not reported as dropped
        live_writer = opts.read_only and fs.is_locked(lock_file_name(path)) is True
        vlog_lengths = self._recover_vlogs(fs, vs, on_disk, edit, live_writer, changes)
        self._last_seq = vs.last_sequence
        self._memtable_counter = 0
        # --- WAL replay ---
        if exists and vs.log_number not in wal_numbers:
            # The WAL an edit names is made durable (directory sync) before the edit is written and
            # deleted only after a later edit moves past it: if it is missing, MANIFEST edits were
            # lost (a damaged last record taken for a torn tail), and with them acknowledged data.
            raise CorruptionError(f"WAL {vs.log_number:06d}.log named by the MANIFEST is missing", wal_file_name(path, vs.log_number))
        mem = self._new_memtable(0)
        replay = Replay(fs, path, wal_numbers, vlog_lengths, vs.vlogs, opts.wal_recovery_mode, wal_data, live_writer,
                        unproven, vs.last_sequence)
        for seq, ops in replay:
            if opts.merge_operator is None and any(kind == MERGE for kind, _, _ in ops):
                raise missing_operator(f"the WAL of database {path}")
            mem.add_batch(seq, ops)
            self._last_seq = max(self._last_seq, seq + len(ops) - 1)
            if mem.memory >= opts.write_buffer_size and not opts.read_only:
                self._flush_recovered(mem, edit)
                mem = self._new_memtable(0)
        self._stats["recovery_dropped"] = replay.dropped + self._stats["recovery_dropped"]
        if opts.read_only:
            # everything stays in memory; nothing is written, deleted or locked
            vs.last_sequence = self._last_seq = max(vs.last_sequence, self._last_seq)
            self._mem = mem
            self._imms = []
            with self._mutex:
                self._install_super_version()
            return
        if not mem.is_empty():
            self._flush_recovered(mem, edit)
        self._count_unreferenced_vlog_records(vs, edit, keep_orphans=bool(replay.not_whole), changes=changes)
        vs.last_sequence = max(vs.last_sequence, self._last_seq)
        self._last_seq = vs.last_sequence
        # --- fresh WAL and value-log file, one MANIFEST edit for all of it ---
        new_log = vs.new_file_number()
        self._wal = create_wal(fs, wal_file_name(path, new_log), vs.last_sequence + 1)
        self._wal_append = self._wal.file.append
        edit.log_number = new_log
        if opts.enable_blob_files:
            self._start_vlog(edit)
        edit.last_sequence = vs.last_sequence
        own.replayed_wals = replay.replayed_whole
        unlisted = sort_unlisted(on_disk, vs, own, log_number=new_log, manifest_number=vs.next_file_number,
                                 recovered_manifest=recovered_manifest, foreign_wals=replay.foreign,
                                 partial_wals=replay.not_whole)
        removed, debris = self._move_aside_at_open(fs, unlisted, changes, needed_from=vs.log_number)
        options_file.save(fs, path, opts)
        vs.log_and_apply(edit)  # THE COMMIT POINT: rolls to a new MANIFEST and swaps CURRENT (syncs the directory)
        changes.committed = True
        self._mem = self._new_memtable(new_log)
        self._imms = []
        self._table_files = {f.number for _, f in vs.current.all_files()}
        self._wal_files = {new_log}
        with self._mutex:
            self._install_super_version()
        self._remove_debris_at_open(fs, removed, debris)
        try:
            self._delete_obsolete_files()  # e.g. empty or fully-garbage value-log files sealed above
        except Exception as e:  # noqa: BLE001 - after the commit point nothing refuses the open
            log.warning("%s: deleting obsolete files at open failed: %s", path, e)
            self._set_bg_error(e)
        if self._wbm is not None:
            self._wbm_token = self._wbm.register(self._wbm_flush_callback, self._wbm_oldest)

    def _pin_recovered_state(self, vs) -> None:
        """Read-only: hold every table and value-log file the recovered state lists, at once
        (a live writer deletes them only after its MANIFEST moved on: then this open is tried
        again, read_only.py), and let go of those an earlier attempt held that it does not."""
        tables = [table_file_name(self.path, f.number) for _, f in vs.current.all_files()]
        vlogs = [vlog_file_name(self.path, n) for n in vs.vlogs]
        self._pinned.keep_only(tables + vlogs)
        for p in tables + vlogs:
            try:
                self._pinned.pin(p)
            except AntIOError:
                pass  # missing: the checks below say what that means

    def _announce_file_number(self, number: int) -> None:
        """Record in the info LOG that this database is about to create a file numbered
        ``number`` (the evidence :mod:`antkv.db.files.unaccounted` needs to delete it as debris)."""
        self._info_log.event(NEW_FILE, f"{number:06d}")

    def _new_memtable(self, log_number: int) -> MemTable:
        self._memtable_counter += 1
        vlog = self._vlog
        return MemTable(self._memtable_counter, log_number, vlog.file_number if vlog is not None else None)

    def _recover_vlogs(self, fs, vs, on_disk, edit, live_writer: bool = False, changes=None) -> dict[int, int]:
        """Valid length of every value-log file; unsealed ones are cut back and sealed in ``edit``
        (read-only: only measured; beside a live writer a torn tail is a record in flight)."""
        lengths: dict[int, int] = {}
        read_only = self.options.read_only
        for number, st in sorted(vs.vlogs.items()):
            p = vlog_file_name(self.path, number)
            if (VLOG, number) not in on_disk and not (self._pinned is not None and self._pinned.pinned(p)):
                if st.sealed and st.garbage >= st.total:
                    edit.deleted_vlogs.append(number)  # deleted after its MANIFEST edit; finish the job
                    if read_only:
                        del vs.vlogs[number]  # in memory only: nothing of it is left to read
                    continue
                raise CorruptionError(f"value-log file {number:06d}.vlog listed in the MANIFEST is missing", p)
            if st.sealed:
                lengths[number] = fs.size(p)
                continue
            length, record_bytes, dropped = active_vlog_length(fs, p, self.options.wal_recovery_mode)
            lengths[number] = length
            if dropped is not None and live_writer and "damaged" not in dropped:
                log.info("read-only open beside a live writer: %s (a record being written)", dropped)
            elif dropped is not None:
                self._stats["recovery_dropped"].append(dropped)
                log.warning("recovery: %s", dropped)
            if read_only:
                st.total = record_bytes  # in memory only, for stats(); the file stays unsealed
                self._recovered_vlog_lengths[number] = length  # what verify() checks of it
                continue
            if length < fs.size(p):
                if dropped is not None and "damaged" in dropped:
                    # damage, not a torn tail: keep the whole file aside before cutting it back
                    target = keep_copy(fs, self.path, os.path.basename(p), changes.copied)
                    self._event("copied-to-lost", f"{os.path.basename(p)}: {dropped}; a copy is {target}")
                changes.cut_back(p, length)
                fs.truncate(p, length)
            # after a process kill its unsynced tail is intact and WAL records replayed now may
            # point into it; they are about to be flushed into a synced table, so the bytes they
            # point at must become durable first
            fs.sync_file(p)
            edit.sealed_vlogs.append((number, record_bytes))
        return lengths

    def _count_unreferenced_vlog_records(self, vs, edit: VersionEdit, keep_orphans: bool, changes) -> None:
        """Count as garbage the records of the value-log files this recovery sealed that no
        table points to.

        Every byte of a value-log file is either referenced by a table (its ``blob_refs``), or
        was counted as garbage when a flush or compaction dropped the pointer to it: total =
        garbage + referenced.  After a crash the file the database was writing can also hold
        records no WAL record points to (a ``disable_wal`` write, or a WAL tail lost with the
        process); nothing would ever count those, and the file could never be collected.  Every
        replayed write is in a table by now, so what is neither referenced nor garbage is such a
        record.  (Counting too much could only make GC relocate a file early: a file is deleted
        only when no table points into it.)

        ``keep_orphans``: recovery dropped intact records of a WAL (that WAL is kept in
        ``lost/``); the values its pointers name are among these records, so a file holding
        any is first copied to ``lost/`` too."""
        for number, total in edit.sealed_vlogs:
            st = vs.vlogs.get(number)
            garbage = (st.garbage if st is not None else 0) + sum(g for n, g in edit.vlog_garbage if n == number)
            referenced = sum(f.blob_refs.get(number, 0) for _, f in vs.current.all_files())
            referenced += sum(f.blob_refs.get(number, 0) for _, f in edit.new_tables)
            orphaned = total - garbage - referenced
            if orphaned > 0 and keep_orphans:
                name = os.path.basename(vlog_file_name(self.path, number))
                target = keep_copy(self._fs, self.path, name, changes.copied)
                self._event("copied-to-lost", f"{name}: holds {orphaned} bytes of records of writes recovery "
                                              f"dropped; a copy is {target}")
            if orphaned > 0:
                log.info("value-log file %06d.vlog: %d bytes of records no write survived for, counted as garbage",
                         number, orphaned)
                edit.vlog_garbage.append((number, orphaned))

    def _flush_recovered(self, mem: MemTable, edit: VersionEdit) -> None:
        meta, garbage = write_level0_table(self._jobs, self._vlog, mem, [], self._stats)
        if meta is not None:
            edit.new_tables.append((0, meta))
        for number, nbytes in garbage.items():
            edit.vlog_garbage.append((number, nbytes))

    def _start_vlog(self, edit: VersionEdit) -> None:
        from ..vlog.writer import ValueLogWriter

        vs = self._versions
        number = vs.new_file_number()
        self._vlog = ValueLogWriter.create_in(self._fs, self.path, number, compression=self.options.blob_compression)
        edit.new_vlogs.append(number)

    def _move_aside_at_open(self, fs, unlisted, changes: OpenChanges, needed_from: int):
        """Before the commit point: move every file of ``unlisted`` that is not provable debris
        to ``lost/`` -- a WAL numbered from ``needed_from`` on (the old state would replay it)
        is copied there instead, its original deleted after the commit point.  Returns the
        report lines and the names to delete after the commit point."""
        removed, debris = [], []
        for name, action, reason in unlisted:
            kind, number = parse_file_name(name)
            if action == DELETE:
                debris.append((name, reason))
            elif kind == WAL and number >= needed_from:
                target = keep_copy(fs, self.path, name, changes.copied)
                removed.append(f"{name}: {reason}; moved to {target}")
                debris.append((name, None))
                self._event("moved-to-lost", f"{name}: {reason}; now {target}")
            else:
                target = move_aside(fs, self.path, name, changes.moved)
                removed.append(f"{name}: {reason}; moved to {target}")
                self._event("moved-to-lost", f"{name}: {reason}; now {target}")
            if action != DELETE:
                log.warning("moved aside at open: %s (%s)", name, reason)
        return removed, debris

    def _remove_debris_at_open(self, fs, removed: list[str], debris) -> None:
        """After the commit point: delete provable debris (``(name, reason)``; reason None: a
        WAL whose copy is in ``lost/``) and an unfinished ``CURRENT.tmp``.  Best effort: a file
        that cannot be deleted now is debris the next open deletes."""
        for name, reason in debris + [(CURRENT_TMP, "unfinished CURRENT swap")]:
            p = os.path.join(self.path, name)
            try:
                if name == CURRENT_TMP and not fs.exists(p):
                    continue
                fs.remove(p)
            except Exception as e:  # noqa: BLE001 - after the commit point nothing refuses the open
                log.warning("%s: could not delete %s at open (%s); the next open will", self.path, name, e)
                continue
            if reason is not None:
                removed.append(f"{name}: {reason}")
                self._event("removed", f"{name}: {reason}")
                if name != CURRENT_TMP and parse_file_name(name)[0] in (TABLE, VLOG):
                    log.warning("removed at open: %s (%s)", name, reason)
        self._stats["files_removed_at_open"] = removed
        if removed:
            try:
                fs.sync_dir(self.path)
            except Exception as e:  # noqa: BLE001 - as above
                log.warning("%s: syncing the directory after deleting debris at open failed: %s", self.path, e)

    def _release_resources(self, keep_pins: bool = False, undo: OpenChanges | None = None,
                           remove_lock: bool = False) -> None:
        """Close every file the open holds (``keep_pins``: not the files a read-only open held,
        which the next attempt of the same open reuses); ``undo``: then, still holding the
        LOCK, put back what a refused open changed, and (``remove_lock``) remove the LOCK file
        it created -- while holding it, so no other opener can be holding that file."""
        for what, w in (("the WAL", self._wal), ("the value log", self._vlog)):  # None when read-only
            if w is not None:
                try:
                    w.close()
                except Exception:  # noqa: BLE001 - best effort while failing an open
                    log.debug("close of %s failed during a failed open", what)
        self._versions.close()
        self._vlog_reader.close()
        if self._pinned is not None and not keep_pins:
            self._pinned.release()
        if self._info_log is not None:
            self._info_log.close()
            self._info_log = None
        if undo is not None:
            try:
                undo.undo()
            except Exception as e:  # noqa: BLE001 - the undo logs what failed; the LOCK is still released
                log.warning("%s: undoing a refused open failed: %s", self.path, e)
        if self._lock is not None and remove_lock:
            try:
                fs_lock_path = lock_file_name(self.path)
                self._fs.remove(fs_lock_path)
            except Exception as e:  # noqa: BLE001 - best effort while failing an open
                log.warning("%s: undoing a refused open: removing LOCK failed: %s", self.path, e)
        if self._lock is not None:
            self._fs.unlock(self._lock)
            self._lock = None

    def _close_db(self) -> None:
        """Flush nothing (the WAL holds the memtable), sync the WAL, release files and the lock."""
        try:
            if self._bg_error is None and not self.options.read_only:
                try:
                    if self._vlog is not None:
                        self._vlog.sync()
                    self._wal.sync()
                    self._sync_wal_names()
                except Exception as e:  # noqa: BLE001 - reported below, resources still released
                    log.warning("sync at close failed: %s", e)
                self._delete_obsolete_files(closing=True)
                try:
                    life = self._collect_stats()["lifetime"]
                    self._event("close", f"lifetime: {life['user_bytes_written']} user bytes, write amplification {life['write_amplification']:.3f}")
                    stats_file.save(self._fs, self.path, life)
                except Exception as e:  # noqa: BLE001 - statistics never fail a close
                    log.warning("saving the lifetime statistics failed: %s", e)
            self._table_cache.close()
            if self._pool is not None:
                self._pool.shutdown(wait=True)
        finally:
            if self._wbm is not None and self._wbm_token is not None:
                self._wbm.unregister(self._wbm_token)
                if self._wbm_reserved:
                    # what was reported for the mutable memtable is still counted as mutable:
                    # move it to "being freed" first, then free everything (RocksDB's FreeMem)
                    mutable_part = self._wbm_reserved - sum(m.memory for m in self._imms)
                    if mutable_part > 0:
                        self._wbm.schedule_free_mem(mutable_part)
                    self._wbm.free_mem(self._wbm_reserved)
                    self._wbm_reserved = 0
            self._release_resources()
