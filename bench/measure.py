"""Measurement primitives: clocks, sampled latencies, process I/O, RSS, bytes on disk, and the
physical limit of the machine.

Invariants the rest of the harness relies on:

* every figure is taken inside ONE fresh child process per (engine, workload, value size, run),
  so ``/proc/self/io`` (which counts the whole process, every thread included: RocksDB's
  background compactions too) and the peak RSS (``VmHWM``) belong to that workload alone;
* ``write_bytes`` of ``/proc/self/io`` is charged when a page is first dirtied, so it counts
  what the engine asked the kernel to write, even if the file is deleted before writeback
  (``cancelled_write_bytes`` is recorded beside it, never subtracted);
* latencies are sampled: one operation in every ``LATENCY_EVERY`` is timed on its own, so the
  two ``perf_counter`` calls cost under 1% of the loop while p50/p99 stay real per-op figures.
"""

from __future__ import annotations

import os
import resource
import struct
import time

LATENCY_EVERY = 16  # time one op in this many
MiB = 1024 * 1024


def read_proc_io() -> dict[str, int]:
    """The ``/proc/self/io`` counters of this process (empty dict where unsupported)."""
    try:
        with open("/proc/self/io", "rb") as f:
            text = f.read().decode()
    except OSError:
        return {}
    out = {}
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if value.strip():
            out[name.strip()] = int(value)
    return out


def io_delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before.get(k, 0) for k in after}


def peak_rss_mib() -> float:
    """Peak resident set size of this process so far, in MiB.

    ``VmHWM`` of ``/proc/self/status`` belongs to this process's address space, which exec
    makes new; ``ru_maxrss`` would not do: Linux carries it across fork + exec, so a child would
    report its parent's peak.  ``ru_maxrss`` is only the fallback off Linux."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) / 1024.0  # kB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def dir_bytes(path: str) -> int:
    """Bytes allocated on disk under ``path`` (``st_blocks``, so sparse files such as LMDB's
    map count what they really use); a file with several hard links under ``path`` (antkv's
    working copies link their snapshot files from its local cache) counts once."""
    total = 0
    seen = set()
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                st = os.lstat(os.path.join(root, name))
            except FileNotFoundError:
                continue  # an engine deleted it while we walked
            if st.st_nlink > 1:
                if (st.st_dev, st.st_ino) in seen:
                    continue
                seen.add((st.st_dev, st.st_ino))
            total += st.st_blocks * 512
    return total


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted list (``q`` in [0, 100])."""
    if not sorted_values:
        return 0.0
    rank = max(0, min(len(sorted_values) - 1, int(round(q / 100.0 * len(sorted_values))) - 1))
    return sorted_values[rank]


def latency_summary(samples: list[float]) -> dict[str, float]:
    """p50/p99/max in microseconds of the sampled per-op latencies (seconds)."""
    s = sorted(samples)
    return {
        "p50_us": percentile(s, 50) * 1e6,
        "p99_us": percentile(s, 99) * 1e6,
        "max_us": (s[-1] * 1e6) if s else 0.0,
        "samples": len(s),
    }


def median(values: list[float]) -> float:
    s = sorted(values)
    n = len(s)
    if n == 0:
        return float("nan")
    mid = n // 2
    return s[mid] if n % 2 else (s[mid - 1] + s[mid]) / 2.0


# --------------------------------------------------------------------------- physical limit


def sequential_write_mib_s(path: str, total_bytes: int, fsync: bool, chunk: int = MiB) -> float:
    """Write ``total_bytes`` sequentially in ``chunk``-sized ``os.write`` calls; with ``fsync``
    the clock also covers one fsync at the end, so the figure is the device's bandwidth,
    without it the page cache's."""
    buf = os.urandom(chunk)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        t0 = time.perf_counter()
        written = 0
        while written < total_bytes:
            written += os.write(fd, buf)
        if fsync:
            os.fsync(fd)
        dt = time.perf_counter() - t0
    finally:
        os.close(fd)
        os.unlink(path)
    return written / MiB / dt


_RECORD_HEADER = struct.Struct("<IIQ")  # key length, value length, sequence


def python_append_mib_s(path: str, total_bytes: int, key_size: int, value_size: int) -> float:
    """A pure-Python append loop of ``header | key | value`` records into a buffered file:
    the fastest a Python value log could go, with no index at all."""
    value = os.urandom(value_size)
    count = max(1, total_bytes // (key_size + value_size))
    keys = [b"%016d" % i for i in range(count)]
    pack = _RECORD_HEADER.pack
    with open(path, "wb") as f:
        write = f.write
        t0 = time.perf_counter()
        for seq, key in enumerate(keys):
            write(pack(key_size, value_size, seq))
            write(key)
            write(value)
        f.flush()
        dt = time.perf_counter() - t0
    os.unlink(path)
    return count * (key_size + value_size) / MiB / dt


def physical_limit(directory: str, total_bytes: int, value_sizes: list[int]) -> dict:
    """Sequential write bandwidth with and without fsync, and the Python append loop per value
    size, measured in ``directory`` (the same file system as the databases)."""
    path = os.path.join(directory, "physical-limit.tmp")
    out = {
        "seq_write_nofsync_mib_s": sequential_write_mib_s(path, total_bytes, fsync=False),
        "seq_write_fsync_mib_s": sequential_write_mib_s(path, total_bytes, fsync=True),
        "python_append_mib_s": {},
    }
    for vs in value_sizes:
        out["python_append_mib_s"][str(vs)] = python_append_mib_s(path, total_bytes, 16, vs)
    return out
