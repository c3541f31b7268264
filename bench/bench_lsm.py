"""The persistent-LSM workloads, antkv against RocksDB (``rocksdict``) in one run.

Per round, each engine in a fresh directory: ``fillrandom`` (N random 16-byte keys, 100-byte
values, ``sync=False``, default options, timed until every flush and compaction the load
triggered has finished); then both databases are reopened side by side for ``readrandom``
(min(N, 100k) gets of present keys in random order) and ``readseq`` (full ``items()`` scans).

The machine's speed drifts by 10-25% over seconds (other tenants share its cores), so the
engines share the clock as closely as they can: the fills alternate, antkv first in odd
rounds and RocksDB first in even ones (the second fill also inherits the first one's
writeback); the reads interleave, the gets in slices of 5,000 keys taken in turn (both
engines read the same keys), the scans ``SCANS`` times each in turn (the median counts).  The
report gives each round's ratio and the median.

    python -m bench.bench_lsm [--n 1000000] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import tempfile
import time

import antkv

GET_SLICE = 5_000
SCANS = 3


def _keys(n: int, seed: int = 1) -> list[bytes]:
    rng = random.Random(seed)
    return [b"%016d" % rng.randrange(10**15) for _ in range(n)]


def fill_antkv(keys, value, path) -> tuple[float, dict]:
    db = antkv.open(path)
    put = db.put
    t = time.perf_counter()
    for k in keys:
        put(k, value)
    db.flush()
    db._wait_for_background(lambda: not db._imms and db._bg_running == 0 and not db._has_work())
    rate = len(keys) / (time.perf_counter() - t)
    st = db.stats()
    db.close()
    shape = [(lv["level"], lv["files"]) for lv in st["levels"] if lv["files"]]
    return rate, {"shape": shape, "stalls": st["stalls"]}


def fill_rocksdb(keys, value, path) -> tuple[float, dict]:
    import rocksdict

    db = rocksdict.Rdict(path, rocksdict.Options(raw_mode=True))
    t = time.perf_counter()
    for k in keys:
        db[k] = value
    db.flush()
    rate = len(keys) / (time.perf_counter() - t)
    db.close()
    return rate, {}


def interleaved_reads(paths: dict, keys: list[bytes]) -> dict:
    """Both databases open at once; gets and scans taken in turn (see the module docstring).
    ``{engine: {"readrandom": gets/s, "readseq": entries/s, "scanned": n}}``."""
    import rocksdict

    dbs = {"antkv": antkv.open(paths["antkv"]), "rocksdb": rocksdict.Rdict(paths["rocksdb"], rocksdict.Options(raw_mode=True))}
    try:
        sample = keys[: min(len(keys), 100_000)]
        random.Random(2).shuffle(sample)
        spent = {name: 0.0 for name in dbs}
        order = list(dbs)
        for i in range(0, len(sample), GET_SLICE):
            part = sample[i : i + GET_SLICE]
            for name in order if (i // GET_SLICE) % 2 == 0 else order[::-1]:
                get = dbs[name].get
                t = time.perf_counter()
                for k in part:
                    get(k)
                spent[name] += time.perf_counter() - t
        scans: dict[str, list[float]] = {name: [] for name in dbs}
        scanned = {}
        for _ in range(SCANS):
            for name, db in dbs.items():
                t = time.perf_counter()
                scanned[name] = sum(1 for _ in db.items())
                scans[name].append(scanned[name] / (time.perf_counter() - t))
    finally:
        for db in dbs.values():
            db.close()
    return {
        name: {"readrandom": len(sample) / spent[name], "readseq": statistics.median(scans[name]), "scanned": scanned[name]}
        for name in dbs
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    keys = _keys(args.n)
    value = b"v" * 100
    fills = {"antkv": fill_antkv, "rocksdb": fill_rocksdb}
    results: dict[str, list[dict]] = {"antkv": [], "rocksdb": []}
    for r in range(args.rounds):
        d = tempfile.mkdtemp(prefix="bench-lsm-")
        try:
            paths = {name: os.path.join(d, name) for name in fills}
            res: dict[str, dict] = {}
            for name in list(fills) if r % 2 == 0 else list(fills)[::-1]:
                rate, extra = fills[name](keys, value, paths[name])
                res[name] = {"fillrandom": rate, **extra}
            reads = interleaved_reads(paths, keys)
        finally:
            shutil.rmtree(d, ignore_errors=True)
        for name in fills:
            res[name].update(reads[name])
            results[name].append(res[name])
            extra = f"  levels {res[name]['shape']} stalls {res[name]['stalls']}" if "shape" in res[name] else ""
            print(
                f"round {r + 1} {name:8} fillrandom {res[name]['fillrandom']:>10,.0f}/s  readrandom "
                f"{res[name]['readrandom']:>10,.0f}/s  readseq {res[name]['readseq']:>11,.0f}/s{extra}",
                flush=True,
            )
    assert len({res["scanned"] for rs in results.values() for res in rs}) == 1, "engines scanned different counts"
    print(f"\nload average at the end: {os.getloadavg()[0]:.2f}")
    for w in ("fillrandom", "readrandom", "readseq"):
        ratios = [a[w] / b[w] for a, b in zip(results["antkv"], results["rocksdb"])]
        print(
            f"{w:10} antkv median {statistics.median(a[w] for a in results['antkv']):>11,.0f}/s  "
            f"rocksdb median {statistics.median(b[w] for b in results['rocksdb']):>11,.0f}/s  "
            f"ratio per round {', '.join(f'{x:.2f}x' for x in ratios)}  median {statistics.median(ratios):.2f}x"
        )


if __name__ == "__main__":
    main()
