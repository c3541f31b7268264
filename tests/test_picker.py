"""Data-driven tests of the compaction picker (:mod:`antkv.compaction.picker`), Pebble style.

``tests/testdata/compaction_picker.txt`` (format: :mod:`datadriven`).  Tables are written as in
:func:`datadriven.parse_table` (``7:a-c/300@5-9+v3=40``).

Commands:

* ``define [levels=N] [base=B] [mult=M] [l0-trigger=T] [gc-threshold=G] [active-vlog=V]`` --
  a version built through a real version set from input lines ``L<n>: <table> <table> ...``
  and ``vlog <n> total=<bytes> garbage=<bytes> [sealed]``; it draws every level with its
  score (levels but the last) and forgets the round-robin cursors;
* ``pick [run]`` -- the picker's choice: ``<reason> L<from> -> L<to>: <inputs of from> +
  <inputs of to>``, the value-log files it collects, and the cursor it would leave.  ``run``
  plays the caller that runs the compaction: it stores that cursor (the version itself is not
  changed, so the level stays over its target);
* ``manual level=<n> [lo=<key>] [hi=<key>] [deletions=<table>,...]`` -- the compaction
  ``compact_range`` runs at that level; ``deletions`` lists the tables holding deletions.

Every pick is made twice, and must come out the same and leave the version, the value-log
states and the cursors as they were: the picker is a pure function of its inputs.
"""

from __future__ import annotations

import copy
import os

from datadriven import check_case, keyword_args, parse_cases, parse_table, render_table

import antkv
from antkv.compaction.picker import level_scores, manual_compactions, pick_compaction
from antkv.fs.memory import MemoryFileSystem
from antkv.manifest.version_edit import VersionEdit
from antkv.manifest.version_set import VersionSet, VlogFileState

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "testdata", "compaction_picker.txt")


class State:
    def __init__(self) -> None:
        self.version = None
        self.opts = None
        self.vlogs: dict[int, VlogFileState] = {}
        self.active_vlog: int | None = None
        self.cursors: dict[int, bytes] = {}


def define(case: dict, st: State) -> list[str]:
    kw = keyword_args(case["args"])
    levels = int(kw.get("levels", 4))
    st.opts = antkv.Options(
        num_levels=levels,
        max_bytes_for_level_base=int(kw.get("base", 1000)),
        max_bytes_for_level_multiplier=float(kw.get("mult", 10)),
        level0_file_num_compaction_trigger=int(kw.get("l0-trigger", 4)),
        blob_gc_threshold=float(kw.get("gc-threshold", 0.5)),
    )
    st.active_vlog = int(kw["active-vlog"]) if "active-vlog" in kw else None
    fs = MemoryFileSystem()
    fs.mkdirs("db")
    vs = VersionSet(fs, "db", levels, 1 << 30)
    edit = VersionEdit()
    for line in case["input"]:
        head, _, rest = line.partition(" ")
        if head == "vlog":
            words = rest.split()
            n = int(words[0])
            vk = keyword_args(words[1:])
            edit.new_vlogs.append(n)
            if "sealed" in vk:
                edit.sealed_vlogs.append((n, int(vk["total"])))
            if int(vk.get("garbage", 0)):
                edit.vlog_garbage.append((n, int(vk["garbage"])))
        else:
            assert head.startswith("L") and head.endswith(":"), f"bad line {line!r}"
            for token in rest.split():
                edit.new_tables.append((int(head[1:-1]), parse_table(token)))
    vs.log_and_apply(edit)  # the real ordering of every level
    st.version = vs.current
    st.vlogs = vs.vlogs
    st.cursors = {}
    vs.close()
    scores = {level: score for score, level in level_scores(st.opts, st.version)}
    out = []
    for level, files in enumerate(st.version.levels):
        score = f" (score {scores[level]:.2f})" if level in scores else ""
        out.append(f"L{level}{score}: " + (" ".join(render_table(f) for f in files) or "-"))
    return out


def render_compaction(c) -> list[str]:
    if c is None:
        return ["none"]
    ins = {}
    for level, f in c.inputs:
        ins.setdefault(level, []).append(render_table(f))
    line = f"{c.reason} L{c.level} -> L{c.output_level}: " + " ".join(ins.get(c.level, []))
    if c.output_level != c.level:
        line += " + " + (" ".join(ins.get(c.output_level, [])) or "-")
    out = [line]
    if c.gc_files:
        out.append("collects vlog " + ",".join(str(n) for n in sorted(c.gc_files)))
    if c.cursor is not None:
        out.append(f"cursor L{c.level} after {c.cursor[:-1].decode()}" if c.cursor.endswith(b"\0") else repr(c.cursor))
    return out


def _pure(st: State, pick):
    """Run ``pick`` twice: same answer, inputs untouched."""
    before = (copy.deepcopy(st.version.levels), copy.deepcopy(st.vlogs), dict(st.cursors))
    first, second = pick(), pick()
    assert render_compaction(first) == render_compaction(second), "the picker answered differently when asked twice"
    assert (st.version.levels, st.vlogs, st.cursors) == before, "the picker changed its inputs"
    return first


def run_case(case: dict, st: State) -> list[str]:
    cmd, kw = case["cmd"], keyword_args(case["args"])
    if cmd == "define":
        return define(case, st)
    assert not case["input"], f"{cmd} takes no input lines"
    if cmd == "pick":
        c = _pure(st, lambda: pick_compaction(st.version, st.opts, st.vlogs, st.active_vlog, st.cursors))
        if "run" in kw and c is not None and c.cursor is not None:
            st.cursors[c.level] = c.cursor
        return render_compaction(c)
    if cmd == "manual":
        marked = {int(n) for n in kw.get("deletions", "").split(",") if n}
        lo = kw["lo"].encode() if kw.get("lo") else None
        hi = kw["hi"].encode() if kw.get("hi") else None
        c = _pure(st, lambda: manual_compactions(st.version, lo, hi, int(kw["level"]), lambda f: f.number in marked))
        return render_compaction(c)
    raise AssertionError(f"unknown command {cmd!r}")


CASES = parse_cases(DATA)


def test_data_file_has_cases():
    assert len(CASES) >= 10
    assert {c["cmd"] for c in CASES} == {"define", "pick", "manual"}


def test_picker_cases():
    st = State()
    for case in CASES:
        check_case(DATA, case, run_case(case, st))
