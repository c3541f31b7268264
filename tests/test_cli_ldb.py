"""The ``ldb``/``sst_dump`` commands of ``antkv``: ``idump``, ``approxsize``, ``compact
--from/--to``, ``ingest``, ``write-sst``, ``dump-sst --from/--to``, each with ``--json`` and its
bad input (exit 2 for a usage error, 1 for an antkv error, nothing changed)."""

from __future__ import annotations

import io
import json
import os
import sys

import pytest

import antkv
from antkv.tools.cli import main

OPTS = dict(max_background_jobs=0, min_blob_size=100, write_buffer_size=4096)


@pytest.fixture
def run(capsysbinary, monkeypatch):
    def run(*argv, stdin: str | None = None):
        if stdin is not None:
            monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin.encode()), encoding="utf-8", newline=""))
        code = main([os.fspath(a) for a in argv])
        cap = capsysbinary.readouterr()
        return code, cap.out.decode(), cap.err.decode()

    return run


@pytest.fixture
def db(tmp_path):
    """Keys k00..k39 (k05 large), then in later sequence numbers: k03 rewritten, k04 deleted,
    [k10, k12) range-deleted, k20 rewritten with an expiry; the last writes stay in the WAL."""
    path = tmp_path / "db"
    with antkv.open(str(path), **OPTS) as d:
        for i in range(40):
            d.put(b"k%02d" % i, b"B" * 300 if i == 5 else b"v%d" % i)
        d.flush()
        d.put(b"k03", b"new")
        d.delete(b"k04")
        d.delete_range(b"k10", b"k12")
        d.put(b"k20", b"t", ttl=3600)
    return path


def _seq(path) -> int:
    with antkv.open(str(path), read_only=True) as d:
        return int(d.property("antkv.last-sequence"))


def test_idump_shows_every_version_kind_and_where_it_lives(run, db):
    code, out, err = run("idump", db, "--json")
    assert code == 0 and err == ""
    docs = [json.loads(line) for line in out.splitlines()]
    k03 = [d for d in docs if d["key"] == "k03"]
    assert [(d["seq"], d["kind"]) for d in k03] == [(41, "PUT"), (4, "PUT")]  # newest first
    assert k03[0]["value"] == "new" and k03[0]["source"] == "memtable" and k03[1]["source"].startswith("L")
    assert [d["kind"] for d in docs if d["key"] == "k04"] == ["DELETE", "PUT"]
    [blob] = [d for d in docs if d["key"] == "k05"]
    assert blob["kind"] == "PUT_BLOB" and blob["value_log"]["size"] > 300 and "value" not in blob
    [rd] = [d for d in docs if d["kind"] == "RANGE_DELETE"]
    assert rd["key"] == "k10" and rd["end"] == "k12" and rd["seq"] == 43
    ttl = [d for d in docs if d["key"] == "k20"][0]
    assert ttl["kind"] == "PUT_TTL" and ttl["expires_ms"] > 0 and ttl["value"] == "t"
    assert [(d["key"], -d["seq"]) for d in docs] == sorted((d["key"], -d["seq"]) for d in docs)
    assert len(docs) == 40 + 4  # every version, the range deletion included
    code, out, _ = run("idump", db, "--from", "k03", "--to", "k05")
    assert code == 0
    assert out.splitlines() == [
        "k03 @41 PUT => new (memtable)", f"k03 @4 PUT => v3 ({k03[1]['source']})",
        "k04 @42 DELETE (memtable)", f"k04 @5 PUT => v4 ({k03[1]['source']})"]
    code, out, _ = run("idump", db, "--hex", "--from", "6b3130", "--limit", "2")
    assert code == 0 and out.splitlines()[0].startswith("6b3130 @43 RANGE_DELETE => [6b3130, 6b3132)")
    assert len(out.splitlines()) == 2


def test_idump_bad_input(run, db, tmp_path):
    assert run("idump", db, "--from", "b", "--to", "a")[0] == 2
    assert run("idump", db, "--limit", "-1")[0] == 2
    assert run("idump", db, "--hex", "--from", "zz")[0] == 2
    code, _, err = run("idump", tmp_path / "none")
    assert code == 1 and "no antkv database" in err and not (tmp_path / "none").exists()


def test_approxsize(run, db):
    code, out, _ = run("approxsize", db)
    total = int(out)
    assert code == 0 and total > 300
    code, out, _ = run("approxsize", db, "--from", "k05", "--to", "k06", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["from"] == "k05" and doc["to"] == "k06" and 0 < doc["bytes"] <= total
    with antkv.open(str(db), read_only=True) as d:
        assert doc["bytes"] == d.approximate_size(b"k05", b"k06")
    assert int(run("approxsize", db, "--from", "x", "--to", "y")[1]) == 0
    assert run("approxsize", db, "--from", "b", "--to", "a")[0] == 2


def test_compact_a_key_range(run, db):
    def tables():
        with antkv.open(str(db), read_only=True) as d:
            return {(lv, f.number, f.smallest, f.largest) for lv, f in d._sv.version.all_files()}

    before = dict(antkv.open(str(db), read_only=True).items())
    code, out, _ = run("compact", db, "--from", "k00", "--to", "k09", "--json")
    assert code == 0 and json.loads(out)["levels"]
    after = tables()
    assert all(lv > 0 for lv, *_ in after)
    code, out, _ = run("compact", db, "--from", "x0", "--to", "x9")  # nothing there: nothing moves
    assert code == 0 and tables() == after
    with antkv.open(str(db), read_only=True) as d:
        assert dict(d.items()) == before
    assert run("compact", db, "--from", "k9", "--to", "k1")[0] == 2
    assert run("compact", db, "--hex", "--from", "xyz")[0] == 2


def test_write_sst_then_ingest(run, db, tmp_path):
    sst = tmp_path / "ext.sst"
    code, out, _ = run("write-sst", sst, "-", stdin="k50\tfifty\nk03\tthree\nk50\tFIFTY\n", )
    assert code == 0 and "wrote 2 entries" in out
    code, out, _ = run("dump-sst", sst, "--from", "k00", "--to", "k99")
    assert code == 0 and out.splitlines() == ["k03 @0 PUT => three (ext.sst)", "k50 @0 PUT => FIFTY (ext.sst)"]
    seq = _seq(db)
    code, out, err = run("ingest", db, sst, "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["sequence"] == seq + 1 and len(doc["tables"]) == 1
    with antkv.open(str(db), read_only=True) as d:
        assert d[b"k03"] == b"three" and d[b"k50"] == b"FIFTY" and d[b"k07"] == b"v7"
    assert sst.exists()  # no --move: the input stays
    # --json input with --hex, large values to a companion value-log file, then --move
    sst2 = tmp_path / "ext2.sst"
    lines = json.dumps({"key": "6b3630", "value": "ab" * 200}) + "\n"
    code, out, _ = run("write-sst", sst2, "-", "--input-format", "json", "--hex", "-o", "min_blob_size=100",
                       "--json", stdin=lines)
    assert code == 0 and json.loads(out)["vlog_path"] == f"{sst2}.vlog"
    assert run("ingest", db, sst2, "--move")[0] == 0
    assert not sst2.exists()
    with antkv.open(str(db), read_only=True) as d:
        assert d[b"k60"] == b"\xab" * 200


def test_write_sst_and_ingest_bad_input(run, db, tmp_path):
    sst = tmp_path / "bad.sst"
    assert run("write-sst", sst, "-", stdin="no tab here\n")[0] == 2 and not sst.exists()
    assert run("write-sst", sst, "-", stdin="")[0] == 2 and not sst.exists()
    assert run("write-sst", sst, tmp_path / "missing.tsv")[0] == 2
    code, _, err = run("write-sst", sst, "-", "-o", "block_sise=10", stdin="a\tb\n")
    assert code == 2 and "did you mean 'block_size'" in err and not sst.exists()
    assert run("write-sst", sst, "-", stdin="a\tb\n")[0] == 0
    code, _, err = run("write-sst", sst, "-", stdin="c\td\n")
    assert code == 2 and "never overwrites" in err
    seq = _seq(db)
    code, _, err = run("ingest", db, tmp_path / "nothing.sst")
    assert code == 2 and "no such file" in err
    not_a_table = tmp_path / "notes.sst"
    not_a_table.write_bytes(b"hello" * 100)
    code, _, err = run("ingest", db, not_a_table)
    assert code == 1 and "CorruptionError" in err
    code, _, err = run("ingest", db, sst, sst)
    assert code == 1 and "named twice" in err
    assert run("ingest", db)[0] == 2
    assert _seq(db) == seq  # nothing was ingested


def test_dump_sst_range_bad_input_and_the_block_dump_unchanged(run, db, tmp_path):
    ssts = sorted(p for p in os.listdir(db) if p.endswith(".sst"))
    table = db / ssts[0]
    code, out, _ = run("dump-sst", table)
    assert code == 0 and out.startswith("table ") and "data blocks:" in out
    code, out, _ = run("dump-sst", table, "--from", "k05", "--to", "k07", "--json")
    assert code == 0
    docs = [json.loads(line) for line in out.splitlines()]
    assert [d["key"] for d in docs] == ["k05", "k06"] and docs[0]["kind"] == "PUT_BLOB"
    code, out, _ = run("dump-sst", table, "--from", "k05", "--limit", "1")
    assert code == 0 and len(out.splitlines()) == 1
    assert run("dump-sst", table, "--from", "k9", "--to", "k1")[0] == 2
    damaged = tmp_path / "damaged.sst"
    data = bytearray(table.read_bytes())
    data[len(data) // 3] ^= 0xFF
    damaged.write_bytes(bytes(data))
    code, out, err = run("dump-sst", damaged, "--from", "k00")
    assert code == 1 and out == "" and "CorruptionError" in err


def test_key_versions_api(db):
    with antkv.open(str(db), read_only=True) as d:
        got = list(d.key_versions(b"k03", b"k05"))
        assert [(v.key, v.sequence, v.kind, v.value) for v in got] == [
            (b"k03", 41, "PUT", b"new"), (b"k03", 4, "PUT", b"v3"), (b"k04", 42, "DELETE", b""), (b"k04", 5, "PUT", b"v4")]
        assert got[0].source == "memtable"
        assert [v.kind for v in d.key_versions(b"k10", b"k11")] == ["RANGE_DELETE", "PUT"]
        assert len(list(d.key_versions())) == 44
        with pytest.raises(TypeError):
            d.key_versions("k03")
    with pytest.raises(antkv.DBClosedError):
        d.key_versions()
