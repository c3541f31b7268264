"""Value-log garbage collection, passive plus threshold."""

from __future__ import annotations

import antkv
from antkv.fs.memory import MemoryFileSystem


def test_explicit_gc_reclaims_the_active_file_once_it_reaches_the_threshold():
    fs = MemoryFileSystem()
    db = antkv.open("db", file_system=fs, max_background_jobs=0, min_blob_size=100, blob_gc_threshold=0.5)
    for round_ in range(4):  # everything overwritten 3 times: 75% garbage, all in the active file
        for i in range(100):
            db.put(b"k%03d" % i, bytes([round_]) * 1000)
    db.compact_range()  # counts the garbage
    st = db.stats()
    assert len(st["vlog_files"]) == 1 and st["vlog_garbage_bytes"] > 0.7 * st["vlog_total_bytes"]
    report = db.gc_value_log()
    after = db.stats()
    assert report["bytes_relocated"] > 0 and report["files_deleted"] >= 1
    assert after["vlog_garbage_bytes"] < 0.05 * after["vlog_total_bytes"] + 1
    assert after["space_amplification"] < 1.5
    assert dict(db.items()) == {b"k%03d" % i: bytes([3]) * 1000 for i in range(100)}
    db.close()


def test_explicit_gc_leaves_an_active_file_below_the_threshold_alone():
    fs = MemoryFileSystem()
    db = antkv.open("db", file_system=fs, max_background_jobs=0, min_blob_size=100, blob_gc_threshold=0.5)
    for i in range(100):
        db.put(b"k%03d" % i, b"a" * 1000)
    for i in range(10):
        db.put(b"k%03d" % i, b"b" * 1000)  # 10% garbage
    db.compact_range()
    files_before = [v["file"] for v in db.stats()["vlog_files"]]
    report = db.gc_value_log()
    assert report["bytes_relocated"] == 0
    assert [v["file"] for v in db.stats()["vlog_files"]] == files_before
    db.close()
