"""``DB.data_blocks``: the data blocks point reads of a set of keys (and scans of key ranges)
may read, from the tables' index and filter (``antkv/read/block_plan.py``).

The check is against the reads themselves: a file system records every read of a table, a
fresh database (cold block cache) reads the keys, and every data block read must be in the
plan made before the reads."""

from __future__ import annotations

import random

import antkv
from antkv.fs import RandomAccessFile, default_file_system
from antkv.fs.delegating import DelegatingFileSystem


class _Recorded(RandomAccessFile):
    def __init__(self, handle, reads):
        self.path = handle.path
        self._handle, self._reads = handle, reads

    def read(self, offset, n):
        self._reads.append((self.path, offset, n))
        return self._handle.read(offset, n)

    def size(self):
        return self._handle.size()

    def close(self):
        self._handle.close()


class _Recording(DelegatingFileSystem):
    """Records ``(path, offset, length)`` of every read of a table."""

    def __init__(self):
        super().__init__(default_file_system())
        self.reads = []

    def open_random(self, path):
        handle = self.base.open_random(path)
        return _Recorded(handle, self.reads) if path.endswith(".sst") else handle


def _db(path, fs):
    return antkv.open(str(path), create_if_missing=True, file_system=fs, block_size=1024,
                      write_buffer_size=1 << 20, max_background_jobs=0, enable_blob_files=False,
                      level0_file_num_compaction_trigger=8)


def test_every_block_a_read_or_a_scan_touches_is_in_the_plan(tmp_path):
    rnd = random.Random(5)
    with _db(tmp_path / "db", default_file_system()) as db:  # several levels, overlapping L0 tables
        for round_ in range(6):
            for i in rnd.sample(range(20000), 3000):
                db.put(b"k%06d" % i, b"v%d-" % round_ * 8)
            db.flush()
            if round_ == 3:
                db.compact_range()  # the first four into a sorted level; two more tables stay in L0
        files = [int(db.property(f"antkv.num-files-at-level{n}")) for n in range(7)]
        assert files[0] >= 2 and sum(files[1:]) >= 1, files  # overlapping L0 tables above a sorted level
    fs = _Recording()
    with _db(tmp_path / "db", fs) as db:
        keys = [b"k%06d" % i for i in rnd.sample(range(20000), 300)] + [b"absent", b"k999999"]
        ranges = [(b"k001000", b"k001050"), (b"k019990", None)]
        plan = db.data_blocks(keys, ranges)
        assert plan and all(p.endswith(".sst") for p in plan)
        planned = {(p, off, n) for p, blocks in plan.items() for off, n in blocks}
        fs.reads.clear()  # the opens read footers, indexes and filters; what follows reads data blocks
        for k in keys:
            db.get(k)
        for begin, end in ranges:
            list(db.items(begin, end))
        data_reads = set(fs.reads)
        assert data_reads and data_reads <= planned, data_reads - planned
        # the filters keep the plan close to the reads (without them it is about twice this)
        assert len(planned) < 1.5 * len(data_reads), (len(planned), len(data_reads))


def test_l0_tables_whose_ranges_all_overlap_are_planned_and_read_alike(tmp_path):
    """When the L0 tables' ranges all overlap, a point read checks no L0 range (the filter, or
    the search of a block, rules a table out); without filters, a key outside one table's
    range then reads that table's first block, and the plan must hold it too."""
    with antkv.open(str(tmp_path / "db"), create_if_missing=True, block_size=256, bloom_bits_per_key=0,
                    max_background_jobs=0, enable_blob_files=False, level0_file_num_compaction_trigger=8) as db:
        for i in range(100, 200):  # [k100, k199]
            db.put(b"k%d" % i, b"old")
        db.flush()
        for i in range(150, 300):  # [k150, k299]: overlaps the first
            db.put(b"k%d" % i, b"new")
        db.flush()
        assert db._sv.version.l0_ranges_apart is False
    fs = _Recording()
    with _db(tmp_path / "db", fs) as db:
        keys = [b"k120", b"k170", b"k250", b"k099", b"k110x", b"k300"]
        plan = db.data_blocks(keys)
        planned = {(p, off, n) for p, blocks in plan.items() for off, n in blocks}
        fs.reads.clear()
        assert [db.get(k) for k in keys] == [b"old", b"new", b"new", None, None, None]
        data_reads = set(fs.reads)
        assert data_reads and data_reads <= planned, data_reads - planned


def test_l0_tables_apart_are_checked_by_range(tmp_path):
    """L0 tables of keys written in order do not overlap: each point read checks their ranges
    and reads only the one table whose range holds the key."""
    with antkv.open(str(tmp_path / "db"), create_if_missing=True, block_size=256, bloom_bits_per_key=0,
                    max_background_jobs=0, enable_blob_files=False, level0_file_num_compaction_trigger=8) as db:
        for t in range(3):
            for i in range(t * 100, t * 100 + 100):
                db.put(b"k%03d" % i, b"v%d" % i)
            db.flush()
        assert db._sv.version.l0_ranges_apart is True
    fs = _Recording()
    with _db(tmp_path / "db", fs) as db:
        db.approximate_size()  # every table opened (footer, index, filter reads)
        fs.reads.clear()
        assert db.get(b"k250") == b"v250" and db.get(b"k150") == b"v150" and db.get(b"k999") is None
        # one block of one table per get found (k150 would read the first block of the newest
        # table, [k200, k299], too without the range check)
        assert len(fs.reads) == 2, fs.reads
