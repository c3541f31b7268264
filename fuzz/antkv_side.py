"""The antkv side of the differential fuzzer: the adapter interface of ``fuzz/oracle.py``
over the public API of SPEC section 2, on the real file system.

Every public entry point is exercised, alternating deterministically where the API offers two
spellings of the same thing: ``db.write(WriteBatch)`` and ``with db.write_batch()``;
``snap.get(k)`` and ``db.get(k, snapshot=snap)``; ``items()`` and ``zip(keys(), values())``;
``key in db`` together with ``db[key]``.

Features that land later (``flush``, ``compact_range``, ``checkpoint``, ``gc_value_log``,
``verify``) are detected with ``hasattr`` on the open database, and by trying: a
``ModuleNotFoundError`` for an ``antkv.*`` module (the method exists, its implementation has
not landed) answers ``("unsupported", module)``.  The runner runs the subject first; on
``unsupported`` it skips the oracle, counts the operation as skipped and asks
``supports()`` no more.  Skips are printed in the run summary, so a missing feature is
visible and never turns into a silent difference.

Error categories: ``InvalidArgumentError`` -> ``("error", "invalid_argument")`` (what RocksDB
reports for a reversed range); any other ``antkv.Error`` -> ``("error", <class name>)`` and
any other exception -> ``("crash", <class name>, <message>)``; both always differ from the
RocksDB answer, so they are reported.
"""

from __future__ import annotations

import os
import shutil
from itertools import islice

from .generator import make_value
from .cursors import step_cursor
from .oracle import NOT_VALID, SKIP

# operation -> the DB method it needs (operations not listed need only the core API)
_FEATURE_METHOD = {
    "flush": "flush",
    "compact_range": "compact_range",
    "checkpoint": "checkpoint",
    "gc": "gc_value_log",
    "verify": "verify",
    "ingest": "ingest",
}


# Operations found unsupported in this process (their module is missing); see supports().
_UNSUPPORTED: set[str] = set()


class AntkvSide:
    """One antkv database driven by fuzzer operations."""

    name = "antkv"

    def __init__(self, path: str, options):
        import antkv

        self.antkv = antkv
        self.path = path
        self.options = options
        self.db = antkv.open(path, options)
        self.snaps: dict[int, object] = {}
        self.iters: dict[int, object] = {}
        self.iter_snap: dict[int, int | None] = {}
        self.checkpoints = 0
        self.calls = 0  # alternates between equivalent spellings of an operation

    def supports(self, opname: str) -> bool:
        if opname in ("merge", "merge_batch"):  # only a database with a merge operator merges
            return self.options.merge_operator is not None
        method = _FEATURE_METHOD.get(opname)
        return method is None or (hasattr(self.db, method) and opname not in _UNSUPPORTED)

    def classify_error(self, exc: BaseException) -> tuple:
        if isinstance(exc, ModuleNotFoundError) and (exc.name or "").startswith("antkv"):
            # The DB method exists but the module implementing it has not landed yet.
            return ("unsupported", exc.name)
        if isinstance(exc, self.antkv.InvalidArgumentError):
            return ("error", "invalid_argument")
        if isinstance(exc, self.antkv.Error):
            return ("error", type(exc).__name__, str(exc)[:200])
        return ("crash", type(exc).__name__, str(exc)[:200])

    def close(self) -> None:
        self._drop_views()
        self.db.close()

    def op_close(self):
        self.close()

    def _drop_views(self) -> None:
        for it in self.iters.values():
            it.close()
        for snap in self.snaps.values():
            snap.release()
        self.iters.clear()
        self.iter_snap.clear()
        self.snaps.clear()

    def _alternate(self) -> bool:
        self.calls += 1
        return self.calls % 2 == 0

    # --- writes ---

    def op_put(self, key, vspec):
        self.db.put(key, make_value(*vspec))

    def op_delete(self, key):
        self.db.delete(key)

    def op_delete_range(self, begin, end):
        self.db.delete_range(begin, end)

    def op_batch(self, subs):
        if self._alternate():
            b = self.antkv.WriteBatch()
            _fill(b, subs)
            self.db.write(b)
        else:
            with self.db.write_batch() as b:
                _fill(b, subs)

    def op_merge(self, key, vspec):
        self.db.merge(key, make_value(*vspec))

    def op_merge_batch(self, subs):
        self.op_batch(subs)

    # --- point reads ---

    def op_get(self, key):
        return self.db.get(key)

    def op_contains(self, key):
        present = key in self.db
        try:
            value = self.db[key]
        except KeyError:
            value = None
        return (present, value)

    # --- snapshots ---

    def op_snap_take(self, sid):
        self.snaps[sid] = self.db.snapshot()

    def op_snap_get(self, sid, key):
        snap = self.snaps.get(sid)
        if snap is None:
            return SKIP
        if self._alternate():
            return snap.get(key)
        return self.db.get(key, snapshot=snap)

    def op_snap_scan(self, sid, start, stop, reverse, limit):
        snap = self.snaps.get(sid)
        if snap is None:
            return SKIP
        return list(islice(self.db.items(start, stop, reverse=reverse, snapshot=snap), limit))

    def op_snap_release(self, sid):
        snap = self.snaps.pop(sid, None)
        if snap is None:
            return SKIP
        for iid in [i for i, s in self.iter_snap.items() if s == sid]:
            self.iters.pop(iid).close()
            del self.iter_snap[iid]
        snap.release()

    # --- cursors ---

    def op_iter_open(self, iid, lower, upper, sid):
        snap = None
        if sid is not None:
            snap = self.snaps.get(sid)
            if snap is None:
                return SKIP
        self.iters[iid] = self.db.iterator(lower_bound=lower, upper_bound=upper, snapshot=snap)
        self.iter_snap[iid] = sid

    def op_iter(self, iid, step, arg):
        it = self.iters.get(iid)
        if it is None:
            return SKIP
        return step_cursor(it, step, arg, NOT_VALID)

    def op_iter_close(self, iid):
        it = self.iters.pop(iid, None)
        if it is None:
            return SKIP
        del self.iter_snap[iid]
        it.close()

    # --- scans ---

    def op_scan(self, start, stop, prefix, reverse, limit):
        db = self.db
        if prefix is not None:
            kw = {"prefix": prefix, "reverse": reverse}
            args = ()
        else:
            kw = {"reverse": reverse}
            args = (start, stop)
        if self._alternate():
            keys = list(islice(db.keys(*args, **kw), limit))
            values = list(islice(db.values(*args, **kw), limit))
            return list(zip(keys, values))
        return list(islice(db.items(*args, **kw), limit))

    # --- maintenance ---

    def op_flush(self):
        self.db.flush()

    def op_compact_range(self, begin, end):
        self.db.compact_range(begin, end)

    def mark_unsupported(self, opname: str) -> None:
        _UNSUPPORTED.add(opname)

    def op_reopen(self):
        self.close()
        self.db = self.antkv.open(self.path, self.options)

    def op_checkpoint(self):
        self.checkpoints += 1
        where = f"{self.path}.cp{self.checkpoints}"
        self.db.checkpoint(where)
        copy = self.antkv.open(where, self.options)
        try:
            content = list(copy.items())
        finally:
            copy.close()
            shutil.rmtree(where, ignore_errors=True)
        return content

    def op_gc(self):
        self.db.gc_value_log()

    def op_ingest(self, files):
        self.calls += 1
        paths = []
        for i, subs in enumerate(files):
            path = f"{self.path}.ingest{self.calls}-{i}.sst"
            with self.antkv.SstFileWriter(path, self.options) as w:
                _fill(w, subs)
            paths.append(path)
        move = self._alternate()
        try:
            self.db.ingest(paths, move=move)
        finally:
            for path in paths:
                for p in (path, path + ".vlog"):
                    if os.path.exists(p):
                        os.remove(p)

    def op_verify(self):
        self.db.verify()


def _fill(b, subs) -> None:
    for sub in subs:
        if sub[0] == "put":
            b.put(sub[1], make_value(*sub[2]))
        elif sub[0] == "delete":
            b.delete(sub[1])
        elif sub[0] == "merge":
            b.merge(sub[1], make_value(*sub[2]))
        else:
            b.delete_range(sub[1], sub[2])
