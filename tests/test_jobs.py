"""Compaction jobs: the columnar path writes exactly what the general path writes.

Random input tables (overlapping levels, several L0 tables, several versions of a key in one
table, deletions, value pointers) are compacted twice -- once through the columnar merge, once
through the entry-by-entry compaction stream -- and the output entries, their split into tables
and the value-log garbage must agree, bottommost or not.
"""

from __future__ import annotations

import random

import pytest

from antkv.base.dbformat import DELETION, VALUE, VALUE_POINTER
from antkv.fs.memory import MemoryFileSystem
from antkv.compaction.jobs import CompactionJob, execute_compaction
from antkv.sst.builder import TableBuilder
from antkv.sst.reader import TableReader
from antkv.compaction.outputs import OutputEnv, TableOptions
from antkv.manifest.version_edit import FileMetaData
from antkv.base.filenames import table_file_name
from antkv.vlog.pointer import decode_pointer, encode_pointer

DIR = "db"


def _write_table(fs, number: int, entries) -> FileMetaData:
    """A table of ``(key, seq, kind, value)`` entries (any order; sorted here)."""
    entries = sorted(entries, key=lambda e: (e[0], -e[1]))
    f = fs.create(table_file_name(DIR, number))
    b = TableBuilder(f, file_number=number, block_size=256, bloom_bits_per_key=10)
    refs: dict[int, int] = {}
    for key, seq, kind, value in entries:
        b.add(key, seq, kind, value)
        if kind == VALUE_POINTER:
            vnum, _, size = decode_pointer(value)
            refs[vnum] = refs.get(vnum, 0) + size
    props = b.finish(blob_refs=refs)
    f.sync()
    f.close()
    return FileMetaData.from_properties(number, props)


def _random_inputs(rng: random.Random, fs) -> list[tuple[int, FileMetaData]]:
    """One L1 table (oldest seqs) and 1-4 L0 tables, each newer than the one before."""
    seq = 1
    inputs = []
    nkeys = rng.choice([5, 50, 400])
    levels = [1] + [0] * rng.randint(1, 4)
    for number, level in enumerate(levels, start=10):
        entries = []
        for key in rng.sample(range(nkeys), rng.randint(1, nkeys)):
            for _ in range(rng.choice([1, 1, 1, 2, 3])):  # several versions in one table too
                r = rng.random()
                if r < 0.2:
                    kind, value = DELETION, b""
                elif r < 0.5:
                    kind, value = VALUE_POINTER, encode_pointer(rng.randint(1, 4), rng.randint(0, 10_000), rng.randint(1, 500))
                else:
                    kind, value = VALUE, b"v%d" % seq * rng.randint(1, 8)
                entries.append((b"key%05d" % key, seq, kind, value))
                seq += 1
        inputs.append((level, _write_table(fs, number, entries)))
    rng.shuffle(inputs)  # the job must not depend on the order it is given
    return inputs


def _run(fs, inputs, bottommost: bool, columnar: bool, target: int):
    numbers = iter(range(1000 if columnar else 2000, 3000))
    env = OutputEnv(fs, DIR, TableOptions(256, 10, None), lambda: next(numbers), {})
    readers = []

    def open_reader(f):
        r = TableReader.open(fs, table_file_name(DIR, f.number), f.number)
        readers.append(r)
        return r

    job = CompactionJob(inputs, output_level=1, snapshots=[], bottommost=bottommost, target_size=target)
    try:
        result = execute_compaction(job, env, open_reader, allow_columnar=columnar)
    finally:
        for r in readers:
            r.close()
    tables = []
    for meta in result.tables:
        r = TableReader.open(fs, table_file_name(DIR, meta.number), meta.number)
        keys, negs, kinds, values = r.columns()
        tables.append((list(zip(keys, negs, kinds, values)), meta.smallest, meta.largest, meta.blob_refs))
        r.close()
    return tables, result.garbage


@pytest.mark.parametrize("seed", range(40))
def test_columnar_merge_writes_what_the_general_path_writes(seed):
    rng = random.Random(seed)
    fs = MemoryFileSystem()
    fs.mkdirs(DIR)
    inputs = _random_inputs(rng, fs)
    target = rng.choice([300, 2000, 1 << 30])
    for bottommost in (False, True):
        general = _run(fs, inputs, bottommost, columnar=False, target=target)
        columnar = _run(fs, inputs, bottommost, columnar=True, target=target)
        entries = lambda tables: [e for t in tables for e in t[0]]  # noqa: E731
        assert entries(columnar[0]) == entries(general[0])
        assert columnar[1] == general[1]  # value-log garbage
        # tables are cut at user-key boundaries: their key ranges follow each other
        for tables in (columnar[0], general[0]):
            assert all(a[2] < b[1] for a, b in zip(tables, tables[1:]))
            assert all(t[0][0][0] == t[1] and t[0][-1][0] == t[2] for t in tables)
        if target == 1 << 30:
            assert len(columnar[0]) == len(general[0]) <= 1
        if bottommost:
            assert all(e[2] != DELETION for e in entries(columnar[0]))


def test_columnar_outputs_are_cut_near_the_target_size():
    rng = random.Random(7)
    fs = MemoryFileSystem()
    fs.mkdirs(DIR)
    entries = [(b"k%06d" % i, i + 1, VALUE, bytes(rng.getrandbits(8) for _ in range(100))) for i in range(3000)]
    inputs = [(0, _write_table(fs, 5, entries))]
    tables, garbage = _run(fs, inputs, bottommost=True, columnar=True, target=64 * 1024)
    assert garbage == {}
    sizes = [sum(len(e[0]) + len(e[3]) + 8 for e in t[0]) for t in tables]
    assert len(tables) == -(-sum(sizes) // (64 * 1024))
    assert all(s >= 64 * 1024 for s in sizes[:-1]) and all(s < 64 * 1024 + 200 for s in sizes[:-1])
    assert [e for t in tables for e in t[0]] == [(k, -s, kind, v) for k, s, kind, v in entries]


@pytest.mark.parametrize("seed", range(12))
def test_subcompactions_together_write_what_one_compaction_writes(seed):
    """Cut at random user keys (and at the split points the runner would pick), the parts'
    outputs in key order hold exactly the whole job's entries, and the garbage computed over
    all parts is the whole job's."""
    from antkv.compaction.jobs import columnar_garbage, split_points

    rng = random.Random(100 + seed)
    fs = MemoryFileSystem()
    fs.mkdirs(DIR)
    inputs = _random_inputs(rng, fs)
    bottommost = rng.random() < 0.5
    whole, whole_garbage = _run(fs, inputs, bottommost, columnar=True, target=1 << 30)
    readers = [TableReader.open(fs, table_file_name(DIR, f.number), f.number) for _, f in inputs]
    cut_sets = [split_points(readers, rng.randint(2, 5)), [], sorted({b"key%05d" % rng.randrange(450) for _ in range(3)})]
    for r in readers:
        r.close()
    numbers = iter(range(5000, 9000))
    for cuts in cut_sets:
        bounds = [None, *cuts, None]
        tables = []
        for lo, hi in zip(bounds, bounds[1:]):
            env = OutputEnv(fs, DIR, TableOptions(256, 10, None), lambda: next(numbers), {})
            job = CompactionJob(inputs, 1, [], bottommost, 1 << 30, lo=lo, hi=hi)
            opened = []

            def open_reader(f):
                opened.append(TableReader.open(fs, table_file_name(DIR, f.number), f.number))
                return opened[-1]

            result = execute_compaction(job, env, open_reader)
            if job.is_subcompaction:
                assert result.garbage == {}  # a part cannot know: the caller computes it
            for r in opened:
                r.close()
            tables += result.tables
        entries = []
        for meta in tables:
            r = TableReader.open(fs, table_file_name(DIR, meta.number), meta.number)
            entries += list(zip(*r.columns()))
            r.close()
        assert entries == [e for t in whole for e in t[0]]
        assert columnar_garbage(inputs, tables) == whole_garbage
