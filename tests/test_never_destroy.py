"""Nothing is deleted that the database cannot account for; read-only open writes nothing.

* a directory with antkv files but no ``CURRENT`` is refused (CorruptionError naming what is
  missing, pointing to repair), by every way of opening it, and nothing in it changes;
* a directory holding only the data-less debris of an interrupted creation opens, and that
  debris is moved to ``lost/``;
* a table or value-log file the MANIFEST does not list goes to ``lost/`` unless it is provably
  debris (a number no MANIFEST edit handed out, or a deletion the MANIFEST records);
* ``read_only=True`` replays the WAL in memory and makes no mutating file-system call: it works
  beside a live writer (no LOCK) and sees what that writer's WAL holds.
"""

from __future__ import annotations

import os

import pytest

import antkv
from antkv.base.filenames import parse_file_name
from antkv.fs.fault import FaultInjectionFileSystem
from antkv.fs.memory import MemoryFileSystem

OPTS = dict(max_background_jobs=0, min_blob_size=64, write_buffer_size=1 << 20)
READ_OPS = {"open", "read", "read_all", "listdir", "size"}


def _contents(path) -> dict:
    out = {}
    for root, _dirs, files in os.walk(path):
        for name in files:
            p = os.path.join(root, name)
            with open(p, "rb") as f:
                out[os.path.relpath(p, path)] = f.read()
    return out


def _make(path) -> dict:
    model = {}
    with antkv.open(str(path), **OPTS) as db:
        for i in range(200):
            k, v = b"k%04d" % i, (b"v%d-" % i) * (1 + i % 40)
            db.put(k, v)
            model[k] = v
        db.flush()
        db.delete(b"k0001")
        del model[b"k0001"]
        db.put(b"k0002", b"in the WAL")
        model[b"k0002"] = b"in the WAL"
    return model


def test_missing_current_is_refused_and_nothing_changes(tmp_path):
    path = tmp_path / "db"
    _make(path)
    os.remove(path / "CURRENT")
    before = _contents(path)
    for kwargs in ({}, {"create_if_missing": True}, {"create_if_missing": False}, {"read_only": True}):
        with pytest.raises(antkv.CorruptionError) as e:
            antkv.open(str(path), **OPTS, **kwargs)
        msg = str(e.value)
        assert "no CURRENT" in msg and "repair" in msg and ".sst" in msg, msg
        assert _contents(path) == before  # nothing moved, deleted or created (read_only: not even LOCK)


def test_interrupted_creation_debris_is_moved_aside_not_deleted(tmp_path):
    path = tmp_path / "db"
    with antkv.open(str(path), **OPTS):
        pass
    os.remove(path / "CURRENT")  # the creation stopped before CURRENT: only empty files remain
    names = sorted(n for n in os.listdir(path) if parse_file_name(n) is not None)
    with antkv.open(str(path), **OPTS) as db:
        db.put(b"a", b"b")
        assert db.get(b"a") == b"b"
    assert sorted(os.listdir(path / "lost")) == names


def test_files_copied_in_go_to_lost_whatever_their_number(tmp_path):
    """Only files the database recorded writing are deleted: a table, value-log file, MANIFEST
    or WAL copied in by hand goes to lost/ unchanged, numbered below or above the next file
    number, and a copied-in WAL is not replayed (another database's keys never merge in)."""
    path = tmp_path / "db"
    model = _make(path)
    other = tmp_path / "other"
    with antkv.open(str(other), **OPTS) as db:
        db.put(b"foreign", b"from another database")
    foreign_wal = max(n for n in os.listdir(other) if n.endswith(".log"))
    table = sorted(n for n in os.listdir(path) if n.endswith(".sst"))[0]
    vlog = sorted(n for n in os.listdir(path) if n.endswith(".vlog"))[0]
    manifest = [n for n in os.listdir(path) if n.startswith("MANIFEST-")][0]
    copies = {
        "000001.sst": (path / table).read_bytes(),  # below the next file number
        "999999.sst": (path / table).read_bytes(),  # far above it
        "999998.vlog": (path / vlog).read_bytes(),
        "MANIFEST-999997": (path / manifest).read_bytes(),
        "999996.log": (other / foreign_wal).read_bytes(),
    }
    for name, data in copies.items():
        (path / name).write_bytes(data)
    with antkv.open(str(path), **OPTS) as db:
        removed = db.stats()["files_removed_at_open"]
        assert dict(db.items()) == model and db.get(b"foreign") is None
    for name, data in copies.items():
        assert (path / "lost" / name).read_bytes() == data, name
        assert not (path / name).exists()
        assert any(r.startswith(name) and "lost" in r for r in removed), removed
    log = (path / "LOG").read_text()
    assert all(f"moved-to-lost {name}" in log for name in copies), log


def test_unlisted_value_log_file_goes_to_lost(tmp_path):
    path = tmp_path / "db"
    model = _make(path)
    vlog = sorted(n for n in os.listdir(path) if n.endswith(".vlog"))[0]
    data = (path / vlog).read_bytes()
    (path / "000001.vlog").write_bytes(data)
    with antkv.open(str(path), **OPTS) as db:
        assert dict(db.items()) == model
    assert (path / "lost" / "000001.vlog").read_bytes() == data


def test_read_only_open_replays_the_wal_and_writes_nothing(tmp_path):
    path = tmp_path / "db"
    model = _make(path)
    before = _contents(path)
    with antkv.open(str(path), read_only=True) as db:
        assert dict(db.items()) == model
        assert db.get(b"k0002") == b"in the WAL" and db.get(b"k0001") is None
        assert db.verify()["tables"] >= 1
        for write in (
            lambda: db.put(b"x", b"y"), lambda: db.delete(b"x"), lambda: db.delete_range(b"a", b"b"),
            lambda: db.flush(), lambda: db.compact_range(), lambda: db.gc_value_log(),
            lambda: db.write(antkv.WriteBatch()),
        ):
            with pytest.raises(antkv.ReadOnlyError):
                write()
    assert _contents(path) == before  # the WAL is still there, nothing was flushed or rolled


def test_read_only_beside_a_live_writer(tmp_path):
    path = tmp_path / "db"
    _make(path)
    with antkv.open(str(path), **OPTS) as live:
        live.put(b"live", b"unflushed" * 20)
        with pytest.raises(antkv.LockError):
            antkv.open(str(path), **OPTS)
        with antkv.open(str(path), read_only=True) as ro:
            assert ro.get(b"live") == b"unflushed" * 20
        live.put(b"after", b"1")
    with antkv.open(str(path), **OPTS) as db:
        assert db.get(b"after") == b"1"


_WRITER = """
import antkv, os, sys, time
db = antkv.open(sys.argv[1], min_blob_size=100)
print("ready", flush=True)
end = time.time() + float(sys.argv[2])
i = 0
while time.time() < end:
    db.put(b"k%06d" % (i % 5000), os.urandom(2000))
    i += 1
db.close()
"""


def test_read_only_opens_beside_a_writer_of_large_values_report_no_damage(tmp_path):
    """A live writer appends a large value to the value log, then the WAL record pointing to it.
    A read-only open reads the WALs before it measures the value-log files, so a record written
    meanwhile never looks like one whose value was lost (``verify`` beside a live writer said
    DAMAGED, exit 4, about once in three runs)."""
    import subprocess
    import sys

    path = str(tmp_path / "db")
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(antkv.__file__))))
    writer = subprocess.Popen([sys.executable, "-c", _WRITER, path, "4"], stdout=subprocess.PIPE, env=env)
    try:
        assert writer.stdout.readline().strip() == b"ready"
        opens = 0
        while writer.poll() is None:
            with antkv.open(path, read_only=True) as ro:
                assert ro.stats()["recovery_dropped"] == [], ro.stats()["recovery_dropped"]
                opens += 1
        assert opens >= 5
    finally:
        writer.kill()
        writer.wait()


def test_read_only_makes_only_reading_file_system_calls():
    """Read-only media and a full disk: every call a read-only open makes is a read."""
    mem = MemoryFileSystem()
    fs = FaultInjectionFileSystem(mem)
    with antkv.open("/db", file_system=fs, **OPTS) as db:
        for i in range(50):
            db.put(b"k%d" % i, b"x" * (i * 3))
        db.flush()
        db.put(b"wal-only", b"y" * 100)
    fs.record_trace = True
    fs.trace.clear()
    with antkv.open("/db", file_system=fs, read_only=True, **OPTS) as db:
        assert db.get(b"wal-only") == b"y" * 100
        assert len(list(db.items())) == 51
        db.verify()
        db.stats()
    ops = {op for _, op, _ in fs.trace}
    assert ops and ops <= READ_OPS, ops - READ_OPS
    with pytest.raises(antkv.InvalidArgumentError):
        antkv.open("/nothing", file_system=fs, read_only=True)
    assert not mem.exists("/nothing")


def test_inline_mode_compacts_at_open_so_reopening_never_piles_up_l0(tmp_path):
    """Each open flushes the WAL it replays to an L0 table; a short session (the CLI's) must
    not leave them piling up past the stop trigger: open runs the compaction they call for."""
    path = str(tmp_path / "db")
    for i in range(45):
        with antkv.open(path, max_background_jobs=0) as db:
            db.put(b"k%d" % i, b"v")
    with antkv.open(path, read_only=True) as db:
        l0 = db.stats()["levels"][0]["files"]
        assert l0 <= db.options.level0_file_num_compaction_trigger, l0
        assert len(list(db.keys())) == 45


def test_a_truncated_manifest_is_reported_as_such_not_as_a_missing_table(tmp_path):
    path = tmp_path / "db"
    with antkv.open(str(path), max_background_jobs=0, write_buffer_size=2048, level0_file_num_compaction_trigger=2) as db:
        for i in range(600):
            db.put(b"k%04d" % (i % 150), b"v" * 40)
        db.compact_range()  # the last edits replace tables: the older ones are deleted
    manifest = [n for n in os.listdir(path) if n.startswith("MANIFEST-")][0]
    data = (path / manifest).read_bytes()
    for cut in range(len(data) - 1, 0, -97):
        (path / manifest).write_bytes(data[:cut])
        try:
            antkv.open(str(path), read_only=True).close()
        except antkv.CorruptionError as e:
            if "missing" in str(e) or "torn" in str(e):
                assert "MANIFEST ends in a torn record" in str(e) and "repair" in str(e), str(e)
                return
    pytest.fail("no truncation of the MANIFEST made a listed table disappear")


def _rocksdb_directory(path) -> dict:
    from rocksdict import Options as RocksOptions, Rdict

    model = {b"r%03d" % i: b"rocks-%d" % i for i in range(300)}
    db = Rdict(str(path), RocksOptions(raw_mode=True))
    for k, v in model.items():
        db[k] = v
    db.flush()
    db[b"in-the-wal"] = b"unflushed"
    model[b"in-the-wal"] = b"unflushed"
    db.close()
    return model


def test_another_engines_directory_is_refused_and_left_as_it_is(tmp_path):
    """A RocksDB directory has CURRENT, MANIFEST-*, *.sst and *.log names like antkv's: repair,
    destroy, every writing command and every open refuse it, and RocksDB still opens it."""
    from rocksdict import Options as RocksOptions, Rdict

    from antkv.tools.cli import main

    path = tmp_path / "rocks"
    model = _rocksdb_directory(path)
    before = _contents(path)
    with pytest.raises(antkv.InvalidArgumentError, match="not an antkv database"):
        antkv.repair(str(path))
    with pytest.raises(antkv.InvalidArgumentError, match="not an antkv database"):
        antkv.destroy(str(path))
    for kwargs in ({}, {"read_only": True}):
        with pytest.raises(antkv.InvalidArgumentError, match="not an antkv database"):
            antkv.open(str(path), **kwargs)
    for argv in (["repair", str(path)], ["put", str(path), "k", "v"], ["compact", str(path)],
                 ["gc", str(path)], ["empty-lost", str(path)], ["scan", str(path)]):
        assert main(argv) == 1, argv
    assert _contents(path) == before
    db = Rdict(str(path), RocksOptions(raw_mode=True))
    try:
        assert {k: db[k] for k in model} == model
    finally:
        db.close()


def _wal_with_a_damaged_third_record(path) -> tuple[str, bytes]:
    from antkv.record.log_format import LogReader

    with antkv.open(str(path), max_background_jobs=0) as db:
        for i in range(50):
            db.put(b"k%02d" % i, b"value %d" % i)
    wal = max((n for n in os.listdir(path) if n.endswith(".log")), key=lambda n: os.path.getsize(path / n))
    data = bytearray((path / wal).read_bytes())
    offsets = [offset for offset, _ in LogReader(bytes(data), wal)]
    data[offsets[3] + 20] ^= 0xFF  # inside the third write's record (record 0 is the WAL's header)
    (path / wal).write_bytes(bytes(data))
    return wal, bytes(data)


@pytest.mark.parametrize("how", ["point_in_time_recovery", "repair"])
def test_a_wal_whose_records_recovery_dropped_is_kept_in_lost(tmp_path, how):
    """Recovery that keeps 2 of 50 acknowledged writes must not delete the WAL holding the
    other 48 intact records: it goes to lost/ unchanged (and repair does the same)."""
    path = tmp_path / "db"
    wal, damaged = _wal_with_a_damaged_third_record(path)
    if how == "repair":
        antkv.repair(str(path))
        opts = {}
    else:
        opts = {"wal_recovery_mode": how}
    with antkv.open(str(path), max_background_jobs=0, **opts) as db:
        kept = dict(db.items())
    assert len(kept) == (2 if how != "repair" else 49), len(kept)
    assert (path / "lost" / wal).read_bytes() == damaged


def test_a_wal_the_log_does_not_name_is_replayed_when_its_records_continue(tmp_path):
    """The LOG line naming a WAL can be lost (a failed LOG write): a WAL after the MANIFEST's
    whose first record continues the database's sequence numbers is still replayed; one whose
    records start anywhere else is another database's and goes to lost/ unreplayed."""
    from antkv.base.dbformat import VALUE
    from antkv.record.batch import encode_batch
    from antkv.record.log_format import frame

    path = tmp_path / "db"
    with antkv.open(str(path), max_background_jobs=0) as db:
        db.put(b"a", b"1")
        db.flush()
        db.put(b"b", b"2")
        last = int(db.property("antkv.last-sequence"))
    newest = max(int(n[:-4]) for n in os.listdir(path) if n.endswith(".log"))
    continuing = frame(encode_batch(last + 1, [(VALUE, b"c", b"3")]))
    (path / f"{newest + 100:06d}.log").write_bytes(continuing)
    foreign = frame(encode_batch(1, [(VALUE, b"x", b"from elsewhere")]))
    (path / f"{newest + 200:06d}.log").write_bytes(foreign)
    with antkv.open(str(path), max_background_jobs=0) as db:
        assert (db.get(b"a"), db.get(b"b"), db.get(b"c"), db.get(b"x")) == (b"1", b"2", b"3", None)
    assert os.listdir(path / "lost") == [f"{newest + 200:06d}.log"]


def test_lost_is_reported_and_emptied_only_on_request(tmp_path, capsys):
    from antkv.tools.cli import main

    path = tmp_path / "db"
    _make(path)
    (path / "000001.sst").write_bytes(b"copied in" * 100)
    with antkv.open(str(path), **OPTS) as db:
        assert db.stats()["lost"] == {"files": 1, "bytes": 900}
        assert db.property("antkv.lost-files") == "1" and db.property("antkv.lost-bytes") == "900"
    assert main(["stats", str(path)]) == 0
    assert "lost/: 1 files, 900 bytes" in capsys.readouterr().out
    with antkv.open(str(path), **OPTS) as db:  # a reopen keeps it
        assert db.stats()["lost"]["files"] == 1
    assert main(["empty-lost", str(path)]) == 0
    assert os.listdir(path / "lost") == []
    with antkv.open(str(path), read_only=True) as db:
        assert db.stats()["lost"] == {"files": 0, "bytes": 0}
        with pytest.raises(antkv.ReadOnlyError):
            db.empty_lost()
