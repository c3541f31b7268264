"""Opening and closing a database: locking, MANIFEST recovery, WAL replay, file hygiene.

Open, step by step:

1. lock ``LOCK`` (a second opener gets ``LockError``); create the directory if allowed;
2. rebuild the version set from ``CURRENT`` and its MANIFEST;
3. check every table the version lists exists with its recorded size (else ``CorruptionError``);
4. cut back the torn tail of unsealed value-log files, and record their final size;
5. replay every WAL numbered >= the MANIFEST's log number, oldest first, into memtables.
   Replay stops at the first torn record, and also at a record whose value pointer reaches past
   what survived of its value-log file (its large value was lost with the crash, so that write
   and everything after it never became durable): the result is always a prefix of history;
6. flush what was replayed to L0 tables, start a new WAL and value-log file, and write one
   MANIFEST edit recording all of it (the MANIFEST is rolled: a recovered MANIFEST is never
   appended to);
7. delete files nothing refers to any more (old WALs, old MANIFESTs, tables and value-log files
   left by an interrupted flush or compaction); each one is *reported* in ``db.stats()``
   (``files_removed_at_open``) and with a warning in the ``antkv`` logger.
"""

from __future__ import annotations

import logging
import os

from .base.dbformat import RANGE_DELETION, VALUE_POINTER
from .base.expiry import pointer_in
from .base.filenames import (
    CURRENT_TMP,
    MANIFEST,
    TABLE,
    VLOG,
    WAL,
    current_file_name,
    lock_file_name,
    parse_file_name,
    table_file_name,
    vlog_file_name,
    wal_file_name,
)
from .compaction.flush import write_level0_table
from .errors import CorruptionError, InvalidArgumentError
from .manifest.version_edit import VersionEdit
from .memtable.memtable import MemTable
from .record.batch import decode_batch
from .record.log_format import LogReader, LogWriter

log = logging.getLogger("antkv")


def _pointers_survived(ops, vlog_lengths: dict[int, int], vlogs, wal_path: str, wal_offset: int) -> bool:
    """False when a value pointer reaches past the recovered tail of the active value-log file
    (lost in the crash).  Only that file can lose a tail: a pointer past the end of a sealed
    file, or into a file the MANIFEST does not list, is damage (CorruptionError)."""
    from .vlog.pointer import decode_pointer

    for kind, _key, value in ops:
        if kind >= VALUE_POINTER:  # a pointer, or an expiring entry that may wrap one
            pointer = pointer_in(kind, value)
            if pointer is None:
                continue
            fnum, offset, size = decode_pointer(pointer)
            if offset + size > vlog_lengths.get(fnum, -1):
                st = vlogs.get(fnum)
                if st is None or st.sealed:
                    raise CorruptionError(
                        f"WAL record points to {size} bytes at {offset} of value-log file {fnum:06d}.vlog, "
                        f"which is {'not in the MANIFEST' if st is None else 'sealed and shorter'}",
                        wal_path,
                        wal_offset,
                    )
                return False
    return True


class Recovery:
    """Part of :class:`~antkv.db.DB` (whose ``__init__`` declares the fields): opening and closing."""

    def _open_db(self) -> None:
        opts = self.options
        fs = self._fs
        path = self.path
        current = current_file_name(path)
        if not fs.is_dir(path):
            if fs.exists(path):
                raise InvalidArgumentError(f"{path} exists and is not a directory")
            if not opts.create_if_missing:
                raise InvalidArgumentError(f"database {path} does not exist (create_if_missing is False)")
            fs.mkdirs(path)
            fs.sync_dir(os.path.dirname(path) or ".")
        self._lock = fs.lock(lock_file_name(path))
        try:
            self._open_locked(fs, fs.exists(current))
        except BaseException:
            self._release_resources()
            raise

    def _open_locked(self, fs, exists: bool) -> None:
        opts = self.options
        path = self.path
        if exists and opts.error_if_exists:
            raise InvalidArgumentError(f"database {path} already exists (error_if_exists is True)")
        if not exists and not opts.create_if_missing:
            raise InvalidArgumentError(f"database {path} does not exist (create_if_missing is False)")
        vs = self._versions
        if exists:
            vs.recover()  # InvalidArgumentError when the MANIFEST has more levels than num_levels
        names = fs.listdir(path)
        on_disk = {}
        for name in names:
            parsed = parse_file_name(name)
            if parsed is not None:
                on_disk[parsed] = name
                vs.mark_file_number_used(parsed[1])
        for _, f in vs.current.all_files():
            if (TABLE, f.number) not in on_disk:
                raise CorruptionError(f"table {f.number:06d}.sst listed in the MANIFEST is missing", table_file_name(path, f.number))
            size = fs.size(table_file_name(path, f.number))
            if size != f.size:
                raise CorruptionError(
                    f"table {f.number:06d}.sst has {size} bytes, the MANIFEST says {f.size}", table_file_name(path, f.number)
                )
        edit = VersionEdit()
        vlog_lengths = self._recover_vlogs(fs, vs, on_disk, edit)
        self._last_seq = vs.last_sequence
        self._memtable_counter = 0
        # --- WAL replay ---
        wal_numbers = sorted(n for (kind, n) in on_disk if kind == WAL and n >= vs.log_number)
        if exists and vs.log_number not in wal_numbers:
            # The WAL an edit names is made durable (directory sync) before the edit is written and
            # deleted only after a later edit moves past it: if it is missing, MANIFEST edits were
            # lost (a damaged last record taken for a torn tail), and with them acknowledged data.
            raise CorruptionError(f"WAL {vs.log_number:06d}.log named by the MANIFEST is missing", wal_file_name(path, vs.log_number))
        mem = self._new_memtable(0)
        stopped = False
        for number in wal_numbers:
            wal_path = wal_file_name(path, number)
            if stopped:
                break
            reader = LogReader(fs.read_all(wal_path), wal_path)
            for offset, payload in reader:
                seq, ops = decode_batch(payload, wal_path, offset)
                if not _pointers_survived(ops, vlog_lengths, vs.vlogs, wal_path, offset):
                    log.warning("%s: replay stops at offset %d: a value it points to was lost in the crash", wal_path, offset)
                    stopped = True
                    break
                for i, (kind, key, value) in enumerate(ops):
                    if kind == RANGE_DELETION:
                        mem.add_range_deletion(seq + i, key, value)
                    else:
                        mem.add(seq + i, kind, key, value)
                self._last_seq = max(self._last_seq, seq + len(ops) - 1)
                if mem.memory >= opts.write_buffer_size:
                    self._flush_recovered(mem, edit)
                    mem = self._new_memtable(0)
            if reader.torn_tail_offset is not None:
                log.warning("%s: torn tail at offset %d dropped", wal_path, reader.torn_tail_offset)
                stopped = True
        if not mem.is_empty():
            self._flush_recovered(mem, edit)
        self._count_unreferenced_vlog_records(vs, edit)
        vs.last_sequence = max(vs.last_sequence, self._last_seq)
        self._last_seq = vs.last_sequence
        # --- fresh WAL and value-log file, one MANIFEST edit for all of it ---
        new_log = vs.new_file_number()
        self._wal = LogWriter(fs.create(wal_file_name(path, new_log)))
        self._wal_append = self._wal.file.append
        edit.log_number = new_log
        if opts.enable_blob_files:
            self._start_vlog(edit)
        edit.last_sequence = vs.last_sequence
        vs.log_and_apply(edit)  # rolls to a new MANIFEST and swaps CURRENT (syncs the directory)
        self._mem = self._new_memtable(new_log)
        self._imms = []
        self._table_files = {f.number for _, f in vs.current.all_files()}
        self._wal_files = {new_log}
        with self._mutex:
            self._install_super_version()
        self._remove_obsolete_at_open(fs, on_disk)
        self._delete_obsolete_files()  # e.g. empty or fully-garbage value-log files sealed above
        if self._wbm is not None:
            self._wbm_token = self._wbm.register(self._wbm_flush_callback, self._wbm_oldest)

    def _new_memtable(self, log_number: int) -> MemTable:
        self._memtable_counter += 1
        vlog = self._vlog
        return MemTable(self._memtable_counter, log_number, vlog.file_number if vlog is not None else None)

    def _recover_vlogs(self, fs, vs, on_disk, edit) -> dict[int, int]:
        """Valid length of every value-log file; unsealed ones are cut back and sealed in ``edit``."""
        from .vlog.reader import ValueLogScan

        lengths: dict[int, int] = {}
        for number, st in sorted(vs.vlogs.items()):
            p = vlog_file_name(self.path, number)
            if (VLOG, number) not in on_disk:
                if st.sealed and st.garbage >= st.total:
                    edit.deleted_vlogs.append(number)  # deleted after its MANIFEST edit; finish the job
                    continue
                raise CorruptionError(f"value-log file {number:06d}.vlog listed in the MANIFEST is missing", p)
            if st.sealed:
                lengths[number] = fs.size(p)
                continue
            scan = ValueLogScan(fs, p).recover()  # cuts a torn tail back
            # after a process kill its unsynced tail is intact and WAL records replayed now may
            # point into it; they are about to be flushed into a synced table, so the bytes they
            # point at must become durable first
            fs.sync_file(p)
            lengths[number] = scan.valid_length
            edit.sealed_vlogs.append((number, scan.record_bytes))
        return lengths

    def _count_unreferenced_vlog_records(self, vs, edit: VersionEdit) -> None:
        """Count as garbage the records of the value-log files this recovery sealed that no
        table points to.

        Every byte of a value-log file is either referenced by a table (its ``blob_refs``), or
        was counted as garbage when a flush or compaction dropped the pointer to it: total =
        garbage + referenced.  After a crash the file the database was writing can also hold
        records no WAL record points to (a ``disable_wal`` write, or a WAL tail lost with the
        process); nothing would ever count those, and the file could never be collected.  Every
        replayed write is in a table by now, so what is neither referenced nor garbage is such a
        record.  (Counting too much could only make GC relocate a file early: a file is deleted
        only when no table points into it.)"""
        for number, total in edit.sealed_vlogs:
            st = vs.vlogs.get(number)
            garbage = (st.garbage if st is not None else 0) + sum(g for n, g in edit.vlog_garbage if n == number)
            referenced = sum(f.blob_refs.get(number, 0) for _, f in vs.current.all_files())
            referenced += sum(f.blob_refs.get(number, 0) for _, f in edit.new_tables)
            orphaned = total - garbage - referenced
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
        from .vlog.writer import ValueLogWriter

        vs = self._versions
        number = vs.new_file_number()
        self._vlog = ValueLogWriter.create_in(self._fs, self.path, number, compression=self.options.blob_compression)
        edit.new_vlogs.append(number)

    def _remove_obsolete_at_open(self, fs, on_disk) -> None:
        vs = self._versions
        live_tables = {f.number for _, f in vs.current.all_files()}
        removed = []
        for (kind, number), name in sorted(on_disk.items()):
            if kind == WAL and number < vs.log_number:
                reason = "flushed WAL"
            elif kind == MANIFEST and number != vs.manifest_number:
                reason = "old MANIFEST"
            elif kind == TABLE and number not in live_tables:
                reason = "table not in the MANIFEST (left by an interrupted flush or compaction)"
            elif kind == VLOG and number not in vs.vlogs:
                reason = "value-log file not in the MANIFEST (unreferenced)"
            else:
                continue
            fs.remove(os.path.join(self.path, name))
            removed.append(f"{name}: {reason}")
            if kind in (TABLE, VLOG):
                log.warning("removed %s at open: %s", name, reason)
        tmp = os.path.join(self.path, CURRENT_TMP)
        if fs.exists(tmp):
            fs.remove(tmp)
            removed.append(f"{CURRENT_TMP}: unfinished CURRENT swap")
        self._stats["files_removed_at_open"] = removed
        if removed:
            fs.sync_dir(self.path)

    def _release_resources(self) -> None:
        for what, w in (("the WAL", self._wal), ("the value log", self._vlog)):
            if w is not None:
                try:
                    w.close()
                except Exception:  # noqa: BLE001 - best effort while failing an open
                    log.debug("close of %s failed during a failed open", what)
        self._versions.close()
        self._vlog_reader.close()
        if self._lock is not None:
            self._fs.unlock(self._lock)
            self._lock = None

    def _close_db(self) -> None:
        """Flush nothing (the WAL holds the memtable), sync the WAL, release files and the lock."""
        try:
            if self._bg_error is None:
                try:
                    if self._vlog is not None:
                        self._vlog.sync()
                    self._wal.sync()
                except Exception as e:  # noqa: BLE001 - reported below, resources still released
                    log.warning("sync at close failed: %s", e)
            if self._bg_error is None:
                self._delete_obsolete_files(closing=True)
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
