"""Key-value separation at scale: fillrandom then overwrite of ``--gib`` GiB of user
data with large values, on antkv, RocksDB and RocksDB BlobDB (the harness's adapters), each
engine in a fresh process; then a full compaction with GC, and the space left.

Write amplification = bytes the process handed to the OS for writing (``/proc/self/io``
``write_bytes``, counted when pages are dirtied, so a WAL deleted before writeback still counts)
/ user bytes (key + value).  Space amplification = bytes in the database directory after
``compact()`` (antkv: ``compact_range`` + ``gc_value_log``; BlobDB: compaction with blob GC at
age cutoff 1.0) / user bytes of the live keys.

    python -m bench.bench_kv_separation [--gib 1] [--value-sizes 16384 65536]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

ENGINES = ("antkv", "rocksdb", "rocksdb-blob")


def _one(name: str, value_size: int, total: int) -> dict:
    from bench.engines import AntKV, RocksDB, RocksDBBlob
    from bench.measure import dir_bytes, read_proc_io

    engine_cls = {"antkv": AntKV, "rocksdb": RocksDB, "rocksdb-blob": RocksDBBlob}[name]
    n = total // value_size
    d = tempfile.mkdtemp(prefix=f"kvsep-{name}-", dir=os.environ.get("BENCH_DIR"))
    try:
        path = os.path.join(d, "db")
        rng = random.Random(1)
        keys = [b"%016d" % i for i in range(n)]
        rng.shuffle(keys)
        value = os.urandom(value_size)
        e = engine_cls(path)
        io0 = read_proc_io()
        t = time.perf_counter()
        for k in keys:
            e.put(k, value)
        e.settle()
        t_fill = time.perf_counter() - t
        io1 = read_proc_io()
        t = time.perf_counter()
        for _ in range(n):
            e.put(keys[rng.randrange(n)], value)
        e.settle()
        t_over = time.perf_counter() - t
        io2 = read_proc_io()
        e.compact()
        e.settle()
        space = dir_bytes(path)
        e.close()
        user = n * (value_size + 16)
        return {
            "engine": name,
            "value_size": value_size,
            "fill_mb_s": user / t_fill / 2**20,
            "fill_wa": (io1["write_bytes"] - io0["write_bytes"]) / user,
            "overwrite_mb_s": user / t_over / 2**20,
            "overwrite_wa": (io2["write_bytes"] - io1["write_bytes"]) / user,
            "space_amp_after_gc": space / user,
        }
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--value-sizes", type=int, nargs="+", default=[16384, 65536])
    ap.add_argument("--child", nargs=3, metavar=("ENGINE", "VALUE_SIZE", "BYTES"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(_one(args.child[0], int(args.child[1]), int(args.child[2]))))
        return
    total = int(args.gib * 2**30)
    print("| value | engine | fill MB/s | fill WA | overwrite MB/s | overwrite WA | space amp after GC |")
    print("|---|---|---|---|---|---|---|")
    for vs in args.value_sizes:
        for name in ENGINES:
            out = subprocess.run(
                [sys.executable, "-m", "bench.bench_kv_separation", "--child", name, str(vs), str(total)],
                capture_output=True, text=True, check=True,
            ).stdout.strip().splitlines()[-1]
            r = json.loads(out)
            print(f"| {vs // 1024} KiB | {name} | {r['fill_mb_s']:.0f} | {r['fill_wa']:.2f} | "
                  f"{r['overwrite_mb_s']:.0f} | {r['overwrite_wa']:.2f} | {r['space_amp_after_gc']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
