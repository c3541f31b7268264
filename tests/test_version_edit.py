"""Data-driven tests of version edits and the version set (:mod:`antkv.manifest`), Pebble style.

``tests/testdata/version_edit.txt`` (format: :mod:`datadriven`).  Tables are written as in
:func:`datadriven.parse_table` (``7:a-c/300@5-9+v3=40``).  An edit is one field per input line::

    log-number 12          next-file 20          last-seq 9
    add L0 7:a-c/300@5-9   delete L0 7
    new-vlog 3             seal-vlog 3 100       garbage 3 40       delete-vlog 3

Commands (each runs on one version set in a :class:`~antkv.fs.memory.MemoryFileSystem`,
created by the first ``apply`` of the file or after ``reset``):

* ``apply [levels=N]`` -- log the edit to the MANIFEST and draw the version set after it;
* ``apply-error`` -- the edit is refused: print the error; the state stays as it was;
* ``recover`` -- open the MANIFEST afresh (``CURRENT``, then every record) and draw what it
  holds: it must be what the last ``apply`` drew;
* ``encode`` -- the edit's bytes in hex, one field a line (the tags are part of the file
  format, so a change here is a format change); decoding them must give the edit back;
* ``reset`` -- forget the version set.

The drawing: the counters, each non-empty level (L0 newest first, then by key) and each
value-log file with its total and garbage bytes.
"""

from __future__ import annotations

import os

import pytest
from datadriven import check_case, keyword_args, parse_cases, parse_table, render_table

from antkv.errors import Error
from antkv.fs.memory import MemoryFileSystem
from antkv.manifest.version_edit import VersionEdit
from antkv.manifest.version_set import VersionSet

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "testdata", "version_edit.txt")
DBNAME = "db"


def parse_edit(lines: list[str]) -> VersionEdit:
    edit = VersionEdit()
    for line in lines:
        words = line.split()
        op, rest = words[0], words[1:]
        if op == "log-number":
            edit.log_number = int(rest[0])
        elif op == "next-file":
            edit.next_file_number = int(rest[0])
        elif op == "last-seq":
            edit.last_sequence = int(rest[0])
        elif op == "add":
            edit.new_tables.append((_level(rest[0]), parse_table(rest[1])))
        elif op == "delete":
            edit.deleted_tables.append((_level(rest[0]), int(rest[1])))
        elif op == "new-vlog":
            edit.new_vlogs.append(int(rest[0]))
        elif op == "seal-vlog":
            edit.sealed_vlogs.append((int(rest[0]), int(rest[1])))
        elif op == "garbage":
            edit.vlog_garbage.append((int(rest[0]), int(rest[1])))
        elif op == "delete-vlog":
            edit.deleted_vlogs.append(int(rest[0]))
        else:
            raise AssertionError(f"unknown edit field {line!r}")
    return edit


def _level(word: str) -> int:
    assert word.startswith("L"), word
    return int(word[1:])


def render_state(vs: VersionSet) -> list[str]:
    out = [f"log {vs.log_number}  next {vs.next_file_number}  last {vs.last_sequence}"]
    for level, files in enumerate(vs.current.levels):
        if files:
            out.append(f"L{level}: " + " ".join(render_table(f, full=True) for f in files))
    for n in sorted(vs.vlogs):
        st = vs.vlogs[n]
        state = f"sealed {st.total}" if st.sealed else "open"
        out.append(f"vlog {n}: {state}, garbage {st.garbage}")
    return out


def render_encoding(edit: VersionEdit) -> list[str]:
    """The edit's bytes, cut where each field starts (each field is encoded on its own)."""
    out = []
    fields = []
    for name in ("log_number", "next_file_number", "last_sequence"):
        if getattr(edit, name) is not None:
            fields.append(VersionEdit(**{name: getattr(edit, name)}))
    for name in ("new_tables", "deleted_tables", "new_vlogs", "sealed_vlogs", "vlog_garbage", "deleted_vlogs"):
        for item in getattr(edit, name):
            fields.append(VersionEdit(**{name: [item]}))
    whole = b""
    for f in fields:
        data = f.encode()
        whole += data
        out.append(data.hex(" "))
    assert whole == edit.encode(), "fields are encoded in the order the drawing assumes"
    assert VersionEdit.decode(whole, "edit", 0) == edit
    return out or ["<empty>"]


class State:
    def __init__(self) -> None:
        self.fs: MemoryFileSystem | None = None
        self.vs: VersionSet | None = None
        self.levels = 7
        self.drawn: list[str] | None = None

    def version_set(self, levels: int | None) -> VersionSet:
        if self.vs is None:
            self.fs = MemoryFileSystem()
            self.fs.mkdirs(DBNAME)
            self.levels = levels or 7
            self.vs = VersionSet(self.fs, DBNAME, self.levels, 1 << 30)
        return self.vs


def run_case(case: dict, st: State) -> list[str]:
    cmd, kw = case["cmd"], keyword_args(case["args"])
    if cmd == "apply":
        vs = st.version_set(int(kw["levels"]) if "levels" in kw else None)
        vs.log_and_apply(parse_edit(case["input"]))
        st.drawn = render_state(vs)
        return st.drawn
    if cmd == "apply-error":
        vs = st.version_set(None)
        before = render_state(vs)
        with pytest.raises(Error) as e:
            vs.log_and_apply(parse_edit(case["input"]))
        assert render_state(vs) == before, "a refused edit changes nothing"
        return [str(e.value).split(":")[0]]
    if cmd == "recover":
        assert not case["input"] and st.vs is not None
        fresh = VersionSet(st.fs, DBNAME, st.levels, 1 << 30)
        fresh.recover()
        drawn = render_state(fresh)
        assert drawn == st.drawn, (drawn, st.drawn)
        fresh.close()
        return drawn
    if cmd == "encode":
        return render_encoding(parse_edit(case["input"]))
    if cmd == "reset":
        if st.vs is not None:
            st.vs.close()
        st.__init__()
        return ["ok"]
    raise AssertionError(f"unknown command {cmd!r}")


CASES = parse_cases(DATA)


def test_data_file_has_cases():
    assert len(CASES) >= 10
    assert {c["cmd"] for c in CASES} >= {"apply", "recover", "encode", "apply-error"}


def test_version_edit_cases():
    st = State()
    for case in CASES:
        check_case(DATA, case, run_case(case, st))
