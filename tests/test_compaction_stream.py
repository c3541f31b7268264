"""Data-driven tests of what survives a compaction (:mod:`antkv.compaction.stream`), Pebble style.

``tests/testdata/compaction_stream.txt`` (format: :mod:`datadriven`).  One entry a line, in
Pebble's notation ``<key>.<KIND>.<seq>[:<value>]``:

* ``a.SET.12:v`` -- a value; ``a.DEL.7`` -- a deletion;
* ``a.PTR.9:3/40`` -- a value in the value log: a pointer to 40 bytes of value-log file 3;
* ``a.RANGEDEL.8:d`` -- the range tombstone ``[a, d)`` at seq 8.

Command ``compact [snapshots=s1,s2,...] [bottommost]``: the entries (in any order) go through
the compaction stream as a compaction's merged inputs do (internal-key order, every input's
range tombstones fragmented together).  Output: the entries kept, in order; the range
tombstones the output table keeps (``output_tombstones``); the garbage counted per value-log
file; how many entries were dropped.
"""

from __future__ import annotations

import os

from datadriven import check_case, keyword_args, parse_cases

from antkv.base.dbformat import DELETION, VALUE, VALUE_POINTER
from antkv.compaction.stream import compaction_stream, output_tombstones
from antkv.memtable.rangedel import fragment
from antkv.vlog.pointer import decode_pointer, encode_pointer

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "testdata", "compaction_stream.txt")
KINDS = {"SET": VALUE, "DEL": DELETION, "PTR": VALUE_POINTER}
NAMES = {v: k for k, v in KINDS.items()}


def parse_entry(line: str):
    """``("point", (key, -seq, kind, value))`` or ``("range", (begin, end, seq))``."""
    head, _, value = line.strip().partition(":")
    key, kind, seq = head.rsplit(".", 2)
    if kind == "RANGEDEL":
        return "range", (key.encode(), value.encode(), int(seq))
    assert kind in KINDS, f"unknown kind in {line!r}"
    if kind == "PTR":
        vnum, size = value.split("/")
        v = encode_pointer(int(vnum), 0, int(size))
    else:
        assert kind == "SET" or not value, f"a deletion has no value: {line!r}"
        v = value.encode()
    return "point", (key.encode(), -int(seq), KINDS[kind], v)


def render_entry(key: bytes, seq: int, kind: int, value: bytes) -> str:
    s = f"{key.decode()}.{NAMES[kind]}.{seq}"
    if kind == VALUE:
        s += ":" + value.decode()
    elif kind == VALUE_POINTER:
        vnum, _off, size = decode_pointer(value)
        s += f":{vnum}/{size}"
    return s


def run_case(case: dict, _state=None) -> list[str]:
    assert case["cmd"] == "compact", f"unknown command {case['cmd']!r}"
    kw = keyword_args(case["args"])
    snapshots = sorted(int(s) for s in kw.get("snapshots", "").split(",") if s)
    bottommost = "bottommost" in kw
    points, ranges = [], []
    for line in case["input"]:
        what, entry = parse_entry(line)
        (points if what == "point" else ranges).append(entry)
    points.sort()  # internal-key order: key ascending, newest (largest seq) first
    garbage: dict[int, int] = {}
    stats: dict = {}
    kept = list(compaction_stream(iter(points), snapshots, fragment(ranges), bottommost, garbage, stats=stats))
    out = [render_entry(*e) for e in kept] or ["<no entries>"]
    tombstones = output_tombstones(ranges, snapshots, bottommost).tombstones()
    out.append("tombstones: " + (" ".join(f"[{b.decode()},{e.decode()})@{s}" for b, e, s in tombstones) or "-"))
    out.append("garbage: " + (" ".join(f"vlog {n}={g}" for n, g in sorted(garbage.items())) or "-"))
    out.append(f"dropped: {stats.get('entries_dropped', 0)}")
    return out


CASES = parse_cases(DATA)


def test_data_file_has_cases():
    assert len(CASES) >= 10


def test_compaction_stream_cases():
    for case in CASES:
        check_case(DATA, case, run_case(case))
