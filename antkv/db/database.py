"""``DB``: the database handle -- the write API, maintenance calls, closing.

How a write travels (``docs/impl.md`` tells it at length):

1. the API converts and checks arguments (bytes-like only; ``str`` is a ``TypeError``);
2. under the write lock: make room (switch a full memtable, stall if flushes lag), append
   large values to the active value-log file (they become VALUE_POINTER entries), append the
   batch as ONE framed WAL record (``sync=True``: value log, then WAL, are fsynced), insert
   into the memtable, publish the new last sequence number (:mod:`antkv.db.write_path`);
3. a full memtable becomes immutable with a fresh WAL, and is flushed to an L0 table by the
   background thread (inline when ``max_background_jobs == 0``), then compaction runs
   (:mod:`antkv.db.background`).

Reads are :class:`~antkv.db.read_api.ReadAPI`'s; the fields every part shares and the locks
guarding them are declared in :class:`~antkv.db.state.DBState`.
"""

from __future__ import annotations

import builtins
import logging
import os
import threading

from ..base.dbformat import DELETION, EXPIRING, MERGE, RANGE_DELETION, VALUE, VALUE_POINTER
from ..base.expiry import encode_expiring, now_ms
from ..errors import Error, InvalidArgumentError
from ..errors import IOError as AntIOError
from ..memtable.memtable import NEW_KEY_OVERHEAD as _NEW_KEY_OVERHEAD
from ..memtable.memtable import TUPLE_VERSIONS as _TUPLE_VERSIONS
from ..memtable.memtable import VERSION_OVERHEAD as _VERSION_OVERHEAD
from ..options import Options, WriteOptions, resolve_open_args, resolve_write_flags
from ..read.block_plan import data_blocks
from ..record.batch import SINGLE_RECORD, WriteBatch, as_bytes, updates_to_write
from ..record.log_format import HEADER, LEN_MUL, LEN_XOR, checksum
from .checkpoint import Checkpoints
from .files.unaccounted import empty_lost
from .ingest import Ingestion, check_paths, check_range
from .read_api import ReadAPI
from .read_only import open_read_only
from .recovery import Recovery
from .resume import Resume
from .value_log_gc import ValueLogGC
from .write_limits import CHECK_ABOVE as _CHECK_ABOVE
from .write_limits import check_ops

log = logging.getLogger("antkv")
_SINGLE_RECORD_PACK = SINGLE_RECORD.pack  # a one-record write batch header (record/batch.py)
_FRAME_HEADER_PACK = HEADER.pack  # the log record header (record/log_format.py)
_checksum = checksum


def open(path, options: Options | None = None, **overrides) -> "DB":  # noqa: A001
    """Open (creating if ``create_if_missing``) the database in directory ``path``;
    ``read_only=True`` opens it without writing anything (``Options.read_only``)."""
    path, options = resolve_open_args(path, options, overrides)
    if options.read_only:
        return open_read_only(DB, path, options)  # tried again while a live writer moves on
    return DB(path, options)


class DB(Recovery, Checkpoints, Ingestion, ValueLogGC, Resume, ReadAPI):
    """An open antkv database.  Thread-safe; use as a context manager to close on exit.

    ``DB`` is one class whose methods live in several modules, as RocksDB's ``DBImpl`` and
    Pebble's ``DB`` do: this one (the write API, maintenance, closing) and its parts, each a
    base class that derives from the parts it calls (``antkv/db/__init__.py`` lists them).
    Every field is declared in :class:`~antkv.db.state.DBState`, typed and grouped by the lock
    that guards it, and nowhere else."""

    def __init__(self, path: str, options: Options, attempts=None):
        """Declares the fields (:class:`~antkv.db.state.DBState`), then opens the database
        (``_open_db``, :mod:`antkv.db.recovery`, fills in what the directory holds) and starts
        the background threads.  ``attempts``: see :func:`~antkv.db.read_only.open_read_only`."""
        super().__init__(path, options, attempts)
        self._open_db()  # may raise
        self._closed = False
        self._write_blocked = options.read_only or self._bg_error is not None
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
            # trigger, so compact L0 once it reached its trigger.  The open has committed by
            # now: a failure is a background error (writes refused until resume()), as at any
            # other time, and the open does not refuse (db/recovery.py).
            trigger = options.level0_file_num_compaction_trigger
            try:
                while len(self._versions.current.levels[0]) >= trigger and self._compact_once():
                    pass
            except Exception as e:  # noqa: BLE001 - see above
                log.warning("%s: compaction at open failed: %s", path, e)
                self._set_bg_error(e)

    # ------------------------------------------------------------------ writes

    def put(self, key, value, *, sync: bool = False, write_options: WriteOptions | None = None, ttl=None) -> None:
        """Set ``key`` to ``value``; with ``ttl`` (seconds, > 0) the entry expires that long
        after now (``Options.clock``) and then reads as deleted.

        The hottest path of the engine, so it is written out flat: no batch object, the WAL
        frame of ``record.log_format.frame(record.batch.encode_batch(...))`` built here, and
        ``MemTable.add_batch`` inlined.  ``tests/test_put_path.py`` pins this copy to those
        originals: a put leaves the same WAL and value-log bytes and the same memtable entries
        as a one-put batch through :meth:`write`.
        """
        if type(key) is not bytes:
            key = as_bytes(key, "key")
        if type(value) is not bytes:
            value = as_bytes(value, "value")
        if write_options is not None or ttl is not None or self._inplace:
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
        ops = updates_to_write(batch)
        if not ops:
            self._check_writable()
            return
        self._write_ops(ops, sync, disable_wal, batch.data_size)

    def write_batch(
        self, sync: bool = False, disable_wal: bool = False, write_options: WriteOptions | None = None
    ) -> "_BatchContext":
        """``with db.write_batch() as b: b.put(...)`` -- written when the block exits cleanly."""
        sync, disable_wal = resolve_write_flags(sync, disable_wal, write_options)
        return _BatchContext(self._check_writable, self.write, sync, disable_wal)

    # ------------------------------------------------------------------ expiry

    def _expiry(self, ttl) -> int:
        """The expiry (ms since the epoch) of an entry written now with ``ttl`` seconds."""
        if isinstance(ttl, bool) or not isinstance(ttl, (int, float)):
            raise TypeError(f"ttl must be a number of seconds, not {type(ttl).__name__}")
        if not ttl > 0 or ttl * 1000 >= 1 << 63:
            raise InvalidArgumentError(f"ttl must be > 0 seconds, got {ttl!r}")
        return now_ms(self.options.clock) + max(1, int(ttl * 1000))

    # the mapping protocol's writes (its reads are ReadAPI's)
    def __setitem__(self, key, value) -> None:
        self.put(key, value)

    def __delitem__(self, key) -> None:
        # RocksDB's Delete does not report absence; a mapping's del does (from the entry alone:
        # a large value is not read to be deleted)
        if not self.key_may_exist(key):
            raise KeyError(key)
        self.delete(key)

    # ------------------------------------------------------------------ maintenance

    def flush(self, wait: bool = True) -> None:
        """Flush the memtable to an L0 table (and wait for it when ``wait``)."""
        if not isinstance(wait, bool):
            raise TypeError("wait must be a bool")
        self._flush(wait)

    def compact_range(self, begin=None, end=None, *, progress=None) -> None:
        """Compact every table overlapping ``[begin, end]`` down to the bottom level.  ``progress``
        (here and in ``gc_value_log``, ``checkpoint``, ``verify``): ``progress(done, total)``."""
        lo = None if begin is None else as_bytes(begin, "begin")
        hi = None if end is None else as_bytes(end, "end")
        if lo is not None and hi is not None and lo > hi:
            raise InvalidArgumentError(f"compact_range: begin {lo!r} > end {hi!r}")
        with self._maintenance():
            self._flush(wait=True)
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

    def ingest(self, paths, *, move: bool = False, verify_checksums: bool = True) -> dict:
        """Add external tables (:class:`antkv.SstFileWriter` files) atomically, each newer than
        everything the database held (later files of the list newer still), without rewriting
        them: hard links where possible.  ``move=True`` removes the input files once ingested.
        ``verify_checksums=False`` skips reading each table whole to check every block before
        the ingest (RocksDB's ``verify_checksums_before_ingest``, off there by default), for a
        table this process has just written: its blocks are still checked when read.
        Returns ``{"tables": [(level, number)], "vlog_files": [number], "sequence": int}``."""
        paths = check_paths(paths)
        if not isinstance(move, bool):
            raise TypeError("move must be a bool")
        if not isinstance(verify_checksums, bool):
            raise TypeError("verify_checksums must be a bool")
        self._check_writable()
        return self._ingest_external(paths, move, verify_checksums)

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

    def data_blocks(self, keys=(), ranges=()) -> dict[str, set[tuple[int, int]]]:
        """``{table path: {(offset, length), ...}}``: the data blocks of the current tables
        that point reads of ``keys`` may read, and those holding keys of each ``(begin, end)``
        of ``ranges`` (``end`` None: no end) (:func:`antkv.read.block_plan.data_blocks`), for a caller that fetches
        them from slow storage together before the reads."""
        keys = [as_bytes(k, "key") for k in keys]
        ranges = [(as_bytes(b, "begin"), None if e is None else as_bytes(e, "end")) for b, e in ranges]
        self._check_open()
        return data_blocks(self._sv.version, self._open_table, keys, ranges)

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


class _BatchContext:
    """``db.write_batch()``: checks the database is writable on entry, writes on a clean exit."""

    def __init__(self, check_writable, write, sync: bool, disable_wal: bool):
        self._check_writable = check_writable
        self._write = write
        self._sync = sync
        self._disable_wal = disable_wal
        self.batch = WriteBatch()

    def __enter__(self) -> WriteBatch:
        self._check_writable()
        return self.batch

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self._write(self.batch, sync=self._sync, disable_wal=self._disable_wal)
