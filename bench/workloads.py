"""The workloads, after RocksDB's db_bench and YCSB.

Each workload is a function ``wl(eng, ctx) -> Outcome`` that runs against an open
:class:`~bench.engines.Engine`.  Everything random (key orders, values, YCSB operation
streams) is generated from ``ctx.seed`` BEFORE the clock starts, so every engine replays
exactly the same operation stream and the timed loop does nothing but call the engine.

Keys are 16 bytes, ``b"%016d" % i`` as db_bench's; values are ASCII and 50% compressible
(half random letters, repeated), as db_bench's ``--compression_ratio=0.5``.  A database is
filled by ``fillrandom`` (every key of ``range(n)`` once, in a seeded random order); the read
workloads run on that database ("base"), the ones that change it on a copy.  If a fill stops at
``ctx.deadline`` (``--max-seconds``), only the keys it wrote are "loaded", and readers draw
from those.

WORKLOADS maps a name to ``(setup, function, kind)`` (see its comment).
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field
from itertools import islice

from .measure import LATENCY_EVERY
from .ycsb import ycsb_ops

KEY_SIZE = 16


def key(i: int) -> bytes:
    return b"%016d" % i


def missing_key(i: int) -> bytes:
    """16 bytes that sort among the real keys but are never written."""
    return b"%015d." % i


_LETTERS = bytes(range(ord("a"), ord("z") + 1)) + bytes(range(ord("A"), ord("Z") + 1))
_TO_LETTERS = bytes(_LETTERS[b % len(_LETTERS)] for b in range(256))


def make_values(value_size: int, count: int, seed: int, pool_bytes: int = 16 << 20) -> list[bytes]:
    """A pool of distinct, 50%-compressible ASCII values; op i uses ``pool[i % len(pool)]``."""
    rng = random.Random(seed)
    pool = max(1, min(count, pool_bytes // max(1, value_size)))
    half = (value_size + 1) // 2
    out = []
    for _ in range(pool):
        r = rng.randbytes(half).translate(_TO_LETTERS)
        out.append((r + r)[:value_size])
    return out


@dataclass
class Context:
    """What a workload may know: sizes, the seeded key universe, the deadline."""

    value_size: int
    num: int  # keys the fill writes (if it is not cut by the deadline)
    loaded: int  # keys the base database holds
    reads: int  # operations of a read workload
    seed: int = 301
    seek_nexts: int = 10
    deadline: float = float("inf")  # perf_counter() value at which loops stop
    ycsb_ops: int = 0

    def fill_order(self) -> list[int]:
        order = list(range(self.num))
        random.Random(self.seed).shuffle(order)
        return order

    def loaded_keys(self) -> list[int]:
        return self.fill_order()[: self.loaded]

    def random_loaded(self, count: int, salt: int) -> list[bytes]:
        """``count`` keys drawn with replacement from the loaded ones."""
        loaded = self.loaded_keys()
        rng = random.Random(self.seed * 1000 + salt)
        return [key(loaded[rng.randrange(len(loaded))]) for _ in range(count)] if loaded else []


@dataclass
class Outcome:
    ops: int
    bytes_read: int = 0  # user bytes returned to the caller
    bytes_written: int = 0  # user bytes handed to the engine (key + value)
    latencies: list[float] = field(default_factory=list)
    live_keys: int | None = None  # keys in the database afterwards (None: unchanged)
    truncated: bool = False  # stopped at the deadline
    extra: dict = field(default_factory=dict)


# --------------------------------------------------------------------------- timed loops


def run_puts(put, pairs: list[tuple[bytes, bytes]], deadline: float) -> tuple[int, list[float]]:
    """Call ``put(k, v)`` for every pair; time one call in LATENCY_EVERY."""
    lat: list[float] = []
    append = lat.append
    pc = time.perf_counter
    every = LATENCY_EVERY
    n = len(pairs)
    done = 0
    for base in range(0, n, every):
        t = pc()
        if t > deadline:
            break
        k, v = pairs[base]
        put(k, v)
        append(pc() - t)
        for k, v in pairs[base + 1: base + every]:
            put(k, v)
        done = min(n, base + every)
    return done, lat


def run_gets(get, keys: list[bytes], deadline: float) -> tuple[int, int, int, list[float]]:
    """Call ``get(k)`` for every key; returns (done, found, bytes_read, latencies)."""
    lat: list[float] = []
    append = lat.append
    pc = time.perf_counter
    every = LATENCY_EVERY
    n = len(keys)
    done = found = nbytes = 0
    for base in range(0, n, every):
        t = pc()
        if t > deadline:
            break
        v = get(keys[base])
        append(pc() - t)
        if v is not None:
            found += 1
            nbytes += len(v)
        for k in keys[base + 1: base + every]:
            v = get(k)
            if v is not None:
                found += 1
                nbytes += len(v)
        done = min(n, base + every)
    return done, found, nbytes, lat


def run_calls(calls: list[tuple], deadline: float) -> tuple[int, list[float]]:
    """Run ``f(a, b)`` for every ``(f, a, b)``; used by the mixed YCSB streams."""
    lat: list[float] = []
    append = lat.append
    pc = time.perf_counter
    every = LATENCY_EVERY
    n = len(calls)
    done = 0
    for base in range(0, n, every):
        t = pc()
        if t > deadline:
            break
        f, a, b = calls[base]
        f(a, b)
        append(pc() - t)
        for f, a, b in calls[base + 1: base + every]:
            f(a, b)
        done = min(n, base + every)
    return done, lat


def _pairs(keys: list[bytes], values: list[bytes], offset: int = 0) -> list[tuple[bytes, bytes]]:
    p = len(values)
    return [(k, values[(i + offset) % p]) for i, k in enumerate(keys)]


def _put_outcome(done: int, lat: list[float], value_size: int, truncated: bool,
                 live_keys: int | None) -> Outcome:
    return Outcome(ops=done, bytes_written=done * (KEY_SIZE + value_size), latencies=lat,
                   live_keys=live_keys, truncated=truncated)


# --------------------------------------------------------------------------- fills


def fillseq(eng, ctx: Context) -> Outcome:
    pairs = _pairs([key(i) for i in range(ctx.num)], make_values(ctx.value_size, ctx.num, ctx.seed))
    done, lat = run_puts(eng.put, pairs, ctx.deadline)
    out = _put_outcome(done, lat, ctx.value_size, done < len(pairs), done)
    out.extra["seq"] = True
    return out


def fillrandom(eng, ctx: Context) -> Outcome:
    pairs = _pairs([key(i) for i in ctx.fill_order()],
                   make_values(ctx.value_size, ctx.num, ctx.seed))
    done, lat = run_puts(eng.put, pairs, ctx.deadline)
    return _put_outcome(done, lat, ctx.value_size, done < len(pairs), done)


def overwrite(eng, ctx: Context) -> Outcome:
    keys = ctx.random_loaded(ctx.loaded, salt=1)
    pairs = _pairs(keys, make_values(ctx.value_size, len(keys), ctx.seed + 1), offset=7)
    done, lat = run_puts(eng.put, pairs, ctx.deadline)
    return _put_outcome(done, lat, ctx.value_size, done < len(pairs), ctx.loaded)


# --------------------------------------------------------------------------- point reads


def readrandom(eng, ctx: Context) -> Outcome:
    keys = ctx.random_loaded(ctx.reads, salt=2)
    done, found, nbytes, lat = run_gets(eng.get, keys, ctx.deadline)
    return Outcome(ops=done, bytes_read=nbytes + done * KEY_SIZE, latencies=lat,
                   truncated=done < len(keys), extra={"found": found})


def readmissing(eng, ctx: Context) -> Outcome:
    rng = random.Random(ctx.seed * 1000 + 3)
    keys = [missing_key(rng.randrange(max(1, ctx.num))) for _ in range(ctx.reads)]
    done, found, nbytes, lat = run_gets(eng.get, keys, ctx.deadline)
    return Outcome(ops=done, bytes_read=0, latencies=lat, truncated=done < len(keys),
                   extra={"found": found})


def _tombstones(count: int):
    def setup(eng, ctx: Context) -> None:
        """``count`` live range tombstones that cover no key (each spans the gap just after a
        key), flushed to disk before the measured readrandom starts."""
        step = max(1, ctx.num // count)
        for j in range(count):
            k = key((j * step) % max(1, ctx.num))
            eng.delete_range(k + b"\x00", k + b"\x01")
        eng.settle()

    return setup


# --------------------------------------------------------------------------- iteration


def seekrandom(eng, ctx: Context) -> Outcome:
    keys = ctx.random_loaded(ctx.reads, salt=4)
    seek_next = eng.seeker()
    nexts = ctx.seek_nexts
    pairs = [(k, nexts) for k in keys]
    counted = [0]

    def op(k, n, _seek=seek_next, _c=counted):
        _c[0] += _seek(k, n)

    done, lat = run_puts(op, pairs, ctx.deadline)
    entries = counted[0]
    return Outcome(ops=done, bytes_read=entries * (KEY_SIZE + ctx.value_size), latencies=lat,
                   truncated=done < len(pairs), extra={"entries": entries, "nexts": nexts})


def _scan(eng, ctx: Context, reverse: bool) -> Outcome:
    it = iter(eng.items(None, None, reverse=reverse))
    lat: list[float] = []
    append = lat.append
    pc = time.perf_counter
    every = LATENCY_EVERY
    deadline = ctx.deadline
    n = nbytes = 0
    truncated = False
    while True:
        t = pc()
        if t > deadline:
            truncated = True
            break
        kv = next(it, None)
        append(pc() - t)
        if kv is None:
            lat.pop()
            break
        n += 1
        nbytes += len(kv[0]) + len(kv[1])
        for k, v in islice(it, every - 1):
            n += 1
            nbytes += len(k) + len(v)
    return Outcome(ops=n, bytes_read=nbytes, latencies=lat, truncated=truncated,
                   extra={"entries": n, "expected": ctx.loaded})


def readseq(eng, ctx: Context) -> Outcome:
    return _scan(eng, ctx, reverse=False)


def readreverse(eng, ctx: Context) -> Outcome:
    return _scan(eng, ctx, reverse=True)


# --------------------------------------------------------------------------- deletes


def _delete_span(ctx: Context) -> tuple[int, int, int]:
    """The 10% of the key space both delete workloads remove: [lo, hi) and its loaded count."""
    lo = ctx.num // 3
    hi = lo + max(1, ctx.num // 10)
    covered = sum(1 for i in ctx.loaded_keys() if lo <= i < hi)
    return lo, hi, covered


def deleterange(eng, ctx: Context) -> Outcome:
    """One ``delete_range`` over 10% of the keys (ops = keys it removes)."""
    lo, hi, covered = _delete_span(ctx)
    t = time.perf_counter()
    eng.delete_range(key(lo), key(hi))
    lat = [time.perf_counter() - t]
    return Outcome(ops=covered, latencies=lat, live_keys=ctx.loaded - covered,
                   bytes_written=2 * KEY_SIZE,
                   extra={"native": eng.native_delete_range, "span": [lo, hi]})


def deleteseq(eng, ctx: Context) -> Outcome:
    """The same 10% of the keys as deleterange, deleted one by one in key order."""
    lo, hi, covered = _delete_span(ctx)
    loaded = set(ctx.loaded_keys())
    keys = [(key(i), None) for i in range(lo, hi) if i in loaded]
    delete = eng.delete
    done, lat = run_puts(lambda k, _v: delete(k), keys, ctx.deadline)
    return Outcome(ops=done, latencies=lat, live_keys=ctx.loaded - done,
                   bytes_written=done * KEY_SIZE, truncated=done < len(keys))


# --------------------------------------------------------------------------- concurrency


def readwhilewriting(eng, ctx: Context) -> Outcome:
    """readrandom in this thread while one writer thread overwrites random keys flat out."""
    if not eng.thread_safe:
        raise NotImplementedError(f"{eng.name} is not safe with a writer thread beside a reader")
    keys = ctx.random_loaded(ctx.reads, salt=5)
    wkeys = ctx.random_loaded(max(1, ctx.loaded), salt=6)
    values = make_values(ctx.value_size, len(wkeys), ctx.seed + 2)
    stop = threading.Event()
    written = [0]

    def writer(put=eng.put, p=len(values)):
        i = 0
        n = len(wkeys)
        while not stop.is_set():
            put(wkeys[i % n], values[i % p])
            i += 1
        written[0] = i

    th = threading.Thread(target=writer, name="bench-writer", daemon=True)
    th.start()
    try:
        done, found, nbytes, lat = run_gets(eng.get, keys, ctx.deadline)
    finally:
        stop.set()
        th.join()
    return Outcome(ops=done, bytes_read=nbytes, latencies=lat, truncated=done < len(keys),
                   bytes_written=written[0] * (KEY_SIZE + ctx.value_size),
                   extra={"found": found, "writes": written[0]})


# --------------------------------------------------------------------------- YCSB


def _ycsb(letter: str):
    def wl(eng, ctx: Context) -> Outcome:
        stream, inserted = ycsb_ops(letter, ctx.loaded_keys(), ctx.num, ctx.ycsb_ops or ctx.reads,
                                    ctx.seed)
        values = make_values(ctx.value_size, len(stream), ctx.seed + 3)
        get, put = eng.get, eng.put
        seek_next = eng.seeker() if letter == "e" else None

        def read(a, _b):
            get(a)

        def read_modify_write(a, b):
            get(a)
            put(a, b)

        p = len(values)
        calls = []
        writes = []
        for i, (op, k, n) in enumerate(stream):
            if op == "read":
                calls.append((read, k, None))
            elif op in ("update", "insert"):
                calls.append((put, k, values[i % p]))
            elif op == "scan":
                calls.append((seek_next, k, n))
            else:
                calls.append((read_modify_write, k, values[i % p]))
            writes.append(op not in ("read", "scan"))
        done, lat = run_calls(calls, ctx.deadline)
        written = sum(writes[:done])
        return Outcome(ops=done, latencies=lat, truncated=done < len(calls),
                       bytes_written=written * (KEY_SIZE + ctx.value_size),
                       live_keys=ctx.loaded + inserted, extra={"writes": written})

    wl.__name__ = f"ycsb_{letter}"
    return wl


# --------------------------------------------------------------------------- answers

# A benchmark of an engine that answers wrongly is worthless, so each workload's answers are
# checked after the clock stops (not timed): ``check(eng, ctx, out) -> None | "what is wrong"``.


def _check_found(eng, ctx: Context, out: Outcome) -> str | None:
    found = out.extra.get("found", 0)
    return None if found == out.ops else f"found {found} of {out.ops} loaded keys"


def _check_missing(eng, ctx: Context, out: Outcome) -> str | None:
    found = out.extra.get("found", 0)
    return None if found == 0 else f"found {found} keys that were never written"


def _check_scan(eng, ctx: Context, out: Outcome) -> str | None:
    if out.truncated or out.ops == ctx.loaded:
        return None
    return f"scan returned {out.ops} entries, {ctx.loaded} loaded"


def _check_seek(eng, ctx: Context, out: Outcome) -> str | None:
    entries = out.extra.get("entries", 0)
    return None if entries >= out.ops else f"{out.ops} seeks to loaded keys read {entries} entries"


def _check_deleted(eng, ctx: Context, out: Outcome) -> str | None:
    lo, hi, covered = _delete_span(ctx)
    left = sum(1 for _kv in eng.items(key(lo), key(hi)))
    if left:
        return f"{left} keys of the deleted span remain"
    survivors = [i for i in ctx.loaded_keys()[:200] if not lo <= i < hi]
    lost = sum(1 for i in survivors if eng.get(key(i)) is None)
    return f"{lost} of {len(survivors)} keys outside the span are gone" if lost else None


def _check_fill(eng, ctx: Context, out: Outcome) -> str | None:
    order = list(range(ctx.num)) if out.extra.get("seq") else ctx.fill_order()
    written = order[: out.ops]
    values = make_values(ctx.value_size, ctx.num, ctx.seed)
    p = len(values)
    bad = sum(1 for j in range(0, len(written), max(1, len(written) // 200))
              if eng.get(key(written[j])) != values[j % p])
    return f"{bad} sampled keys read back wrong after the fill" if bad else None


CHECKS = {
    "fillseq": _check_fill,
    "fillrandom": _check_fill,
    "readrandom": _check_found,
    "readrandom_rt100": _check_found,
    "readrandom_rt10000": _check_found,
    "readwhilewriting": _check_found,
    "readmissing": _check_missing,
    "readseq": _check_scan,
    "readreverse": _check_scan,
    "seekrandom": _check_seek,
    "deleterange": _check_deleted,
    "deleteseq": _check_deleted,
}


# name -> (setup or None, workload, kind).  ``setup(eng, ctx)`` runs before the clock and the
# I/O counters start.  kind: "fill" (fresh directory), "read" (the base database, read-only),
# "mutate" (a copy of the base).
WORKLOADS = {
    "fillseq": (None, fillseq, "fill"),
    "fillrandom": (None, fillrandom, "fill"),
    "overwrite": (None, overwrite, "mutate"),
    "readrandom": (None, readrandom, "read"),
    "readmissing": (None, readmissing, "read"),
    "seekrandom": (None, seekrandom, "read"),
    "readseq": (None, readseq, "read"),
    "readreverse": (None, readreverse, "read"),
    "deleterange": (None, deleterange, "mutate"),
    "deleteseq": (None, deleteseq, "mutate"),
    "readrandom_rt100": (_tombstones(100), readrandom, "mutate"),
    "readrandom_rt10000": (_tombstones(10000), readrandom, "mutate"),
    "readwhilewriting": (None, readwhilewriting, "mutate"),
    **{f"ycsb_{c}": (None, _ycsb(c), "mutate") for c in "abcdef"},
}
# Workloads whose ops/s include settle() (flush + the compactions they triggered).
WRITE_WORKLOADS = {"fillseq", "fillrandom", "overwrite", "deleterange", "deleteseq",
                   "ycsb_a", "ycsb_b", "ycsb_d", "ycsb_e", "ycsb_f"}
