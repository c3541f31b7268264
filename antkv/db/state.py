"""``DBState``: the fields every part of a :class:`~antkv.db.DB` shares, in one declared place.

A ``DB`` is one object whose methods live in several modules (as RocksDB's ``DBImpl`` and
Pebble's ``DB`` are): the handle (:mod:`antkv.db.database`) and its parts, each a class in its own
module.  Every part derives from :class:`DBState`, so from any part a reader (or an IDE) sees
what ``self._bg_cv`` is: :meth:`DBState.__init__` declares every field, typed, grouped by the
lock that guards it, and no other method creates one.

The lock order: ``_checkpoint_lock`` (held across a whole checkpoint, which takes the others)
before ``_write_lock`` before ``_compaction_lock`` before ``_mutex`` (docs/impl.md section 4).
A field under *no lock* is set here or at open and only read afterwards, or guards itself.

``DBState`` also holds the primitives every part uses -- the open/writable checks, the
background error, the LOG line, syncing the WAL, logging a MANIFEST edit and publishing a read
view -- so that each part calls only :class:`DBState` and the parts it derives from: a part's
base classes are exactly the parts it calls, and calls between the parts go one way
(``tests/test_layers.py`` checks it).
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor

from ..base.dbformat import CHECK_INVARIANTS
from ..compaction.run import CompactionEnv
from ..compaction.worker import JobRunner
from ..errors import BackgroundError, DBClosedError, Error, ReadOnlyError
from ..errors import IOError as AntIOError
from ..fs import default_file_system
from ..fs.api import FileLock, FileSystem
from ..fs.pinned import PinnedFileSystem
from ..manifest.table_cache import TableCache
from ..manifest.version_set import VersionSet
from ..memory.cache import DEFAULT_POLICY, Cache
from ..memory.write_buffer_manager import WriteBufferManager
from ..memtable.memtable import MemTable
from ..options import Options
from ..read.read_view import SuperVersion, prefetch_threads
from ..read.snapshot import SnapshotList
from ..record.log_format import LogWriter
from ..vlog.reader import ValueLogReader
from ..vlog.writer import ValueLogWriter
from .files.info_log import InfoLog
from .files.stats_file import new_stats

DEFAULT_CACHE_CAPACITY = 32 * 1024 * 1024  # the private block cache when Options.block_cache is None
DEFAULT_CACHE_POLICY = DEFAULT_POLICY  # ... and its policy: the one of every Cache (docs/memory.md)


class DBState:
    """The shared state of a database and the primitives every part of it uses."""

    def __init__(self, path: str, options: Options, attempts=None):
        """Declares every field of the database (nothing is open yet: ``DB.__init__`` then
        opens it, and :mod:`antkv.db.recovery` fills in what the directory holds).
        ``attempts``: the :class:`~antkv.db.read_only.ReadOnlyAttempts` of a read-only open."""
        self.path: str = path
        self.options: Options = options
        fs = options.file_system or default_file_system()
        if options.read_only and not isinstance(fs, PinnedFileSystem):
            fs = PinnedFileSystem(fs)  # holds the files the view reads (db/read_only.py)

        # --- no lock: set here or at open, then only read (or guarded by their own lock) ---
        self._fs: FileSystem = fs
        self._pinned: PinnedFileSystem | None = fs if options.read_only else None  # read-only: the files held open
        self._read_only_attempts = attempts  # read-only: what the attempts of this open share
        self._recovered_vlog_lengths: dict[int, int] = {}  # read-only: unsealed files' valid length at open
        self._lock: FileLock | None = None  # the held LOCK file (recovery takes it)
        self._cache: Cache = (
            options.block_cache if options.block_cache is not None
            else Cache(DEFAULT_CACHE_CAPACITY, policy=DEFAULT_CACHE_POLICY)
        )
        self._vlog_reader = ValueLogReader(fs, path)  # its own lock
        self._table_cache = TableCache(  # its own lock
            fs, path, self._cache, options.paranoid_checks, options.cache_index_and_filter_blocks
        )
        self._open_table = self._table_cache.get  # f.reader or self._open_table(f): a table's reader
        self._wbm: WriteBufferManager | None = options.write_buffer_manager
        self._min_blob_size: int = options.min_blob_size if options.enable_blob_files else 1 << 62  # never reached
        self._stats: dict = new_stats()  # counters: each is written by one thread at a time
        self._lifetime_base: dict = {}  # the STATS file's counters, loaded at open (db/files/stats_file.py)
        self._info_log: InfoLog | None = None  # the LOG file (db/files/info_log.py); None when read-only; its own lock
        self._snapshots = SnapshotList()  # its own lock
        # Options.inplace_update_support: writes keep only the versions a reader can see
        # (MemTable.add_batch_pruning); a plain cursor or scan then holds a snapshot (_view)
        self._inplace: bool = options.inplace_update_support
        self._live_views: "weakref.WeakSet[SuperVersion]" = weakref.WeakSet()  # super versions in use
        self._jobs = JobRunner(  # flush and compaction jobs (recovery flushes too)
            fs, path, options, self._new_file_number, self._open_table, self._lock_fd, self._in_background_thread
        )
        self._pool: ThreadPoolExecutor | None = None  # the prefetch thread pool, created on first use under _mutex
        self._compaction_env = CompactionEnv(
            fs, path, options, self._jobs, self._open_table, self._new_file_number, self._vlog_reader, self._stats
        )

        # --- _write_lock: the write path ---
        self._write_lock = threading.Lock()
        self._closed: bool = True  # written under _write_lock; read anywhere (a bool)
        self._closing: bool = False  # close() began: writes and new maintenance calls are refused
        self._write_blocked: bool = True  # closed, or read-only after an error: the put path checks this one flag
        self._last_seq: int = 0  # the last published sequence number; readers read it without a lock
        self._mem: MemTable | None = None  # the mutable memtable (swapped under _mutex too)
        self._wal: LogWriter | None = None  # the WAL of _mem
        self._wal_append = None  # _wal's file.append (the put path calls it)
        self._vlog: ValueLogWriter | None = None  # the active value-log file (rotated under _mutex too)
        self._vlog_dirty: bool = False  # the value log got records since its last sync
        self._user_bytes: int = 0  # user key + value bytes written (a plain int: it is on the put path)
        self._unpersisted: bool = False  # a disable_wal write happened: close() must flush
        # the put path calls _make_room once the memtable reaches _write_buffer_size; until the
        # background threads started their worker processes, that is half the real size, where
        # _make_room asks them to (_warm_up_workers) and restores it
        self._write_buffer_size: int = (
            options.write_buffer_size // 2 if self._jobs.would_use_workers() else options.write_buffer_size
        )
        self._must_make_room: bool = False  # the next write switches the memtable first
        self._flush_requested: bool = False  # the write buffer manager asked for a flush
        self._wbm_token: int | None = None  # our registration with the write buffer manager
        self._wbm_reserved: int = 0  # bytes reported to the write buffer manager (also under _mutex)
        self._wbm_pending: int = 0  # bytes not yet reported (reported in chunks)
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
        self._memtable_counter: int = 0  # numbers memtables (under _write_lock at a switch)
        self._bg_error: Error | None = None  # set once; then every write raises BackgroundError
        self._bg_thread: threading.Thread | None = None  # the first background thread (None: inline work)
        self._bg_threads: list[threading.Thread] = []
        self._bg_shutdown: bool = False
        self._bg_running: int = 0
        self._warm_up_pending: bool = False  # the flushing thread is asked to start its worker
        self._maintenance_calls: int = 0  # user-thread flush/compact_range/GC/checkpoint/verify running

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
