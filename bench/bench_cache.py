"""Single-threaded speed of the block cache's hot paths, in operations per second.

    .venv/bin/python bench/bench_cache.py [--keys N] [--rounds R] [--shard-bits B] [--policy clock|lru]

Keys are ``(table_id, offset)`` tuples, as the table reader uses.  Prints one line per path:
``get`` hit / miss (the non-pinning fast path; "get hit" walks all keys in order, so every hit
promotes a low-pool entry to the high pool: the worst case; "hot 5%" re-reads a small set that
stays in the high pool), ``put`` (insert without a handle: into a cache with room for
every key, "fits", which includes Python's GC scanning the growing population, and into a cache
a tenth of that, "evicting", the steady state), ``insert+release`` (pinned handle; same two cases), ``lookup+release``, and ``get`` hit
with several threads sharing the cache (total ops/s).  Targets: get hit >= 1,000,000/s,
insert/put >= 300,000/s.  The loop overhead is included: the numbers are what a caller sees.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from antkv.memory.cache import DEFAULT_POLICY, POLICIES  # noqa: E402
from antkv.memory.cache import Cache as _Cache  # noqa: E402


def _rate(n: int, fn) -> float:
    t = time.perf_counter()
    fn()
    return n / (time.perf_counter() - t)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--shard-bits", type=int, default=6)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--policy", choices=sorted(POLICIES), default=DEFAULT_POLICY)
    a = ap.parse_args(argv)
    n = a.keys

    def Cache(*args, **kwargs):  # noqa: N802 - the cache under test, of the chosen policy
        return _Cache(*args, policy=a.policy, **kwargs)

    keys = [(7, i * 4096) for i in range(n)]
    missing = [(8, i * 4096) for i in range(n)]
    block = b"x" * 4096
    results: dict[str, list[float]] = {}

    def record(name, rate):
        results.setdefault(name, []).append(rate)

    for _ in range(a.rounds):
        big = Cache(n * 4096 * 2, num_shard_bits=a.shard_bits, high_pri_pool_ratio=0.1)
        put = big.put
        record("put (fits)", _rate(n, lambda: [put(k, block, 4096) for k in keys]))
        get = big.get
        record("get hit", _rate(n, lambda: [get(k) for k in keys]))
        hot = keys[: n // 20] * 20  # 5% of the keys, read 20 times: hits in the high pool
        record("get hit, hot 5%", _rate(len(hot), lambda: [get(k) for k in hot]))
        record("get miss", _rate(n, lambda: [get(k) for k in missing]))

        flat = Cache(n * 4096 * 2, num_shard_bits=a.shard_bits, high_pri_pool_ratio=0.0)
        fput, fget = flat.put, flat.get
        for k in keys:
            fput(k, block, 4096)
        record("get hit, no high pool", _rate(n, lambda: [fget(k) for k in keys]))

        small = Cache(n * 4096 // 10, num_shard_bits=a.shard_bits, high_pri_pool_ratio=0.1)
        sput = small.put
        record("put (evicting)", _rate(n, lambda: [sput(k, block, 4096) for k in keys]))

        c = Cache(n * 4096 * 2, num_shard_bits=a.shard_bits, high_pri_pool_ratio=0.1)
        ins, rel, look = c.insert, c.release, c.lookup
        record("insert+release", _rate(n, lambda: [rel(ins(k, block, 4096)) for k in keys]))
        record("lookup+release", _rate(n, lambda: [rel(look(k)) for k in keys]))
        full = Cache(n * 4096 // 10, num_shard_bits=a.shard_bits, high_pri_pool_ratio=0.1)
        fins, frel = full.insert, full.release
        record("insert+release (evicting)", _rate(n, lambda: [frel(fins(k, block, 4096)) for k in keys]))

        per = n // a.threads
        parts = [keys[i * per:(i + 1) * per] for i in range(a.threads)]

        def work(part):
            for k in part:
                get(k)

        threads = [threading.Thread(target=work, args=(p,)) for p in parts]
        t = time.perf_counter()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        record(f"get hit, {a.threads} threads", per * a.threads / (time.perf_counter() - t))
        big._check()
        small._check()
        c._check()

    print(f"python {sys.version.split()[0]}, {n} keys, {a.rounds} rounds, "
          f"{1 << a.shard_bits} shards; best / median ops/s")
    for name, rates in results.items():
        rates.sort()
        print(f"  {name:<26} {rates[-1]:>12,.0f} {rates[len(rates) // 2]:>12,.0f}")


if __name__ == "__main__":
    main()
