"""Clear answers to a new user's first mistakes: an option typo names the closest option, an
unknown property is None in the API and exit 3 with a hint in the CLI (RocksDB's spelling
works in both), ``antkv --version``, ``verify`` counts the WAL and the memtables beside the
tables, and the ``state-*`` commands say when a location does not exist."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import antkv


@pytest.fixture
def run(antkv_cli):
    return antkv_cli


def test_an_option_typo_names_the_closest_option(tmp_path):
    with pytest.raises(TypeError, match="'write_bufer_size'; did you mean 'write_buffer_size'"):
        antkv.Options(write_bufer_size=1 << 20)
    with pytest.raises(TypeError, match="did you mean 'max_background_jobs'"):
        antkv.open(str(tmp_path / "db"), max_background_job=0)
    assert not (tmp_path / "db").exists()
    with pytest.raises(TypeError, match="did you mean 'blob_gc_threshold'"):
        antkv.Options().replace(blob_gc_treshold=0.3)
    with pytest.raises(TypeError, match="no field 'zzz' \\(its fields: .*write_buffer_size"):
        antkv.Options(zzz=1)
    assert antkv.Options(num_levels=3).num_levels == 3  # known names pass as before


def test_the_cli_option_typo_gets_the_same_hint(run, tmp_path):
    code, _, err = run("put", tmp_path / "db", "k", "v", "--create-if-missing", "-o", "num_level=3")
    assert code == 2 and "did you mean 'num_levels'" in err
    assert not (tmp_path / "db").exists()


def test_unknown_property_is_none_in_the_api_and_exit_3_with_a_hint_in_the_cli(run, tmp_path):
    path = tmp_path / "db"
    with antkv.open(str(path), max_background_jobs=0) as db:
        db.put(b"k", b"v")
        assert db.property("rocksdb.stats").startswith("** antkv stats **")
        assert db.property("rocksdb.estimate-num-keys") == db.property("antkv.estimate-num-keys") == "1"
        assert db.property("rocksdb.num-files-at-level0") == "0"
        assert db.property("antkv.estimated-num-keys") is None
        assert db.property("rocksdb.no-such-thing") is None
    code, out, _ = run("get-property", path, "rocksdb.estimate-num-keys")
    assert code == 0 and out.strip().isdigit()
    code, out, err = run("get-property", path, "antkv.estimated-num-keys")
    assert code == 3 and out == ""
    assert "did you mean 'antkv.estimate-num-keys'" in err and "antkv.num-files-at-levelN" in err
    code, out, err = run("get-property", path, "antkv.estimated-num-keys", "--json")
    doc = json.loads(out)
    assert code == 3 and doc["value"] is None and doc["did_you_mean"] == "antkv.estimate-num-keys"
    assert "antkv.stats" in doc["known"]
    code, _, err = run("get-property", path, "zzzz")
    assert code == 3 and "did you mean" not in err and "the properties:" in err


def test_version(run):
    code, out, err = run("--version")
    assert code == 0 and out.startswith(f"antkv {antkv.__version__} (Python ") and err == ""
    r = subprocess.run([sys.executable, "-m", "antkv", "--version"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.startswith("antkv ")


def test_verify_counts_the_wal_and_the_memtables_beside_the_tables(run, tmp_path):
    path = tmp_path / "db"
    with antkv.open(str(path), max_background_jobs=0) as db:
        with db.write_batch() as b:
            for i in range(300):
                b.put(b"k%03d" % i, b"v")
        db.put(b"one", b"more")
        # the writer's own view: 2 records in the WAL, 301 entries in the memtable, no table
        r = db.verify()
        assert (r["tables"], r["wal_files"], r["wal_records"], r["wal_entries"], r["memtable_entries"]) == (0, 1, 2, 301, 301)
        # a reader beside it (what the CLI is) replays the same WAL into memory
        code, out, err = run("verify", path)
        assert code == 0, err
        assert "0 tables (0 entries)" in out and "1 WALs (2 records, 301 entries; 301 entries in memtables" in out
        code, out, _ = run("verify", path, "--json")
        doc = json.loads(out)
        assert (doc["wal_records"], doc["wal_entries"], doc["memtable_entries"]) == (2, 301, 301)
        db.flush()
        r = db.verify()
        assert (r["tables"], r["table_entries"], r["wal_records"], r["memtable_entries"]) == (1, 301, 0, 0)


def test_state_commands_say_a_location_does_not_exist(run, tmp_path):
    missing = tmp_path / "nothing-here"
    for argv in (("state-info", missing), ("state-show", missing, "op"), ("state-export", missing, "op", tmp_path / "x")):
        code, _, err = run(*argv)
        assert code == 1 and f"no checkpoint location at {missing}: it does not exist" in err, err
    assert not (tmp_path / "x").exists()
    with antkv.open(str(tmp_path / "db")) as db:
        db.put(b"k", b"v")
    code, _, err = run("state-info", tmp_path / "db")
    assert code == 1 and "is an antkv database" in err and "antkv stats" in err


def test_verify_skips_a_wal_flushed_and_deleted_while_it_runs():
    """verify() lists the live WALs, then reads them; a flush finishing in between deletes one
    (its writes are in a table now), which verify must skip, not report as an I/O error."""
    from antkv.fs.fault import FaultInjectionFileSystem
    from antkv.fs.memory import MemoryFileSystem

    class FlushBeforeReadingAWal(FaultInjectionFileSystem):
        db = None

        def read_all(self, path: str) -> bytes:
            if self.db is not None and path.endswith(".log"):
                db, self.db = self.db, None
                db.flush(wait=True)  # the WAL about to be read is flushed and deleted
                assert not self.exists(path)
            return super().read_all(path)

    fs = FlushBeforeReadingAWal(MemoryFileSystem())
    with antkv.open("db", file_system=fs) as db:
        for i in range(300):
            db.put(b"k%03d" % i, b"v")
        fs.db = db
        r = db.verify()
        assert fs.db is None  # the flush ran inside the verify
        assert r["wal_files"] == 0  # the one it listed was gone, its writes in a table
        assert dict(db.items()) == {b"k%03d" % i: b"v" for i in range(300)}
