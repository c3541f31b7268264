"""``DB``: the database handle -- write path, read path, lifecycle.

How a write travels (``docs/impl.md`` tells it at length):

1. the API converts and checks arguments (bytes-like only; ``str`` is a ``TypeError``);
2. under the write lock: make room (switch a full memtable, stall if flushes lag), append
   large values to the active value-log file (they become VALUE_POINTER entries), append the
   batch as ONE framed WAL record (``sync=True``: value log, then WAL, are fsynced), insert
   into the memtable, publish the new last sequence number;
3. a full memtable becomes immutable with a fresh WAL, and is flushed to an L0 table by the
   background thread (inline when ``max_background_jobs == 0``), then compaction runs.

How a read travels: take the current *super version* (mutable memtable, immutable memtables,
table version: replaced atomically, never mutated) and a read sequence number (the snapshot's,
or the last published one); search newest to oldest, stopping at the first version or covering
range tombstone.

Lock order: ``_write_lock`` before ``_mutex``.  ``_mutex`` guards the version set, the list of
immutable memtables, the super version and background-work state.
"""

from __future__ import annotations

import builtins
import contextlib
import os
import threading
import time
import weakref
from typing import Iterator

from .background import Background
from ..base.dbformat import CHECK_INVARIANTS, DELETION, EXPIRING, MERGE, RANGE_DELETION, VALUE, VALUE_POINTER
from ..base.expiry import HEAD_SIZE, encode_expiring, live_inner, now_ms
from ..base.filenames import wal_file_name
from ..base.merge_operator import missing_operator
from .checkpoint import Checkpoints
from ..compaction.run import CompactionEnv
from ..compaction.worker import JobRunner
from ..errors import BackgroundError, DBClosedError, Error, InvalidArgumentError, ReadOnlyError
from .ingest import Ingestion, check_paths, check_range
from .write_path import WriteBufferAccounting
from .write_limits import CHECK_ABOVE as _CHECK_ABOVE
from .write_limits import check_ops
from ..errors import IOError as AntIOError
from ..fs import default_file_system
from ..fs.pinned import PinnedFileSystem
from .files.unaccounted import empty_lost
from ..manifest.table_cache import TableCache
from ..manifest.version_edit import VersionEdit
from ..manifest.version_set import VersionSet
from ..memory.cache import Cache
from ..memtable.memtable import MemTable
from ..memtable.memtable import NEW_KEY_OVERHEAD as _NEW_KEY_OVERHEAD
from ..memtable.memtable import TUPLE_VERSIONS as _TUPLE_VERSIONS
from ..memtable.memtable import VERSION_OVERHEAD as _VERSION_OVERHEAD
from .obsolete_files import ObsoleteFiles
from ..options import Options, WriteOptions, resolve_open_args, resolve_write_flags
from ..read.iterators import DBIterator, scan_range, yielded_shape
from ..read.key_versions import KeyVersion, key_versions
from ..read.read_view import ReadView, SuperVersion, prefetch_threads
from ..read.sizes import approximate_size
from ..read.snapshot import Snapshot, SnapshotList
from ..record.batch import SINGLE_RECORD
from ..record.batch import WriteBatch, as_bytes, encode_batch
from ..record.log_format import HEADER, LEN_MUL, LEN_XOR, LogWriter, checksum, frame
from .read_only import open_read_only
from .recovery import Recovery
from .resume import Resume
from .stats import Statistics, new_stats
from ..vlog.reader import ValueLogReader
from ..vlog.writer import ValueLogWriter

_SINGLE_RECORD_PACK = SINGLE_RECORD.pack  # a one-record write batch header (batch.py)
_FRAME_HEADER_PACK = HEADER.pack  # the log record header (log_format.py)
_checksum = checksum
DEFAULT_CACHE_CAPACITY = 32 * 1024 * 1024  # the private block cache when Options.block_cache is None
DEFAULT_CACHE_POLICY = "clock"  # ... and its policy: hits without a lock (docs/memory.md)


def open(path, options: Options | None = None, **overrides) -> "DB":  # noqa: A001
    """Open (creating if ``create_if_missing``) the database in directory ``path``;
    ``read_only=True`` opens it without writing anything (``Options.read_only``)."""
    path, options = resolve_open_args(path, options, overrides)
    if options.read_only:
        return open_read_only(DB, path, options)  # tried again while a live writer moves on
    return DB(path, options)


class DB(Recovery, Background, ObsoleteFiles, Checkpoints, Ingestion, Statistics, Resume, WriteBufferAccounting):
    """An open antkv database.  Thread-safe; use as a context manager to close on exit."""

    def __init__(self, path: str, options: Options):
        """Declares every field of the database, grouped by the lock that guards it (the lock
        order: ``_write_lock``, ``_compaction_lock``, ``_mutex``; docs/impl.md section 4), then
        opens it (``_open_db``, :mod:`antkv.db.recovery`, fills in what the directory holds).

        ``DB`` is one class whose methods live in several modules, as RocksDB's ``DBImpl`` and
        Pebble's ``DB`` do: this one (the API, the write path, memtable switch, value-log
        rotation) and its bases :class:`~antkv.db.recovery.Recovery` (open, close),
        :class:`~antkv.db.background.Background` (flush, compaction, GC),
        :class:`~antkv.db.obsolete_files.ObsoleteFiles`, :class:`~antkv.db.checkpoint.Checkpoints`,
        :class:`~antkv.db.ingest.Ingestion` and
        :class:`~antkv.db.stats.Statistics`.  Every field is declared here and nowhere else."""
        self.path = path
        self.options = options
        fs = options.file_system or default_file_system()
        if options.read_only and not isinstance(fs, PinnedFileSystem):
            fs = PinnedFileSystem(fs)  # holds the files the view reads (read_only.py)

        # --- set here or at open, then only read (no lock) ---
        self._fs = fs
        self._pinned = fs if options.read_only else None  # read-only: the files held open
        self._recovered_vlog_lengths: dict[int, int] = {}  # read-only: unsealed files' valid length at open
        self._lock = None  # the held LOCK file (recovery takes it)
        self._cache = options.block_cache if options.block_cache is not None else Cache(DEFAULT_CACHE_CAPACITY, policy=DEFAULT_CACHE_POLICY)
        self._vlog_reader = ValueLogReader(fs, path)  # its own lock
        self._table_cache = TableCache(fs, path, self._cache, options.paranoid_checks)  # its own lock
        self._open_table = self._table_cache.get  # f.reader or self._open_table(f): a table's reader
        self._wbm = options.write_buffer_manager
        self._min_blob_size = options.min_blob_size if options.enable_blob_files else 1 << 62  # never reached
        self._stats = new_stats()  # counters: each is written by one thread at a time
        self._lifetime_base: dict = {}  # the STATS file's counters, loaded at open (db/files/stats_file.py)
        self._info_log = None  # the LOG file (db/files/info_log.py); None when read-only; its own lock
        self._snapshots = SnapshotList()  # its own lock
        self._live_views: "weakref.WeakSet[SuperVersion]" = weakref.WeakSet()  # super versions in use
        self._jobs = JobRunner(  # flush and compaction jobs (recovery flushes too)
            fs, path, options, self._new_file_number, self._open_table, self._lock_fd, self._in_background_thread
        )
        self._pool = None  # the prefetch thread pool, created on first use under _mutex
        self._compaction_env = CompactionEnv(
            fs, path, options, self._jobs, self._open_table, self._new_file_number, self._vlog_reader, self._stats
        )

        # --- _write_lock: the write path ---
        self._write_lock = threading.Lock()
        self._closed = True  # written under _write_lock; read anywhere (a bool)
        self._closing = False  # close() began: writes and new maintenance calls are refused
        self._write_blocked = True  # closed, or read-only after an error: the put path checks this one flag
        self._last_seq = 0  # the last published sequence number; readers read it without a lock
        self._mem: MemTable | None = None  # the mutable memtable (swapped under _mutex too)
        self._wal: LogWriter | None = None  # the WAL of _mem
        self._wal_append = None  # _wal's file.append (the put path calls it)
        self._vlog: ValueLogWriter | None = None  # the active value-log file (rotated under _mutex too)
        self._vlog_dirty = False  # the value log got records since its last sync
        self._user_bytes = 0  # user key + value bytes written (a plain int: it is on the put path)
        self._unpersisted = False  # a disable_wal write happened: close() must flush
        # the put path calls _make_room once the memtable reaches _write_buffer_size; until the
        # background threads started their worker processes, that is half the real size, where
        # _make_room asks them to (_warm_up_workers) and restores it
        self._write_buffer_size = (
            options.write_buffer_size // 2 if self._jobs.would_use_workers() else options.write_buffer_size
        )
        self._must_make_room = False  # the next write switches the memtable first
        self._flush_requested = False  # the write buffer manager asked for a flush
        self._wbm_token = None  # our registration with the write buffer manager
        self._wbm_reserved = 0  # bytes reported to the write buffer manager (also under _mutex)
        self._wbm_pending = 0  # bytes not yet reported (reported in chunks)
        self._wbm_mutable_since: int | None = None  # when the mutable memtable took its first write

        # --- _checkpoint_lock: one checkpoint at a time ---
        self._checkpoint_lock = threading.Lock()

        # --- _compaction_lock: one compaction, compact_range or GC at a time ---
        self._compaction_lock = threading.Lock()
        self._compact_cursor: dict[int, bytes] = {}  # level -> round-robin position (db/background.py)

        # --- _mutex (and _bg_cv): versions, immutable memtables, the read view, background state ---
        self._mutex = threading.RLock()
        self._bg_cv = threading.Condition(self._mutex)
        self._versions = VersionSet(fs, path, options.num_levels, options.max_manifest_file_size)
        self._imms: list[MemTable] = []  # immutable memtables, newest first
        self._sv: SuperVersion | None = None  # the current read view; readers read it without a lock
        self._table_files: set[int] = set()  # tables on disk not yet deleted
        self._wal_files: set[int] = set()  # WALs on disk not yet deleted
        self._wal_names_unsynced: set[int] = set()  # WALs whose directory entries may not be durable yet
        self._memtable_counter = 0  # numbers memtables (under _write_lock at a switch)
        self._bg_error: Error | None = None  # set once; then every write raises BackgroundError
        self._bg_thread: threading.Thread | None = None  # the first background thread (None: inline work)
        self._bg_threads: list[threading.Thread] = []
        self._bg_shutdown = False
        self._bg_running = 0
        self._warm_up_pending = False  # the flushing thread is asked to start its worker
        self._maintenance_calls = 0  # user-thread flush/compact_range/GC/checkpoint/verify running

        self._open_db()  # may raise
        self._closed = False
        self._write_blocked = options.read_only
        if options.read_only:
            return  # no background work: nothing is ever written
        if options.max_background_jobs > 0:
            # one thread flushes, one compacts (a long compaction never holds up a flush);
            # with a single job, one thread does both
            roles = ("flush", "compaction") if options.max_background_jobs >= 2 else ("all",)
            self._bg_threads = [
                threading.Thread(target=self._bg_loop, args=(role,), name=f"antkv-{role}:{path}", daemon=True)
                for role in roles
            ]
            self._bg_thread = self._bg_threads[0]
            for t in self._bg_threads:
                t.start()
        with self._mutex:
            self._schedule_work()
        if options.max_background_jobs == 0:
            # each open adds the replayed WAL as an L0 table: with no thread to compact them,
            # a series of short sessions (the antkv command's) would pile L0 up past the stop
            # trigger, so compact L0 once it reached its trigger.  A failure fails the open.
            trigger = options.level0_file_num_compaction_trigger
            try:
                while len(self._versions.current.levels[0]) >= trigger and self._compact_once():
                    pass
            except BaseException as e:
                self._set_bg_error(e)  # so that close() writes nothing more
                self.close()
                raise

    # ------------------------------------------------------------------ helpers

    def _check_open(self) -> None:
        if self._closed:
            raise DBClosedError(f"database {self.path} is closed")

    def _check_writable(self) -> None:
        if self._closed or self._closing:
            raise DBClosedError(f"database {self.path} is closed")
        if self.options.read_only:
            raise ReadOnlyError(f"database {self.path} is open read-only (read_only=True): it writes nothing")
        if self._bg_error is not None:
            raise BackgroundError(
                f"database is read-only after a write or background job failed: {self._bg_error}; "
                "once the cause is gone (e.g. disk space freed), call db.resume()", None, self.path
            ) from self._bg_error

    @contextlib.contextmanager
    def _maintenance(self):
        """A user-thread maintenance call (flush, compact_range, GC, checkpoint, verify).

        ``close()`` refuses new ones and waits for running ones, which stop at their next step
        with DBClosedError once it began: after ``close()`` returns, nothing writes or deletes
        a file of this database on its behalf."""
        with self._mutex:
            if self._closed or self._closing:
                raise DBClosedError(f"database {self.path} is closed")
            self._maintenance_calls += 1
        try:
            yield
        finally:
            with self._mutex:
                self._maintenance_calls -= 1
                self._bg_cv.notify_all()

    def _stop_if_closing(self) -> None:
        """Between two steps of a maintenance call: stop once ``close()`` began."""
        if self._closing:
            raise DBClosedError(f"database {self.path} is closing")

    def _set_bg_error(self, e: BaseException) -> None:
        if self._bg_error is None:
            self._bg_error = e if isinstance(e, Error) else AntIOError(str(e), None, self.path)
            self._write_blocked = True
            self._event("background-error", f"{type(self._bg_error).__name__}: {self._bg_error}; writes refused until resume()")

    def _event(self, what: str, details: str = "") -> None:
        """One line in the info LOG (none when read-only)."""
        if self._info_log is not None:
            self._info_log.event(what, details)

    # ------------------------------------------------------------------ writes

    def put(self, key, value, *, sync: bool = False, write_options: WriteOptions | None = None, ttl=None) -> None:
        """Set ``key`` to ``value``; with ``ttl`` (seconds, > 0) the entry expires that long
        after now (``Options.clock``) and then reads as deleted.

        The hottest path of the engine, so it is written out flat: no batch object, the WAL
        frame built here, the memtable insert inlined (see ``MemTable.add``).
        """
        if type(key) is not bytes:
            key = as_bytes(key, "key")
        if type(value) is not bytes:
            value = as_bytes(value, "value")
        if write_options is not None or ttl is not None:
            if ttl is not None:
                sync, disable_wal = resolve_write_flags(sync, False, write_options)
                entry = encode_expiring(self._expiry(ttl), VALUE, value)
                self._write_ops([(EXPIRING, key, entry)], sync, disable_wal, len(key) + len(entry))
                return
            sync, disable_wal = resolve_write_flags(sync, False, write_options)
            self._write_ops([(VALUE, key, value)], sync, disable_wal, len(key) + len(value))
            return
        if sync is not False and sync is not True:
            raise TypeError("sync must be a bool")
        if len(key) + len(value) >= _CHECK_ABOVE:
            check_ops([(VALUE, key, value)], self._min_blob_size)  # too large to store: refused here
        with self._write_lock:
            if self._write_blocked:
                self._check_writable()
            mem = self._mem
            if mem.memory >= self._write_buffer_size or self._must_make_room:
                self._make_room()
                mem = self._mem
            seq = self._last_seq + 1
            lk = len(key)
            lv = len(value)
            self._user_bytes += lk + lv
            if lv >= self._min_blob_size:
                value = self._vlog_add(key, value)
                kind = VALUE_POINTER
                lv = len(value)
            else:
                kind = VALUE
            try:
                payload = _SINGLE_RECORD_PACK(seq, 1, kind, lk, lv) + key + value
                n = len(payload)  # the WAL frame of log_format.frame, with length_check inlined
                self._wal_append(_FRAME_HEADER_PACK(n, ((n ^ LEN_XOR) * LEN_MUL) & 0xFFFFFFFF, _checksum(payload)) + payload)
                if sync:
                    self._sync_wal()
            except AntIOError as e:
                self._set_bg_error(e)
                raise
            versions = mem.versions
            old = versions.get(key)
            if old is None:
                versions[key] = (seq, kind, value)
                mem.pending.append(key)
                added = _NEW_KEY_OVERHEAD + lk + lv
            else:
                older = mem.older.get(key)
                if older is None:
                    mem.older[key] = (old,)
                elif type(older) is list:
                    older.append(old)
                else:
                    mem.older[key] = older + (old,) if len(older) < _TUPLE_VERSIONS else [*older, old]
                versions[key] = (seq, kind, value)  # after the append (memtable.py docstring)
                added = _VERSION_OVERHEAD + lv
            mem.memory += added
            self._last_seq = seq
            if self._wbm is not None:
                self._wbm_account(added)

    def delete(self, key, *, sync: bool = False, write_options: WriteOptions | None = None) -> None:
        """Remove ``key`` (no error if it is absent)."""
        if type(key) is not bytes:
            key = as_bytes(key, "key")
        sync, disable_wal = resolve_write_flags(sync, False, write_options)
        self._write_ops([(DELETION, key, b"")], sync, disable_wal, len(key))

    def merge(self, key, operand, *, sync: bool = False, write_options: WriteOptions | None = None) -> None:
        """Merge ``operand`` into ``key`` with ``Options.merge_operator`` (RocksDB's Merge)."""
        key, operand = as_bytes(key, "key"), as_bytes(operand, "operand")
        sync, disable_wal = resolve_write_flags(sync, False, write_options)
        if self.options.merge_operator is None:
            raise InvalidArgumentError("db.merge needs a merge operator: open with Options(merge_operator=...)")
        self._write_ops([(MERGE, key, operand)], sync, disable_wal, len(key) + len(operand))

    def delete_range(self, begin, end, *, sync: bool = False, write_options: WriteOptions | None = None) -> None:
        """Remove every key in ``[begin, end)``; ``begin == end`` is a no-op."""
        begin = as_bytes(begin, "begin")
        end = as_bytes(end, "end")
        if begin > end:
            raise InvalidArgumentError(f"delete_range: begin {begin!r} > end {end!r}")
        sync, disable_wal = resolve_write_flags(sync, False, write_options)
        if begin == end:
            self._check_writable()
            return
        self._write_ops([(RANGE_DELETION, begin, end)], sync, disable_wal, len(begin) + len(end))

    def write(
        self, batch: WriteBatch, *, sync: bool = False, disable_wal: bool = False,
        write_options: WriteOptions | None = None,
    ) -> None:
        """Apply ``batch`` atomically: all of it or none, also across a crash.

        ``disable_wal=True`` (or ``write_options=WriteOptions(disable_wal=True)``) skips the
        WAL as Flink and Spark do: UNSAFE, such writes are lost by a crash until flushed.
        """
        if not isinstance(batch, WriteBatch):
            raise TypeError(f"batch must be an antkv.WriteBatch, not {type(batch).__name__}")
        sync, disable_wal = resolve_write_flags(sync, disable_wal, write_options)
        if not isinstance(sync, bool) or not isinstance(disable_wal, bool):
            raise TypeError("sync and disable_wal must be bools")
        if batch.num_merges and self.options.merge_operator is None:
            raise InvalidArgumentError("a batch with merges needs a merge operator: open with Options(merge_operator=...)")
        ops = batch.ops()
        if not ops:
            self._check_writable()
            return
        self._write_ops(ops, sync, disable_wal, batch.data_size)

    def write_batch(
        self, sync: bool = False, disable_wal: bool = False, write_options: WriteOptions | None = None
    ) -> "_BatchContext":
        """``with db.write_batch() as b: b.put(...)`` -- written when the block exits cleanly."""
        sync, disable_wal = resolve_write_flags(sync, disable_wal, write_options)
        return _BatchContext(self, sync, disable_wal)

    def _write_ops(self, ops: list, sync: bool, disable_wal: bool, user_bytes: int) -> None:
        """Write ``ops`` (``(kind, key, value)``) as one batch; ``user_bytes``: their keys' and values' lengths."""
        if user_bytes + 9 * len(ops) >= _CHECK_ABOVE:
            check_ops(ops, self._min_blob_size)  # too large to store: refused before anything is written
        with self._write_lock:
            self._check_writable()
            if self._mem.memory >= self._write_buffer_size or self._must_make_room:
                self._make_room()
            mem = self._mem
            seq = self._last_seq + 1
            limit = self._min_blob_size
            if any((kind == VALUE and len(value) >= limit) or kind == EXPIRING for kind, _, value in ops):
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
            added = mem.add_batch(seq, ops)
            self._last_seq = seq + len(ops) - 1
            self._user_bytes += user_bytes
            if self._wbm is not None:
                self._wbm_account(added)
            lim = self.options.memtable_max_range_deletions
            if lim and mem.num_range_deletes >= lim:
                self._must_make_room = True

    def _sync_wal(self) -> None:
        """REQUIRES the write lock.  Make every WAL record durable -- and first the value-log
        records they point to, or recovery would have to stop before them -- and the WAL's name."""
        if self._vlog_dirty:
            self._vlog.sync()
            self._vlog_dirty = False
        self._wal.sync()
        self._sync_wal_names()

    def _sync_wal_names(self) -> None:
        """Make the names of the WALs created by switches durable (docs/durability.md section 4)."""
        if self._wal_names_unsynced:  # no switch adds one meanwhile: every caller holds a lock it takes
            if self._info_log is not None:
                self._info_log.sync()  # the LOG names these WALs: it lasts as long as they do (db/files/unaccounted.py)
            self._fs.sync_dir(self.path)
            self._wal_names_unsynced = set()

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
                wal_file = self._fs.create(wal_file_name(self.path, new_log))
            except AntIOError as e:
                self._set_bg_error(e)
                raise
            self._wal_names_unsynced.add(new_log)  # durable before a synced write or an edit names it
            self._stats["wal_bytes_written"] += self._wal.size
            self._wal.close()
            self._wal = LogWriter(wal_file)
            self._wal_append = wal_file.append
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

    def _apply_edit(self, edit, on_success=None) -> None:
        """REQUIRES _mutex.  Log ``edit`` to the MANIFEST, run ``on_success`` (only if that
        worked), then publish the new version."""
        vs = self._versions
        if vs.last_sequence < self._last_seq:
            vs.last_sequence = self._last_seq  # every seq in the edit's tables is <= this
        vs.log_and_apply(edit)
        if on_success is not None:
            on_success()
        for _, f in edit.new_tables:
            self._table_files.add(f.number)
        self._install_super_version()
        if CHECK_INVARIANTS:
            vs.current._check()

    def _new_file_number(self) -> int:
        with self._mutex:
            return self._versions.new_file_number()

    def _in_background_thread(self) -> bool:
        return threading.current_thread() in self._bg_threads

    def _lock_fd(self) -> int | None:
        """The LOCK file's descriptor (inherited by worker processes), when on the OS."""
        return getattr(self._lock, "fd", None)

    def _wal_bytes_total(self) -> int:
        return self._stats["wal_bytes_written"] + (self._wal.size if self._wal is not None else 0)

    def _prefetch_pool(self):
        with self._mutex:
            if self._closed:
                raise DBClosedError(f"database {self.path} is closed")
            if self._pool is None:
                from concurrent.futures import ThreadPoolExecutor

                self._pool = ThreadPoolExecutor(
                    max_workers=prefetch_threads(self.options), thread_name_prefix="antkv-prefetch"
                )
            return self._pool

    def _install_super_version(self) -> None:
        """REQUIRES _mutex.  Publish a new immutable read view."""
        sv = SuperVersion(self._mem, tuple(self._imms), self._versions.current)
        self._sv = sv
        self._live_views.add(sv)

    # ------------------------------------------------------------------ reads

    def _expiry(self, ttl) -> int:
        """The expiry (ms since the epoch) of an entry written now with ``ttl`` seconds."""
        if isinstance(ttl, bool) or not isinstance(ttl, (int, float)):
            raise TypeError(f"ttl must be a number of seconds, not {type(ttl).__name__}")
        if not ttl > 0 or ttl * 1000 >= 1 << 63:
            raise InvalidArgumentError(f"ttl must be > 0 seconds, got {ttl!r}")
        return now_ms(self.options.clock) + max(1, int(ttl * 1000))

    def _entry_value(self, key: bytes, kind: int, value: bytes, sv, read_seq: int, default):
        """The value a point read returns for the newest visible entry of ``key`` when its kind
        is not VALUE (a DELETION never gets here): a value pointer resolved, an expiring entry
        unwrapped (``default`` once expired), or the key's operands merged onto its base."""
        if kind == VALUE_POINTER:
            return self._vlog_reader.get(value)
        if kind == MERGE:
            if self.options.merge_operator is None:
                raise missing_operator(f"database {self.path}")
            merged = ReadView(self, sv, read_seq).merged_value(key)
            return default if merged is None else merged
        live = live_inner(value, now_ms(self.options.clock))
        if live is None:
            return default
        return self._vlog_reader.get(live[1]) if live[0] == VALUE_POINTER else live[1]

    def _read_seq(self, snapshot) -> int:
        if snapshot is None:
            return self._last_seq
        if not isinstance(snapshot, Snapshot):
            raise TypeError(f"snapshot must be an antkv Snapshot, not {type(snapshot).__name__}")
        if snapshot._db is not self or snapshot._released:
            raise InvalidArgumentError("snapshot is released or belongs to another database")
        return snapshot.sequence

    def get(self, key, default=None, *, snapshot=None):
        """The value of ``key``, or ``default`` (None) when it is absent; for a list of keys,
        the list of their values (rocksdict's list ``get``; :meth:`multi_get`)."""
        if type(key) is not bytes:
            if type(key) is list:
                return [default if v is None else v for v in self.multi_get(key, snapshot=snapshot)]
            key = as_bytes(key, "key")
        if self._closed:
            self._check_open()
        read_seq = self._last_seq if snapshot is None else self._read_seq(snapshot)
        sv = self._sv
        tomb = 0
        for mem in sv.memtables:
            e = mem.versions.get(key)
            if e is not None and e[0] > read_seq:
                e = mem.get(key, read_seq)
            if mem.range_dels:
                t = mem.fragments().max_covering_seq(key, read_seq)
                if t > tomb:
                    tomb = t
            if e is not None:
                if tomb > e[0] or e[1] == DELETION:
                    return default
                if e[1] != VALUE:
                    return self._entry_value(key, e[1], e[2], sv, read_seq, default)
                return e[2]
            if tomb:
                return default
        e = sv.table_get(key, read_seq, self._open_table)
        if e is None or e[1] == DELETION:
            return default
        if e[1] != VALUE:
            return self._entry_value(key, e[1], e[2], sv, read_seq, default)
        return e[2]

    def key_may_exist(self, key, fetch: bool = False, *, snapshot=None):
        """Whether ``key`` is present (rocksdict's ``key_may_exist``, here exact: no false
        positives), answered from the tables' and memtables' entries alone: a large value's
        pointer is enough, the value log is never read.  ``key in db`` and ``del db[key]`` ask
        this.  ``fetch=True`` returns ``(present, value or None)``, reading the value."""
        if type(key) is not bytes:
            key = as_bytes(key, "key")
        if not isinstance(fetch, bool):
            raise TypeError("fetch must be a bool")
        self._check_open()
        read_seq = self._read_seq(snapshot)
        if fetch:
            value = self.get(key, snapshot=snapshot)
            return value is not None, value
        e = self._newest_entry(key, read_seq)
        if e is None:
            return False
        if e[1] == EXPIRING:
            return live_inner(e[2], now_ms(self.options.clock)) is not None
        return True  # a value, a value pointer, or merge operands (onto a base or onto nothing)

    def _newest_entry(self, key: bytes, read_seq: int):
        """The newest ``(seq, kind, value)`` of ``key`` visible at ``read_seq``, value pointers
        unresolved, or None where it reads as absent (deleted, range-deleted, never written).
        :meth:`get` runs the same search fused with its value step."""
        sv = self._sv
        tomb = 0
        for mem in sv.memtables:
            e = mem.get(key, read_seq)
            if mem.range_dels:
                tomb = max(tomb, mem.fragments().max_covering_seq(key, read_seq))
            if e is not None:
                return None if tomb > e[0] or e[1] == DELETION else e
            if tomb:
                return None
        e = sv.table_get(key, read_seq, self._open_table)
        return None if e is None or e[1] == DELETION else e

    def _view(self, snapshot) -> ReadView:
        self._check_open()
        return ReadView(self, self._sv, self._read_seq(snapshot))

    def iterator(
        self, lower_bound=None, upper_bound=None, snapshot=None, *, prefix=None, reverse=False, start=None,
        stop=None, include_start=True, include_stop=False, include_key=True, include_value=True,
    ) -> DBIterator:
        """A cursor (RocksDB style): seek it, or iterate it (``for k, v in db.iterator()``)
        from its first key (its last with ``reverse``).  The range arguments are those of
        :meth:`items` (``start``/``stop`` are plyvel's names for ``lower_bound``/``upper_bound``);
        ``include_key``/``include_value`` say what iterating yields, as in plyvel: a key-only
        cursor reads no value from the value log until ``value()`` asks for it."""
        lo, hi = scan_range(
            ("lower_bound", lower_bound), ("start", start), ("upper_bound", upper_bound), ("stop", stop),
            include_start, include_stop, prefix,
        )
        if not isinstance(reverse, bool):
            raise TypeError(f"reverse must be a bool, not {type(reverse).__name__}")
        shape = yielded_shape(include_key, include_value)
        return DBIterator(self._view(snapshot), lo, hi, reverse, shape)

    def key_versions(self, begin=None, end=None) -> Iterator[KeyVersion]:
        """Every stored version of the keys in ``[begin, end)`` -- older versions, deletions,
        range deletions, value pointers -- as :class:`~antkv.read.key_versions.KeyVersion`
        records, key ascending then newest first (RocksDB's ``GetAllKeyVersions``; ``antkv
        idump``).  A debugging view of the current state, not a snapshot read."""
        lo = None if begin is None else as_bytes(begin, "begin")
        hi = None if end is None else as_bytes(end, "end")
        self._check_open()
        return key_versions(self._sv, self._open_table, lo, hi)

    def multi_get(self, keys, *, snapshot=None) -> list:
        """The values of ``keys`` (None for an absent key), all read at one sequence number."""
        keys = [as_bytes(k, "key") for k in keys]
        if snapshot is not None:
            return [self.get(k, snapshot=snapshot) for k in keys]
        with self.snapshot() as snap:
            return [self.get(k, snapshot=snap) for k in keys]

    def approximate_size(self, begin=None, end=None) -> int:
        """Estimated bytes on disk of the keys in ``[begin, end)``: tables and the value-log
        records they point to (memtables not counted; ``antkv/read/sizes.py``)."""
        lo = None if begin is None else as_bytes(begin, "begin")
        hi = None if end is None else as_bytes(end, "end")
        if lo is not None and hi is not None and lo > hi:
            raise InvalidArgumentError(f"approximate_size: begin {lo!r} > end {hi!r}")
        self._check_open()
        return approximate_size(self._sv.version, self._open_table, lo, hi)

    def items(
        self, start=None, stop=None, *, prefix=None, reverse=False, snapshot=None, lower_bound=None,
        upper_bound=None, include_start=True, include_stop=False, include_key=True, include_value=True,
        from_key=None, backwards=None,
    ) -> Iterator:
        """``(key, value)`` for keys in ``[start, stop)`` (and with ``prefix``), ascending or not.

        The range arguments, the same for :meth:`iterator`, :meth:`keys` and :meth:`values`:
        ``start``/``stop`` (or RocksDB's names ``lower_bound``/``upper_bound``; one of each pair),
        ``include_start=True``/``include_stop=False`` (plyvel's), ``prefix`` (intersected with
        the bounds), ``reverse``.  ``include_key=False`` or ``include_value=False`` yields values
        or keys alone, as plyvel's iterator does (the same as :meth:`values`, :meth:`keys`).
        rocksdict's ``backwards`` is ``reverse``, and its ``from_key`` the key the scan starts
        at (inclusive): ``start`` going forward, an included ``stop`` going backwards."""
        mode = {(True, True): "items", (True, False): "keys", (False, True): "values"}[
            yielded_shape(include_key, include_value)
        ]
        return self._scan(start, lower_bound, stop, upper_bound, include_start, include_stop, prefix, reverse,
                          snapshot, mode, from_key, backwards)

    def keys(
        self, start=None, stop=None, *, prefix=None, reverse=False, snapshot=None, lower_bound=None,
        upper_bound=None, include_start=True, include_stop=False, from_key=None, backwards=None,
    ) -> Iterator[bytes]:
        """The keys of :meth:`items` (no value is read)."""
        return self._scan(start, lower_bound, stop, upper_bound, include_start, include_stop, prefix, reverse,
                          snapshot, "keys", from_key, backwards)

    def values(
        self, start=None, stop=None, *, prefix=None, reverse=False, snapshot=None, lower_bound=None,
        upper_bound=None, include_start=True, include_stop=False, from_key=None, backwards=None,
    ) -> Iterator[bytes]:
        """The values of :meth:`items`."""
        return self._scan(start, lower_bound, stop, upper_bound, include_start, include_stop, prefix, reverse,
                          snapshot, "values", from_key, backwards)

    def _scan(self, start, lower_bound, stop, upper_bound, include_start, include_stop, prefix, reverse, snapshot, mode,
              from_key, backwards):
        if backwards is not None:  # rocksdict's names
            if not isinstance(backwards, bool) or reverse:
                raise TypeError("backwards (rocksdict's name of reverse) must be a bool, and not given with reverse")
            reverse = backwards
        if not isinstance(reverse, bool):
            raise TypeError(f"reverse must be a bool, not {type(reverse).__name__}")
        if from_key is not None:
            if reverse:
                stop, upper_bound, include_stop = _one_bound("stop", stop, upper_bound, from_key), None, True
            else:
                start, lower_bound, include_start = _one_bound("start", start, lower_bound, from_key), None, True
        lo, hi = scan_range(
            ("start", start), ("lower_bound", lower_bound), ("stop", stop), ("upper_bound", upper_bound),
            include_start, include_stop, prefix,
        )
        return self._view(snapshot).items(lo, hi, reverse, mode)

    def snapshot(self) -> Snapshot:
        """A snapshot of the current state (release it when done)."""
        with self._write_lock:
            self._check_open()
            snap = Snapshot(self, self._last_seq, self._snapshots)
            self._snapshots.add(snap.sequence)
            return snap

    # mapping protocol
    def __getitem__(self, key) -> bytes:
        v = self.get(key)
        if v is None:
            raise KeyError(key)
        return v

    def __setitem__(self, key, value) -> None:
        self.put(key, value)

    def __delitem__(self, key) -> None:
        # RocksDB's Delete does not report absence; a mapping's del does (from the entry alone:
        # a large value is not read to be deleted)
        if not self.key_may_exist(key):
            raise KeyError(key)
        self.delete(key)

    def __contains__(self, key) -> bool:
        return self.key_may_exist(key)

    def __iter__(self) -> Iterator[bytes]:
        return self.keys()

    # ------------------------------------------------------------------ maintenance

    def flush(self, wait: bool = True) -> None:
        """Flush the memtable to an L0 table (and wait for it when ``wait``)."""
        if not isinstance(wait, bool):
            raise TypeError("wait must be a bool")
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

    def compact_range(self, begin=None, end=None, *, progress=None) -> None:
        """Compact every table overlapping ``[begin, end]`` down to the bottom level.  ``progress``
        (here and in ``gc_value_log``, ``checkpoint``, ``verify``): ``progress(done, total)``."""
        lo = None if begin is None else as_bytes(begin, "begin")
        hi = None if end is None else as_bytes(end, "end")
        if lo is not None and hi is not None and lo > hi:
            raise InvalidArgumentError(f"compact_range: begin {lo!r} > end {hi!r}")
        with self._maintenance():
            self.flush(wait=True)
            self._compact_range_levels(lo, hi, progress)

    def gc_value_log(self, *, progress=None) -> dict:
        """Run value-log garbage collection now; returns what it did."""
        with self._maintenance():
            self._check_writable()
            return self._collect_value_log(progress)

    def empty_lost(self) -> dict:
        """Delete the files in ``lost/`` -- those the database could not account for and moved
        aside instead of deleting (``stats()["lost"]`` reports them).  Returns the files and
        bytes deleted.  Only the operator knows that nothing there is needed any more."""
        with self._maintenance():
            self._check_writable()
            files, size = empty_lost(self._fs, self.path)
            self._event("emptied-lost", f"{files} files, {size} bytes")
            return {"files": files, "bytes": size}

    def checkpoint(self, directory, *, progress=None) -> None:
        """Write a consistent, openable copy of the database to ``directory`` (must not exist)."""
        if not isinstance(directory, (str, os.PathLike)):
            raise TypeError(f"directory must be a str or os.PathLike, not {type(directory).__name__}")
        with self._maintenance():
            self._check_writable()
            self._create_checkpoint(os.fspath(directory), progress)

    def ingest(self, paths, *, move: bool = False) -> dict:
        """Add external tables (:class:`antkv.SstFileWriter` files) atomically, each newer than
        everything the database held (later files of the list newer still), without rewriting
        them: hard links where possible.  ``move=True`` removes the input files once ingested.
        Returns ``{"tables": [(level, number)], "vlog_files": [number], "sequence": int}``."""
        paths = check_paths(paths)
        if not isinstance(move, bool):
            raise TypeError("move must be a bool")
        self._check_writable()
        return self._ingest_external(paths, move)

    def ingest_database(self, path, begin=None, end=None) -> dict:
        """Replace ``[begin, end)`` (None: unbounded) with what the antkv database at ``path``
        (a checkpoint, typically) holds there, atomically, by linking its tables and value-log
        files; only tables straddling a bound are rewritten.  The source's WAL is not read."""
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"path must be a str or os.PathLike, not {type(path).__name__}")
        lo, hi = check_range(begin, end)
        self._check_writable()
        path = os.fspath(path)
        if os.path.abspath(path) == os.path.abspath(self.path):
            raise InvalidArgumentError("ingest_database: a database cannot ingest itself")
        return self._ingest_database(path, lo, hi)

    def verify(self, *, progress=None) -> dict:
        """Read every file and check every checksum; returns counts, raises CorruptionError."""
        with self._maintenance():
            return self._verify_files(progress)

    def stats(self) -> dict:
        self._check_open()
        return self._collect_stats()

    def property(self, name: str) -> str | None:
        if not isinstance(name, str):
            raise TypeError("property name must be a str")
        self._check_open()
        return self._property_value(name)

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Close the database.

        In order: refuse new writes and maintenance calls (they raise DBClosedError); flush
        writes that skipped the WAL (``Options.avoid_flush_during_shutdown`` drops them); wait for user-thread maintenance calls to stop (a running
        ``compact_range`` or GC stops at its next step with DBClosedError) and for the
        background threads to finish their current job; sync the WAL and release every file and
        the LOCK.  A write either raised DBClosedError or is in the reopened database.  Open
        iterators and scans raise DBClosedError from then on; the files only they kept alive are
        deleted now.  Idempotent; a second concurrent ``close()`` returns at once."""
        with self._write_lock:
            if self._closed or self._closing:
                return
            self._closing = True
            self._write_blocked = True
            flush_error = None
            flush = self._unpersisted and not self.options.avoid_flush_during_shutdown
            if flush and self._bg_error is None and not self._mem.is_empty():
                # As RocksDB does (unless avoid_flush_during_shutdown): writes that skipped the
                # WAL live only in memtables, so flush them; a clean close loses no acknowledged
                # write.  Under the write lock, so no write slips in after this switch.
                try:
                    self._switch_memtable()
                except Error as e:  # close anyway, then report it
                    flush_error = e
        with self._mutex:
            while self._maintenance_calls:
                self._bg_cv.wait()
        if flush and flush_error is None:
            try:
                self._wait_for_background(lambda: not self._imms)
            except Error as e:
                flush_error = e
        with self._write_lock:
            self._closed = True
        with self._mutex:
            self._bg_shutdown = True
            self._bg_cv.notify_all()
        for t in self._bg_threads:
            t.join()
        self._jobs.close()
        self._close_db()
        if flush_error is not None:
            raise flush_error

    @builtins.property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> "DB":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"antkv.DB({self.path!r}{', closed' if self._closed else ''})"


def _one_bound(name: str, value, alias, from_key):
    """``from_key`` as the bound ``name`` (whose RocksDB alias is ``alias``), given alone."""
    if value is not None or alias is not None:
        raise TypeError(f"from_key is the {name} of this scan: give one of them")
    return from_key


class _BatchContext:
    def __init__(self, db: DB, sync: bool, disable_wal: bool):
        self._db = db
        self._sync = sync
        self._disable_wal = disable_wal
        self.batch = WriteBatch()

    def __enter__(self) -> WriteBatch:
        self._db._check_writable()
        return self.batch

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self._db.write(self.batch, sync=self._sync, disable_wal=self._disable_wal)

