"""``antkv.repair``: on every damage class of the corruption sweep (each file kind of a database
with tables on several levels, sealed and active value-log files, a WAL, a MANIFEST and
CURRENT; flipped byte, truncation, file removed), repair must

* leave a database that opens and verifies,
* never invent data: every pair it holds was in the damaged database's files,
* lose nothing when only the MANIFEST or CURRENT was damaged (the state is exactly the whole
  acknowledged history), and
* report what it lost whenever the state is not the whole history (a removed file: because
  the last MANIFEST named it).
"""

from __future__ import annotations

import os

import pytest

import antkv
from antkv.base.dbformat import VALUE
from antkv.base.filenames import parse_file_name
from antkv.record.batch import decode_batch
from antkv.record.log_format import LogReader
from antkv.sst.reader import TableReader
from antkv.vlog.reader import ValueLogScan
from fuzz.sweeps import DB, Mutation, build_corruption_db, restore_files


@pytest.fixture(scope="module")
def cdb():
    return build_corruption_db(0)


def _all_pairs(cdb) -> set:
    """Every (key, value) any file of the undamaged database holds."""
    fs = restore_files(cdb.files)
    pairs = set()
    for name in cdb.files:
        parsed = parse_file_name(name)
        p = os.path.join(DB, name)
        if parsed is None:
            continue
        if parsed[0] == "sst":
            r = TableReader.open(fs, p, parsed[1], cache=None)
            pairs.update((k, v) for k, _neg, kind, v in r.iter_forward() if kind == VALUE)
            r.close()
        elif parsed[0] == "vlog":
            pairs.update((k, v) for _off, _size, k, v, _c in ValueLogScan(fs, p))
        elif parsed[0] == "log":
            for offset, payload in LogReader(cdb.files[name], name):
                pairs.update((k, v) for kind, k, v in decode_batch(payload, name, offset)[1] if kind == VALUE)
    return pairs


def _damages(cdb) -> list[tuple[str, str, int]]:
    out = []
    for name, data in sorted(cdb.files.items()):
        if name == "LOCK" or not data:
            continue
        out += [(name, "flip01", len(data) // 2), (name, "flipFF", min(30, len(data) - 1)), (name, "truncate", len(data) // 2), (name, "remove", 0)]
    return out


def test_repair_every_damage_class(cdb):
    pairs = _all_pairs(cdb)
    kinds = set()
    for name, kind, offset in _damages(cdb):
        files = dict(cdb.files)
        if kind == "remove":
            del files[name]
        else:
            files[name] = Mutation(name, kind, offset).apply(files[name])
        fs = restore_files(files)
        where = f"{name} {kind}@{offset}"
        report = antkv.repair(DB, file_system=fs, **cdb.options)
        with antkv.open(DB, file_system=fs, **cdb.options) as db:
            got = dict(db.items())
            db.verify()
        assert set(got.items()) <= pairs, where  # nothing invented
        file_kind = name.split(".")[-1].split("-")[0]
        if file_kind in ("MANIFEST", "CURRENT"):
            assert got == cdb.full, where  # the MANIFEST only said which files: all rebuilt
        if got != cdb.full:  # a removed file the last MANIFEST named is reported missing
            assert report.lost_anything, where
        kinds.add(file_kind)
    assert {"sst", "vlog", "log", "MANIFEST", "CURRENT"} <= kinds


def test_repair_reports_and_keeps_moved_files(tmp_path):
    path = tmp_path / "db"
    with antkv.open(str(path), max_background_jobs=0, min_blob_size=50, write_buffer_size=4096) as db:
        for i in range(400):
            db.put(b"k%04d" % i, b"v%d-" % i * (1 + i % 30))
    tables = sorted(n for n in os.listdir(path) if n.endswith(".sst"))
    victim = path / tables[0]
    data = bytearray(victim.read_bytes())
    data[len(data) // 3] ^= 0xFF
    victim.write_bytes(bytes(data))
    report = antkv.repair(str(path))
    assert any(m.startswith(tables[0]) for m in report.moved_to_lost), report.lines()
    assert (path / "lost" / tables[0]).read_bytes() == bytes(data)  # kept, not deleted
    # (a damaged table whose index still reads has its readable blocks in a new table)
    assert report.lost_anything and report.tables_kept == len(tables) - 1 + len(report.tables_salvaged)
    assert report.to_dict()["tables_kept"] == report.tables_kept
    with antkv.open(str(path), max_background_jobs=0) as db:
        n = len(list(db.items()))
        assert 0 < n < 400


def test_repair_bad_input(tmp_path):
    with pytest.raises(antkv.InvalidArgumentError):
        antkv.repair(str(tmp_path / "missing"))
    with pytest.raises(TypeError):
        antkv.repair(42)
    with antkv.open(str(tmp_path / "db"), max_background_jobs=0) as db:
        db.put(b"k", b"v")
        with pytest.raises(antkv.LockError):
            antkv.repair(str(tmp_path / "db"))  # open elsewhere: untouched
        assert db.get(b"k") == b"v"


def _table_blocks(path) -> list[list[tuple[bytes, bytes]]]:
    """The (key, value) pairs of each data block of the table file ``path``, in order."""
    r = TableReader.open(antkv.fs.default_file_system(), str(path), 0, cache=None)
    try:
        return [list(zip(b[0], b[3])) for _off, b in r.readable_blocks()]
    finally:
        r.close()


def test_repair_keeps_every_readable_block_of_a_damaged_table(tmp_path):
    path = tmp_path / "db"
    model = {}
    with antkv.open(str(path), max_background_jobs=0, block_size=512, write_buffer_size=1 << 20) as db:
        for i in range(600):
            model[b"k%04d" % i] = os.urandom(40)
            db.put(b"k%04d" % i, model[b"k%04d" % i])
        db.flush()
    [table] = sorted(n for n in os.listdir(path) if n.endswith(".sst"))
    blocks = _table_blocks(path / table)
    assert len(blocks) > 10
    r = TableReader.open(antkv.fs.default_file_system(), str(path / table), 0, cache=None)
    offsets = list(r.index()[2])
    r.close()
    victim = len(blocks) // 2
    data = bytearray((path / table).read_bytes())
    data[offsets[victim] + 5] ^= 0x55  # one byte inside one data block
    (path / table).write_bytes(bytes(data))
    with pytest.raises(antkv.CorruptionError):
        with antkv.open(str(path), max_background_jobs=0) as db:
            db.verify()
    report = antkv.repair(str(path))
    assert report.lost_anything
    assert report.tables_salvaged and f"{sum(map(len, blocks)) - len(blocks[victim])} of 600 entries" in report.tables_salvaged[0]
    assert "1 data blocks lost" in report.tables_salvaged[0], report.lines()
    with antkv.open(str(path), max_background_jobs=0) as db:
        got = dict(db.items())
        db.verify()
    lost = dict(blocks[victim])
    assert got == {k: v for k, v in model.items() if k not in lost}  # every other entry, exactly
    assert (path / "lost" / table).read_bytes() == bytes(data)


def test_repair_keeps_ingested_tables_readable(tmp_path):
    """A table brought in by ingest_database reads through a translation the MANIFEST holds;
    repair must give it that translation again (without it, the ingested keys vanished)."""
    src, dst = str(tmp_path / "src"), str(tmp_path / "dst")
    with antkv.open(src, min_blob_size=50, max_background_jobs=0) as a:
        for round_ in (b"old", b"new"):
            for i in range(100):
                a.put(b"k%03d" % i, round_ + os.urandom(60))
            a.flush()
        a.checkpoint(str(tmp_path / "src-cp"))
    with antkv.open(dst, min_blob_size=50, max_background_jobs=0) as b:
        for i in range(200):
            b.put(b"x%03d" % i, os.urandom(120))
        b.flush()
        b.ingest_database(str(tmp_path / "src-cp"), b"k", b"l")
        model = dict(b.items())
    assert len(model) == 300
    report = antkv.repair(dst)
    assert report.tables_translated >= 1 and not report.lost_anything, report.lines()
    with antkv.open(dst) as b:
        assert dict(b.items()) == model
        b.verify()


def test_repair_reports_the_files_the_manifest_named_that_are_gone(tmp_path):
    """A table the MANIFEST lists is removed: its keys go back to older values and deleted keys
    come back, so repair must say so (and exit 4), naming the table and its key range; the
    same for the WAL the MANIFEST names."""
    from antkv.tools.cli import main

    path = tmp_path / "db"
    opts = dict(max_background_jobs=0, write_buffer_size=1 << 20, level0_file_num_compaction_trigger=10)
    with antkv.open(str(path), **opts) as db:
        for i in range(100):
            db.put(b"k%03d" % i, b"old")
        db.flush()
        first = set(n for n in os.listdir(path) if n.endswith(".sst"))
        for i in range(50):
            db.put(b"k%03d" % i, b"new")
        for i in range(50, 60):
            db.delete(b"k%03d" % i)
        db.flush()
        newest = (set(n for n in os.listdir(path) if n.endswith(".sst")) - first).pop()
        db.put(b"only-in-the-wal", b"x")
    wal = max(n for n in os.listdir(path) if n.endswith(".log"))
    os.remove(path / newest)
    os.remove(path / wal)
    assert main(["repair", str(path)]) == 4
    with antkv.open(str(path), **opts) as db:
        assert db.get(b"k000") == b"old" and db.get(b"k055") == b"old"  # what the missing table hid
    # the same damage, reported in the RepairReport
    path2 = tmp_path / "db2"
    with antkv.open(str(path2), **opts) as db:
        db.put(b"a", b"1")
        db.flush()
        db.put(b"b", b"2")
        db.flush()
    tables = sorted(n for n in os.listdir(path2) if n.endswith(".sst"))
    os.remove(path2 / tables[-1])
    report = antkv.repair(str(path2))
    assert report.lost_anything and "nothing was lost" not in report.lines()
    assert any(m.startswith(tables[-1]) and "b'b'..b'b'" in m for m in report.files_missing), report.lines()
