"""Single-threaded speed of one SST table: build, random gets, full scans; and its parts.

    .venv/bin/python bench/bench_sst.py [--num 200000] [--gets 100000] [--compression zstd]
                                        [--block-size 4096] [--memory] [--profile get]
                                        [--micro | --micro-only] [--repeat 5] [--against DIR]

``--micro`` (or ``--micro-only``, which skips the rest) first times the pieces of a table build
on ``--num`` entries in memory, printing the median of ``--repeat`` runs in us per entry/key
(each run with the garbage collector paused, as ``timeit`` does):

* ``build add_sorted`` / ``build add`` -- a whole table (MemoryFileSystem), columns / per entry;
* ``encode_block`` / ``decode_block`` -- the data blocks of that table, one call per block;
* ``bloom build`` -- hashing the keys plus building the filter at 10 bits per key;
* ``bloom probe`` -- ``may_contain`` on absent keys, and the false-positive rate it measured.

``--against DIR`` also loads the ``antkv`` package of another checkout (say ``git worktree add
/tmp/old <commit>``; format version 1 works too) and alternates the two in every round, printing
both columns and their ratio: the way to compare on a machine other work is loading.

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
import gc
import importlib
import inspect
import itertools
import os
import pstats
import random
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from antkv.memory.cache import Cache  # noqa: E402
from antkv.base.dbformat import MAX_SEQUENCE, VALUE  # noqa: E402
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


def load_against(checkout: str) -> str:
    """Import the ``antkv`` package of another checkout as ``antkv_against`` (a copy under that
    name in a temporary directory: its imports are relative); the name to import it by."""
    tmp = tempfile.mkdtemp(prefix="bench_sst_")
    shutil.copytree(os.path.join(checkout, "antkv"), os.path.join(tmp, "antkv_against"))
    sys.path.insert(0, tmp)
    return "antkv_against"


def micro_phases(package: str, keys: list[bytes], vals: list[bytes], block_size: int, absent: list[bytes]):
    """``({label: (fn, items, unit)}, false-positive rate, filter bits per key)`` for the
    ``antkv`` package imported as ``package``."""
    bloom = importlib.import_module(package + ".sst.bloom")
    block = importlib.import_module(package + ".sst.block")
    builder = importlib.import_module(package + ".sst.builder").TableBuilder
    memory_fs = importlib.import_module(package + ".fs.memory").MemoryFileSystem
    n = len(keys)
    seqs = list(range(1, n + 1))
    kinds = [VALUE] * n
    rows = list(zip(seqs, kinds, vals))
    columns_api = "seqs" in inspect.signature(builder.add_sorted).parameters  # before rows

    def build_sorted() -> None:
        b = builder(memory_fs().create("t.sst"), file_number=1, block_size=block_size)
        if columns_api:
            b.add_sorted(keys, seqs, kinds, vals)
        else:
            b.add_sorted(keys, rows)
        b.finish()

    def build_add() -> None:
        b = builder(memory_fs().create("t.sst"), file_number=1, block_size=block_size)
        add = b.add
        for k, s, v in zip(keys, seqs, vals):
            add(k, s, VALUE, v)
        b.finish()

    per_block = max(1, block_size // (len(keys[0]) + len(vals[0]) + 8) + 1)
    cuts = range(0, n, per_block)
    blocks = [(keys[i : i + per_block], seqs[i : i + per_block], kinds[i : i + per_block], vals[i : i + per_block]) for i in cuts]
    encoded = [block.encode_block(*b) for b in blocks]

    def encode() -> None:
        for b in blocks:
            block.encode_block(*b)

    def decode() -> None:
        for e in encoded:
            block.decode_block(e, len(e), "t", 0)

    def bloom_build() -> bytes:
        if hasattr(bloom, "key_digests"):
            return bloom.build_filter(bloom.key_digests(keys), 10)
        return bloom.build_filter(list(map(bloom.key_hash, keys)), 10)  # format version 1

    raw = bloom_build()
    filt = bloom.decode_filter(raw, len(raw), "t", 0)
    may = bloom.may_contain
    assert all(may(filt, k) for k in keys)
    fpr = sum(map(may, itertools.repeat(filt), absent)) / len(absent)

    def probe() -> None:
        for k in absent:
            may(filt, k)

    phases = {
        "build add_sorted": (build_sorted, n, "entry"),
        "build add": (build_add, n, "entry"),
        "encode_block": (encode, n, "entry"),
        "decode_block": (decode, n, "entry"),
        "bloom build": (bloom_build, n, "key"),
        "bloom probe": (probe, len(absent), "key"),
    }
    return phases, fpr, len(raw) * 8 / n


def micro(keys: list[bytes], values: list[bytes], block_size: int, repeat: int, against: str | None) -> None:
    """Time the parts of a table build (see the module docstring), alternating with the
    ``against`` checkout's code in every round when given."""
    n = len(keys)
    vals = [values[i & 63] for i in range(n)]
    rng = random.Random(5)
    absent = [rng.randbytes(8).hex().encode() + b"x" for _ in range(n)]
    packages = {"this": "antkv"}
    if against:
        packages = {"against": load_against(against), "this": "antkv"}
    setups = {label: micro_phases(p, keys, vals, block_size, absent) for label, p in packages.items()}
    times: dict = {(label, phase): [] for label in packages for phase in setups["this"][0]}
    for _ in range(repeat):
        for phase in setups["this"][0]:
            for label in packages:
                fn, items, _unit = setups[label][0][phase]
                gc.collect()
                gc.disable()  # as timeit does: no full collection of the big heap mid-run
                try:
                    t0 = time.perf_counter()
                    fn()
                    times[label, phase].append((time.perf_counter() - t0) / items * 1e6)
                finally:
                    gc.enable()
    print(f"micro: {n:,} entries, {block_size} B blocks, median of {repeat} runs"
          + (f", alternating with {against} in each" if against else "") + "; us per entry (key)")
    print(f"  {'':18}" + "".join(f"{label:>12}" for label in packages) + ("       ratio" if against else ""))
    for phase, (_fn, _items, unit) in setups["this"][0].items():
        med = [statistics.median(times[label, phase]) for label in packages]
        ratio = f"    x{med[0] / med[1]:6.2f}" if against else ""
        print(f"  {phase:<18}" + "".join(f"{m:12.3f}" for m in med) + f"{ratio}   us/{unit}")
    fprs = "".join(f"{setups[label][1] * 100:11.3f}%" for label in packages)
    print(f"  {'bloom FPR':<18}{fprs}   ({len(absent):,} absent keys, {setups['this'][2]:.2f} bits/key)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--num", type=int, default=200_000)
    ap.add_argument("--gets", type=int, default=100_000)
    ap.add_argument("--block-size", type=int, default=4096)
    ap.add_argument("--compression", default=None)
    ap.add_argument("--memory", action="store_true", help="use MemoryFileSystem")
    ap.add_argument("--profile", default=None, help="a phase label substring to run under cProfile")
    ap.add_argument("--micro", action="store_true", help="first time the parts of a table build")
    ap.add_argument("--micro-only", action="store_true", help="only time the parts of a table build")
    ap.add_argument("--repeat", type=int, default=5, help="runs per micro measurement (median)")
    ap.add_argument("--against", default=None, help="a checkout whose antkv to alternate with (micro only)")
    args = ap.parse_args()

    rng = random.Random(42)
    keys = sorted({rng.randbytes(8).hex().encode() for _ in range(args.num)})
    values = [rng.randbytes(100) for _ in range(64)]
    n = len(keys)
    if args.micro or args.micro_only:
        micro(keys, values, args.block_size, args.repeat, args.against)
        if args.micro_only:
            return
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
