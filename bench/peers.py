"""Adapters for the peer engines: LevelDB (plyvel), LMDB, SQLite, and the pure-Python stores
tritcask, pycask and pylsm.  The interface and its rules are in :mod:`bench.engines`."""

from __future__ import annotations

import importlib
import os
import sqlite3

from .engines import Engine, EngineUnavailable


# --------------------------------------------------------------------------- LevelDB, LMDB


class LevelDB(Engine):
    """LevelDB through plyvel, defaults, compression off"""

    name = "leveldb"
    native_delete_range = False

    def __init__(self, path: str) -> None:
        super().__init__(path)
        try:
            import plyvel
        except ImportError as e:
            raise EngineUnavailable(f"plyvel: {e}") from e
        self.db = db = plyvel.DB(path, create_if_missing=True, compression=None)
        self.put = db.put
        self.get = db.get
        self.delete = db.delete

    def delete_range(self, begin, end):
        with self.db.write_batch() as wb:
            for key in self.db.iterator(start=begin, stop=end, include_value=False):
                wb.delete(key)

    def items(self, start=None, stop=None, reverse=False):
        return self.db.iterator(start=start, stop=stop, reverse=reverse)

    def seeker(self):
        it = self.db.iterator()
        seek = it.seek

        def seek_next(k: bytes, n: int) -> int:
            seek(k)
            count = 0
            for _kv in it:
                count += 1
                if count >= n:
                    break
            return count

        self._it = it
        return seek_next

    def compact(self):
        self.db.compact_range()

    def close(self):
        if getattr(self, "_it", None) is not None:
            self._it.close()
        self.db.close()


class LMDB(Engine):
    """LMDB through py-lmdb, one write transaction per put, sync=False"""

    name = "lmdb"
    native_delete_range = False

    def __init__(self, path: str) -> None:
        super().__init__(path)
        try:
            import lmdb
        except ImportError as e:
            raise EngineUnavailable(f"lmdb: {e}") from e
        self.env = env = lmdb.open(path, map_size=1 << 38, sync=False, metasync=False,
                                   readahead=False, max_spare_txns=4)
        begin = env.begin

        def put(k, v):
            with begin(write=True) as txn:
                txn.put(k, v)

        def get(k):
            with begin() as txn:
                return txn.get(k)

        def delete(k):
            with begin(write=True) as txn:
                txn.delete(k)

        self.put, self.get, self.delete = put, get, delete

    def delete_range(self, begin, end):
        with self.env.begin(write=True) as txn:
            cur = txn.cursor()
            if cur.set_range(begin):
                while cur.key() < end and cur.delete():
                    pass

    def items(self, start=None, stop=None, reverse=False):
        with self.env.begin() as txn:
            cur = txn.cursor()
            if reverse:
                ok = cur.set_range(stop) if stop is not None else cur.last()
                if stop is not None:
                    ok = cur.prev() if ok else cur.last()
                while ok:
                    k = cur.key()
                    if start is not None and k < start:
                        break
                    yield k, cur.value()
                    ok = cur.prev()
            else:
                ok = cur.set_range(start) if start is not None else cur.first()
                while ok:
                    k = cur.key()
                    if stop is not None and k >= stop:
                        break
                    yield k, cur.value()
                    ok = cur.next()

    def seeker(self):
        txn = self.env.begin()
        cur = txn.cursor()

        def seek_next(k: bytes, n: int) -> int:
            ok = cur.set_range(k)
            count = 0
            while ok and count < n:
                cur.key()
                cur.value()
                count += 1
                ok = cur.next()
            return count

        self._txn = txn
        return seek_next

    def settle(self):
        self.env.sync(True)

    def close(self):
        if getattr(self, "_txn", None) is not None:
            self._txn.abort()
        self.env.close()


# --------------------------------------------------------------------------- SQLite


class SQLite(Engine):
    """SQLite (stdlib), WAL journal, synchronous=OFF, one autocommit statement per op"""

    name = "sqlite"

    def __init__(self, path: str) -> None:
        super().__init__(path)
        os.makedirs(path, exist_ok=True)
        self.conn = conn = sqlite3.connect(os.path.join(path, "kv.sqlite"), isolation_level=None,
                                           check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=OFF")
        conn.execute("CREATE TABLE IF NOT EXISTS kv (k BLOB PRIMARY KEY, v BLOB NOT NULL)")
        ex = conn.execute

        def put(k, v):
            ex("INSERT OR REPLACE INTO kv (k, v) VALUES (?, ?)", (k, v))

        def get(k):
            row = ex("SELECT v FROM kv WHERE k = ?", (k,)).fetchone()
            return row[0] if row is not None else None

        def delete(k):
            ex("DELETE FROM kv WHERE k = ?", (k,))

        self.put, self.get, self.delete = put, get, delete

    def delete_range(self, begin, end):
        self.conn.execute("DELETE FROM kv WHERE k >= ? AND k < ?", (begin, end))

    def items(self, start=None, stop=None, reverse=False):
        order = "DESC" if reverse else "ASC"
        lo = start if start is not None else b""
        if stop is None:
            return self.conn.execute(f"SELECT k, v FROM kv WHERE k >= ? ORDER BY k {order}", (lo,))
        return self.conn.execute(
            f"SELECT k, v FROM kv WHERE k >= ? AND k < ? ORDER BY k {order}", (lo, stop))

    def settle(self):
        self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def compact(self):
        self.conn.execute("VACUUM")
        self.settle()

    def close(self):
        self.conn.close()


# --------------------------------------------------------------------------- pure-Python peers


class _SortedKeysMixin:
    """Ordered reads for hash-indexed (bitcask) stores: sort the key directory, then get."""

    native_order = False
    native_delete_range = False

    def _all_keys(self) -> list[bytes]:
        raise NotImplementedError

    def items(self, start=None, stop=None, reverse=False):
        keys = sorted(k for k in self._all_keys()
                      if (start is None or k >= start) and (stop is None or k < stop))
        if reverse:
            keys.reverse()
        get = self.get
        for k in keys:
            yield k, get(k)


class PyCask(_SortedKeysMixin, Engine):
    """pycask (pure-Python bitcask; str keys, fsyncs every put)"""

    name = "pycask"
    thread_safe = False

    def __init__(self, path: str) -> None:
        super().__init__(path)
        try:
            import pycask
        except ImportError as e:
            raise EngineUnavailable(f"pycask: {e}") from e
        # pycask stores str: the harness's keys and values are ASCII, so decode/encode is exact.
        self.ds = ds = pycask.DataStore(path)
        ds_put, ds_get, ds_delete = ds.put, ds.get, ds.delete

        def put(k, v):
            ds_put(k.decode("ascii"), v.decode("ascii"))

        def get(k):
            v = ds_get(k.decode("ascii"))
            return None if v is None else v.encode("ascii")

        def delete(k):
            ds_delete(k.decode("ascii"))

        self.put, self.get, self.delete = put, get, delete

    def _all_keys(self):
        return [k.encode("ascii") for k in self.ds.keys()]

    def compact(self):
        self.ds.merge()

    def close(self):
        # pycask has no close(); its active log file object owns the only open handle.
        self.ds._active_datafile.close()


class Tritcask(_SortedKeysMixin, Engine):
    """tritcask (pure-Python bitcask; Python 2 era, needs the collections.MutableMapping alias)"""

    name = "tritcask"
    thread_safe = False

    def __init__(self, path: str) -> None:
        super().__init__(path)
        import collections
        import collections.abc

        if not hasattr(collections, "MutableMapping"):
            # tritcask 0.3 imports collections.MutableMapping, removed in Python 3.10; the alias
            # is the same class, so this only lets the module import.
            collections.MutableMapping = collections.abc.MutableMapping
        try:
            from tritcask.tritcask import Tritcask as _Tritcask
        except ImportError as e:
            raise EngineUnavailable(f"tritcask: {e}") from e
        self.db = db = _Tritcask(path, auto_merge=True)
        db_put, db_get, db_delete = db.put, db.get, db.delete

        def put(k, v):
            db_put(0, k, v)

        def get(k):
            try:
                return db_get(0, k)
            except KeyError:
                return None

        def delete(k):
            try:
                db_delete(0, k)
            except KeyError:
                pass  # deleting a missing key is a no-op in every other engine

        self.put, self.get, self.delete = put, get, delete

    def _all_keys(self):
        return [k for (_row, k) in self.db.keys()]

    def compact(self):
        self.db.rotate()
        self.db.merge(dict(self.db._immutable))

    def close(self):
        self.db.shutdown()


class PyLSM(Engine):
    """pylsm (pure-Python LSM) -- `pylsm.DB(path)` with put/get/delete/close"""

    name = "pylsm"
    native_delete_range = False
    native_order = False

    def __init__(self, path: str) -> None:
        super().__init__(path)
        try:
            pylsm = importlib.import_module("pylsm")
            self.db = db = pylsm.DB(path)
        except Exception as e:
            raise EngineUnavailable(f"pylsm: {type(e).__name__}: {e}") from e
        self.put, self.get, self.delete = db.put, db.get, db.delete

    def items(self, start=None, stop=None, reverse=False):
        raise EngineUnavailable("pylsm: no ordered iteration in its API")

    def close(self):
        self.db.close()
