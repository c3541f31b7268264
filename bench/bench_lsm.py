"""The persistent-LSM workloads of issue 4, antkv against RocksDB (``rocksdict``) in one run.

Per round and engine, in a fresh directory: ``fillrandom`` (N random 16-byte keys, 100-byte
values, ``sync=False``, default options, timed until every flush and compaction the load
triggered has finished), a reopen, ``readrandom`` (min(N, 100k) gets of present keys in random
order) and ``readseq`` (a full ``items()`` scan).  The engines alternate A B A B so both see the
same machine load; the report gives each round and the median ratio.

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
from antkv import background


def _keys(n: int, seed: int = 1) -> list[bytes]:
    rng = random.Random(seed)
    return [b"%016d" % rng.randrange(10**15) for _ in range(n)]


def _reads(db_get, db_items, keys) -> tuple[float, float, int]:
    sample = keys[: min(len(keys), 100_000)]
    random.Random(2).shuffle(sample)
    t = time.perf_counter()
    for k in sample:
        db_get(k)
    readrandom = len(sample) / (time.perf_counter() - t)
    t = time.perf_counter()
    n = sum(1 for _ in db_items())
    readseq = n / (time.perf_counter() - t)
    return readrandom, readseq, n


def run_antkv(keys, value, path) -> dict:
    db = antkv.open(path)
    put = db.put
    t = time.perf_counter()
    for k in keys:
        put(k, value)
    db.flush()
    db._wait_for_background(lambda: not db._imms and db._bg_running == 0 and not background.has_work(db))
    fill = len(keys) / (time.perf_counter() - t)
    st = db.stats()
    db.close()
    db = antkv.open(path)
    rr, rs, n = _reads(db.get, db.items, keys)
    db.close()
    shape = [(lv["level"], lv["files"]) for lv in st["levels"] if lv["files"]]
    return {"fillrandom": fill, "readrandom": rr, "readseq": rs, "scanned": n, "shape": shape, "stalls": st["stalls"]}


def run_rocksdb(keys, value, path) -> dict:
    import rocksdict

    opts = rocksdict.Options(raw_mode=True)
    db = rocksdict.Rdict(path, opts)
    t = time.perf_counter()
    for k in keys:
        db[k] = value
    db.flush()
    fill = len(keys) / (time.perf_counter() - t)
    db.close()
    db = rocksdict.Rdict(path, opts)
    rr, rs, n = _reads(db.get, db.items, keys)
    db.close()
    return {"fillrandom": fill, "readrandom": rr, "readseq": rs, "scanned": n}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    keys = _keys(args.n)
    value = b"v" * 100
    results: dict[str, list[dict]] = {"antkv": [], "rocksdb": []}
    for r in range(args.rounds):
        for name, fn in (("antkv", run_antkv), ("rocksdb", run_rocksdb)):
            d = tempfile.mkdtemp(prefix=f"bench-lsm-{name}-")
            try:
                res = fn(keys, value, os.path.join(d, "db"))
            finally:
                shutil.rmtree(d, ignore_errors=True)
            results[name].append(res)
            extra = f"  levels {res['shape']} stalls {res['stalls']}" if "shape" in res else ""
            print(
                f"round {r + 1} {name:8} fillrandom {res['fillrandom']:>10,.0f}/s  readrandom "
                f"{res['readrandom']:>10,.0f}/s  readseq {res['readseq']:>11,.0f}/s{extra}",
                flush=True,
            )
    assert len({res["scanned"] for rs in results.values() for res in rs}) == 1, "engines scanned different counts"
    print(f"\nload average at the end: {os.getloadavg()[0]:.2f}")
    for w in ("fillrandom", "readrandom", "readseq"):
        ratios = [a[w] / b[w] for a, b in zip(results["antkv"], results["rocksdb"])]
        print(
            f"{w:10} antkv median {statistics.median(a[w] for a in results['antkv']):>11,.0f}/s  "
            f"rocksdb median {statistics.median(b[w] for b in results['rocksdb']):>11,.0f}/s  "
            f"ratio per round {', '.join(f'{x:.2f}x' for x in ratios)}"
        )


if __name__ == "__main__":
    main()
