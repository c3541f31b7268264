"""Ingestion: bringing in a key range of another database by its files, against copying it.

Usage::

    .venv/bin/python bench/bench_ingest.py [--keys 20000] [--value-size 1024] [--dir /tmp]

The rescale step of a Spark state store: a partition takes over a fixed key range (the first
1/8 of ``--keys`` keys) from another partition's checkpoint.  The source holds ``--keys`` keys,
then 10x as many (the range brought in stays the same size), with ``--value-size``-byte
incompressible values (in the value log, the antkv default ``min_blob_size`` of 4 KiB lowered
to 512 B), flushed and compacted, then checkpointed.  For each source size:

* ``ingest_database``: wall time and bytes the process wrote (``wchar``: links write nothing;
  the two tables straddling the range bounds and the MANIFEST are all that is written);
* ``copy``: the same range read from the source and written with ``put`` in batches of 1,000,
  then flushed (what a rescale costs without ingestion).

Both targets already hold the keys outside the range.  Single runs on a shared machine: expect
+-10% noise on times.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import antkv  # noqa: E402
from bench.measure import read_proc_io  # noqa: E402


def key(i: int) -> bytes:
    return b"key%013d" % i


def wchar() -> int:
    return read_proc_io().get("wchar", 0)


def build_source(path: str, n: int, value_size: int, opts) -> None:
    with antkv.open(path, opts) as db:
        for start in range(0, n, 1000):
            with db.write_batch() as b:
                for i in range(start, min(n, start + 1000)):
                    b.put(key(i), os.urandom(value_size))
        db.compact_range()
        db.checkpoint(path + "-cp")


def one_size(root: str, n: int, range_keys: int, value_size: int, opts) -> dict:
    src = os.path.join(root, f"src-{n}")
    build_source(src, n, value_size, opts)
    lo, hi = key(0), key(range_keys)
    out = {}
    for how in ("ingest_database", "copy"):
        target = os.path.join(root, f"{how}-{n}")
        with antkv.open(target, opts) as db:
            db.put(key(n + 1), b"outside")
            db.flush()
            w0, t0 = wchar(), time.perf_counter()
            if how == "ingest_database":
                db.ingest_database(src + "-cp", lo, hi)
            else:
                with antkv.open(src + "-cp", opts) as s:
                    it = s.items(lo, hi)
                    while True:
                        chunk = [kv for _, kv in zip(range(1000), it)]
                        if not chunk:
                            break
                        with db.write_batch() as b:
                            for k, v in chunk:
                                b.put(k, v)
                db.flush()
            seconds = time.perf_counter() - t0
            written = wchar() - w0
            assert sum(1 for _ in db.keys(lo, hi)) == range_keys
        out[how] = (seconds, written)
        shutil.rmtree(target, ignore_errors=True)
    shutil.rmtree(src, ignore_errors=True)
    shutil.rmtree(src + "-cp", ignore_errors=True)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, default=20000)
    ap.add_argument("--value-size", type=int, default=1024)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args(argv)
    opts = antkv.Options(min_blob_size=512, max_background_jobs=2)
    root = tempfile.mkdtemp(prefix="antkv-bench-ingest-", dir=args.dir)
    range_keys = args.keys // 8
    try:
        print(f"range brought in: {range_keys} keys x {args.value_size} B")
        for n in (args.keys, args.keys * 10):
            r = one_size(root, n, range_keys, args.value_size, opts)
            for how, (s, w) in r.items():
                print(f"source {n:>9,} keys  {how:<16} {s * 1000:9.1f} ms  {w / 1e6:9.2f} MB written")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
