"""One small adapter interface over every engine the benchmark compares.

An :class:`Engine` opens a database directory and exposes the few operations a db_bench
workload needs.  ``put``/``get``/``delete`` are plain attributes bound to the engine's own
callables at open time (no adapter frame in the hot loop where the engine's API already
matches); everything else is a method.  Semantics every adapter keeps, so numbers compare:

* writes are acknowledged with ``sync=False`` durability (they survive a process kill, not a
  power loss) -- except where the engine offers nothing weaker (pycask fsyncs every put);
* block/page compression is off everywhere it can be switched off (values are 50%
  compressible, as db_bench's);
* ``settle()`` flushes memtables and waits for background work the writes triggered, so write
  figures include it; ``compact()`` is a full compaction plus value-log/blob GC where the engine
  has one (used to measure space amplification "after GC settles");
* ``delete_range`` is native where the engine has it (``native_delete_range``), otherwise an
  iterate-and-delete emulation, which the report marks.

An engine that cannot be imported or opened raises :class:`EngineUnavailable` with the reason;
the harness reports it, it never drops it silently.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from typing import Callable, Iterator

MiB = 1024 * 1024


def cursor_seek_next(it) -> Callable[[bytes, int], int]:
    """``seek_next(key, n)`` over a RocksDB-style cursor (seek/valid/key/value/next): seek, then
    read up to ``n`` entries; returns how many it read."""
    seek, valid, key, value, nxt = it.seek, it.valid, it.key, it.value, it.next

    def seek_next(k: bytes, n: int) -> int:
        seek(k)
        count = 0
        while count < n and valid():
            key()
            value()
            nxt()
            count += 1
        return count

    return seek_next


class EngineUnavailable(Exception):
    """The engine cannot be used on this machine; the message says why."""


class Engine:
    """Base adapter; subclasses set ``put``/``get``/``delete`` in ``__init__``."""

    name = "?"
    native_delete_range = True
    native_order = True  # ordered iteration without sorting every key in Python
    thread_safe = True  # one writer thread beside a reader (readwhilewriting)
    put: Callable[[bytes, bytes], object]
    get: Callable[[bytes], bytes | None]
    delete: Callable[[bytes], object]

    def __init__(self, path: str) -> None:
        self.path = path

    @classmethod
    def describe(cls) -> str:
        return cls.__doc__.strip().splitlines()[0] if cls.__doc__ else cls.name

    def delete_range(self, begin: bytes, end: bytes) -> None:
        for key, _value in list(self.items(begin, end)):
            self.delete(key)

    def items(self, start: bytes | None = None, stop: bytes | None = None,
              reverse: bool = False) -> Iterator[tuple[bytes, bytes]]:
        raise NotImplementedError

    def seeker(self) -> Callable[[bytes, int], int]:
        """A function ``seek_next(key, n)``: position at the first key >= ``key`` and read up
        to ``n`` entries; returns how many it read.  One cursor is reused, as db_bench does."""
        items = self.items

        def seek_next(key: bytes, n: int) -> int:
            count = 0
            for _kv in items(key, None):
                count += 1
                if count >= n:
                    break
            return count

        return seek_next

    def warm(self) -> None:
        """Import every module the engine may load lazily, before the clock starts: a workload
        of a few hundred ops must not time an import (with ``PYTHONDONTWRITEBYTECODE`` set,
        as on the project machine, each import even compiles the module)."""

    def settle(self) -> None:
        """Flush memtables and wait for the background work writes triggered."""

    def compact(self) -> None:
        """Full compaction and GC, to measure space amplification once it settles."""

    def engine_stats(self) -> dict:
        return {}

    def close(self) -> None:
        raise NotImplementedError


def _wait_until(predicate: Callable[[], bool], timeout: float = 600.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.005)


# --------------------------------------------------------------------------- antkv

ANTKV_TUNED = {
    # Bigger write buffer and L1 target: fewer flushes and compactions per user byte.
    "write_buffer_size": 128 * MiB,
    "max_bytes_for_level_base": 512 * MiB,
    "target_file_size_base": 64 * MiB,
    # Separate values from 1 KiB: they are written once and never rewritten by compaction.
    "enable_blob_files": True,
    "min_blob_size": 1024,
}


class AntKV(Engine):
    """antkv with its default Options"""

    name = "antkv"
    overrides: dict = {}
    # ``--antkv-option KEY=VALUE`` of the command line, applied on top of ``overrides`` (the
    # runner sets it in its one-shot child process).
    extra_options: dict = {}

    def __init__(self, path: str) -> None:
        super().__init__(path)
        try:
            import antkv

            opener = antkv.open
        except (ImportError, AttributeError) as e:
            raise EngineUnavailable(f"antkv not available yet: {type(e).__name__}: {e}") from e
        try:
            self.db = db = opener(path, **{**self.overrides, **self.extra_options})
        except Exception as e:  # the engine is under construction: report, do not crash
            raise EngineUnavailable(f"antkv not available yet: {type(e).__name__}: {e}") from e
        self.put = db.put
        self.get = db.get
        self.delete = db.delete
        self.delete_range = db.delete_range

    def items(self, start=None, stop=None, reverse=False):
        return self.db.items(start, stop, reverse=reverse)

    def warm(self):
        import importlib
        import pkgutil

        import antkv

        for mod in pkgutil.walk_packages(antkv.__path__, "antkv."):
            if any(part in mod.name for part in (".spark", ".cli", ".demo", "__main__")):
                continue  # tools and the Spark layer: never on the engine's paths
            try:
                importlib.import_module(mod.name)
            except ImportError:
                pass  # a module of the tree being written may not import yet; not ours to judge

    def seeker(self):
        it = self.db.iterator()
        self._iterators = getattr(self, "_iterators", []) + [it]
        return cursor_seek_next(it)

    def settle(self):
        self.db.flush()
        stats = self.db.stats
        _wait_until(lambda: not stats().get("pending_compaction_bytes", 0)
                    and not stats().get("running_compactions", 0))

    def compact(self):
        self.db.compact_range()
        gc = getattr(self.db, "gc_value_log", None)
        if gc is not None:
            gc()

    def engine_stats(self):
        return dict(self.db.stats())

    def close(self):
        for it in getattr(self, "_iterators", []):
            it.close()
        self.db.close()


class AntKVTuned(AntKV):
    """antkv with bench.engines.ANTKV_TUNED overrides"""

    name = "antkv-tuned"
    overrides = ANTKV_TUNED


# --------------------------------------------------------------------------- RocksDB


class RocksDB(Engine):
    """RocksDB through rocksdict, defaults, compression off"""

    name = "rocksdb"

    def __init__(self, path: str) -> None:
        super().__init__(path)
        try:
            import rocksdict
        except ImportError as e:
            raise EngineUnavailable(f"rocksdict: {e}") from e
        self._rd = rocksdict
        opts = rocksdict.Options(raw_mode=True)
        opts.create_if_missing(True)
        opts.set_compression_type(rocksdict.DBCompressionType.none())
        self.configure(opts)
        self.db = db = rocksdict.Rdict(path, options=opts)
        self.put = db.put
        self.get = db.get
        self.delete = db.delete
        self.delete_range = db.delete_range

    def configure(self, opts) -> None:
        """Hook for variants (blob files)."""

    def items(self, start=None, stop=None, reverse=False):
        it = self.db.iter()
        if reverse:
            if stop is None:
                it.seek_to_last()
            else:
                it.seek_for_prev(stop)
                if it.valid() and it.key() == stop:
                    it.prev()
            step = it.prev
            while it.valid():
                k = it.key()
                if start is not None and k < start:
                    break
                yield k, it.value()
                step()
        else:
            if start is None:
                it.seek_to_first()
            else:
                it.seek(start)
            step = it.next
            while it.valid():
                k = it.key()
                if stop is not None and k >= stop:
                    break
                yield k, it.value()
                step()

    def seeker(self):
        return cursor_seek_next(self.db.iter())

    def settle(self):
        self.db.flush(True)
        prop = self.db.property_int_value
        _wait_until(lambda: prop("rocksdb.num-running-flushes") == 0
                    and prop("rocksdb.num-running-compactions") == 0
                    and prop("rocksdb.compaction-pending") == 0)

    def compact(self):
        self.db.compact_range(None, None)
        self.settle()

    def engine_stats(self):
        prop = self.db.property_int_value
        return {"live_data_size": prop("rocksdb.estimate-live-data-size"),
                "live_sst_bytes": prop("rocksdb.live-sst-files-size"),
                "blob_file_bytes": prop("rocksdb.total-blob-file-size")}

    def close(self):
        self.db.close()


class RocksDBBlob(RocksDB):
    """RocksDB through rocksdict, BlobDB: enable_blob_files, min_blob_size 4 KiB, blob GC"""

    name = "rocksdb-blob"

    def configure(self, opts) -> None:
        opts.set_enable_blob_files(True)
        opts.set_min_blob_size(4096)  # antkv's default min_blob_size
        opts.set_blob_file_size(256 * MiB)
        opts.set_enable_blob_gc(True)
        opts.set_blob_gc_age_cutoff(0.25)
        opts.set_blob_compression_type(self._rd.DBCompressionType.none())

    def compact(self):
        # "After GC settles": let the full compaction relocate live blobs out of every blob
        # file (age cutoff 1.0), not only out of the oldest 25% as during normal running.
        self.db.set_options({"blob_garbage_collection_age_cutoff": "1.0"})
        super().compact()


# The other engines live in bench/peers.py; imported here, after Engine exists, to register them.
from .peers import LMDB, PyCask, PyLSM, LevelDB, SQLite, Tritcask  # noqa: E402

ENGINES: dict[str, type[Engine]] = {
    cls.name: cls
    for cls in (AntKV, AntKVTuned, RocksDB, RocksDBBlob, LevelDB, LMDB, SQLite, PyCask, Tritcask,
                PyLSM)
}

# The PyPI distribution that provides each engine ("" = standard library or this repository).
DISTRIBUTIONS = {
    "antkv": "", "antkv-tuned": "", "sqlite": "",
    "rocksdb": "rocksdict", "rocksdb-blob": "rocksdict",
    "leveldb": "plyvel", "lmdb": "lmdb", "pycask": "pycask", "tritcask": "tritcask",
    "pylsm": "pylsm",
}


def probe(name: str) -> str | None:
    """None if ``name`` opens, writes, reads back and closes in a scratch directory; otherwise
    the reason it cannot be benchmarked."""
    cls = ENGINES.get(name)
    if cls is None:
        return f"unknown engine {name!r}; known: {', '.join(ENGINES)}"
    tmp = tempfile.mkdtemp(prefix=f"bench-probe-{name}-")
    try:
        eng = cls(os.path.join(tmp, "db"))
        eng.put(b"probe-key-000001", b"probe-value")
        got = eng.get(b"probe-key-000001")
        eng.close()
        if got != b"probe-value":
            return f"{name}: probe read back {got!r}"
        return None
    except EngineUnavailable as e:
        return str(e)
    except Exception as e:
        return f"{name}: {type(e).__name__}: {e}"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
