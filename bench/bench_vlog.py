"""Value-log micro-benchmark: how close ``add``/``get`` come to raw ``os.write``/``os.pread``.

Usage::

    .venv/bin/python bench/bench_vlog.py [--mb 64] [--dir /tmp] [--compression zstd]

For 16 KiB and 64 KiB values it measures, on the real file system:

* ``add``: ValueLogWriter.add of ``--mb`` MiB of values (MB/s of user bytes), against a plain
  Python loop of ``os.write`` of the same record-sized buffers to a fresh file (the raw
  append rate: no framing, no checksum, no pointer);
* ``get``: ValueLogReader.get of every pointer in random order, against ``os.pread`` of the
  same (offset, size) ranges;
* ``scan``: 10,000 distinct pointers in shuffled order resolved inline, by 8 threads of a
  ``ThreadPoolExecutor`` with one future per pointer (what a scan with ``blob_readahead``
  does), and with one future per 64 pointers -- once with the file in the page cache, once
  after evicting it (``posix_fadvise(DONTNEED)``, no root needed), i.e. real random I/O.

``add``/``get`` run on files in the page cache, so they measure CPU cost (framing, checksums,
copies, the handle cache).  The machine's other load makes single runs noisy: best of
``--rounds``.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from antkv.fs.os_file_system import OSFileSystem  # noqa: E402
from antkv.vlog import ValueLogReader, ValueLogWriter, decode_pointer, vlog_file_name  # noqa: E402

MiB = 1 << 20


def make_values(n: int, size: int, compressible: bool, rng: random.Random) -> list[bytes]:
    if not compressible:
        return [rng.randbytes(size) for _ in range(n)]
    # about 2:1 compressible: half random, half a repeated pattern
    return [rng.randbytes(size // 2) + bytes([i % 256]) * (size - size // 2) for i in range(n)]


def rate(nbytes: int, seconds: float) -> float:
    return nbytes / MiB / seconds if seconds > 0 else float("inf")


def evict_page_cache(path: str) -> bool:
    """Drop ``path`` from the page cache (no root needed for clean pages); False if unsupported."""
    if not hasattr(os, "posix_fadvise"):
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    return True


def time_raw_append(path: str, values: list[bytes]) -> float:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    write = os.write
    t = time.perf_counter()
    for v in values:
        write(fd, v)
    t = time.perf_counter() - t
    os.close(fd)
    return t


def time_vlog_add(fs, path: str, keys, values, compression) -> tuple[float, list[bytes]]:
    w = ValueLogWriter(fs, path, 1, compression=compression)
    add = w.add
    t = time.perf_counter()
    ptrs = [add(k, v) for k, v in zip(keys, values)]
    t = time.perf_counter() - t
    w.seal()
    return t, ptrs


def time_scan(get, ptrs, threads: int, batch: int) -> float:
    """Resolve ``ptrs`` in order: inline (threads 0), one future per pointer (batch 1), or
    one future per ``batch`` consecutive pointers."""
    t = time.perf_counter()
    if threads == 0:
        for p in ptrs:
            get(p)
    else:
        with ThreadPoolExecutor(threads) as ex:
            if batch == 1:
                for _ in ex.map(get, ptrs):
                    pass
            else:
                chunks = [ptrs[i : i + batch] for i in range(0, len(ptrs), batch)]
                for _ in ex.map(lambda c: [get(p) for p in c], chunks):
                    pass
    return time.perf_counter() - t


def bench_size(d: str, value_size: int, total: int, compression: str | None, threads: int, rounds: int) -> None:
    rng = random.Random(value_size)
    n = max(1, total // value_size)
    values = make_values(n, value_size, compression is not None, rng)
    keys = [b"key%012d" % i for i in range(n)]
    user_bytes = n * value_size
    fs = OSFileSystem.instance()
    raw_path = os.path.join(d, "raw.bin")
    path = vlog_file_name(d, 1)

    # alternate raw and vlog appends to fresh files; best of `rounds` (page-cache writeback is noisy)
    t_raw = t_add = float("inf")
    for _ in range(rounds):
        t_raw = min(t_raw, time_raw_append(raw_path, values))
        os.remove(raw_path)
        t, ptrs = time_vlog_add(fs, path, keys, values, compression)
        t_add = min(t_add, t)
    disk = os.path.getsize(path)

    order = list(range(n))
    rng.shuffle(order)
    locs = [decode_pointer(p)[1:] for p in ptrs]
    r = ValueLogReader(fs, d)
    get = r.get
    assert all(get(p) == v for p, v in zip(ptrs, values)), "wrong value"
    t_pread = t_get = float("inf")
    fd = os.open(path, os.O_RDONLY)
    pread = os.pread
    for _ in range(rounds):
        t = time.perf_counter()
        for i in order:
            off, size = locs[i]
            pread(fd, size, off)
        t_pread = min(t_pread, time.perf_counter() - t)
        t = time.perf_counter()
        for i in order:
            get(ptrs[i])
        t_get = min(t_get, time.perf_counter() - t)
    os.close(fd)

    label = f"{value_size // 1024} KiB values, compression={compression or 'none'}, {n} values, {user_bytes / MiB:.0f} MiB"
    print(label)
    print(f"  add   {rate(user_bytes, t_add):7.0f} MB/s   raw os.write {rate(user_bytes, t_raw):7.0f} MB/s"
          f"   ({t_raw / t_add * 100:3.0f}% of raw); file {disk / MiB:.1f} MiB")
    print(f"  get   {rate(user_bytes, t_get):7.0f} MB/s   raw os.pread {rate(user_bytes, t_pread):7.0f} MB/s"
          f"   ({t_pread / t_get * 100:3.0f}% of raw); {n / t_get:,.0f} gets/s")
    r.close()
    os.remove(path)


def bench_scan(d: str, value_size: int, count: int, threads: int) -> None:
    """Resolve ``count`` distinct pointers in shuffled order (an old table's pointers are
    scattered over the value log): inline, with one future per pointer, and with one future
    per 64 pointers; with the file in the page cache and evicted from it."""
    fs = OSFileSystem.instance()
    path = vlog_file_name(d, 2)
    rng = random.Random(2)
    w = ValueLogWriter(fs, path, 2)
    block = rng.randbytes(value_size + 4096)
    ptrs = [w.add(b"key%012d" % i, block[i % 4096 : i % 4096 + value_size]) for i in range(count)]
    w.seal()
    rng.shuffle(ptrs)
    nbytes = sum(decode_pointer(p)[2] for p in ptrs)
    print(f"scan of {count:,} distinct pointers, {value_size // 1024} KiB values ({nbytes / MiB:.0f} MiB), shuffled order")
    for cache in ("warm", "cold"):
        cells = []
        for label, th, batch in (("1 thread", 0, 1), (f"{threads} thr x 1 ptr", threads, 1), (f"{threads} thr x 64 ptrs", threads, 64)):
            if cache == "cold" and not evict_page_cache(path):
                print("  (posix_fadvise unavailable: no cold run)")
                break
            r = ValueLogReader(fs, d)
            if cache == "warm":
                time_scan(r.get, ptrs, 0, 1)
            t = time_scan(r.get, ptrs, th, batch)
            r.close()
            cells.append(f"{label} {t * 1e3:5.0f} ms ({rate(nbytes, t):5.0f} MB/s)")
        print(f"  page cache {cache}: " + ", ".join(cells))
    os.remove(path)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=int, default=64, help="MiB of values per value size")
    ap.add_argument("--dir", default=None, help="directory for the files (default: a temp dir)")
    ap.add_argument("--compression", choices=["none", "zstd", "both"], default="both")
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sizes", default="16,64", help="value sizes in KiB")
    ap.add_argument("--scan", type=int, default=10_000, help="pointers in the scan (0 = skip)")
    ap.add_argument("--scan-kib", type=int, default=16, help="value size of the scan")
    args = ap.parse_args(argv)
    d = tempfile.mkdtemp(prefix="bench_vlog_", dir=args.dir)
    comps = {"none": [None], "zstd": ["zstd"], "both": [None, "zstd"]}[args.compression]
    try:
        for c in comps:
            for kib in (int(s) for s in args.sizes.split(",")):
                bench_size(d, kib * 1024, args.mb * MiB, c, args.threads, args.rounds)
        if args.scan:
            bench_scan(d, args.scan_kib * 1024, args.scan, args.threads)
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
