"""The files a database keeps about itself: the info ``LOG`` (rotated), ``STATS`` (statistics of
the database's life) and ``OPTIONS`` (the options of the last open, checked at the next)."""

from __future__ import annotations

import errno
import os

import pytest

import antkv
from antkv.db.files.info_log import InfoLog
from antkv.fs.memory import MemoryFileSystem, _err

OPTS = dict(max_background_jobs=0, write_buffer_size=4096, min_blob_size=100, level0_file_num_compaction_trigger=2)


def _load(db, n=2000):
    for i in range(n):
        db.put(b"k%04d" % (i % 400), b"v" * (40 + 120 * (i % 2)))


def test_the_log_tells_what_the_engine_did(tmp_path):
    path = tmp_path / "db"
    with antkv.open(str(path), **OPTS) as db:
        _load(db)
        db.compact_range()
        db.gc_value_log()
    text = (path / "LOG").read_text()
    for event in ("open created", "flush memtable of", "compaction L0 -> L1", "value-log-gc", "close lifetime"):
        assert event in text, event
    assert " B" in text and " s" in text  # sizes and durations
    with antkv.open(str(path), **OPTS):
        pass
    assert "open recovered" in (path / "LOG").read_text()
    assert "close lifetime" in (path / "LOG.old.1").read_text()  # rotated at open
    with antkv.open(str(path), read_only=True):
        pass
    assert not (path / "LOG.old.2").exists()  # a read-only open writes no LOG


def test_the_log_rotates_and_keeps_a_bounded_number():
    fs = MemoryFileSystem()
    fs.mkdirs("/db")
    log = InfoLog(fs, "/db", max_size=200, keep=3)
    log.start()
    for i in range(100):
        log.event("flush", f"line {i}")
    log.close()
    names = sorted(fs.listdir("/db"))
    assert names == ["LOG", "LOG.old.1", "LOG.old.2", "LOG.old.3"]
    assert all(fs.size("/db/" + n) <= 200 + 80 for n in names)
    assert b"line 99" in fs.read_all("/db/LOG")


def test_write_amplification_of_the_database_life(tmp_path):
    path = str(tmp_path / "db")
    with antkv.open(path, **OPTS) as db:
        _load(db)
        first = db.stats()["lifetime"]
    assert first["user_bytes_written"] > 0 and first["write_amplification"] > 1
    with antkv.open(path, **OPTS) as db:
        db.compact_range()  # a compaction in a process that wrote nothing
        s = db.stats()
        assert s["write_amplification"] == 0.0  # this process: no user bytes
        life = s["lifetime"]
        assert life["user_bytes_written"] == first["user_bytes_written"]
        assert life["compaction_bytes_written"] > first["compaction_bytes_written"]
        assert life["write_amplification"] > first["write_amplification"]
        assert "the database's life" in db.property("antkv.stats")
    # a damaged STATS file is reported and the counts restart: it never blocks an open
    with open(os.path.join(path, "STATS"), "r+b") as f:
        f.write(b"X")
    with antkv.open(path, **OPTS) as db:
        assert db.stats()["lifetime"]["user_bytes_written"] == 0


def test_options_are_persisted_and_checked(tmp_path):
    path = str(tmp_path / "db")
    with antkv.open(path, num_levels=12, **OPTS) as db:
        _load(db, 3000)
        db.compact_range()
        deepest = max(lv["level"] for lv in db.stats()["levels"] if lv["files"])
    assert deepest >= 1
    with antkv.open(path, num_levels=12, **dict(OPTS, block_size=8192)) as db:
        assert db.stats()["options_changed"] == ["block_size: 4096 -> 8192"]  # compatible: applied
    with pytest.raises(antkv.InvalidArgumentError, match="num_levels"):
        antkv.open(path, num_levels=deepest, **OPTS)
    with antkv.open(path, num_levels=12, **dict(OPTS, block_size=8192)) as db:
        assert db.stats()["options_changed"] == []  # recorded by the previous open
    # the command line opens with the recorded options (no -o needed)
    from antkv.tools.cli import main

    assert main(["get", path, "k0001"]) == 0
    # a damaged OPTIONS file does not block an open and is rewritten
    with open(os.path.join(path, "OPTIONS"), "r+b") as f:
        f.write(b"{")
    with antkv.open(path, num_levels=12, **OPTS):
        pass
    with antkv.open(path, num_levels=12, **OPTS) as db:
        assert db.stats()["options_changed"] == []


def test_a_refused_open_leaves_every_log_as_it_was(tmp_path):
    """Six refused opens (error_if_exists) must not rotate the last good run's LOG away;
    another program's LOG is never renamed or written to."""
    path = tmp_path / "db"
    with antkv.open(str(path), max_background_jobs=0, write_buffer_size=1024, level0_file_num_compaction_trigger=8) as db:
        _load(db, 400)
        db.compact_range()
    good = (path / "LOG").read_bytes()
    assert b" close " in good
    for _ in range(6):
        with pytest.raises(antkv.InvalidArgumentError):
            antkv.open(str(path), error_if_exists=True)
    assert (path / "LOG").read_bytes() == good
    (path / "LOG").write_bytes(b"another program's log\n")
    for name in [n for n in os.listdir(path) if n.startswith("LOG.old")]:
        os.remove(path / name)
    with antkv.open(str(path), max_background_jobs=0) as db:
        db.put(b"k", b"v")
    assert (path / "LOG").read_bytes() == b"another program's log\n"
    assert not [n for n in os.listdir(path) if n.startswith("LOG.old")]


class _ModeZero(MemoryFileSystem):
    """The in-memory file system, answering reads of ``unreadable`` paths as the OS answers a
    mode-000 file (EACCES)."""

    unreadable: set = set()

    def read_all(self, path):
        if path in self.unreadable:
            raise _err(errno.EACCES, "open", path)
        return super().read_all(path)


def test_unreadable_stats_and_options_files_are_tolerated_like_damaged_ones():
    fs = _ModeZero()
    with antkv.open("/db", file_system=fs, max_background_jobs=0) as db:
        db.put(b"k", b"v")
    fs.unreadable = {"/db/STATS", "/db/OPTIONS"}
    with antkv.open("/db", file_system=fs, read_only=True) as db:
        assert db.get(b"k") == b"v"
    with antkv.open("/db", file_system=fs, max_background_jobs=0) as db:  # rewrites both
        assert db.get(b"k") == b"v"
    fs.unreadable = set()
    assert fs.read_all("/db/OPTIONS").startswith(b'{"body"')
