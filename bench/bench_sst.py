"""Single-threaded speed of one SST table: build, random gets, full scans.

    .venv/bin/python bench/bench_sst.py [--num 200000] [--gets 100000] [--compression zstd]
                                        [--block-size 4096] [--memory] [--profile get]

Builds a table of ``--num`` entries (16-byte keys, 100-byte values, one version each) on the
real file system (a temporary directory; ``--memory`` uses MemoryFileSystem), then measures,
with no cache and with a block cache large enough to hold the whole table (warmed first):

* ``get hit``   -- random existing keys;
* ``get miss``  -- random absent keys (the bloom filter answers);
* ``scan fwd`` / ``scan bwd`` -- a full ``iter_forward`` / ``iter_backward``;

printing entries or operations per second.  ``--profile NAME`` runs that phase under cProfile.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import random
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from antkv.cache import Cache  # noqa: E402
from antkv.dbformat import MAX_SEQUENCE, VALUE  # noqa: E402
from antkv.fs import default_file_system, join  # noqa: E402
from antkv.fs.memory import MemoryFileSystem  # noqa: E402
from antkv.sst import TableBuilder, TableReader  # noqa: E402


def timed(label: str, n: int, fn, profile: str | None, unit: str = "ops") -> None:
    prof = cProfile.Profile() if profile and profile in label else None
    t0 = time.perf_counter()
    if prof:
        prof.enable()
    fn()
    if prof:
        prof.disable()
    dt = time.perf_counter() - t0
    print(f"  {label:<28} {n / dt:>12,.0f} {unit}/s   ({dt:.3f} s)")
    if prof:
        pstats.Stats(prof).sort_stats("tottime").print_stats(15)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--num", type=int, default=200_000)
    ap.add_argument("--gets", type=int, default=100_000)
    ap.add_argument("--block-size", type=int, default=4096)
    ap.add_argument("--compression", default=None)
    ap.add_argument("--memory", action="store_true", help="use MemoryFileSystem")
    ap.add_argument("--profile", default=None, help="a phase label substring to run under cProfile")
    args = ap.parse_args()

    rng = random.Random(42)
    keys = sorted({rng.randbytes(8).hex().encode() for _ in range(args.num)})
    values = [rng.randbytes(100) for _ in range(64)]
    n = len(keys)
    with tempfile.TemporaryDirectory() as tmp:
        fs = MemoryFileSystem() if args.memory else default_file_system()
        path = "t.sst" if args.memory else join(tmp, "t.sst")
        print(f"table of {n:,} entries (16 B keys, 100 B values), block_size={args.block_size}, "
              f"compression={args.compression}, {'memory' if args.memory else 'disk'}")

        def build() -> None:
            f = fs.create(path)
            b = TableBuilder(f, file_number=1, block_size=args.block_size, compression=args.compression)
            add = b.add
            for i, key in enumerate(keys):
                add(key, i + 1, VALUE, values[i & 63])
            props = b.finish()
            f.sync()
            f.close()
            print(f"  {props.num_data_blocks} data blocks, file {props.file_size:,} B, "
                  f"index {props.index_size:,} B, filter {props.filter_size:,} B")

        timed("build", n, build, args.profile, "entries")
        hits = [keys[rng.randrange(n)] for _ in range(args.gets)]
        misses = [rng.randbytes(8).hex().encode() + b"x" for _ in range(args.gets)]

        for label, cache in (("no cache", None), ("cache", Cache(64 << 20))):
            print(label)
            reader = TableReader.open(fs, path, 1, cache=cache)
            if cache is not None:
                for _ in reader.iter_forward():  # warm
                    pass

            def get_hits(reader=reader) -> None:
                get = reader.get
                for k in hits:
                    if get(k, MAX_SEQUENCE) is None:
                        raise AssertionError(k)

            def get_misses(reader=reader) -> None:
                get = reader.get
                for k in misses:
                    get(k, MAX_SEQUENCE)

            def scan(it) -> None:
                count = 0
                for _ in it():
                    count += 1
                assert count == n

            timed(f"get hit ({label})", len(hits), get_hits, args.profile)
            timed(f"get miss ({label})", len(misses), get_misses, args.profile)
            timed(f"scan fwd ({label})", n, lambda r=reader: scan(r.iter_forward), args.profile, "entries")
            timed(f"scan bwd ({label})", n, lambda r=reader: scan(r.iter_backward), args.profile, "entries")
            reader.close()


if __name__ == "__main__":
    main()
