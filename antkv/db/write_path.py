"""The write path below the API: writing a batch, the active value-log file, and making room.

:class:`WritePath` is the part of :class:`~antkv.db.DB` every write goes through (the put fast
path in :mod:`antkv.db.database` calls the same pieces), all under ``_write_lock``:

* :meth:`~WritePath._write_ops` writes a batch: large values to the value log, ONE framed WAL
  record, the memtable insert, the new last sequence number;
* :meth:`~WritePath._vlog_add` and :meth:`~WritePath._rotate_vlog`: the active value-log file
  (sealed and replaced, with one MANIFEST edit, once it reaches ``Options.blob_file_size``);
* :meth:`~WritePath._make_room`: a full memtable becomes immutable with a fresh WAL
  (:meth:`~WritePath._switch_memtable`), and writes stall while flushes lag behind;
* :meth:`~WritePath._flush`: switch the memtable and wait for its flush (``db.flush``,
  checkpoints, GC and ``resume`` use it);
* the database's side of a shared write buffer manager (``memory/write_buffer_manager.py``):
  the write path adds each write's memtable growth to ``_wbm_pending`` and reports it in chunks
  of :data:`WBM_REPORT_BYTES` (``reserve_mem``), asking the manager whether a flush is due and,
  past the budget, waiting for flushes with the write lock released; a memtable switch reports
  what was still pending and moves the memtable's memory out of the mutable count
  (``schedule_free_mem``); the flush gives it back (``free_mem``); the manager asks this
  database to flush through :meth:`~WritePath._wbm_flush_callback`, choosing the one whose
  mutable memtable took its first write earliest (:meth:`~WritePath._wbm_oldest`).
"""

from __future__ import annotations

import time
from operator import itemgetter

from ..base.dbformat import EXPIRING, VALUE, VALUE_POINTER
from ..base.expiry import HEAD_SIZE
from ..base.filenames import wal_file_name
from ..errors import IOError as AntIOError
from ..manifest.version_edit import VersionEdit
from ..memtable.memtable import MemTable
from ..record.batch import encode_batch
from ..record.log_format import frame
from ..record.wal import create_wal
from ..vlog.writer import ValueLogWriter
from .background import Background
from .write_limits import CHECK_ABOVE, check_ops

WBM_REPORT_BYTES = 64 * 1024  # memtable growth reported to a write buffer manager at once
_NEVER = 1 << 62  # the blob size of a database that separates no value (DBState._min_blob_size)
_KIND_OF = itemgetter(0)
_VALUE_OF = itemgetter(2)


class WritePath(Background):
    """Part of :class:`~antkv.db.DB`: the write path (calls :class:`~antkv.db.background.Background`)."""

    def _write_ops(self, ops: list, sync: bool, disable_wal: bool, user_bytes: int) -> None:
        """Write ``ops`` (``(kind, key, value)``) as one batch; ``user_bytes``: their keys' and values' lengths."""
        if user_bytes + 9 * len(ops) >= CHECK_ABOVE:
            check_ops(ops, self._min_blob_size, user_bytes)  # too large to store: refused before anything is written
        with self._write_lock:
            self._check_writable()
            if self._mem.memory >= self._write_buffer_size or self._must_make_room:
                self._make_room()
            mem = self._mem
            seq = self._last_seq + 1
            limit = self._min_blob_size
            # (the test in C first: no value as long as a blob and no expiring entry, the common
            # case, costs no Python step per entry)
            if ((limit < _NEVER and max(map(len, map(_VALUE_OF, ops))) >= limit) or EXPIRING in map(_KIND_OF, ops)) and any(
                    (kind == VALUE and len(value) >= limit) or kind == EXPIRING for kind, _, value in ops):
                out = []
                for kind, key, value in ops:
                    if kind == VALUE and len(value) >= limit:
                        out.append((VALUE_POINTER, key, self._vlog_add(key, value)))
                    elif kind == EXPIRING and len(value) - HEAD_SIZE >= limit and value[8] == VALUE:
                        pointer = self._vlog_add(key, value[HEAD_SIZE:])
                        out.append((EXPIRING, key, value[:8] + bytes((VALUE_POINTER,)) + pointer))
                    else:
                        out.append((kind, key, value))
                ops = out
            if not disable_wal:
                try:
                    self._wal_append(frame(encode_batch(seq, ops)))
                    if sync:
                        self._sync_wal()
                except AntIOError as e:
                    self._set_bg_error(e)
                    raise
            else:
                self._unpersisted = True  # only a flush makes it durable: close() flushes
            if self._inplace:
                added = mem.add_batch_pruning(seq, ops, *self._snapshots.bounds())
            else:
                added = mem.add_batch(seq, ops)
            self._last_seq = seq + len(ops) - 1
            self._user_bytes += user_bytes
            if self._wbm is not None:
                self._wbm_account(added)
            lim = self.options.memtable_max_range_deletions
            if lim and mem.num_range_deletes >= lim:
                self._must_make_room = True


    def _vlog_add(self, key: bytes, value: bytes) -> bytes:
        """Append a large value to the value log (REQUIRES the write lock); its pointer."""
        vlog = self._vlog
        if vlog.size >= self.options.blob_file_size:
            self._rotate_vlog()
            vlog = self._vlog
        self._vlog_dirty = True
        try:
            ptr = vlog.add(key, value)
        except AntIOError as e:
            self._set_bg_error(e)
            raise
        return ptr

    def _rotate_vlog(self) -> None:
        """REQUIRES the write lock.  Seal the active value-log file and start a new one, with
        one MANIFEST edit."""
        vs = self._versions
        with self._mutex:
            old = self._vlog
            number = vs.new_file_number()
            new = ValueLogWriter.create_in(self._fs, self.path, number, compression=self.options.blob_compression)
            self._fs.sync_dir(self.path)
            edit = VersionEdit(new_vlogs=[number])
            old.seal()
            edit.sealed_vlogs.append((old.file_number, old.record_bytes))
            self._stats["vlog_bytes_written"] += old.size
            vs.log_and_apply(edit)
            self._vlog = new

    # ------------------------------------------------------------------ memtable switch

    def _make_room(self) -> None:
        """REQUIRES the write lock.  Switch a full memtable; stall while flushes lag behind."""
        opts = self.options
        self._must_make_room = False
        if self._write_buffer_size != opts.write_buffer_size and self._mem.memory >= self._write_buffer_size:
            # the first memtable reached the warm-up point (__init__): start the workers (not
            # when a flush was asked for earlier: a small memtable is flushed in-process)
            self._write_buffer_size = opts.write_buffer_size
            self._warm_up_workers()
        mem = self._mem
        if not mem.is_empty() and (
            mem.memory >= self._write_buffer_size
            or (opts.memtable_max_range_deletions and mem.num_range_deletes >= opts.memtable_max_range_deletions)
            or self._flush_requested
        ):
            self._flush_requested = False
            self._switch_memtable()
        if self._bg_thread is None:
            return
        # stalls: too many immutable memtables or L0 files
        stalled = False
        started = time.monotonic()
        with self._mutex:
            while not self._closed and self._bg_error is None:
                l0 = len(self._versions.current.levels[0])
                if len(self._imms) >= opts.max_write_buffer_number or l0 >= opts.level0_stop_writes_trigger:
                    stalled = True
                    self._bg_cv.wait(0.1)
                    continue
                break
            if stalled:
                self._stats["stalls"] += 1
                self._event("stall", f"writes waited {time.monotonic() - started:.3f} s: {len(self._imms)} immutable memtables, {l0} L0 tables")
            elif l0 >= opts.level0_slowdown_writes_trigger:
                self._stats["slowdowns"] += 1
                self._bg_cv.wait(0.001)
        self._check_writable()

    def _switch_memtable(self) -> None:
        """REQUIRES the write lock.  Make the mutable memtable immutable, with a new WAL."""
        with self._mutex:
            old = self._mem
            new_log = self._versions.new_file_number()
            try:
                # the old WAL (records, name) is synced: no later synced write outlives it (prefix rule)
                self._sync_wal()
                new_wal = create_wal(self._fs, wal_file_name(self.path, new_log), self._last_seq + 1)
            except AntIOError as e:
                self._set_bg_error(e)
                raise
            self._wal_names_unsynced.add(new_log)  # durable before a synced write or an edit names it
            self._stats["wal_bytes_written"] += self._wal.size
            self._wal.close()
            self._wal = new_wal
            self._wal_append = new_wal.file.append
            self._memtable_counter += 1
            self._wal_files.add(new_log)
            self._mem = MemTable(self._memtable_counter, new_log, self._vlog.file_number if self._vlog is not None else None)
            self._imms.insert(0, old)
            if self._wbm is not None:
                self._wbm_pending_flush_account(old)
            self._install_super_version()
            self._schedule_work()
        if self._bg_thread is None:
            self._run_inline_work()


    def _flush(self, wait: bool) -> None:
        """Flush the memtable to an L0 table (and wait for it when ``wait``): ``db.flush``."""
        with self._maintenance():
            with self._write_lock:
                self._check_writable()
                if self._mem.is_empty():
                    # nothing new, but wait for memtables already being flushed (as RocksDB does)
                    target = self._imms[0] if self._imms else None
                else:
                    target = self._mem
                    target.flush_waited = wait
                    self._switch_memtable()
            if wait and target is not None:
                self._wait_for_background(lambda: target not in self._imms)

    # ------------------------------------------------------------------ the write buffer manager

    def _wbm_account(self, added: int) -> None:
        if self._wbm_mutable_since is None:
            self._wbm_mutable_since = time.monotonic_ns()  # the memtable's first write
        self._wbm_pending += added
        if self._wbm_pending >= WBM_REPORT_BYTES:
            n, self._wbm_pending = self._wbm_pending, 0
            self._wbm_reserved += n
            self._wbm.reserve_mem(n)
            self._wbm.maybe_trigger_flush()
            if self._must_make_room:
                self._make_room()
            wbm = self._wbm
            if wbm.allow_stall or wbm.enabled and wbm.memory_usage > wbm.buffer_size + wbm.dummy_entry_size:
                # wait for flushes with the write lock released (their memtable switches
                # need it); without allow_stall only past the budget plus one unit
                self._write_lock.release()
                try:
                    wbm.maybe_stall() if wbm.allow_stall else wbm.hold_budget(self._wbm_token)
                finally:
                    self._write_lock.acquire()

    def _wbm_pending_flush_account(self, old) -> None:
        n, self._wbm_pending = self._wbm_pending, 0
        self._wbm_mutable_since = None
        if n:
            self._wbm_reserved += n
            self._wbm.reserve_mem(n)
        self._wbm.schedule_free_mem(old.memory)

    def _wbm_flush_callback(self) -> None:
        """The write buffer manager asks this database to flush its mutable memtable."""
        self._flush_requested = True
        self._must_make_room = True
        if self._write_lock.acquire(blocking=False):
            try:
                if not self._closed and self._bg_error is None:
                    self._make_room()
            finally:
                self._write_lock.release()

    def _wbm_oldest(self) -> int | None:
        """When the mutable memtable took its first write (None: it is empty).  Stamped at the
        first write, not when the memtable was created: an idle database's memtable is not old."""
        return None if self._mem.is_empty() else self._wbm_mutable_since
