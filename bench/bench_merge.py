"""Appending to lists: antkv's ``db.merge`` against RocksDB's read-modify-write, from one run.

    python -m bench.bench_merge [--lists 2000] [--appends 20] [--rounds 3]

What Spark's list state does on RocksDB: append an element to a key's list.  antkv appends
with ``db.merge(key, element)`` and the built-in ``"append"`` operator; ``rocksdict`` has no
merge operator, so the RocksDB side does what an application without one must: ``get`` the
list, append, ``put`` it back.  Elements are 32 incompressible bytes that differ per append
(seeded, so both engines write the same bytes); appends go round-robin over ``--lists`` keys.

| phase | what is timed |
|---|---|
| ``append`` | ``lists * appends`` appends, then ``flush()`` and (antkv) every flush and compaction they triggered |
| ``read`` | one ``get`` of every list, in random order (the lists are checked equal across engines) |
| ``scan`` | one full forward scan |

Each round runs each engine in a fresh child process, alternating which goes first; figures
are medians over ``--rounds`` with the per-round ratio antkv/RocksDB.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ENGINES = ("antkv", "rocksdb")
PHASES = ("append", "read", "scan")


def _elements(lists: int, appends: int, seed: int):
    rng = random.Random(seed)
    keys = [b"list/%08d" % i for i in range(lists)]
    return keys, [(keys[i % lists], rng.randbytes(32)) for i in range(lists * appends)]


def child(engine: str, path: str, lists: int, appends: int, seed: int) -> dict:
    keys, elements = _elements(lists, appends, seed)
    order = keys[:]
    random.Random(seed + 1).shuffle(order)
    out = {}
    if engine == "antkv":
        import antkv

        db = antkv.open(path, merge_operator="append")
        t = time.perf_counter()
        for k, e in elements:
            db.merge(k, e)
        db.flush()
        db.compact_range()  # what the appends left for the background: done before reads
        out["append"] = len(elements) / (time.perf_counter() - t)
        get, items = db.get, db.items
    else:
        import rocksdict

        opts = rocksdict.Options(raw_mode=True)
        opts.create_if_missing(True)
        db = rocksdict.Rdict(path, opts)
        t = time.perf_counter()
        for k, e in elements:
            cur = db.get(k)
            db.put(k, e if cur is None else cur + e)
        db.flush()
        db.compact_range(None, None)
        out["append"] = len(elements) / (time.perf_counter() - t)
        get, items = db.get, db.items
    t = time.perf_counter()
    values = [get(k) for k in order]
    out["read"] = len(order) / (time.perf_counter() - t)
    t = time.perf_counter()
    n = sum(1 for _ in items())
    out["scan"] = n / (time.perf_counter() - t)
    out["digest"] = hashlib.sha256(b"".join(v + b"|" for v in values)).hexdigest()
    db.close()
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lists", type=int, default=2000)
    ap.add_argument("--appends", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--child", nargs=2, metavar=("ENGINE", "PATH"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child[0], args.child[1], args.lists, args.appends, args.seed)))
        return 0
    results = {e: [] for e in ENGINES}
    root = tempfile.mkdtemp(prefix="antkv-bench-merge-")
    try:
        for r in range(args.rounds):
            for engine in ENGINES if r % 2 == 0 else ENGINES[::-1]:
                path = os.path.join(root, f"{engine}-{r}")
                cmd = [sys.executable, "-m", "bench.bench_merge", "--lists", str(args.lists), "--appends",
                       str(args.appends), "--seed", str(args.seed), "--child", engine, path]
                proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
                results[engine].append(json.loads(proc.stdout.strip().splitlines()[-1]))
                shutil.rmtree(path, ignore_errors=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    digests = {res["digest"] for e in ENGINES for res in results[e]}
    if len(digests) != 1:
        print("the engines' lists differ", file=sys.stderr)
        return 1
    print(f"{args.lists} lists x {args.appends} appends of 32 B, {args.rounds} rounds; load average "
          f"{os.getloadavg()[0]:.2f}\n")
    print("| phase | antkv | RocksDB (get + put) | antkv/RocksDB (median, range) |")
    print("|---|---|---|---|")
    for phase in PHASES:
        a = [res[phase] for res in results["antkv"]]
        b = [res[phase] for res in results["rocksdb"]]
        ratios = [x / y for x, y in zip(a, b)]
        print(f"| {phase} | {statistics.median(a):,.0f}/s | {statistics.median(b):,.0f}/s | "
              f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}) |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
