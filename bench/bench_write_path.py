"""Micro-benchmark of the hottest paths: single-threaded ``put`` of 16-byte keys and
100-byte values with ``sync=False``, and ``get`` from the memtable; antkv and RocksDB
(``rocksdict``) alternate A B A B in one process so both see the same machine load.

    python -m bench.bench_write_path [--n 200000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time

import antkv


def run_antkv(keys, value, path):
    db = antkv.open(path, write_buffer_size=1 << 30)
    put = db.put
    t = time.perf_counter()
    for k in keys:
        put(k, value)
    put_rate = len(keys) / (time.perf_counter() - t)
    get = db.get
    t = time.perf_counter()
    for k in keys:
        get(k)
    get_rate = len(keys) / (time.perf_counter() - t)
    db.close()
    return put_rate, get_rate


def run_rocksdb(keys, value, path):
    import rocksdict

    opts = rocksdict.Options(raw_mode=True)
    opts.create_if_missing(True)
    db = rocksdict.Rdict(path, opts)
    t = time.perf_counter()
    for k in keys:
        db[k] = value
    put_rate = len(keys) / (time.perf_counter() - t)
    t = time.perf_counter()
    for k in keys:
        db[k]
    get_rate = len(keys) / (time.perf_counter() - t)
    db.close()
    return put_rate, get_rate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    rng_keys = [os.urandom(16) for _ in range(args.n)]
    value = b"v" * 100
    results = {"antkv": [], "rocksdb": []}
    for _ in range(args.rounds):
        for name, fn in (("antkv", run_antkv), ("rocksdb", run_rocksdb)):
            d = tempfile.mkdtemp(prefix=f"bench-{name}-")
            try:
                results[name].append(fn(rng_keys, value, os.path.join(d, "db")))
            finally:
                shutil.rmtree(d, ignore_errors=True)
    print(f"{'engine':8} {'put ops/s (median)':>20} {'get ops/s (median)':>20}   runs")
    for name, runs in results.items():
        puts = [p for p, _ in runs]
        gets = [g for _, g in runs]
        print(f"{name:8} {statistics.median(puts):>20,.0f} {statistics.median(gets):>20,.0f}   "
              f"put {min(puts):,.0f}-{max(puts):,.0f}, get {min(gets):,.0f}-{max(gets):,.0f}")
    a, r = results["antkv"], results["rocksdb"]
    print(f"ratio antkv/rocksdb: put {statistics.median([p for p, _ in a]) / statistics.median([p for p, _ in r]):.2f}, "
          f"get {statistics.median([g for _, g in a]) / statistics.median([g for _, g in r]):.2f}")


if __name__ == "__main__":
    main()
