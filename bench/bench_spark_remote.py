"""Remote tables against download-whole mode: steady batches and the first batch after a restore.

Usage::

    .venv/bin/python bench/bench_spark_remote.py                     # 100,000 keys, local location
    .venv/bin/python bench/bench_spark_remote.py --keys 1000000 --s3  # 1M keys, on an S3 API
        [--batches 10] [--touched 0.01] [--value-size 100] [--cache-mib 64] [--changelog-kib 1024] [--dir /tmp]
        [--modes local,remote,remote-noprefetch] [--per-batch]

The workload runs on plain stores (``open_store`` / ``commit`` / ``publish``: the state store
without Spark around it), one partition: version 1 loads ``--keys`` keys (committed as a
snapshot), then each batch reads and rewrites ``--touched`` of the keys, chosen at random.
Both modes run the same batches on their own location:

* **local** (``StoreOptions(tables="local")``, the default): snapshot files downloaded whole;
* **remote** (``tables="remote"``): read by ranges through the block cache, bounded by
  ``--cache-mib``; each batch announces its keys first (``StateStore.prefetch``: the chunks
  they need, fetched in parallel);
* **remote-noprefetch** (``--modes local,remote,remote-noprefetch``): remote mode without the
  announcement, every read on its own.

Reported per mode: the median **steady** batch (the worker keeps its copy open between
batches), the **first batch after a restore** (a new machine: no working copy, an empty local
cache; the store opens the version from the location) and the one after it, and for each the
bytes read from the location and, in remote mode, the block cache's hit ratio (chunks served
from local disk over chunks read).  With ``--s3`` the locations are on an S3 API served by
``moto`` on 127.0.0.1 (no network latency: a lower bound of a real object store's cost).
Single runs: on a shared machine expect noise, and say so beside any figure.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from antkv.spark import CommitCoordinator, Location, StoreOptions, open_store, release_idle_stores  # noqa: E402
from antkv.spark.store.idle_copies import local_cache_counters  # noqa: E402


def _read_bytes(options) -> tuple[int, int, int]:
    """(bytes read from the location, block hits, block misses) so far in this process."""
    c = local_cache_counters(options)
    return c["download_bytes"] + c["changelog_bytes"] + c["block_fetched_bytes"], c["block_hits"], c["block_misses"]


def _batch(loc, coord, version, options, keys, rnd, touched, value_size, prefetch) -> dict:
    before = _read_bytes(options)
    t0 = time.perf_counter()
    store = open_store(loc, "op", 0, version, manifest=coord.base_manifests(version)[0], options=options)
    try:
        batch = [b"key%09d" % i for i in rnd.sample(range(keys), max(1, int(keys * touched)))]
        if prefetch:
            store.prefetch(batch)
        for k in batch:
            old = store.get(k)
            store.put(k, (old or b"")[:8] + os.urandom(value_size - 8))
        message = store.commit()
    except BaseException:
        store.abort()
        raise
    coord.publish(version + 1, [message])
    coord.cleanup(version + 1)
    seconds = time.perf_counter() - t0
    after = _read_bytes(options)
    hits, misses = after[1] - before[1], after[2] - before[2]
    return dict(seconds=seconds, fetched=after[0] - before[0],
                hit_ratio=hits / (hits + misses) if hits + misses else None)


def run_mode(mode: str, loc: Location, work: str, args) -> dict:
    tables, prefetch = mode.split("-")[0], not mode.endswith("-noprefetch")
    engine = dict(max_background_jobs=0)
    def options(cache):
        return StoreOptions(cache_dir=os.path.join(work, cache), tables=tables, cache_disk_bytes=args.cache_mib << 20,
                            max_changelog_bytes=args.changelog_kib << 10, engine=engine)
    rnd = random.Random(1)
    coord = CommitCoordinator(loc, "op", 1, query_id="bench")
    opts = options("cache")
    t0 = time.perf_counter()
    with open_store(loc, "op", 0, 0, manifest=None, options=opts) as store:
        for i in range(args.keys):
            store.put(b"key%09d" % i, os.urandom(args.value_size))
        coord.publish(1, [store.commit()])
    load_s = time.perf_counter() - t0
    version, steady = 1, []
    for _ in range(args.batches):
        steady.append(_batch(loc, coord, version, opts, args.keys, rnd, args.touched, args.value_size, prefetch))
        version += 1
    release_idle_stores()
    cold = options(f"restored-{uuid.uuid4().hex[:6]}")  # a new machine: an empty local cache
    first = _batch(loc, coord, version, cold, args.keys, rnd, args.touched, args.value_size, prefetch)
    second = _batch(loc, coord, version + 1, cold, args.keys, rnd, args.touched, args.value_size, prefetch)
    release_idle_stores()
    return dict(load_s=load_s, steady=steady, first=first, second=second)


def _fmt(b: dict) -> str:
    ratio = "-" if b["hit_ratio"] is None else f"{b['hit_ratio']:.2f}"
    return f"{b['seconds']:7.3f} s  {b['fetched'] / 1e6:9.2f} MB read  hit ratio {ratio}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--batches", type=int, default=10)
    ap.add_argument("--touched", type=float, default=0.01)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--cache-mib", type=int, default=64)
    ap.add_argument("--changelog-kib", type=int, default=1024,
                    help="max_changelog_bytes: a batch changing more commits a snapshot (scale it with --keys)")
    ap.add_argument("--s3", action="store_true")
    ap.add_argument("--modes", default="local,remote",
                    help="comma-separated, of local, remote, remote-noprefetch (local first)")
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("--per-batch", action="store_true", help="print every steady batch, not only the median")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="bench-remote-", dir=args.dir)
    stop_server = None
    try:
        if args.s3:
            from bench.s3_server import start_s3_server

            fs, stop_server = start_s3_server("bench")
            locations = {m: Location(f"bench/{m}", filesystem=fs) for m in args.modes.split(",")}
        else:
            locations = {m: Location(os.path.join(work, f"loc-{m}")) for m in args.modes.split(",")}
        print(f"{args.keys:,} keys of {args.value_size} B, {args.touched:.1%} touched per batch, "
              f"{args.batches} steady batches, block cache {args.cache_mib} MiB, "
              f"location {'S3 (moto on 127.0.0.1)' if args.s3 else 'local'}")
        results = {}
        for mode in args.modes.split(","):
            r = results[mode] = run_mode(mode, locations[mode], os.path.join(work, mode), args)
            med = statistics.median(b["seconds"] for b in r["steady"])
            fetched = statistics.median(b["fetched"] for b in r["steady"])
            ratios = [b["hit_ratio"] for b in r["steady"] if b["hit_ratio"] is not None]
            print(f"\n{mode}: load {r['load_s']:.1f} s")
            ratio = f"{statistics.median(ratios):.2f}" if ratios else "-"
            print(f"  steady batch (median)    {med:7.3f} s  {fetched / 1e6:9.2f} MB read  hit ratio {ratio}")
            print(f"  first batch after restore {_fmt(r['first'])}")
            print(f"  second batch after it     {_fmt(r['second'])}")
            if args.per_batch:
                for i, b in enumerate(r["steady"], 2):
                    print(f"  steady batch {i:3d}          {_fmt(b)}")
        steady = {m: statistics.median(b["seconds"] for b in r["steady"]) for m, r in results.items()}
        print()
        for m in results:
            if m != "local" and "local" in results:
                print(f"steady throughput, {m} / local: {steady['local'] / steady[m]:.0%}")
        print("first batch after restore / steady batch: "
              + ", ".join(f"{m} {results[m]['first']['seconds'] / steady[m]:.1f}x" for m in results))
    finally:
        release_idle_stores()
        if stop_server is not None:
            stop_server()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
