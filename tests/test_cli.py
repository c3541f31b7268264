"""The ``antkv`` command line over a real small database: every command, the three key/value
conventions (text, ``--hex``, ``--escape``), exit statuses (0 ok, 1 antkv error, 2 usage,
3 key not found), no database created by a read, and no traceback for any bad file.

Commands run in-process through ``antkv.tools.cli.main(argv)`` (output captured as bytes), and once as
a real ``python -m antkv`` subprocess.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import pytest

import antkv
from antkv.tools.cli import escape, main, unescape

OPTS = dict(max_background_jobs=0, min_blob_size=100, write_buffer_size=4096, level0_file_num_compaction_trigger=8)
BIG = bytes(range(256)) * 2  # 512 bytes: goes to the value log


@pytest.fixture
def run(capsysbinary):
    def run(*argv):
        code = main([os.fspath(a) for a in argv])
        cap = capsysbinary.readouterr()
        return code, cap.out, cap.err.decode("utf-8", "replace")

    return run


def _fill(db) -> dict:
    model = {}
    for i in range(60):
        k, v = b"key%03d" % i, b"value-%d" % i
        db.put(k, v)
        model[k] = v
    db.put(b"big", BIG)
    model[b"big"] = BIG
    db.put(b"bin\x00\t\n\\\xff", b"v\x00\r\n")
    model[b"bin\x00\t\n\\\xff"] = b"v\x00\r\n"
    db.put(b"", b"empty key")
    model[b""] = b"empty key"
    db.delete(b"key005")
    del model[b"key005"]
    db.delete_range(b"key010", b"key020")
    for k in [k for k in model if b"key010" <= k < b"key020"]:
        del model[k]
    return model


@pytest.fixture
def dbdir(tmp_path):
    path = tmp_path / "db"
    with antkv.open(str(path), **OPTS) as db:
        model = _fill(db)
        db.flush()
        db.put(b"key001", b"newer")  # left in the WAL
        model[b"key001"] = b"newer"
    return path, model


def _items(path) -> dict:
    with antkv.open(str(path), create_if_missing=False, max_background_jobs=0) as db:
        return dict(db.items())


# --------------------------------------------------------------------------- codecs


def test_escape_round_trips_every_byte_and_is_line_safe():
    rng = random.Random(7)
    samples = [bytes(range(256)), b"", b"\\x41", b"plain text"]
    samples += [bytes(rng.randrange(256) for _ in range(rng.randrange(40))) for _ in range(300)]
    for data in samples:
        text = escape(data)
        assert unescape(text) == data
        assert text.isascii() and text.isprintable()  # no tab, newline or control byte
    assert escape(b"a\\b\t\n\r\x00\xff") == "a\\\\b\\t\\n\\r\\x00\\xff"
    assert unescape("\\0\\x7F") == b"\x00\x7f"


# --------------------------------------------------------------------------- get / put / scan


def test_get_in_text_hex_and_escape(run, dbdir):
    path, _ = dbdir
    assert run("get", path, "key001") == (0, b"newer\n", "")
    assert run("get", path, b"big".hex(), "--hex")[1] == BIG.hex().encode() + b"\n"
    assert run("get", "--escape", path, "bin\\x00\\t\\n\\\\\\xff")[1] == b"v\\x00\\r\\n\n"
    assert run("get", "--hex", path, "0x" + b"bin\x00\t\n\\\xff".hex())[1] == b"v\x00\r\n".hex().encode() + b"\n"
    assert run("get", path, "")[1] == b"empty key\n"  # the empty key is a key
    code, out, err = run("get", path, "key005")
    assert (code, out) == (3, b"") and "key not found: key005" in err
    code, out, err = run("get", path, "key015")  # range-deleted
    assert code == 3


def test_put_exact_bytes_then_get_them_back(run, dbdir):
    path, model = dbdir
    key = bytes(range(256))
    value = bytes(reversed(range(256))) * 3
    assert run("put", path, "--hex", key.hex(), value.hex()) == (0, b"", "")
    assert run("put", "--escape", path, escape(b"\x00k\n"), escape(b"\xfe\\")) == (0, b"", "")
    assert run("put", path, "text-key", "text value") == (0, b"", "")
    got = _items(path)
    model.update({key: value, b"\x00k\n": b"\xfe\\", b"text-key": b"text value"})
    assert got == model
    assert run("get", "--escape", path, escape(key))[1] == escape(value).encode() + b"\n"


def test_put_creates_a_database_only_when_asked(run, tmp_path):
    path = tmp_path / "new"
    code, _, err = run("put", path, "k", "v")
    assert code == 1 and "no antkv database" in err and not path.exists()
    assert run("put", "--create-if-missing", path, "k", "v")[0] == 0
    assert run("get", path, "k")[1] == b"v\n"


def test_scan_matches_items_with_every_option(run, dbdir):
    path, model = dbdir
    code, out, _ = run("scan", path, "--escape")
    assert code == 0
    lines = out.decode().splitlines()
    assert [tuple(unescape(x) for x in line.split("\t")) for line in lines] == sorted(model.items())
    cases = [
        (["--start", "key030", "--stop", "key040"], dict(start=b"key030", stop=b"key040")),
        (["--prefix", "key04"], dict(prefix=b"key04")),
        (["--prefix", "key0", "--reverse", "--limit", "7"], dict(prefix=b"key0", reverse=True, limit=7)),
        (["--start", "key050", "--reverse"], dict(start=b"key050", reverse=True)),
        (["--stop", "key003", "--limit", "0"], dict(stop=b"key003", limit=0)),
    ]
    for argv, kw in cases:
        limit = kw.pop("limit", None)
        with antkv.open(str(path), create_if_missing=False, max_background_jobs=0) as db:
            want = list(db.items(kw.pop("start", None), kw.pop("stop", None), **kw))
        want = want[:limit] if limit is not None else want
        code, out, _ = run("scan", path, "--escape", *argv)
        assert code == 0
        got = [tuple(unescape(x) for x in line.split("\t")) for line in out.decode().splitlines()]
        assert got == want, argv
    code, out, _ = run("scan", path, "--prefix", "key06", "--keys-only")
    assert out == b""  # keys run key000..key059
    assert run("scan", path, "--prefix", "key05", "--keys-only")[1] == b"".join(b"key05%d\n" % i for i in range(10))


# --------------------------------------------------------------------------- maintenance


def test_stats_verify_compact_checkpoint(run, dbdir, tmp_path):
    path, model = dbdir
    code, out, _ = run("stats", path)
    assert code == 0 and out.startswith(b"** antkv stats **") and b"value-log files:" in out
    code, out, _ = run("stats", path, "--json")
    s = json.loads(out)
    assert code == 0 and sum(lv["files"] for lv in s["levels"]) >= 1 and s["vlog_total_bytes"] > 0
    code, out, _ = run("verify", path)
    assert code == 0 and out.startswith(b"OK: ") and b"every checksum matches" in out
    code, out, _ = run("compact", path)
    assert code == 0 and out.startswith(b"compacted")
    s = json.loads(run("stats", path, "--json")[1])
    assert s["levels"][0]["files"] == 0 and sum(lv["files"] for lv in s["levels"]) >= 1
    cp = tmp_path / "cp"
    code, out, _ = run("checkpoint", path, cp)
    assert code == 0 and b"written to" in out
    assert _items(cp) == model == _items(path)
    code, _, err = run("checkpoint", path, cp)
    assert code == 1 and "already exists" in err


def test_verify_reports_a_damaged_table_with_its_name(run, dbdir):
    path, _ = dbdir
    run("compact", path)
    table = sorted(p for p in path.iterdir() if p.suffix == ".sst")[0]
    data = bytearray(table.read_bytes())
    data[10] ^= 0x40  # inside the first data block
    table.write_bytes(bytes(data))
    code, out, err = run("verify", path)
    assert code == 1 and out == b""
    assert err.startswith("antkv verify: CorruptionError:") and table.name in err and "offset" in err
    assert err.count("\n") == 1 and "Traceback" not in err


# --------------------------------------------------------------------------- dumps


def test_dump_wal_of_a_live_database(run, tmp_path):
    path = tmp_path / "db"
    with antkv.open(str(path), **OPTS) as db:
        db.put(b"a", b"1")
        db.put(b"b", BIG)
        db.delete(b"a")
        db.delete_range(b"c", b"d")
        with db.write_batch() as b:
            b.put(b"e", b"5")
            b.delete(b"f")
        wal = [p for p in path.iterdir() if p.suffix == ".log"]
        assert len(wal) == 1
        code, out, _ = run("dump-wal", wal[0])
    assert code == 0
    text = out.decode()
    assert "  @1 PUT b'a' b'1'" in text
    assert "  @2 PUT b'b' -> value log " in text and f"size {25 + 1 + len(BIG)}" in text
    assert "  @3 DELETE b'a'" in text
    assert "  @4 DELETE_RANGE [b'c', b'd')" in text
    assert "batch seq 5, 2 ops" in text and "  @6 DELETE b'f'" in text
    assert text.rstrip().endswith("5 records, 6 ops, sequence 1..6")


def test_dump_wal_torn_tail_and_damage(run, tmp_path):
    path = tmp_path / "db"
    with antkv.open(str(path), **OPTS) as db:
        for i in range(3):
            db.put(b"k%d" % i, b"v" * 10)
        wal = next(p for p in path.iterdir() if p.suffix == ".log")
        data = wal.read_bytes()
    torn = tmp_path / "torn.log"
    torn.write_bytes(data[:-5])
    code, out, _ = run("dump-wal", torn)
    assert code == 0 and b"2 records" in out and b"torn tail at offset" in out
    bad = bytearray(data)
    bad[20] ^= 1  # payload of the first record: damage in the middle
    (tmp_path / "bad.log").write_bytes(bytes(bad))
    code, out, err = run("dump-wal", tmp_path / "bad.log")
    assert code == 1 and "CorruptionError" in err and "bad.log at offset 0" in err


def test_dump_sst_vlog_manifest(run, dbdir):
    path, _ = dbdir
    run("compact", path)
    table = sorted(p for p in path.iterdir() if p.suffix == ".sst")[0]
    code, out, _ = run("dump-sst", table)
    assert code == 0 and out.startswith(b"table ") and b"data blocks:" in out and b"b'key000'" in out
    vlogs = [p for p in path.iterdir() if p.suffix == ".vlog" and p.stat().st_size > 100]
    code, out, _ = run("dump-vlog", vlogs[0])
    assert code == 0 and b"key b'big' (3 B), value 512 B" in out
    code, out, _ = run("dump-manifest", path)
    text = out.decode()
    assert code == 0 and "(named by CURRENT)" in text and "new table L" in text and "state: log_number" in text
    manifest = next(p for p in path.iterdir() if p.name.startswith("MANIFEST-"))
    code, out2, _ = run("dump-manifest", manifest)
    assert code == 0 and out2.split(b"\n", 1)[1] == out.split(b"\n", 1)[1]


def test_no_traceback_for_any_damaged_file(run, dbdir, tmp_path):
    """Every truncation and a sweep of byte flips of every file kind, through its dump command
    (and the WAL and MANIFEST through the wrong dumps): exit 0 or 1, never an exception."""
    path, _ = dbdir
    with antkv.open(str(path), **OPTS) as db:  # a WAL with records, read while it is open
        db.put(b"x", b"y")
        db.put(b"z", BIG)
        files = {p.name: p.read_bytes() for p in path.iterdir() if p.name not in ("LOCK", "CURRENT")}
    commands = {".sst": "dump-sst", ".vlog": "dump-vlog", ".log": "dump-wal"}
    rng = random.Random(3)
    f = tmp_path / "victim"
    runs = 0
    for name, data in sorted(files.items()):
        cmds = [commands.get(os.path.splitext(name)[1], "dump-manifest")]
        if cmds[0] in ("dump-wal", "dump-manifest"):
            cmds = ["dump-wal", "dump-manifest", "dump-sst", "dump-vlog"]
        step = max(1, len(data) // 30)
        variants = [data[:n] for n in range(0, len(data), step)]
        for _ in range(12):
            b = bytearray(data)
            if b:
                b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
            variants.append(bytes(b))
        for v in variants:
            f.write_bytes(v)
            for cmd in cmds:
                code, _, err = run(cmd, f)
                assert code in (0, 1), (cmd, name, err)
                assert "Traceback" not in err
                runs += 1
    assert runs > 250
    assert run("dump-sst", tmp_path)[0] == 1  # a directory
    assert run("dump-vlog", tmp_path / "missing")[0] == 1


# --------------------------------------------------------------------------- errors and opening


def test_reads_never_create_a_database(run, tmp_path):
    missing = tmp_path / "nothing"
    empty = tmp_path / "empty"
    empty.mkdir()
    for target in (missing, empty):
        for argv in (["get", target, "k"], ["scan", target], ["stats", target], ["verify", target],
                     ["compact", target], ["checkpoint", target, tmp_path / "cp"], ["dump-manifest", target]):
            code, out, err = run(*argv)
            assert code == 1 and out == b"" and err.count("\n") == 1, argv
            if argv[0] != "dump-manifest":  # which reads a file: a missing one is an IOError
                assert "no antkv database at" in err, argv
    assert not missing.exists() and list(empty.iterdir()) == [] and not (tmp_path / "cp").exists()


def test_usage_errors_exit_2(run, dbdir):
    path, _ = dbdir
    bad = [
        [],
        ["frobnicate", path],
        ["get", path],
        ["get", path, "k", "extra"],
        ["get", "--hex", path, "xyz"],
        ["get", "--hex", "--escape", path, "00"],
        ["get", "--escape", path, "tail\\"],
        ["get", "--escape", path, "\\x4"],
        ["scan", path, "--limit", "-1"],
        ["scan", path, "--limit", "many"],
        ["get", "-o", "no_such_option=1", path, "k"],
        ["get", "-o", "novalue", path, "k"],
        ["get", "-o", "file_system=x", path, "k"],
    ]
    for argv in bad:
        code, out, err = run(*argv)
        assert code == 2 and out == b"" and err and "Traceback" not in err, argv
    code, out, _ = run("--help")
    assert code == 0 and b"dump-manifest" in out
    code, _, err = run("get", "-o", "num_levels=1", path, "k")  # a bad option value is antkv's error
    assert code == 1 and "Options.num_levels" in err


def test_a_database_open_elsewhere_is_a_lock_error_for_writes_but_readable(run, dbdir):
    path, _ = dbdir
    with antkv.open(str(path), create_if_missing=False, max_background_jobs=0) as live:
        live.put(b"key002", b"from the live writer")  # in its WAL only
        code, out, err = run("put", path, "key001", "x")
        assert code == 1 and out == b"" and err.startswith("antkv put: LockError:")
        # reads open read-only: no lock, and they see the live writer's WAL
        assert run("get", path, "key002")[:2] == (0, b"from the live writer\n")
        assert run("verify", path)[0] == 0
        assert run("stats", path, "--json")[0] == 0


def test_real_subprocess(dbdir):
    path, model = dbdir
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(antkv.__file__))))
    r = subprocess.run([sys.executable, "-m", "antkv", "scan", str(path), "--escape"], capture_output=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    got = [tuple(unescape(x) for x in line.split("\t")) for line in r.stdout.decode().splitlines()]
    assert got == sorted(model.items())
    r = subprocess.run([sys.executable, "-m", "antkv", "get", str(path), "big"], capture_output=True, env=env, timeout=120)
    assert (r.returncode, r.stdout) == (0, BIG + b"\n")  # text mode: the exact bytes
    r = subprocess.run([sys.executable, "-m", "antkv", "dump-wal", str(path / "CURRENT")], capture_output=True, env=env, timeout=120)
    assert r.returncode == 1 and r.stderr.count(b"\n") == 1 and b"Traceback" not in r.stderr
