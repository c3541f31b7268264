"""Value-log GC threshold trade-off: space and write amplification for
``blob_gc_threshold`` 0.3 ... 0.9 on an overwrite-heavy workload of 16 KiB values.

Each run loads ``--keys`` keys, then overwrites random keys ``--overwrites`` times the key count,
with GC running as compaction finds files at the threshold (no manual GC).  Space amplification
is bytes on disk / live user bytes at the end; write amplification is bytes written (WAL, tables,
value log, MANIFEST) / user bytes written.  Writes ``--plot`` (PNG) and prints a Markdown table.

    python -m bench.bench_gc_threshold [--keys 2000] [--overwrites 3] [--plot docs/img/gc_threshold.png]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import tempfile
import time

import antkv

THRESHOLDS = [0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]


def run(threshold: float, keys: int, overwrites: int, value_size: int) -> dict:
    d = tempfile.mkdtemp(prefix="antkv-gc-")
    try:
        db = antkv.open(
            os.path.join(d, "db"),
            blob_gc_threshold=threshold,
            min_blob_size=1024,
            blob_file_size=4 << 20,
            write_buffer_size=1 << 20,
            target_file_size_base=1 << 20,
            max_background_jobs=0,
        )
        rng = random.Random(1)
        t = time.perf_counter()
        for i in range(keys):
            db.put(b"key%08d" % i, os.urandom(16) + b"v" * (value_size - 16))
        for i in range(keys * overwrites):
            db.put(b"key%08d" % rng.randrange(keys), os.urandom(16) + b"w" * (value_size - 16))
        db.flush()
        elapsed = time.perf_counter() - t
        s = db.stats()
        live = keys * (value_size + 11)
        result = {
            "threshold": threshold,
            "space_amp": s["bytes_on_disk"] / live,
            "write_amp": s["write_amplification"],
            "gc_relocated_mb": s["gc_bytes_relocated"] / 2**20,
            "vlog_files": len(s["vlog_files"]),
            "mb_per_s": s["user_bytes_written"] / 2**20 / elapsed,
        }
        db.close()
        return result
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, default=2000)
    ap.add_argument("--overwrites", type=int, default=3)
    ap.add_argument("--value-size", type=int, default=16 * 1024)
    ap.add_argument("--plot", default=None)
    args = ap.parse_args()
    rows = [run(t, args.keys, args.overwrites, args.value_size) for t in THRESHOLDS]
    print("| blob_gc_threshold | space amp | write amp | GC relocated MiB | value-log files | MB/s |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['threshold']:.1f} | {r['space_amp']:.2f} | {r['write_amp']:.2f} | "
              f"{r['gc_relocated_mb']:.1f} | {r['vlog_files']} | {r['mb_per_s']:.1f} |")
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 3.6), dpi=100)
        xs = [r["threshold"] for r in rows]
        ax.plot(xs, [r["space_amp"] for r in rows], "o-", label="space amplification")
        ax.plot(xs, [r["write_amp"] for r in rows], "s-", label="write amplification")
        ax.set_xlabel("blob_gc_threshold")
        ax.set_ylabel("amplification (x)")
        ax.set_title(f"GC threshold, {args.keys} keys x {args.value_size // 1024} KiB, {args.overwrites}x overwrites")
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        os.makedirs(os.path.dirname(args.plot) or ".", exist_ok=True)
        fig.savefig(args.plot)
        print(f"plot written to {args.plot}")


if __name__ == "__main__":
    main()
