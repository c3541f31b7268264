"""Compaction picking: regressions found by the differential fuzzer."""

from __future__ import annotations

import antkv
from antkv.fs.memory import MemoryFileSystem


def test_in_place_bottom_compaction_never_leaves_a_table_inside_its_output():
    # fuzz seed 252415 (random-128): compact_range rewrote two non-adjacent bottom tables that
    # held deletions; the output spanned the table between them, two L1 tables overlapped, and
    # get() answered from the wrong one
    fs = MemoryFileSystem()
    opts = dict(file_system=fs, max_background_jobs=0, num_levels=2, block_size=1,
                target_file_size_base=1024, enable_blob_files=False)
    db = antkv.open("db", **opts)
    model = {}

    def put(k, v):
        db.put(k, v)
        model[k] = v

    for k in (b"a0", b"a1", b"a2", b"a3"):
        put(k, b"x" * 300)
    snap = db.snapshot()  # keeps the deletions alive through the bottom-level compactions
    db.delete(b"a0")  # a deletion in the first table
    del model[b"a0"]
    db.compact_range()
    for k in (b"m1", b"m2", b"m3"):
        put(k, b"y" * 300)  # a middle table without deletions
    db.compact_range()
    for k in (b"z0", b"z1", b"z2", b"z3"):
        put(k, b"z" * 300)
    snap2 = db.snapshot()
    db.delete(b"z0")  # a deletion in the last table
    del model[b"z0"]
    db.compact_range()
    files = db._versions.current.levels[1]
    with_deletions = [f for f in files if db._open_table(f).properties.num_deletions]
    assert len(files) >= 3 and len(with_deletions) == 2 and with_deletions[0] is files[0]
    snap.release()
    snap2.release()
    db.close()
    db = antkv.open("db", **opts)
    db.compact_range()  # rewrites the tables with deletions in place
    db._versions.current._check()
    for k, v in model.items():
        assert db.get(k) == v, k
    assert dict(db.items()) == model
    db.close()
