"""Rescale of a state store at two state sizes 10x apart: ingesting files against copying keys.

Usage::

    .venv/bin/python bench/bench_spark_rescale.py [--keys 20000] [--value-size 1024]
        [--min-blob-size 4096] [--reps 2] [--dir /tmp]

An operator with the default 4,096 key groups holds ``--keys`` keys, then 10x as many, each
with a ``--value-size``-byte value of random bytes (incompressible, different per key), in a
version published by 2 partitions (a local checkpoint location, the stores' default engine
options but ``min_blob_size``).  Version 1 is then rescaled to 3 partitions, each new
partition opened with ``antkv.spark.store.rescale.open_rescaled_store`` and committed (not
published: every repetition starts from the same version).  The plan (``K = 4096, 2 -> 3``):

* new 0 keeps old 0's groups [0, 1366) and clips [1366, 2048): a third of its base dropped;
* new 1 keeps old 1's [2048, 2731), clips [2731, 4096) and brings in [1366, 2048) from old 0;
* new 2 keeps old 1's [2731, 4096) and clips [2048, 2731).

Modes, alternated in the same run (``--reps`` times each, the median reported):

* ``ingest``: the bring-in adds old 0's files (``StateStore.ingest_version``);
* ``copy``: the bring-in reads old 0's range and ``put``s every key (what a rescale did
  before ingestion).

Reported per new partition: bytes kept, dropped and brought in (key + value bytes, from the
key counts); open time (base open + clip + bring-in); commit time; bytes the commit uploaded;
and bytes the process wrote to local files before the commit (``wchar``: the engine's WAL,
value log, flushes, compactions and the ingest's rewritten tables; hard links write nothing),
which shows that no kept state is rewritten.  Each open starts from the executor-local cache (no working copy
kept in memory), as a task on an executor that ran the previous batch does.  Single runs on a
shared 2-core machine: expect noise.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import replace

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import xxhash  # noqa: E402

from bench.measure import read_proc_io  # noqa: E402
from antkv.spark import CommitCoordinator, StoreOptions, open_store, release_idle_stores  # noqa: E402
from antkv.spark.store.keygroups import DEFAULT_KEY_GROUPS, clip_to_key_groups, key_group_range, plan_rescale  # noqa: E402
from antkv.spark.store.rescale import open_rescaled_store  # noqa: E402

K = DEFAULT_KEY_GROUPS
KEY_LEN = 2 + 2 + 13
VERSION = 3  # the version rescaled
SETTLED = b"\xff\xffbench-settled"  # a metadata key (above every key group): kept by every partition


def _key(i: int) -> bytes:
    g = xxhash.xxh64_intdigest(b"%d" % i) % K
    return g.to_bytes(2, "big") + b"\x00\x01" + b"user%09d" % i


def load(loc: str, options: StoreOptions, keys: int, value_size: int) -> None:
    """Publish version 1 of 2 partitions holding ``keys`` keys between them, then versions 2
    and 3, each adding one metadata key with a snapshot commit: version 3 is committed once the
    compactions the load called for are done (the working copies stay open in between), so
    the rescale of version 3 measures the rescale, not a compaction the load left over."""
    coord = CommitCoordinator(loc, "bench", 2, query_id="bench")
    stores = [open_store(loc, "bench", p, 0, options=options) for p in range(2)]
    for i in range(keys):
        k = _key(i)
        stores[int.from_bytes(k[:2], "big") * 2 // K].put(k, os.urandom(value_size))
    coord.publish(1, [s.commit() for s in stores])
    settle = replace(options, max_changelog_chain=1)  # any change commits a snapshot
    for version in (1, 2):
        stores = [open_store(loc, "bench", p, version, options=settle) for p in range(2)]
        for s in stores:
            while True:
                st = s.engine_stats()
                if st["levels"][0]["files"] < 4 and not st["pending_compaction_bytes"]:
                    break
                time.sleep(0.05)
            s.put(SETTLED, b"%d" % version)
        coord.publish(version + 1, [s.commit() for s in stores])
    release_idle_stores()


def _wchar() -> int:
    return read_proc_io().get("wchar", 0)


def _copy_rescaled(loc, plan, old, options):
    """The bring-in by copying keys (the mode ingestion replaced), for comparison."""
    store = open_store(loc, "bench", plan.partition, VERSION, manifest=old[plan.base], options=options,
                       rescale_from=plan.base)
    clip_to_key_groups(store, plan)
    for source_partition, groups in plan.bring_in:
        source = open_store(loc, "bench", source_partition, VERSION, manifest=old[source_partition],
                            options=options)
        for k, v in source.items(*groups.key_bounds()):
            store.put(k, v)
        source.abort()
    return store


def rescale_once(loc: str, options: StoreOptions, mode: str) -> list[dict]:
    old = CommitCoordinator(loc, "bench", 3, query_id="bench").published_manifests(VERSION)
    out = []
    for plan in plan_rescale(K, 2, 3):
        release_idle_stores()
        w0, t0 = _wchar(), time.perf_counter()
        if mode == "ingest":
            store = open_rescaled_store(loc, "bench", plan, VERSION, old, options)
        else:
            store = _copy_rescaled(loc, plan, old, options)
        t1, written = time.perf_counter(), _wchar() - w0
        msg = store.commit()
        t2 = time.perf_counter()
        out.append({"open_s": t1 - t0, "commit_s": t2 - t1, "uploaded": msg.bytes_uploaded,
                    "written": written, "num_keys": msg.num_keys, "snapshot": msg.snapshot})
    release_idle_stores()
    return out


def shares(keys: int, value_size: int) -> list[dict]:
    """Bytes kept, dropped and brought in per new partition (from the keys' groups)."""
    counts = [0] * K
    for i in range(keys):
        counts[int.from_bytes(_key(i)[:2], "big")] += 1
    per_key = KEY_LEN + value_size
    old_ranges = [key_group_range(K, 2, p) for p in range(2)]
    out = []
    for plan in plan_rescale(K, 2, 3):
        base = old_ranges[plan.base]
        kept = sum(counts[g] for g in base.intersection(plan.key_groups))
        dropped = sum(counts[g] for g in base) - kept
        brought = sum(counts[g] for _, r in plan.bring_in for g in r)
        out.append({"kept": kept * per_key, "dropped": dropped * per_key, "brought_in": brought * per_key,
                    "keys": kept + brought + 1})  # + the metadata key SETTLED
    return out


def one_size(root: str, keys: int, args) -> dict:
    work = os.path.join(root, f"state-{keys}")
    loc = "file://" + os.path.join(work, "loc")
    engine = dict(min_blob_size=args.min_blob_size)
    if args.target_file_size:
        engine["target_file_size_base"] = args.target_file_size
    options = StoreOptions(cache_dir=os.path.join(work, "cache"), engine=engine)
    t0 = time.perf_counter()
    load(loc, options, keys, args.value_size)
    print(f"  loaded {keys:,} keys in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    runs = {"ingest": [], "copy": []}
    for _ in range(args.reps):
        for mode in ("ingest", "copy"):
            runs[mode].append(rescale_once(loc, options, mode))
    share = shares(keys, args.value_size)
    result = {"keys": keys, "partitions": share}
    for mode, reps in runs.items():
        parts = []
        for p in range(3):
            rows = [r[p] for r in reps]
            assert all(r["num_keys"] == share[p]["keys"] for r in rows), (mode, p, rows, share[p])
            parts.append({f: statistics.median(r[f] for r in rows)
                          for f in ("open_s", "commit_s", "uploaded", "written")})
        result[mode] = parts
    shutil.rmtree(work, ignore_errors=True)
    return result


def report(results: list[dict], args) -> list[str]:
    mb = 1e6
    target = f"{args.target_file_size:,}" if args.target_file_size else "default"
    lines = [f"# rescale 2 -> 3, K = {K}, {args.value_size} B values, min_blob_size {args.min_blob_size}, "
             f"target_file_size_base {target}, median of {args.reps}", "",
             "| state keys | new partition | kept MB | dropped MB | brought in MB | mode | open s | commit s "
             "| uploaded MB | wrote before commit MB |", "|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|"]
    for r in results:
        for p, share in enumerate(r["partitions"]):
            for mode in ("ingest", "copy"):
                m = r[mode][p]
                lines.append(f"| {r['keys']:,} | {p} | {share['kept'] / mb:.1f} | {share['dropped'] / mb:.1f} | "
                             f"{share['brought_in'] / mb:.1f} | {mode} | {m['open_s']:.3f} | {m['commit_s']:.3f} | "
                             f"{m['uploaded'] / mb:.2f} | {m['written'] / mb:.2f} |")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, default=20_000)
    ap.add_argument("--value-size", type=int, default=1024)
    ap.add_argument("--min-blob-size", type=int, default=4096)
    ap.add_argument("--target-file-size", type=int, default=0, help="the engine's target_file_size_base "
                    "(0: its default, 64 MiB)")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    if min(args.keys, args.reps, args.min_blob_size) < 1 or args.value_size < 0:
        ap.error("sizes must be positive")
    root = tempfile.mkdtemp(prefix="antkv-bench-rescale-", dir=args.dir)
    results = []
    try:
        for keys in (args.keys, 10 * args.keys):
            print(f"rescale at {keys:,} keys", file=sys.stderr)
            results.append(one_size(root, keys, args))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print("\n".join(report(results, args)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
