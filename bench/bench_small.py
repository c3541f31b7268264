"""Small values, antkv against RocksDB (``rocksdict``), from one run.

    python -m bench.bench_small [--num 300000] [--rounds 3] [--jobs 20] [--workloads ...]

Data: 16-byte random keys; incompressible 100-byte values that differ per key (each drawn
from a seeded RNG, so every engine writes the same bytes); default options for both engines,
except where a workload says otherwise. Every measurement runs in a fresh child process
(``python -m bench.bench_small --child ...``, or ``--serve ...`` for the point reads) and the engines alternate, antkv first in odd
rounds and RocksDB first in even ones. Each figure is the median over ``--rounds`` with its
spread (half the range, relative to the median); the ratio column is the median of the
per-round ratios antkv/RocksDB, with their range.

| workload | what is timed |
|---|---|
| ``fillrandom`` | ``--num`` puts of 100 B values in random key order into an empty database, then ``flush()`` and the wait for every flush and compaction the load triggered |
| ``readrandom`` | ``min(num, 100k)`` gets of random present keys, after the same gets once untimed: *in cache*, both engines opened with a block cache of twice the user data (69.6 MB at 300,000 keys), which holds every block of either |
| ``readrandom_uncached`` | the same gets, no warm-up: *out of cache*, both engines opened with a block cache of a quarter of the user data (8.7 MB at 300,000 keys) |
| ``readafterload`` | in the process that loaded it: ``--num`` puts (the 100 B pairs, another seed) into an empty database opened with a 256 MiB block cache, ``flush()``, the wait, ``compact_range()``; then every key read once, in random order -- the reads alone are timed |
| ``readseq`` | one full forward scan (after one untimed scan) |
| ``overwrite`` | YCSB-A (50% get, 50% update, zipfian) over a database of ``num // 10`` keys of 1 KiB values, ``num // 10`` operations, then the flush and wait as in the fill |
| ``seekrandom`` | seek to a random present key of the 1 KiB database, then 10 ``next`` (one cursor reused), ``min(num // 10, 20k)`` times |
| ``shortjob`` | ``--jobs`` times in one process: open a new database, 1,000 puts, ``flush()``, close; the median job (the first job of the process is reported apart) |

The block caches of the two read workloads have the same capacity for both engines (printed
at the start); antkv's uses the policy of a database's own cache (``antkv.db.DEFAULT_CACHE_POLICY``),
RocksDB's is its ``LRUCache`` (rocksdict's ``Cache``).  The other workloads use each engine's
default cache (32 MiB for both).  All three readers keep the tables' index and filter blocks
outside the block cache (``cache_index_and_filter_blocks`` off: both engines' default, and what
the floor does), so the capacity is all data blocks for each; and all three open every table
(footer, index, filter) before the clock starts: RocksDB and the floor do when they open the
database, antkv on a table's first read, so its wrapper opens them (``AntKV.open_tables``).

The point-read workloads also run a third reader in each round: the *floor*
(:mod:`bench.read_floor`), the least a pure-Python reader does to get a key from antkv's tables
through the same cache capacity. The report gives its multiple of RocksDB and antkv's share of
it: how far antkv's own gets are from what Python allows; the share is also given by the
process CPU time of the timed gets, which other work on a shared machine disturbs far less than
the elapsed time.  The floor runs in a process of its own beside antkv's, both set up before
either clock starts, and the two are timed in turn over the same keys, a tenth of them at a
time (antkv first in even slices, the floor in odd ones; :func:`run_point_reads`): one
process's rate moves by up to a tenth from one fresh process to the next, and slices in turn
see the same state of the machine, so the share is not left to which process drew the better
run.  A process's heap stays its own (part of what a read costs: the cyclic garbage collector
walks it).  For ``readafterload`` the floor reads the tables antkv's process of that round
loaded and still holds open, in a process holding the same loaded pairs.  RocksDB's point
reads run in the same slices, in a process of their own, before or after the pair.

The 100 B databases of a round are made by that round's ``fillrandom``; the 1 KiB ones by an
untimed load in their own child (``load1k``); overwrite works on a copy.
"""

from __future__ import annotations

import argparse
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
FLOOR = "floor"  # bench/read_floor.py: the point reads, beside the two engines
POINT_READS = ("readrandom", "readrandom_uncached", "readafterload")
WORKLOADS = ("fillrandom", "readrandom", "readrandom_uncached", "readafterload", "readseq", "overwrite", "seekrandom",
             "shortjob")
AFTER_LOAD_CACHE = 256 * 1024 * 1024  # readafterload's block cache, both engines
SLICES = 10  # a point-read workload's reads are timed in this many slices (run_point_reads)
UNITS = {"shortjob": "ms"}  # every other figure is operations per second
KEY_SIZE = 16
SMALL, LARGE = 100, 1024


def make_pairs(n: int, value_size: int, seed: int) -> list[tuple[bytes, bytes]]:
    """``n`` distinct random 16-byte keys, each with its own random (incompressible) value."""
    rng = random.Random(seed)
    seen: set[bytes] = set()
    out = []
    while len(out) < n:
        k = rng.randbytes(KEY_SIZE)
        if k not in seen:
            seen.add(k)
            out.append((k, rng.randbytes(value_size)))
    return out


# --------------------------------------------------------------------------- the engines


def seek_next(it):
    """``f(key, n)``: seek the cursor ``it`` to ``key`` and read up to ``n`` entries (both
    engines' cursors have ``seek``, ``valid``, ``key``, ``value`` and ``next``)."""

    def f(k: bytes, n: int) -> int:
        it.seek(k)
        got = 0
        while got < n and it.valid():
            it.key(), it.value()
            it.next()
            got += 1
        return got

    return f


class AntKV:
    def __init__(self, path: str, cache_bytes: int | None = None) -> None:
        import antkv

        from antkv.db import DEFAULT_CACHE_POLICY

        opts = {} if cache_bytes is None else {"block_cache": antkv.Cache(cache_bytes, policy=DEFAULT_CACHE_POLICY)}
        self.db = antkv.open(path, **opts)
        self.put, self.get = self.db.put, self.db.get
        self.open_tables()

    def open_tables(self) -> None:
        """Open every table now (its reader: footer, index, filter): antkv opens a table on its
        first read, RocksDB (``max_open_files=-1``) and the floor when they open the database,
        so no engine's clock counts it.  ``approximate_size`` reads the index of every table."""
        self.db.approximate_size()

    def settle(self) -> None:
        db = self.db
        db.flush()
        db._wait_for_background(lambda: not db._imms and db._bg_running == 0 and not db._has_work())

    def compact(self) -> None:
        self.db.compact_range()
        self.open_tables()  # the compaction's output, likewise

    def scan(self) -> int:
        return sum(1 for _ in self.db.items())

    def cursor(self):
        return seek_next(self.db.iterator())

    def close(self) -> None:
        self.db.close()


class RocksDB:
    def __init__(self, path: str, cache_bytes: int | None = None) -> None:
        import rocksdict

        opts = rocksdict.Options(raw_mode=True)
        if cache_bytes is not None:
            table = rocksdict.BlockBasedOptions()
            table.set_block_cache(rocksdict.Cache(cache_bytes))
            opts.set_block_based_table_factory(table)
        self.db = rocksdict.Rdict(path, opts)
        self.put, self.get = self.db.put, self.db.get

    def settle(self) -> None:
        self.db.flush()
        prop = self.db.property_int_value
        while prop("rocksdb.num-running-compactions") or prop("rocksdb.compaction-pending") or prop("rocksdb.num-running-flushes"):
            time.sleep(0.005)

    def compact(self) -> None:
        self.db.compact_range(None, None)
        self.settle()

    def scan(self) -> int:
        return sum(1 for _ in self.db.items())

    def cursor(self):
        return seek_next(self.db.iter())

    def close(self) -> None:
        self.db.close()


def _floor(path: str, cache_bytes: int, layout: dict | None = None):
    from .read_floor import FloorReader

    return FloorReader(path, cache_bytes, layout)


OPEN = {"antkv": AntKV, "rocksdb": RocksDB, FLOOR: _floor}


# --------------------------------------------------------------------------- one measurement


def cache_capacity(workload: str, num: int) -> int:
    """The block cache of both engines for a read workload: twice the user data in cache, a
    quarter of it out of cache."""
    user = num * (KEY_SIZE + SMALL)
    return 2 * user if workload == "readrandom" else user // 4


def child(engine: str, workload: str, d: str, num: int, jobs: int, seed: int) -> float:
    """Run one workload of one engine in this (fresh) process; return its figure."""
    __import__("antkv" if engine == "antkv" else "rocksdict")  # imported before any clock starts
    path = os.path.join(d, f"{engine}-small")
    path1k = os.path.join(d, f"{engine}-1k")
    small_n, large_n = num, max(1000, num // 10)
    if workload == "fillrandom":
        pairs = make_pairs(small_n, SMALL, seed)
        db = OPEN[engine](path)
        put = db.put
        t = time.perf_counter()
        for k, v in pairs:
            put(k, v)
        db.settle()
        took = time.perf_counter() - t
        db.close()
        return small_n / took
    if workload == "readseq":
        db = OPEN[engine](path)
        db.scan()
        t = time.perf_counter()
        n = db.scan()
        took = time.perf_counter() - t
        db.close()
        if n != small_n:
            raise SystemExit(f"{engine} readseq: scanned {n} of {small_n}")
        return n / took
    if workload == "load1k":
        db = OPEN[engine](path1k)
        for k, v in make_pairs(large_n, LARGE, seed + 2):
            db.put(k, v)
        db.settle()
        db.close()
        return 0.0
    if workload == "overwrite":
        from .ycsb import ycsb_ops

        pairs = make_pairs(large_n, LARGE, seed + 2)
        ops, _ = ycsb_ops("a", list(range(large_n)), large_n, large_n, seed)
        rng = random.Random(seed + 3)
        stream = []
        for op, key, _ in ops:  # ycsb's keys are indices printed as 16 digits
            k = pairs[int(key)][0]
            stream.append((op == "read", k, None if op == "read" else rng.randbytes(LARGE)))
        copy = os.path.join(d, f"{engine}-1k-copy")
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(path1k, copy)
        db = OPEN[engine](copy)
        get, put = db.get, db.put
        t = time.perf_counter()
        for is_read, k, v in stream:
            if is_read:
                get(k)
            else:
                put(k, v)
        db.settle()
        took = time.perf_counter() - t
        db.close()
        shutil.rmtree(copy, ignore_errors=True)
        return len(stream) / took
    if workload == "seekrandom":
        pairs = make_pairs(large_n, LARGE, seed + 2)
        rng = random.Random(seed + 4)
        count = min(large_n, 20_000)
        targets = [pairs[rng.randrange(large_n)][0] for _ in range(count)]
        db = OPEN[engine](path1k)
        seek_next = db.cursor()
        t = time.perf_counter()
        for k in targets:
            seek_next(k, 10)
        took = time.perf_counter() - t
        db.close()
        return count / took
    if workload == "shortjob":
        pairs = make_pairs(1000, SMALL, seed + 5)
        times = []
        for j in range(jobs):
            p = os.path.join(d, f"{engine}-job{j}")
            t = time.perf_counter()
            db = OPEN[engine](p)
            put = db.put
            for k, v in pairs:
                put(k, v)
            db.db.flush()
            db.close()
            times.append((time.perf_counter() - t) * 1000)
            shutil.rmtree(p, ignore_errors=True)
        print(json.dumps({"first_ms": times[0]}), file=sys.stderr)
        return statistics.median(times[1:] if len(times) > 1 else times)
    raise SystemExit(f"unknown workload {workload}")


def _send(msg) -> None:
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def serve_point_reads(engine: str, workload: str, d: str, num: int, seed: int) -> None:
    """Set up one engine's point reads in this (fresh) process -- open and warm, or load --
    then time them a slice at a time as the parent asks (:class:`SliceChild`): a line with a
    slice number runs that slice and answers its elapsed and CPU seconds; ``end`` checks the
    answers and closes."""
    __import__("antkv" if engine != "rocksdb" else "rocksdict")  # imported before any clock starts
    layout = None
    if workload == "readafterload":
        pairs = make_pairs(num, SMALL, seed + 6)
        order = list(range(num))
        random.Random(seed + 7).shuffle(order)
        keys = [pairs[i][0] for i in order]
        check = pairs[:: max(1, num // 10_000)]
        path = os.path.join(d, f"{'antkv' if engine == FLOOR else engine}-afterload")
        if engine == FLOOR:  # reads the tables antkv's process loaded and holds open
            with open(os.path.join(d, "afterload-layout.json")) as f:
                db = OPEN[FLOOR](path, AFTER_LOAD_CACHE, json.load(f))
        else:
            db = OPEN[engine](path, AFTER_LOAD_CACHE)
            put = db.put
            for k, v in pairs:
                put(k, v)
            db.settle()
            db.compact()
            if engine == "antkv":
                from .read_floor import table_layout

                layout = table_layout(db.db)
    else:
        pairs = make_pairs(num, SMALL, seed)
        rng = random.Random(seed + 1)
        check = [pairs[rng.randrange(num)] for _ in range(min(num, 100_000))]
        keys = [k for k, _ in check]
        path = os.path.join(d, f"{'antkv' if engine == FLOOR else engine}-small")  # the floor reads antkv's
        db = OPEN[engine](path, cache_capacity(workload, num))
    get = db.get
    if workload == "readrandom":  # in cache: every block read once before the clock starts
        for k in keys:
            get(k)
    _send({"ready": True, "layout": layout})
    for line in sys.stdin:
        if line.strip() == "end":
            break
        i = int(line)
        part = keys[i * len(keys) // SLICES : (i + 1) * len(keys) // SLICES]
        c, t = time.process_time(), time.perf_counter()
        for k in part:
            get(k)
        t = time.perf_counter() - t
        _send({"t": t, "c": time.process_time() - c, "n": len(part)})
    wrong = sum(1 for k, v in check if get(k) != v)
    db.close()
    _send({"wrong": wrong})


class SliceChild:
    """One engine's point reads in a child process of its own (:func:`serve_point_reads`),
    timed a slice at a time; ``t``, ``c`` and ``n`` add up the slices' elapsed seconds, CPU
    seconds and reads."""

    def __init__(self, engine: str, workload: str, d: str, args) -> None:
        self.engine, self.workload = engine, workload
        cmd = [sys.executable, "-m", "bench.bench_small", "--serve", engine, workload, d,
               "--num", str(args.num), "--seed", str(args.seed)]
        cwd = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        self.err = tempfile.TemporaryFile(mode="w+")
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err, text=True, cwd=cwd)
        self.t = self.c = 0.0
        self.n = 0
        self.ready = self._reply()

    def _reply(self) -> dict:
        line = self.p.stdout.readline()
        if not line:
            self.p.wait()
            self.err.seek(0)
            raise SystemExit(f"{self.engine} {self.workload} failed:\n{self.err.read()}")
        return json.loads(line)

    def run(self, i: int) -> None:
        self.p.stdin.write(f"{i}\n")
        self.p.stdin.flush()
        r = self._reply()
        self.t += r["t"]
        self.c += r["c"]
        self.n += r["n"]

    def finish(self) -> None:
        self.p.stdin.write("end\n")
        self.p.stdin.flush()
        wrong = self._reply()["wrong"]
        self.p.stdin.close()
        self.p.wait()
        self.err.close()
        if wrong:
            raise SystemExit(f"{self.engine} {self.workload}: {wrong} wrong answers")


def run_point_reads(engine: str, workload: str, d: str, args) -> dict[str, tuple[float, float]]:
    """One point-read workload of ``engine``: its reads per second by elapsed and by CPU time.
    antkv's run beside the floor's, each in its own process, the two timed slice by slice in
    turn (antkv first in even slices, the floor first in odd ones), so that both meet the same
    state of the machine; the floor opens antkv's database before antkv does, or, after a load,
    is told its tables by antkv's process."""
    if engine == "rocksdb":
        children = [SliceChild(engine, workload, d, args)]
    elif workload == "readafterload":
        children = [SliceChild(engine, workload, d, args)]
        with open(os.path.join(d, "afterload-layout.json"), "w") as f:
            json.dump(children[0].ready["layout"], f)
        children.append(SliceChild(FLOOR, workload, d, args))
    else:
        floor = SliceChild(FLOOR, workload, d, args)
        children = [SliceChild(engine, workload, d, args), floor]
    try:
        for i in range(SLICES):
            for c in children if i % 2 == 0 else children[::-1]:
                c.run(i)
        for c in children:
            c.finish()
    finally:
        for c in children:
            if c.p.poll() is None:
                c.p.kill()
    return {c.engine: (c.n / c.t, c.n / c.c) for c in children}


def run_child(engine: str, workload: str, d: str, args) -> tuple[float, dict]:
    cmd = [sys.executable, "-m", "bench.bench_small", "--child", engine, workload, d,
           "--num", str(args.num), "--jobs", str(args.jobs), "--seed", str(args.seed)]
    cwd = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, timeout=args.timeout)
    if p.returncode != 0:
        raise SystemExit(f"{engine} {workload} failed:\n{p.stdout}\n{p.stderr}")
    extra = {}
    for line in p.stderr.splitlines():
        if line.startswith("{"):
            extra.update(json.loads(line))
    return float(p.stdout.strip().splitlines()[-1]), extra


# --------------------------------------------------------------------------- the table


def _spread(xs: list[float]) -> str:
    m = statistics.median(xs)
    return f"±{(max(xs) - min(xs)) / 2 / m * 100:.0f}%" if m else ""


def report(results: dict, extras: dict, workloads: list[str]) -> str:
    lines = [
        "| workload | antkv | RocksDB | antkv/RocksDB (median, range) |",
        "|---|---|---|---|",
    ]
    for w in workloads:
        a, r = results["antkv"].get(w), results["rocksdb"].get(w)
        if not a or not r:
            continue
        unit = UNITS.get(w, "/s")
        if unit == "ms":  # a time: the ratio is antkv time / RocksDB time, smaller is better
            ratios = [x / y for x, y in zip(a, r)]
            fmt = lambda v: f"{v:,.1f} ms"  # noqa: E731
            label = "x the time"
        else:
            ratios = [x / y for x, y in zip(a, r)]
            fmt = lambda v: f"{v:,.0f}/s"  # noqa: E731
            label = "x"
        lines.append(
            f"| {w} | {fmt(statistics.median(a))} {_spread(a)} | {fmt(statistics.median(r))} {_spread(r)} | "
            f"{statistics.median(ratios):.2f}{label} ({min(ratios):.2f}-{max(ratios):.2f}) |"
        )
    for w in POINT_READS:
        f, r = results.get(FLOOR, {}).get(w), results["rocksdb"].get(w)
        if f and r:
            ratios = [x / y for x, y in zip(f, r)]
            lines.append(f"\n{w}, the floor (bench/read_floor.py, the same cache): {statistics.median(f):,.0f}/s, "
                         f"{statistics.median(ratios):.2f}x RocksDB ({min(ratios):.2f}-{max(ratios):.2f}); antkv runs "
                         f"at {statistics.median(x / y for x, y in zip(results['antkv'][w], f)):.0%} of it")
            cpu = {e: extras.get(e, {}).get(f"cpu_rate {w}") for e in ("antkv", FLOOR)}
            if cpu["antkv"] and cpu[FLOOR]:
                shares = [x / y for x, y in zip(cpu["antkv"], cpu[FLOOR])]
                lines.append(f"  by process CPU time (what other work on the machine disturbs least): antkv at "
                             f"{statistics.median(shares):.0%} of the floor ({min(shares):.0%}-{max(shares):.0%})")
    for eng in ENGINES:
        firsts = extras.get(eng, {}).get("first_ms")
        if firsts:
            lines.append(f"\nshortjob, first job of a process, {eng}: median {statistics.median(firsts):.1f} ms "
                         f"({', '.join(f'{x:.0f}' for x in firsts)})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--num", type=int, default=300_000, help="keys of the 100 B database (the 1 KiB one gets num // 10)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=20, help="short jobs per shortjob process")
    ap.add_argument("--seed", type=int, default=19)
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=WORKLOADS)
    ap.add_argument("--dir", default=None, help="where the databases go (a temporary directory by default)")
    ap.add_argument("--child", nargs=3, metavar=("ENGINE", "WORKLOAD", "DIR"), help=argparse.SUPPRESS)
    ap.add_argument("--serve", nargs=3, metavar=("ENGINE", "WORKLOAD", "DIR"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.serve:
        serve_point_reads(*args.serve, args.num, args.seed)
        return
    if args.child:
        engine, workload, d = args.child
        print(child(engine, workload, d, args.num, args.jobs, args.seed))
        return
    workloads = [w for w in WORKLOADS if w in args.workloads]
    need_small = any(w in workloads for w in ("readrandom", "readrandom_uncached", "readseq"))
    need_large = any(w in workloads for w in ("overwrite", "seekrandom"))
    if need_small and "fillrandom" not in workloads:
        workloads.insert(0, "fillrandom")
    results: dict = {e: {} for e in ENGINES + (FLOOR,)}
    extras: dict = {e: {} for e in ENGINES + (FLOOR,)}
    print(f"bench_small: --num {args.num} --rounds {args.rounds} --jobs {args.jobs}; load average "
          f"{os.getloadavg()[0]:.2f}; Python {sys.version.split()[0]}, {os.cpu_count()} CPUs", flush=True)
    for w in ("readrandom", "readrandom_uncached"):
        if w in workloads:
            print(f"{w}: both engines' block cache {cache_capacity(w, args.num):,} bytes", flush=True)
    if "readafterload" in workloads:
        print(f"readafterload: both engines' block cache {AFTER_LOAD_CACHE:,} bytes", flush=True)
    for r in range(args.rounds):
        order = ENGINES if r % 2 == 0 else ENGINES[::-1]
        d = tempfile.mkdtemp(prefix="bench-small-", dir=args.dir)
        try:
            steps = list(workloads)
            if need_large:
                steps.insert(steps.index(next(w for w in workloads if w in ("overwrite", "seekrandom"))), "load1k")
            for w in steps:
                if w in POINT_READS:
                    for eng in order:
                        for e, (rate, cpu_rate) in run_point_reads(eng, w, d, args).items():
                            results[e].setdefault(w, []).append(rate)
                            extras[e].setdefault(f"cpu_rate {w}", []).append(cpu_rate)
                            print(f"round {r + 1} {w:20} {e:8} {rate:>12,.1f} /s", flush=True)
                    continue
                for eng in order:
                    value, extra = run_child(eng, w, d, args)
                    if w == "load1k":
                        continue
                    results[eng].setdefault(w, []).append(value)
                    for k, v in extra.items():
                        extras[eng].setdefault(f"{k} {w}" if k == "cpu_rate" else k, []).append(v)
                    unit = "ms" if w in UNITS else "/s"
                    print(f"round {r + 1} {w:20} {eng:8} {value:>12,.1f} {unit}", flush=True)
        finally:
            shutil.rmtree(d, ignore_errors=True)
    print(f"\nload average at the end: {os.getloadavg()[0]:.2f}\n")
    print(report(results, extras, workloads))


if __name__ == "__main__":
    main()
