"""Range deletes, antkv against RocksDB.

Usage::

    .venv/bin/python bench/bench_rangedel.py [--keys 1000000] [--value-size 100] [--gets 100000]
                                             [--dir /tmp] [--engines antkv,rocksdb]

Both engines run on the real file system, one after the other, each on a fresh database of
``--keys`` keys (16-byte keys, ``--value-size``-byte values) loaded with write batches of 1,000,
flushed and compacted into one sorted run before anything is measured.  RocksDB runs through
``rocksdict`` (raw mode, compression off, otherwise defaults), antkv with its defaults except
the value log off (the values are small) and compression off; both get a ``--cache-mb`` block
cache (default 256 MiB: the whole database fits, so readrandom measures the engines' CPU cost
of a lookup, tombstone checks included, not the disk or the cache's warm-up).

1. **Delete 10% of the keys**: one ``delete_range`` over a contiguous 10% (keys 0-10%), against
   ``delete`` of the same number of keys one by one (keys 10-20%).  For each: the wall time of
   the delete calls, the bytes the process wrote meanwhile (``wchar`` of ``/proc/self/io``: every
   ``write()``, the WAL here), then the same two figures for the flush that persists them.
2. **readrandom** (``--gets`` gets of uniformly random keys, a fixed seed, the same keys for both
   engines) with 0, 100 and 10,000 live range tombstones, each deleting one key, spread evenly
   over the key space (never over a probed key); once with the tombstones in the memtable and
   once flushed into an L0 table; best of ``--rounds`` passes.
   The database is compacted first, so the 10% deletes of part 1 are gone, and one untimed
   pass of the same gets warms the caches.

Single runs on a shared machine: expect +-10% noise on times.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import antkv  # noqa: E402
from bench.measure import read_proc_io  # noqa: E402

BATCH = 1000


def key(i: int) -> bytes:
    return b"key%013d" % i


def wchar() -> int:
    return read_proc_io().get("wchar", 0)


class _Engine:
    """What both adapters share: batched loading and the delete/get entry points."""

    db = None

    def new_batch(self):
        raise NotImplementedError

    def load(self, n: int, value: bytes) -> None:
        db = self.db
        for start in range(0, n, BATCH):
            b = self.new_batch()
            for i in range(start, min(start + BATCH, n)):
                b.put(key(i), value)
            db.write(b)

    def delete_range(self, a: bytes, b: bytes) -> None:
        self.db.delete_range(a, b)

    def deleter(self):
        return self.db.delete

    def getter(self):
        return self.db.get


class AntKV(_Engine):
    name = "antkv"

    def new_batch(self):
        return antkv.WriteBatch()

    def __init__(self, path: str, cache_bytes: int):
        self.db = antkv.open(path, enable_blob_files=False, compression=None, block_cache=antkv.Cache(cache_bytes))

    def flush(self) -> None:
        self.db.flush(wait=True)

    def compact(self) -> None:
        self.db.compact_range()

    def engine_bytes_written(self) -> int:
        return self.db.stats()["bytes_written_total"]

    def close(self) -> None:
        self.db.close()


class RocksDB(_Engine):
    name = "rocksdb"

    def new_batch(self):
        return self._rd.WriteBatch(raw_mode=True)

    def __init__(self, path: str, cache_bytes: int):
        import rocksdict

        self._rd = rocksdict
        opts = rocksdict.Options(raw_mode=True)
        opts.create_if_missing(True)
        opts.set_compression_type(rocksdict.DBCompressionType.none())
        table = rocksdict.BlockBasedOptions()
        table.set_block_cache(rocksdict.Cache(cache_bytes))
        opts.set_block_based_table_factory(table)
        self.db = rocksdict.Rdict(path, options=opts)

    def flush(self) -> None:
        self.db.flush(True)
        self._settle()

    def _settle(self) -> None:
        prop = self.db.property_int_value
        while prop("rocksdb.num-running-flushes") or prop("rocksdb.num-running-compactions") or prop("rocksdb.compaction-pending"):
            time.sleep(0.01)

    def compact(self) -> None:
        self.db.compact_range(None, None)
        self._settle()

    def engine_bytes_written(self) -> int | None:
        return None

    def close(self) -> None:
        self.db.close()


ENGINES = {"antkv": AntKV, "rocksdb": RocksDB}


def timed_io(fn) -> tuple[float, int]:
    w0 = wchar()
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0, wchar() - w0


def readrandom(e, probes: list[bytes], rounds: int) -> float:
    """Best of ``rounds`` passes over ``probes``, in gets per second (every probe must exist)."""
    get = e.getter()
    best = 0.0
    for _ in range(rounds):
        t0 = time.perf_counter()
        missing = 0
        for k in probes:
            if get(k) is None:
                missing += 1
        best = max(best, len(probes) / (time.perf_counter() - t0))
        assert missing == 0, f"{missing} probes missing"
    return best


def run_engine(name: str, args, root: str) -> dict:
    path = os.path.join(root, name)
    e = ENGINES[name](path, args.cache_mb << 20)
    n = args.keys
    tenth = n // 10
    value = b"v" * args.value_size
    out: dict = {}
    t0 = time.perf_counter()
    e.load(n, value)
    e.flush()
    e.compact()
    out["load_s"] = time.perf_counter() - t0
    print(f"  {name}: loaded {n:,} keys in {out['load_s']:.1f}s", flush=True)

    # 1a. delete_range of keys [0, 10%)
    eb0 = e.engine_bytes_written()
    out["range_s"], out["range_bytes"] = timed_io(lambda: e.delete_range(key(0), key(tenth)))
    out["range_flush_s"], out["range_flush_bytes"] = timed_io(e.flush)
    eb1 = e.engine_bytes_written()
    out["range_engine_bytes"] = None if eb0 is None else eb1 - eb0
    # 1b. the same number of keys, [10%, 20%), one by one
    delete = e.deleter()
    keys = [key(i) for i in range(tenth, 2 * tenth)]

    def one_by_one():
        for k in keys:
            delete(k)

    out["point_s"], out["point_bytes"] = timed_io(one_by_one)
    out["point_flush_s"], out["point_flush_bytes"] = timed_io(e.flush)
    eb2 = e.engine_bytes_written()
    out["point_engine_bytes"] = None if eb0 is None else eb2 - eb1
    get = e.getter()
    assert get(key(5)) is None and get(key(tenth + 5)) is None and get(key(2 * tenth + 5)) == value

    # 2. readrandom with 0, 100, 10,000 live tombstones (memtable, then flushed)
    e.compact()
    # 100 tombstones first, then 9,900 more: each deletes the single key 2*tenth + 1 + j*step
    step = (n - 2 * tenth) // 10_000
    rng = random.Random(7)
    probes = []
    for _ in range(args.gets):  # keys that exist and stay: never a tombstone's key
        i = rng.randrange(2 * tenth, n)
        probes.append(key(i - 1 if (i - 2 * tenth - 1) % step == 0 else i))
    out["rr"] = {}
    readrandom(e, probes, 1)  # warm-up: the block cache and the OS page cache as a steady state
    out["rr"][("-", 0)] = readrandom(e, probes, args.rounds)
    placed = 0
    for count in (100, 10_000):
        wanted = list(range(2 * tenth + 1, n, step))[:count]
        for i in wanted[placed:]:
            e.delete_range(key(i), key(i) + b"\x00")
        placed = len(wanted)
        out["rr"][("memtable", count)] = readrandom(e, probes, args.rounds)
        e.flush()
        out["rr"][("table", count)] = readrandom(e, probes, args.rounds)
    e.close()
    return out


def fmt_bytes(b) -> str:
    if b is None:
        return "-"
    if b >= 1 << 20:
        return f"{b / (1 << 20):.1f} MiB"
    if b >= 1 << 10:
        return f"{b / 1024:.1f} KiB"
    return f"{b} B"


def fmt_time(s: float) -> str:
    return f"{s * 1e3:.2f} ms" if s < 1 else f"{s:.2f} s"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--gets", type=int, default=100_000)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--engines", default="antkv,rocksdb")
    ap.add_argument("--cache-mb", type=int, default=256, help="block cache of each engine")
    ap.add_argument("--rounds", type=int, default=3, help="readrandom: best of this many passes")
    a = ap.parse_args(argv)
    root = tempfile.mkdtemp(prefix="bench_rangedel_", dir=a.dir)
    results = {}
    try:
        for name in a.engines.split(","):
            results[name] = run_engine(name, a, root)
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    n = a.keys
    print(f"\nDelete 10% of {n:,} keys ({n // 10:,} keys; {a.value_size}-byte values); bytes = write() bytes of the process")
    hdr = f"{'engine':8} {'method':18} {'delete time':>12} {'bytes':>10} {'flush time':>11} {'flush bytes':>12} {'engine-counted':>15}"
    print(hdr)
    print("-" * len(hdr))
    for name, r in results.items():
        for label, p in (("delete_range x1", "range"), ("delete one by one", "point")):
            print(
                f"{name:8} {label:18} {fmt_time(r[p + '_s']):>12} {fmt_bytes(r[p + '_bytes']):>10} "
                f"{fmt_time(r[p + '_flush_s']):>11} {fmt_bytes(r[p + '_flush_bytes']):>12} {fmt_bytes(r[p + '_engine_bytes']):>15}"
            )
    print(f"\nreadrandom: {a.gets:,} gets of existing keys, ops/s (best of {a.rounds}), with N live single-key range tombstones")
    cols = [("-", 0), ("memtable", 100), ("memtable", 10_000), ("table", 100), ("table", 10_000)]
    hdr = f"{'engine':8} " + " ".join(f"{(str(c) + ' ' + (p if p != '-' else '')).strip():>16}" for p, c in cols)
    print(hdr)
    print("-" * len(hdr))
    for name, r in results.items():
        print(f"{name:8} " + " ".join(f"{r['rr'][c]:>16,.0f}" for c in cols))


if __name__ == "__main__":
    main()
