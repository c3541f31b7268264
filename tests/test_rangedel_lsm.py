"""Range tombstones through the whole LSM: memtable, L0, sorted levels, snapshots, compaction.

What is proved here, each against a plain-dict model of what a reader must see:

* a tombstone hides exactly the older versions in its range wherever they live (memtable, L0,
  L1+), and snapshots older than it still see the data -- across flushes and compactions;
* an iterator skips a covered span with a seek, not key by key: the number of table block reads
  (``FaultInjectionFileSystem`` counts every ``read``) of a scan over a mostly deleted table is a
  small fraction of a full scan's;
* compaction drops input tables that a newer tombstone wholly covers without reading a block of
  them, counted in ``stats()["tables_dropped_by_range_tombstones"]``; not when a snapshot
  separates them;
* tombstones disappear at the bottom level once no snapshot needs them;
* ``memtable_max_range_deletions`` flushes a memtable holding that many tombstones;
* thousands of tombstones do not make reads crawl: fragments are built once and shared (checked
  by identity), and a seek costs O(log fragments) work (checked by counting the lines the
  iterator code executes, a deterministic measure of work -- no timing).
"""

from __future__ import annotations

import random
import sys

import pytest

import antkv
from antkv.read import iterators
from antkv.fs.fault import FaultInjectionFileSystem
from antkv.fs.memory import MemoryFileSystem
from antkv.memtable.rangedel import fragment

BASE = dict(max_background_jobs=0, enable_blob_files=False, level0_file_num_compaction_trigger=100,
            level0_slowdown_writes_trigger=200, level0_stop_writes_trigger=300)


def k(i: int) -> bytes:
    return b"k%05d" % i


def val(i: int, gen: int = 0) -> bytes:
    return b"v%05d.%d." % (i, gen) + b"x" * 40


def open_db(fs=None, **kw):
    fs = fs if fs is not None else MemoryFileSystem()
    return antkv.open("db", **dict(BASE, file_system=fs, **kw))


def check(db, model: dict, snapshot=None, probes=None) -> None:
    """Every read path agrees with ``model``: get, forward and backward scans, bounded scans,
    and cursor seeks in both directions."""
    want = sorted(model.items())
    assert list(db.items(snapshot=snapshot)) == want
    assert list(db.items(reverse=True, snapshot=snapshot)) == want[::-1]
    keys = [kk for kk, _ in want]
    probes = probes if probes is not None else sorted(set(keys[::7]) | {k(i) for i in range(0, 2000, 37)})
    for p in probes:
        assert db.get(p, snapshot=snapshot) == model.get(p), p
    rng = random.Random(len(model))
    it = db.iterator(snapshot=snapshot)
    for _ in range(20):
        a, b = sorted((k(rng.randrange(2000)), k(rng.randrange(2000))))
        assert list(db.keys(a, b, snapshot=snapshot)) == [x for x in keys if a <= x < b]
        assert list(db.keys(a, b, reverse=True, snapshot=snapshot)) == [x for x in reversed(keys) if a <= x < b]
        it.seek(a)
        nxt = [x for x in keys if x >= a]
        assert it.valid() == bool(nxt) and (not nxt or it.key() == nxt[0])
        it.seek_for_prev(a)
        prv = [x for x in keys if x <= a]
        assert it.valid() == bool(prv) and (not prv or it.key() == prv[-1])
    it.close()


def tombstones_per_level(db) -> list[int]:
    return [sum(len(db._open_table(f).range_tombstones) for f in files) for files in db._versions.current.levels]


def files_per_level(db) -> list[int]:
    return [len(files) for files in db._versions.current.levels]


def check_tombstones_truncated(db, spans: list[tuple[bytes, bytes]]) -> None:
    """Each table's tombstones lie inside its key range, and together the tables of the bottom
    level still cover exactly ``spans`` (the tombstones were cut at table boundaries, not lost)."""
    levels = db._versions.current.levels
    bottom = max(i for i, files in enumerate(levels) if files)
    carrying = 0
    pieces = []
    for files in levels:
        for f in files:
            ts = db._open_table(f).range_tombstones
            carrying += bool(ts)
            for b, e, _ in ts:
                assert f.smallest <= b < e <= f.largest, (f.number, b, e, f.smallest, f.largest)
            if files is levels[bottom]:
                pieces.extend(ts)
    assert carrying >= 2, "a tombstone spanning many tables was not split among them"
    frags = fragment(pieces)
    runs = []
    for b, e in zip(frags.starts, frags.ends):
        if runs and runs[-1][1] == b:
            runs[-1][1] = e
        else:
            runs.append([b, e])
    assert [tuple(r) for r in runs] == spans


def delete_model(model: dict, lo: bytes, hi: bytes) -> None:
    for x in [x for x in model if lo <= x < hi]:
        del model[x]


# ------------------------------------------------------------------ snapshots across the LSM


def test_tombstones_in_every_layer_with_snapshots_held_across_flush_and_compaction():
    db = open_db(block_size=256, target_file_size_base=4096, num_levels=4)
    model = {k(i): val(i) for i in range(0, 2000, 2)}
    for kk, v in model.items():
        db.put(kk, v)
    db.compact_range()  # everything at the bottom, in many tables
    assert files_per_level(db)[0] == 0 and sum(files_per_level(db)) > 5
    check(db, model)

    # 1. tombstone in the memtable over data in the levels; a snapshot from before it
    s1, m1 = db.snapshot(), dict(model)
    db.delete_range(k(300), k(900))
    delete_model(model, k(300), k(900))
    db.put(k(500), val(500, 1))  # newer than the tombstone: visible
    model[k(500)] = val(500, 1)
    check(db, model)
    check(db, m1, snapshot=s1)

    # 2. flushed: the tombstone lives in an L0 table, the data below it
    db.flush()
    assert tombstones_per_level(db)[0] == 1
    check(db, model)
    check(db, m1, snapshot=s1)

    # 3. a second tombstone in the memtable, overlapping the first, with its own snapshot
    s2, m2 = db.snapshot(), dict(model)
    db.delete_range(k(0), k(400))
    delete_model(model, k(0), k(400))
    db.delete_range(k(1000), k(1000))  # empty: no-op
    check(db, model)
    check(db, m2, snapshot=s2)
    check(db, m1, snapshot=s1)

    # 4. compact everything down while both snapshots live: tombstones travel to the bottom
    #    (snapshots need them), data they cover stays for the snapshots
    db.compact_range()
    assert files_per_level(db)[0] == 0
    assert sum(tombstones_per_level(db)) >= 2
    check_tombstones_truncated(db, [(k(0), k(900))])
    check(db, model)
    check(db, m2, snapshot=s2)
    check(db, m1, snapshot=s1)

    # 5. another layer: newer data over the deleted span, then a tombstone over part of it, in L0
    for i in range(301, 700, 3):
        db.put(k(i), val(i, 2))
        model[k(i)] = val(i, 2)
    db.flush()
    db.delete_range(k(450), k(460))
    delete_model(model, k(450), k(460))
    db.flush()
    assert files_per_level(db)[0] == 2
    check(db, model)
    check(db, m1, snapshot=s1)

    # 6. release s1: the data only it could see may go; s2 still pins the second stripe
    s1.release()
    db.compact_range()
    check(db, model)
    check(db, m2, snapshot=s2)

    # 7. no snapshot left: the bottom drops every tombstone and everything they covered
    s2.release()
    db.compact_range()
    assert sum(tombstones_per_level(db)) == 0
    check(db, model)
    entries = sum(f.num_entries for _, f in db._versions.current.all_files())
    assert entries == len(model)  # nothing covered survives
    db.close()


def test_random_workload_against_model_with_snapshots():
    """Seeded random puts, deletes, range deletes, snapshots, flushes and partial compactions
    over 2,000 keys (tables of many blocks, so iterators really seek)."""
    rng = random.Random(42)
    db = open_db(block_size=128, target_file_size_base=2048, write_buffer_size=16 * 1024,
                 level0_file_num_compaction_trigger=3, max_bytes_for_level_base=16 * 1024,
                 max_bytes_for_level_multiplier=3, num_levels=4, memtable_max_range_deletions=4)
    model: dict = {}
    snaps: list = []
    for step in range(500):
        r = rng.random()
        if r < 0.55:
            i = rng.randrange(2000)
            db.put(k(i), val(i, step))
            model[k(i)] = val(i, step)
        elif r < 0.65:
            i = rng.randrange(2000)
            db.delete(k(i))
            model.pop(k(i), None)
        elif r < 0.8:
            a = rng.randrange(2000)
            b = a + rng.choice((1, 5, 50, 400))
            db.delete_range(k(a), k(b))
            delete_model(model, k(a), k(b))
        elif r < 0.85 and len(snaps) < 3:
            snaps.append((db.snapshot(), dict(model)))
        elif r < 0.9 and snaps:
            snaps.pop(rng.randrange(len(snaps)))[0].release()
        elif r < 0.95:
            db.flush()
        else:
            a = rng.randrange(2000)
            db.compact_range(k(a), k(a + rng.randrange(800)))
        if step % 50 == 49:
            check(db, model)
            for s, m in snaps:
                check(db, m, snapshot=s)
    for s, _ in snaps:
        s.release()
    db.compact_range()
    check(db, model)
    assert sum(tombstones_per_level(db)) == 0
    assert db.stats()["flushes"] > 5
    db.close()


# ------------------------------------------------------------------ iterators seek past a span


def _sst_reads(fs: FaultInjectionFileSystem) -> int:
    """Bytes read from tables (long scans read ahead many blocks per call, so calls would not
    tell how much was read)."""
    return sum(n for path, n in fs.bytes_read.items() if path.endswith(".sst"))


@pytest.mark.parametrize("where", ["memtable", "l0"])
def test_iterator_skips_a_covered_span_with_a_seek(where):
    fs = FaultInjectionFileSystem(MemoryFileSystem())
    # no block stays cached, so every block an iterator touches is one read
    db = open_db(fs, block_size=256, block_cache=antkv.Cache(0))
    for i in range(4000):
        db.put(k(i), val(i))
    db.compact_range()
    assert files_per_level(db)[1] >= 1
    snap = db.snapshot()
    db.delete_range(k(100), k(3900))
    if where == "l0":
        db.flush()
        assert tombstones_per_level(db)[0] == 1
    fs.record_trace = True

    def reads_of(fn):
        fs.trace.clear()
        fs.bytes_read.clear()
        out = fn()
        return out, _sst_reads(fs)

    full, full_reads = reads_of(lambda: list(db.keys(snapshot=snap)))
    assert len(full) == 4000
    live, live_reads = reads_of(lambda: list(db.keys()))
    assert live == [k(i) for i in range(100)] + [k(i) for i in range(3900, 4000)]
    back, back_reads = reads_of(lambda: list(db.keys(reverse=True)))
    assert back == live[::-1]
    # the covered 95% is skipped: the live scan reads about 5% of the table bytes
    assert full_reads > 300 * 256
    assert live_reads * 10 < full_reads, (live_reads, full_reads)
    assert back_reads * 10 < full_reads, (back_reads, full_reads)

    def seek_into_the_span():
        it = db.iterator()
        it.seek(k(2000))
        got = [it.key()]
        it.seek_for_prev(k(2000))
        got.append(it.key())
        it.close()
        return got

    got, seek_reads = reads_of(seek_into_the_span)
    assert got == [k(3900), k(99)]
    assert seek_reads <= 6 * (256 + 64), seek_reads  # a handful of ~256-byte blocks
    snap.release()
    db.close()


# ------------------------------------------------------------------ compaction drops covered inputs


def _load_bottom(fs, n=2000, **kw):
    db = open_db(fs, block_size=256, target_file_size_base=2048, **kw)
    model = {}
    for i in range(n):
        db.put(k(i), val(i))
        model[k(i)] = val(i)
    db.compact_range()
    assert files_per_level(db)[0] == 0
    check(db, model)  # opens every table reader
    return db, model


def test_compaction_drops_wholly_covered_tables_unread():
    fs = FaultInjectionFileSystem(MemoryFileSystem())
    db, model = _load_bottom(fs)
    lo, hi = k(500), k(1500)
    level = max(i for i, n in enumerate(files_per_level(db)) if n)
    covered = [f for f in db._versions.current.levels[level] if f.smallest >= lo and f.largest < hi]
    assert len(covered) >= 10
    covered_paths = {f"{f.number:06d}.sst" for f in covered}
    db.delete_range(lo, hi)
    delete_model(model, lo, hi)
    db.flush()
    before = db.stats()
    fs.trace.clear()
    fs.record_trace = True
    db.compact_range()
    fs.record_trace = False
    after = db.stats()
    assert after["tables_dropped_by_range_tombstones"] - before["tables_dropped_by_range_tombstones"] == len(covered)
    touched = {path.rsplit("/", 1)[-1] for _, op, path in fs.trace if op in ("read", "open")}
    assert not touched & covered_paths, sorted(touched & covered_paths)
    # compact_range also rewrites the bottom in place afterwards; neither pass read a covered
    # table (checked above), and compaction's own count agrees: it read less than the level
    read_bytes = after["compaction_bytes_read"] - before["compaction_bytes_read"]
    kept_bytes = before["levels"][level]["bytes"] - sum(f.size for f in covered)
    assert read_bytes <= 2 * kept_bytes + before["levels"][0]["bytes"], (read_bytes, kept_bytes)
    assert after["levels"][level]["bytes"] < before["levels"][level]["bytes"] * 0.6
    assert sum(tombstones_per_level(db)) == 0  # bottommost, no snapshot: the tombstone is gone
    check(db, model)
    db.close()


def test_a_snapshot_between_keeps_covered_tables_and_the_tombstone():
    fs = FaultInjectionFileSystem(MemoryFileSystem())
    db, model = _load_bottom(fs)
    snap, old = db.snapshot(), dict(model)
    db.delete_range(k(500), k(1500))
    delete_model(model, k(500), k(1500))
    db.flush()
    bytes_before = db.stats()["levels"]
    db.compact_range()
    st = db.stats()
    assert st["tables_dropped_by_range_tombstones"] == 0
    assert sum(tombstones_per_level(db)) >= 1  # the bottom keeps it: the snapshot needs it
    check(db, model)
    check(db, old, snapshot=snap)
    snap.release()
    db.compact_range()
    assert sum(tombstones_per_level(db)) == 0
    check(db, model)
    total_before = sum(lv["bytes"] for lv in bytes_before)
    assert sum(lv["bytes"] for lv in db.stats()["levels"]) < total_before * 0.6
    db.close()


def test_range_deleted_values_in_the_value_log_become_garbage():
    db = open_db(enable_blob_files=True, min_blob_size=0, blob_file_size=16 * 1024, block_size=256,
                 target_file_size_base=4096, blob_gc_threshold=0.5)
    model = {}
    for i in range(600):
        db.put(k(i), val(i) * 4)
        model[k(i)] = val(i) * 4
    db.compact_range()
    snap = db.snapshot()
    db.delete_range(k(0), k(600))
    db.compact_range()
    assert snap.get(k(7)) == model[k(7)]  # the snapshot still reaches the value log
    snap.release()
    db.compact_range()
    st = db.stats()
    assert list(db.items()) == []
    # every value the tombstone hid is counted as garbage, so its file can go
    assert st["vlog_garbage_bytes"] == st["vlog_total_bytes"] or not st["vlog_files"]
    db.put(k(1), b"after")
    db.flush()
    db.compact_range()
    assert db.get(k(1)) == b"after" and db.get(k(2)) is None
    db.close()


# ------------------------------------------------------------------ memtable_max_range_deletions


def test_memtable_max_range_deletions_flushes():
    db = open_db(memtable_max_range_deletions=5)
    for i in range(100):
        db.put(k(i), val(i))
    db.flush()  # a table below: the tombstones' flushes keep them (a bottommost flush would not)
    for j in range(12):
        db.delete_range(k(j * 8), k(j * 8 + 3))
    st = db.stats()
    assert st["flushes"] == 3
    assert db._mem.num_range_deletes == 2  # the last 2 are still in the memtable
    per_table = sorted(len(db._open_table(f).range_tombstones) for f in db._versions.current.levels[0])
    assert per_table == [0, 5, 5]
    model = {k(i): val(i) for i in range(100) if not any(j * 8 <= i < j * 8 + 3 for j in range(12))}
    check(db, model, probes=[k(i) for i in range(100)])
    db.close()

    off = open_db()
    for j in range(50):
        off.delete_range(k(j), k(j + 1))
    assert off.stats()["flushes"] == 0 and off._mem.num_range_deletes == 50
    off.close()


# ------------------------------------------------------------------ many tombstones, cheap reads


def _count_lines(fn, codes) -> tuple:
    """Run ``fn`` and count the source lines executed inside the functions ``codes``."""
    n = 0

    def local(frame, event, arg):
        nonlocal n
        if event == "line":
            n += 1
        return local

    def glob(frame, event, arg):
        return local if frame.f_code in codes else None

    old = sys.gettrace()
    sys.settrace(glob)
    try:
        out = fn()
    finally:
        sys.settrace(old)
    return out, n


_ITER_CODES = {
    iterators.visible_forward.__code__,
    iterators.visible_backward.__code__,
    iterators.skip_covered_forward.__code__,
    iterators.skip_covered_backward.__code__,
}


@pytest.mark.parametrize("where", ["memtable", "table"])
def test_thousands_of_tombstones_do_not_make_reads_crawl(where):
    n = 5000
    db = open_db()
    for i in range(2 * n):
        db.put(b"k%06d" % i, b"v")
    db.compact_range()
    for i in range(0, 2 * n, 2):  # every even key deleted by its own tombstone
        db.delete_range(b"k%06d" % i, b"k%06d" % i + b"\x00")
    if where == "table":
        db.flush()
        reader = db._open_table(db._versions.current.levels[0][0])
        assert len(reader.range_tombstones) == n

    # gets: the fragmented view is built once and reused
    assert db.get(b"k000001") == b"v" and db.get(b"k000002") is None
    if where == "memtable":
        frags = db._mem.fragments()
        assert len(frags) == n
    else:
        frags = reader.fragments()
    for i in range(0, 2000, 7):
        assert db.get(b"k%06d" % i) == (None if i % 2 == 0 else b"v")
    if where == "memtable":
        assert db._mem.fragments() is frags
    else:
        assert reader.fragments() is frags

    # iterators: one fragmented view per super version, shared -- also across a write that
    # does not touch the tombstones (its sequence number changes nothing a reader sees of them)
    sv = db._sv

    def seek_last(key=b"k009990"):
        it = db.iterator()
        it.seek(key)
        got = [it.key()]
        it.next()
        got.append(it.key())
        it.seek_for_prev(b"k000010")
        got.append(it.key())
        it.close()
        return got

    assert seek_last() == [b"k009991", b"k009993", b"k000009"]
    shared = sv._frag_cache
    db.put(b"unrelated", b"x")
    assert db._sv is sv
    assert seek_last() == [b"k009991", b"k009993", b"k000009"]
    assert sv._frag_cache is shared, "a write re-fragmented every tombstone"

    # a seek near either end does O(log n) work in the iterator code, not O(n)
    got, lines = _count_lines(seek_last, _ITER_CODES)
    assert got == [b"k009991", b"k009993", b"k000009"]
    assert lines < 300, lines
    db.close()


def test_a_tombstone_added_while_a_reader_builds_the_fragments_is_not_lost(monkeypatch):
    """A point read builds the memtable's fragmented tombstones without a lock.  When a
    ``delete_range`` lands between its copy of the tombstones and its store of the view -- the
    interleaving forced here by adding the tombstone from inside the fragmenting -- every later
    read must still see the new tombstone (a view cached without it hid it from every point read
    of the memtable, while scans, which fragment on their own, saw it)."""
    from antkv.memtable import memtable as memtable_module

    db = antkv.open("db", **dict(BASE, file_system=MemoryFileSystem()))
    db.put(b"k", b"v")
    db.delete_range(b"a", b"b")  # a tombstone elsewhere: the read below fragments the list
    real_fragment = memtable_module.fragment
    landed = []

    def fragment_while_a_writer_adds(tombstones, *args):
        view = real_fragment(tombstones, *args)
        if not landed:  # the writer, between the reader's copy of the list and its store
            landed.append(True)
            db.delete_range(b"j", b"l")
        return view

    monkeypatch.setattr(memtable_module, "fragment", fragment_while_a_writer_adds)
    assert db.get(b"k") == b"v"  # (read before the second tombstone was published)
    assert landed
    assert db.get(b"k") is None
    assert list(db.items()) == []
    assert db.get(b"k", snapshot=db.snapshot()) is None
    db.close()
