"""The RocksDB side of the differential fuzzer, through ``rocksdict`` in raw mode.

A *side* is an object with one method ``op_<name>`` per operation of ``fuzz/generator.py``;
each returns the operation's *answer* (``None`` for writes, the value or ``None`` for reads,
``(valid, key, value)`` for cursor steps, lists of pairs for scans) so the runner can compare
the two sides with ``==``.  ``("skip",)`` means the operation named an id that does not exist
(only after shrinking); ``("not-valid",)`` means next/prev on an invalid cursor, which neither
side is asked to perform.

Two variants: ``plain`` (values inline in tables) and ``blob`` (``enable_blob_files`` with a
small ``min_blob_size`` and blob GC), so antkv's key-value separation is checked against
RocksDB's own (BlobDB), and the two RocksDB variants can be checked against each other.

Quirks of the installed ``rocksdict`` 0.3.x, each verified on the real binding, and how this
module adapts (none of them hides an antkv answer; see also ``docs/testing.md``):

1. ``Snapshot.iter()`` / ``.items()`` read the LIVE state.  ``snapshot[key]`` honours the
   snapshot and raises a bare ``Exception("key not found")`` for a missing key.  So at
   ``snap_take`` the whole state is materialised from RocksDB (a fresh iterator, taken with
   no write in between, sees exactly the snapshot); snapshot scans and snapshot cursors run
   over that list, and every ``snap_get`` also checks ``snapshot[key]`` against it.
2. ``ReadOptions`` has no raw mode: its iterate bounds are encoded with the typed key
   encoding and are wrong on a raw database; bounds are applied by ``fuzz/cursors.py``.
3. ``RdictIter.next()`` / ``prev()`` on an invalid iterator SEGFAULTS; never called.
4. ``delete_range(b, e)`` with b > e raises ``Exception("Invalid argument: end key comes
   before start key")`` AND POISONS THE DATABASE: every later write, and even ``close()``,
   raises the same error (the range reached the WAL and the memtable insert failed).  The
   answer RocksDB documents and gives first, InvalidArgument, is therefore produced here
   without calling the binding: ``("error", "invalid_argument")``.  ``begin == end`` is a
   harmless no-op and does go to RocksDB.
5. A ``WriteBatch`` holding a reversed delete_range is APPLIED IN PART (its puts land) and
   then fails, poisoning the DB likewise; the generator never puts a reversed range inside
   a batch.
6. ``Rdict.get`` of a missing key returns None; empty keys and empty values work.
"""

from __future__ import annotations

import gc
import os
import shutil

import rocksdict

from .cursors import BoundedCursor, ListCursor, prefix_upper, scan, step_cursor
from .generator import make_value
from .options_sets import MERGE_DELIMITER

SKIP = ("skip",)
NOT_VALID = ("not-valid",)


class OracleError(Exception):
    """RocksDB (or the binding) did something the fuzzer does not expect: a fuzzer bug."""


def rocks_options(variant: str) -> rocksdict.Options:
    o = rocksdict.Options(raw_mode=True)
    o.create_if_missing(True)
    o.set_write_buffer_size(256 * 1024)
    o.set_target_file_size_base(256 * 1024)
    o.set_max_bytes_for_level_base(1024 * 1024)
    o.set_level_zero_file_num_compaction_trigger(2)
    if variant == "blob":
        o.set_enable_blob_files(True)
        o.set_min_blob_size(64)
        o.set_blob_file_size(256 * 1024)
        o.set_enable_blob_gc(True)
        o.set_blob_gc_age_cutoff(0.5)
    elif variant != "plain":
        raise ValueError(f"unknown RocksDB variant {variant!r}")
    return o


def classify_rocks_error(exc: BaseException) -> tuple:
    msg = str(exc)
    if type(exc) is Exception and msg.startswith("Invalid argument"):
        return ("error", "invalid_argument")
    raise OracleError(f"unexpected RocksDB error {type(exc).__name__}: {msg}") from exc


def open_rdict(path: str, options) -> rocksdict.Rdict:
    """``Rdict(path, options)``; if this process still holds the database's lock -- a closed
    handle kept alive by an iterator or snapshot caught in a reference cycle -- collect the
    garbage (which frees them and releases the lock) and open again.  A full collection costs
    a fraction of a second in a large process (a test run), so it is made only when needed."""
    try:
        return rocksdict.Rdict(path, options)
    except Exception as e:  # noqa: BLE001 - the binding raises a bare Exception
        if "lock hold by current process" not in str(e):
            raise
    gc.collect()
    return rocksdict.Rdict(path, options)


class RocksSide:
    """One RocksDB database driven by fuzzer operations."""

    name = "rocksdb"

    def __init__(self, path: str, variant: str = "plain"):
        self.path = path
        self.variant = variant
        self.name = f"rocksdb-{variant}"
        self.options = rocks_options(variant)
        self.db = open_rdict(path, self.options)
        self.snaps: dict[int, tuple] = {}  # sid -> (Snapshot, keys, values)
        self.iters: dict[int, BoundedCursor] = {}
        self.iter_snap: dict[int, int | None] = {}  # iid -> sid it reads at
        self.checkpoints = 0
        self.ingests = 0

    classify_error = staticmethod(classify_rocks_error)

    def supports(self, opname: str) -> bool:
        return True

    def mark_unsupported(self, opname: str) -> None:
        raise OracleError(f"RocksDB supports every operation, {opname} included")

    def close(self) -> None:
        self._drop_views()
        self.db.close()

    def op_close(self):
        self.close()

    def _drop_views(self) -> None:
        """Forget every snapshot and cursor: the binding frees them on deallocation, so the
        database really closes once they are gone (one caught in a reference cycle lives until
        a collection: :func:`open_rdict` handles that case)."""
        self.snaps.clear()
        self.iters.clear()
        self.iter_snap.clear()

    # --- writes ---

    def op_put(self, key, vspec):
        self.db.put(key, make_value(*vspec))

    def op_delete(self, key):
        self.db.delete(key)

    def op_delete_range(self, begin, end):
        if begin > end:  # quirk 4: the binding would poison the database
            return ("error", "invalid_argument")
        self.db.delete_range(begin, end)

    def op_batch(self, subs):
        wb = rocksdict.WriteBatch(raw_mode=True)
        for sub in subs:
            if sub[0] == "put":
                wb.put(sub[1], make_value(*sub[2]))
            elif sub[0] == "delete":
                wb.delete(sub[1])
            else:
                wb.delete_range(sub[1], sub[2])
        self.db.write(wb)

    # --- merges: read-modify-write, the model of the append operator ---

    def op_merge(self, key, vspec):
        cur = self.db.get(key)
        self.db.put(key, _appended(cur, make_value(*vspec)))

    def op_merge_batch(self, subs):
        """The batch with each merge replaced by a put of its result, computed in order over
        what the batch itself wrote before it (puts, deletes, ranges) and the database."""
        wb = rocksdict.WriteBatch(raw_mode=True)
        pending: dict[bytes, bytes | None] = {}
        ranges: list[tuple[bytes, bytes]] = []
        for sub in subs:
            if sub[0] == "put":
                pending[sub[1]] = make_value(*sub[2])
                wb.put(sub[1], pending[sub[1]])
            elif sub[0] == "delete":
                pending[sub[1]] = None
                wb.delete(sub[1])
            elif sub[0] == "merge":
                k = sub[1]
                if k in pending:
                    cur = pending[k]
                elif any(b <= k < e for b, e in ranges):
                    cur = None
                else:
                    cur = self.db.get(k)
                pending[k] = _appended(cur, make_value(*sub[2]))
                wb.put(k, pending[k])
            else:
                b, e = sub[1], sub[2]
                ranges.append((b, e))
                for k in [k for k in pending if b <= k < e]:
                    del pending[k]
                wb.delete_range(b, e)
        self.db.write(wb)

    # --- point reads ---

    def op_get(self, key):
        return self.db.get(key)

    def op_contains(self, key):
        v = self.db.get(key)
        return (v is not None, v)

    # --- snapshots ---

    def op_snap_take(self, sid):
        snap = self.db.snapshot()
        keys, values = [], []
        for k, v in self.db.items():
            keys.append(k)
            values.append(v)
        self.snaps[sid] = (snap, keys, values)

    def op_snap_get(self, sid, key):
        entry = self.snaps.get(sid)
        if entry is None:
            return SKIP
        snap, keys, values = entry
        try:
            v = snap[key]
        except Exception as e:  # quirk 1: a bare Exception for a missing key
            if str(e) != "key not found":
                raise
            v = None
        c = ListCursor(keys, values)
        c.seek(key)
        listed = c.value() if c.valid() and c.key() == key else None
        if listed != v:
            raise OracleError(f"RocksDB snapshot[{key!r}] disagrees with its materialised scan")
        return v

    def op_snap_scan(self, sid, start, stop, reverse, limit):
        entry = self.snaps.get(sid)
        if entry is None:
            return SKIP
        return scan(BoundedCursor(ListCursor(entry[1], entry[2]), start, stop), reverse, limit)

    def op_snap_release(self, sid):
        if self.snaps.pop(sid, None) is None:
            return SKIP
        # Cursors reading at a snapshot close with it (RocksDB leaves an iterator that
        # outlives its snapshot undefined); the generator forgets their ids too.
        for iid in [i for i, s in self.iter_snap.items() if s == sid]:
            del self.iters[iid], self.iter_snap[iid]
        return None

    # --- cursors ---

    def op_iter_open(self, iid, lower, upper, sid):
        if sid is None:
            raw = self.db.iter()
        else:
            entry = self.snaps.get(sid)
            if entry is None:
                return SKIP
            raw = ListCursor(entry[1], entry[2])
        self.iters[iid] = BoundedCursor(raw, lower, upper)
        self.iter_snap[iid] = sid

    def op_iter(self, iid, step, arg):
        c = self.iters.get(iid)
        if c is None:
            return SKIP
        return step_cursor(c, step, arg, NOT_VALID)

    def op_iter_close(self, iid):
        if self.iters.pop(iid, None) is None:
            return SKIP
        del self.iter_snap[iid]

    # --- scans ---

    def op_scan(self, start, stop, prefix, reverse, limit):
        if prefix is not None:
            start, stop = prefix, prefix_upper(prefix)
        return scan(BoundedCursor(self.db.iter(), start, stop), reverse, limit)

    # --- maintenance ---

    def op_flush(self):
        self.db.flush()

    def op_compact_range(self, begin, end):
        self.db.compact_range(begin, end)

    def op_reopen(self):
        self.close()
        self.db = open_rdict(self.path, self.options)

    def op_checkpoint(self):
        self.checkpoints += 1
        where = f"{self.path}.cp{self.checkpoints}"
        rocksdict.Checkpoint(self.db).create_checkpoint(where)
        copy = rocksdict.Rdict(where, rocks_options(self.variant))
        try:
            content = list(copy.items())
        finally:
            copy.close()
            shutil.rmtree(where, ignore_errors=True)
        return content

    def op_gc(self):
        # RocksDB's blob GC runs inside compaction; nothing to call.  The answer of a GC is
        # only that the reads after it are unchanged, which the following operations check.
        return None

    def op_verify(self):
        return None

    def op_ingest(self, files):
        self.ingests += 1
        paths = []
        for i, subs in enumerate(files):
            path = f"{self.path}.ingest{self.ingests}-{i}.sst"
            w = rocksdict.SstFileWriter(self.options)
            w.open(path)
            for sub in subs:
                if sub[0] == "put":
                    w[sub[1]] = make_value(*sub[2])
                else:
                    del w[sub[1]]
            w.finish()
            paths.append(path)
        try:
            self.db.ingest_external_file(paths)
        finally:
            for path in paths:
                if os.path.exists(path):
                    os.remove(path)


def _appended(current: bytes | None, operand: bytes) -> bytes:
    """The append operator (``options_sets.MERGE_OPERATOR``): ``operand`` onto ``current``."""
    return operand if current is None else current + MERGE_DELIMITER + operand


def remove_tree(path: str) -> None:
    if os.path.exists(path):
        shutil.rmtree(path, ignore_errors=True)
