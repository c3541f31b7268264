"""The operator's commands of ``antkv`` (docs/operations.md): delete, delete-range, load, dump,
get-property, list-files, gc, repair, values from a file or stdin, ``--json`` on every command,
read-only reads beside a live writer, the exit-code scheme, and short sessions that leave no
work behind.  Every command is also given bad input."""

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
    def run(*argv, stdin: bytes | str | None = None):
        if stdin is not None:
            stdin = stdin.encode() if isinstance(stdin, str) else stdin
            monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8", newline=""))
        code = main([os.fspath(a) for a in argv])
        cap = capsysbinary.readouterr()
        return code, cap.out, cap.err.decode("utf-8", "replace")

    return run


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "db"
    with antkv.open(str(path), **OPTS) as d:
        for i in range(50):
            d.put(b"k%02d" % i, b"v%d" % i)
        d.put(b"big", b"B" * 300)
    return path


def _items(path) -> dict:
    with antkv.open(str(path), read_only=True) as d:
        return dict(d.items())


def test_delete_and_delete_range(run, db):
    assert run("delete", db, "k01")[0] == 0
    assert run("delete-range", db, "k10", "k20")[0] == 0
    items = _items(db)
    assert b"k01" not in items and not any(b"k10" <= k < b"k20" for k in items) and b"k20" in items
    assert run("delete", "--hex", db, "zz")[0] == 2  # bad hex
    assert run("delete-range", db, "b", "a")[0] == 2  # begin > end
    assert run("delete-range", db, "a")[0] == 2  # END missing
    assert run("delete", db / "nothing", "k")[0] == 1 and not (db / "nothing").exists()


def test_put_value_from_a_file_or_stdin_exactly(run, db, tmp_path):
    blob = bytes(range(256)) * 1024  # 256 KiB, past what argv carries comfortably
    f = tmp_path / "value.bin"
    f.write_bytes(blob)
    assert run("put", db, "file", "--value-file", f)[0] == 0
    assert run("put", db, "stdin", "--value-file", "-", stdin=b"line\r\n\x00")[0] == 0
    items = _items(db)
    assert items[b"file"] == blob and items[b"stdin"] == b"line\r\n\x00"
    assert run("put", db, "k", "v", "--value-file", f)[0] == 2  # both
    assert run("put", db, "k")[0] == 2  # neither
    assert run("put", db, "k", "--value-file", tmp_path / "missing")[0] == 2


def test_dump_load_round_trip_in_both_formats(run, db, tmp_path):
    want = _items(db)
    for fmt, flag in (("tsv", "--escape"), ("json", "--hex")):
        out_file = tmp_path / f"dump.{fmt}"
        code, out, _ = run("dump", db, out_file, "--output-format", fmt, flag)
        assert code == 0 and b"dumped" in out
        assert run("dump", db, out_file)[0] == 2  # never overwrites
        target = tmp_path / f"copy-{fmt}"
        code, out, _ = run("load", target, out_file, "--input-format", fmt, flag, "--create-if-missing", "--json")
        assert code == 0 and json.loads(out) == {"loaded": len(want)}
        assert _items(target) == want
    code, out, _ = run("dump", db)  # to stdout
    assert code == 0 and out.count(b"\n") == len(want)
    code, _, _ = run("load", tmp_path / "copy-stdin", "--create-if-missing", stdin=out.decode())
    assert code == 0 and _items(tmp_path / "copy-stdin") == want


def test_load_bad_input_writes_nothing(run, db):
    before = _items(db)
    bad = [
        ("tsv", "a\tb\nno tab here\n"),
        ("tsv", "a\tb\tc\n"),
        ("tsv", "bad\\q\tv\n"),
        ("json", '{"key": "a", "value": "b"}\n[1]\n'),
        ("json", "not json\n"),
        ("json", '{"key": "a"}\n'),
    ]
    for fmt, text in bad:
        code, out, err = run("load", db, "--input-format", fmt, stdin=text)
        assert code == 2 and "line" in err and "Traceback" not in err, (fmt, text, err)
        assert _items(db) == before
    assert run("load", db, db / "no-such-file")[0] == 2
    assert run("load", db.parent / "nothing", stdin="a\tb\n")[0] == 1  # no database, not created
    assert not (db.parent / "nothing").exists()


def test_every_command_speaks_json(run, db, tmp_path):
    docs = {}
    for argv in (
        ["get", db, "k01"], ["put", db, "x", "y"], ["delete", db, "x"], ["delete-range", db, "a", "b"],
        ["stats", db], ["get-property", db, "antkv.num-files-at-level0"], ["list-files", db], ["verify", db],
        ["checkpoint", db, tmp_path / "cp"], ["compact", db], ["gc", db], ["repair", db],
        ["dump-manifest", db],
    ):
        code, out, err = run(argv[0], "--json", *argv[1:])
        assert code == 0, (argv, err)
        docs[argv[0]] = json.loads(out)
    assert docs["get"]["value"] == "v1" and docs["verify"]["tables"] >= 1
    assert docs["list-files"]["tables"] and docs["list-files"]["vlog_files"]
    assert docs["repair"]["moved_to_lost"] == [] and docs["repair"]["keys_lost"] == []
    code, out, _ = run("scan", "--json", db, "--limit", "2")
    assert [json.loads(line)["key"] for line in out.splitlines()] == ["big", "k00"]
    code, out, _ = run("get", "--json", db / "missing", "k")  # an error is JSON too
    assert code == 1 and json.loads(out)["error"] == "InvalidArgumentError"


def test_get_property_and_list_files(run, db):
    code, out, _ = run("get-property", db, "antkv.stats")
    assert code == 0 and b"antkv stats" in out
    assert run("get-property", db, "no.such.property")[0] == 3
    assert run("get-property", db)[0] == 2
    code, out, _ = run("list-files", db)
    assert code == 0 and b".sst" in out and b".vlog" in out
    assert run("list-files", db.parent / "missing")[0] == 1


def test_verify_exit_4_on_a_torn_wal_and_deletes_nothing(run, db):
    with antkv.open(str(db), **OPTS) as d:
        d.put(b"tail", b"t")
    wal = [n for n in os.listdir(db) if n.endswith(".log") and os.path.getsize(db / n)][0]
    size = os.path.getsize(db / wal)
    with open(db / wal, "r+b") as f:
        f.truncate(size - 3)
    code, out, _ = run("verify", db)
    assert code == 4 and out.startswith(b"DAMAGED") and b"torn tail" in out
    assert os.path.getsize(db / wal) == size - 3  # the evidence is still there


def test_gc_and_repair_bad_input(run, db, tmp_path):
    assert run("gc", tmp_path / "missing")[0] == 1
    assert run("repair", tmp_path / "missing")[0] == 1
    assert run("repair", db, "-o", "nonsense=1")[0] == 2
    os.remove(db / "CURRENT")
    code, _, err = run("get", db, "k01")
    assert code == 1 and "no CURRENT" in err and "repair" in err
    code, out, _ = run("repair", db)
    assert code == 0 and b"repaired" in out
    assert _items(db)[b"k01"] == b"v1"


def test_a_short_cli_session_leaves_no_work_behind(run, tmp_path):
    path = tmp_path / "db"
    for i in range(45):
        assert run("put", path, f"k{i}", "v", "--create-if-missing")[0] == 0
    code, out, _ = run("get-property", path, "antkv.num-files-at-level0")
    assert code == 0 and int(out) < antkv.Options().level0_file_num_compaction_trigger
    assert len(_items(path)) == 45


def _on_a_terminal(*argv) -> tuple[int, bytes, bytes]:
    """Run ``python -m antkv ARGV`` with standard error on a pseudo-terminal: (exit, stdout, what
    the terminal showed)."""
    import fcntl
    import struct
    import subprocess
    import termios

    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))  # a new pty is 0x0
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(antkv.__file__))))
    r = subprocess.run([sys.executable, "-m", "antkv", *map(str, argv)],
                       stdout=subprocess.PIPE, stderr=slave, env=env, timeout=120)
    os.close(slave)
    drawn = b""
    try:
        while chunk := os.read(master, 65536):
            drawn += chunk
    except OSError:  # the terminal closed
        pass
    os.close(master)
    return r.returncode, r.stdout, drawn


def test_progress_bar_only_on_a_terminal(run, tmp_path):
    src = tmp_path / "pairs.tsv"
    src.write_text("".join(f"k{i}\tv{i}\n" for i in range(3000)))
    code, out, err = run("load", tmp_path / "piped", src, "--create-if-missing")
    assert code == 0 and err == ""  # piped: quiet
    code, out, drawn = _on_a_terminal("load", tmp_path / "tty", src, "--create-if-missing")
    assert code == 0 and b"loaded 3000 pairs" in out
    assert b"load" in drawn and b"keys" in drawn  # the bar, on the terminal only


@pytest.mark.parametrize("command, extra, unit", [
    ("verify", (), b"files"), ("compact", (), b"levels"), ("gc", (), b"files"), ("checkpoint", ("cp",), b"files"),
])
def test_maintenance_commands_draw_a_bar_on_a_terminal_only(run, tmp_path, command, extra, unit):
    path = tmp_path / "db"
    with antkv.open(str(path), **OPTS, blob_gc_threshold=0.25) as d:
        for round_ in range(3):
            for i in range(200):
                d.put(b"k%03d" % i, os.urandom(120))
            d.flush()
    code, out, drawn = _on_a_terminal(command, path, *[tmp_path / e for e in extra])  # first: gc has work
    assert code == 0 and out
    assert command.encode() in drawn and unit in drawn and b"100%" in drawn, drawn
    code, out, err = run(command, path, *[tmp_path / f"{e}-piped" for e in extra])
    assert code == 0 and err == "" and out  # piped: the result line, no bar
    code, out, drawn = _on_a_terminal(command, path, *[tmp_path / f"{e}-quiet" for e in extra], "--no-progress")
    assert code == 0 and drawn == b""


def test_verify_exit_4_on_a_torn_tail_of_the_active_value_log_file(run, db):
    """The active value-log file ends in half a record (a crash while appending): verify says
    DAMAGED and exits 4, as for a torn WAL, and changes nothing."""
    vlog = max(n for n in os.listdir(db) if n.endswith(".vlog"))
    with open(db / vlog, "ab") as f:
        f.write(b"\x07\x00\x00\x00\x09")  # the start of a record header
    before = (db / vlog).read_bytes()
    code, out, err = run("verify", "--no-progress", db)
    assert code == 4 and out.startswith(b"DAMAGED") and b"torn tail" in out, (out, err)
    assert (db / vlog).read_bytes() == before
