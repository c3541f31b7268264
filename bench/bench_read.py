"""Read speed against RocksDB in the same run: readrandom (point gets) and readseq (full scan).

    PYTHONPATH=. .venv/bin/python bench/bench_read.py [--keys N] [--reads R] [--rounds K] [--dir D]
                                                      [--profile random|seq]

Loads ``N`` random 16-byte keys with 100-byte values (the small-value shape, default options) into
antkv and into RocksDB (``rocksdict``), both flushed, then alternates the two engines ``K``
times: re-open, ``R`` gets of existing keys in random order, one full ``items()`` scan.  Prints
every round, the medians and the antkv/RocksDB ratios, by the wall clock and by CPU time.  With ``--dir`` the two databases are
kept there and re-used by later runs (the load takes about a minute at 1M keys); without it
they live in a temporary directory.  ``--profile`` runs antkv's random gets or scan once under
cProfile instead and prints the top functions.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import random
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import antkv  # noqa: E402

VALUE = b"v" * 100


def make_keys(n: int) -> list[bytes]:
    rng = random.Random(1)
    return [b"%016d" % rng.randrange(10**15) for _ in range(n)]


def load_antkv(path: str, keys: list[bytes]) -> None:
    db = antkv.open(path)
    try:
        put = db.put
        for k in keys:
            put(k, VALUE)
        db.flush()
        db._wait_for_background(lambda: not db._imms and db._bg_running == 0)
    finally:
        db.close()


def load_rocksdb(path: str, keys: list[bytes]) -> None:
    import rocksdict

    db = rocksdict.Rdict(path, rocksdict.Options(raw_mode=True))
    try:
        for k in keys:
            db[k] = VALUE
        db.flush()
    finally:
        db.close()


def open_engine(name: str, path: str):
    if name == "antkv":
        return antkv.open(path)
    import rocksdict

    return rocksdict.Rdict(path, rocksdict.Options(raw_mode=True))


def measure(name: str, path: str, probes: list[bytes]) -> tuple[float, float, float, float]:
    """``(gets/s, scanned entries/s)`` of one engine, freshly opened, by the wall clock and by
    the process's CPU time (both engines read in the calling thread, and CPU time is less
    disturbed by other processes on a busy machine)."""
    db = open_engine(name, path)
    try:
        get = db.get
        t, c = time.perf_counter(), time.process_time()
        for k in probes:
            get(k)
        rr, rr_cpu = len(probes) / (time.perf_counter() - t), len(probes) / (time.process_time() - c)
        t, c = time.perf_counter(), time.process_time()
        n = sum(1 for _ in db.items())
        rs, rs_cpu = n / (time.perf_counter() - t), n / (time.process_time() - c)
    finally:
        db.close()
    return rr, rs, rr_cpu, rs_cpu


def profile(path: str, probes: list[bytes], what: str) -> None:
    db = antkv.open(path)
    try:
        prof = cProfile.Profile()
        if what == "random":
            get = db.get
            prof.runcall(lambda: [get(k) for k in probes])
        else:
            prof.runcall(lambda: sum(1 for _ in db.items()))
        pstats.Stats(prof).sort_stats("tottime").print_stats(20)
    finally:
        db.close()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--reads", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", default=None, help="keep the databases here and re-use them")
    ap.add_argument("--profile", choices=("random", "seq"), default=None)
    a = ap.parse_args(argv)
    keys = make_keys(a.keys)
    probes = keys[:]
    random.Random(2).shuffle(probes)
    probes = probes[: a.reads]
    base = a.dir or tempfile.mkdtemp(prefix="antkv-bench-read-")
    paths = {"antkv": os.path.join(base, f"antkv-{a.keys}"), "rocksdb": os.path.join(base, f"rocksdb-{a.keys}")}
    try:
        for name, load in (("antkv", load_antkv), ("rocksdb", load_rocksdb)):
            if not os.path.exists(paths[name]):
                t = time.perf_counter()
                load(paths[name], keys)
                print(f"loaded {name} in {time.perf_counter() - t:.1f}s", flush=True)
        if a.profile:
            profile(paths["antkv"], probes, a.profile)
            return
        results: dict[str, list[tuple[float, float, float, float]]] = {"antkv": [], "rocksdb": []}
        for r in range(a.rounds):
            for name in ("antkv", "rocksdb"):
                m = measure(name, paths[name], probes)
                results[name].append(m)
                print(
                    f"round {r} {name:8} readrandom {m[0]:>11,.0f}/s (cpu {m[2]:>11,.0f}/s)  "
                    f"readseq {m[1]:>11,.0f}/s (cpu {m[3]:>11,.0f}/s)",
                    flush=True,
                )
        for name, v in results.items():
            med = [statistics.median(x[i] for x in v) for i in range(4)]
            print(
                f"median  {name:8} readrandom {med[0]:>11,.0f}/s (cpu {med[2]:>11,.0f}/s)  "
                f"readseq {med[1]:>11,.0f}/s (cpu {med[3]:>11,.0f}/s)"
            )
        ratio = [
            statistics.median(x[i] / y[i] for x, y in zip(results["antkv"], results["rocksdb"])) for i in range(4)
        ]
        print(
            f"antkv/rocksdb (median of per-round ratios): readrandom {ratio[0]:.2f}x (cpu {ratio[2]:.2f}x)  "
            f"readseq {ratio[1]:.2f}x (cpu {ratio[3]:.2f}x)"
        )
    finally:
        if a.dir is None:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
