"""The rescaling case that range deletes exist for (issue 5): clip the key groups a partition no
longer owns.

A store holds 1,000,000 keys over 16 key groups (key = 2-byte big-endian group + 8-byte
big-endian key, as Flink lays out keyed state).  The partition keeps one group and drops 15 with
15 ``delete_range`` calls.  Proved by counting work, never by timing:

* the deletes are cheap: a few hundred bytes of WAL, no table read, no flush, no compaction;
* reads of the surviving group read the same table blocks as before the deletes (a full scan
  seeks past the deleted groups: a handful of extra block reads, not 937,500 keys);
* every key of a deleted group is gone and every key of the kept group is intact;
* after ``compact_range`` the deleted groups' disk space is gone: bytes on disk drop to ~1/16,
  and the tables wholly inside deleted groups are dropped without a single read.

Runtime is dominated by loading, flushing and compacting 1,000,000 keys (~30-40 s on a shared
2-core machine).
"""

from __future__ import annotations

import random
import struct
import time

import antkv
from antkv.fs.fault import FaultInjectionFileSystem
from antkv.fs.memory import MemoryFileSystem

GROUPS = 16
PER_GROUP = 62_500  # 16 * 62,500 = 1,000,000 keys
KEEP = 15
_KEY = struct.Struct(">HQ")


def key(group: int, i: int) -> bytes:
    return _KEY.pack(group, i)


def value(group: int, i: int) -> bytes:
    return b"%x:%07d" % (group, i)


def group_start(group: int) -> bytes:
    return struct.pack(">H", group)


BLOCK = 4096 + 9  # a data block of the default size with its trailer


def _sst_reads(fs: FaultInjectionFileSystem, paths: set | None = None) -> int:
    """Table bytes read since ``fs.bytes_read`` was last cleared (long scans read ahead many
    blocks per call, so calls would not tell how much was read)."""
    return sum(
        n
        for p, n in fs.bytes_read.items()
        if p.endswith(".sst") and (paths is None or p.rsplit("/", 1)[-1] in paths)
    )


def test_drop_fifteen_of_sixteen_key_groups():
    t0 = time.perf_counter()
    fs = FaultInjectionFileSystem(MemoryFileSystem())
    db = antkv.open(
        "db",
        file_system=fs,
        max_background_jobs=0,
        enable_blob_files=False,
        write_buffer_size=1 << 30,  # one memtable for the whole load: one flush
        target_file_size_base=1 << 20,  # ~20 tables of ~1 MiB at L1, about one per group
        level0_file_num_compaction_trigger=100,
        level0_slowdown_writes_trigger=200,
        level0_stop_writes_trigger=300,
        block_cache=antkv.Cache(0),  # nothing stays cached: every block touched is a read
    )
    for g in range(GROUPS):
        for start in range(0, PER_GROUP, 1000):
            b = antkv.WriteBatch()
            for i in range(start, min(start + 1000, PER_GROUP)):
                b.put(key(g, i), value(g, i))
            db.write(b)
    db.flush()
    db.compact_range()
    t_load = time.perf_counter() - t0
    before = db.stats()
    disk_before = before["bytes_on_disk"]
    assert before["levels"][0]["files"] == 0 and before["levels"][1]["files"] >= 16

    kept_prefix = group_start(KEEP)
    assert sum(1 for _ in db.keys(prefix=kept_prefix)) == PER_GROUP  # opens every table reader
    fs.record_trace = True
    fs.trace.clear()
    fs.bytes_read.clear()
    kept_before = list(db.items(prefix=kept_prefix))
    reads_kept_before = _sst_reads(fs)
    assert len(kept_before) == PER_GROUP
    assert kept_before[0] == (key(KEEP, 0), value(KEEP, 0))
    assert kept_before[-1] == (key(KEEP, PER_GROUP - 1), value(KEEP, PER_GROUP - 1))

    # --- the 15 deletes: WAL bytes only, nothing read, nothing flushed or compacted ---
    fs.trace.clear()
    fs.bytes_read.clear()
    t1 = time.perf_counter()
    for g in range(GROUPS):
        if g != KEEP:
            db.delete_range(group_start(g), group_start(g + 1))
    t_delete = time.perf_counter() - t1
    ops = [op for _, op, _ in fs.trace]
    after_delete = db.stats()
    written = after_delete["bytes_written_total"] - before["bytes_written_total"]
    assert written < 1024, written  # 15 WAL records of two 2-byte keys each
    assert "read" not in ops and "create" not in ops, ops
    assert ops.count("append") <= GROUPS - 1
    for name in ("flushes", "compactions", "compaction_bytes_read"):
        assert after_delete[name] == before[name], name
    assert db._mem.num_range_deletes == GROUPS - 1

    # --- reads of the kept group: same answers, same blocks read ---
    fs.trace.clear()
    fs.bytes_read.clear()
    kept_after = list(db.items(prefix=kept_prefix))
    reads_kept_after = _sst_reads(fs)
    assert kept_after == kept_before
    assert abs(reads_kept_after - reads_kept_before) <= 2 * BLOCK, (reads_kept_after, reads_kept_before)
    fs.trace.clear()
    fs.bytes_read.clear()
    everything = list(db.items())
    reads_full = _sst_reads(fs)
    assert everything == kept_before
    # the full scan seeks over each deleted group: about one block per group, not its ~1,300
    assert reads_full <= reads_kept_before + (2 * GROUPS + 4) * BLOCK, (reads_full, reads_kept_before)
    assert list(db.keys(reverse=True, stop=group_start(KEEP) + b"\x00" * 7 + b"\x05")) == [
        key(KEEP, i) for i in (4, 3, 2, 1, 0)
    ]
    rng = random.Random(16)
    for _ in range(2000):
        g, i = rng.randrange(GROUPS), rng.randrange(PER_GROUP)
        assert db.get(key(g, i)) == (value(g, i) if g == KEEP else None)
    fs.record_trace = False

    # --- compact_range: the deleted groups' space is gone, their tables dropped unread ---
    l1 = db._versions.current.levels[1]
    lo, hi = group_start(0), group_start(KEEP)
    covered = {f"{f.number:06d}.sst" for f in l1 if f.smallest >= lo and f.largest < hi}
    assert len(covered) >= 12
    fs.trace.clear()
    fs.bytes_read.clear()
    fs.record_trace = True
    t2 = time.perf_counter()
    db.compact_range()
    t_compact = time.perf_counter() - t2
    fs.record_trace = False
    assert _sst_reads(fs, covered) == 0
    after = db.stats()
    assert after["tables_dropped_by_range_tombstones"] - before["tables_dropped_by_range_tombstones"] == len(covered)
    compaction_read = after["compaction_bytes_read"] - before["compaction_bytes_read"]
    assert compaction_read < disk_before / 4, (compaction_read, disk_before)
    disk_after = after["bytes_on_disk"]
    assert disk_after <= disk_before / GROUPS * 1.05 + 64 * 1024, (disk_after, disk_before)
    assert sum(len(db._open_table(f).range_tombstones) for _, f in db._versions.current.all_files()) == 0
    assert list(db.items()) == kept_before
    db.close()
    print(
        f"\nkey groups: load+flush+compact {t_load:.1f}s, 15 delete_range {t_delete * 1e3:.2f}ms "
        f"({written} bytes written), compact_range {t_compact:.2f}s, disk {disk_before} -> {disk_after} bytes, "
        f"{len(covered)} tables dropped unread, kept-group scan {reads_kept_before} block reads before / "
        f"{reads_kept_after} after, full scan {reads_full}, total {time.perf_counter() - t0:.1f}s"
    )
