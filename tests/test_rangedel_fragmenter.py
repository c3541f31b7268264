"""Data-driven tests of the range-tombstone fragmenter (:mod:`antkv.memtable.rangedel`), Pebble style.

``tests/testdata/rangedel_fragmenter.txt`` holds cases; each is a command line, input lines,
``----`` and the expected output, ended by a blank line.  Keys are single lowercase letters
drawn on a grid: key ``a`` in column 0, ``b`` in column 2, ``c`` in column 4 ... after the
``seq: `` prefix, so a line is a picture of a span::

    build
    5: a-------e          the tombstone [a, e)@5
    9:     c-------g      the tombstone [c, g)@9
    ----
    9:     c---e---g      fragments [c,e) and [e,g) both carry 9
    5: a---c---e          fragments [a,c) and [c,e) both carry 5

An input span may also be written ``seq: [b,e)`` (needed for reversed ranges, which the
fragmenter ignores, and for keys that are not single letters), and ``seq: c`` alone is the
empty range [c, c).  Output has one row per sequence number, newest first; every fragment
holding that number is drawn with a letter at each end, so a letter inside a row is a cut
between two fragments.  ``<empty>`` is the picture of no fragments.

Commands:

* ``build [snapshots=s1,s2,...]`` -- fragment the input (with snapshot stripes) and draw it;
* ``visible <read_seq>`` -- draw the last build as a reader at ``read_seq`` sees it;
* ``truncate <lower|-> <upper|->`` -- draw the last build clipped to ``[lower, upper)``;
* ``get <key> <read_seq>`` -- the newest covering seq visible at ``read_seq`` (0 = none).

Every fragmented result goes through ``_check()`` (sorted, non-overlapping, seqs descending,
touching neighbours never equal).  A seeded brute-force comparison backs the file up.
"""

from __future__ import annotations

import os
import random
import re

import pytest

from antkv.memtable.rangedel import EMPTY, FragmentedRangeTombstones, fragment, truncate
from datadriven import check_case, parse_cases

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "testdata", "rangedel_fragmenter.txt")
_LINE = re.compile(r"^\s*(\d+):(.*)$")


def _col(key: bytes) -> int:
    assert len(key) == 1 and b"a" <= key <= b"z", f"only single letters can be drawn, got {key!r}"
    return 2 * (key[0] - ord("a"))


def parse_span(line: str) -> tuple[bytes, bytes, int]:
    """``(begin, end, seq)`` of one input line (a picture, ``[b,e)`` or a single letter)."""
    m = _LINE.match(line)
    assert m, f"bad input line: {line!r}"
    seq = int(m.group(1))
    body = m.group(2)
    text = re.fullmatch(r"\s*\[([^,\]]*),([^)]*)\)\s*", body)
    if text:
        return text.group(1).encode(), text.group(2).encode(), seq
    pic = body[1:] if body.startswith(" ") else body
    letters = [(i, ch) for i, ch in enumerate(pic) if ch.isalpha()]
    assert 1 <= len(letters) <= 2, f"a span needs one or two letters: {line!r}"
    for i, ch in letters:
        assert i == _col(ch.encode()), f"letter {ch!r} drawn at column {i}, belongs at {_col(ch.encode())}: {line!r}"
    (i0, b), (i1, e) = letters[0], letters[-1]
    inner = pic[i0 + 1 : i1]
    assert set(inner) <= {"-"}, f"a span is drawn with dashes only: {line!r}"
    assert not pic[:i0].strip() and not pic[i1 + 1 :].strip(), f"stray characters: {line!r}"
    return b.encode(), e.encode(), seq


def render(frags: FragmentedRangeTombstones) -> list[str]:
    """One row per sequence number (newest first) drawing every fragment that holds it."""
    frags._check()
    if not frags:
        return ["<empty>"]
    all_seqs = sorted({s for ss in frags.seqs for s in ss}, reverse=True)
    width = max(len(str(s)) for s in all_seqs)
    rows = []
    for s in all_seqs:
        row: list[str] = []
        for b, e, ss in zip(frags.starts, frags.ends, frags.seqs):
            if s not in ss:
                continue
            cb, ce = _col(b), _col(e)
            if len(row) < ce + 1:
                row.extend(" " * (ce + 1 - len(row)))
            row[cb] = b.decode()
            for i in range(cb + 1, ce):
                row[i] = "-"
            row[ce] = e.decode()
        rows.append(f"{s:>{width}}: " + "".join(row).rstrip())
    return rows


def run_case(case: dict, state: dict) -> list[str]:
    cmd, args = case["cmd"], case["args"]
    if cmd == "build":
        snapshots = None
        for a in args:
            name, _, val = a.partition("=")
            assert name == "snapshots", a
            snapshots = sorted(int(x) for x in val.split(",")) if val else []
        ts = [parse_span(x) for x in case["input"]]
        frags = fragment(ts, snapshots)
        frags._check()
        _check_against_brute_force(ts, snapshots, frags)
        state["last"] = frags
        return render(frags)
    assert not case["input"], f"{cmd} takes no input lines"
    last = state["last"]
    if cmd == "visible":
        v = last.visible(int(args[0]))
        v._check()
        return render(v)
    if cmd == "truncate":
        lo = None if args[0] == "-" else args[0].encode()
        hi = None if args[1] == "-" else args[1].encode()
        pieces = truncate(last, lo, hi)
        for b, e, _ in pieces:
            assert (lo is None or b >= lo) and (hi is None or e <= hi) and b < e
        return render(fragment(pieces))
    if cmd == "get":
        return [str(last.max_covering_seq(args[0].encode(), int(args[1])))]
    raise AssertionError(f"unknown command {cmd!r}")


CASES = parse_cases(DATA)


def _groups(cases: list[dict]) -> list[list[dict]]:
    """Each ``build`` with the commands after it that read its result."""
    groups: list[list[dict]] = []
    for c in cases:
        if c["cmd"] == "build":
            groups.append([c])
        else:
            assert groups, f"line {c['line']}: {c['cmd']} before any build"
            groups[-1].append(c)
    return groups


GROUPS = _groups(CASES)


def test_data_file_has_cases():
    assert len(GROUPS) >= 15
    assert {c["cmd"] for c in CASES} == {"build", "visible", "truncate", "get"}


@pytest.mark.parametrize("group", GROUPS, ids=[f"line{g[0]['line']}" for g in GROUPS])
def test_fragmenter_case(group):
    state: dict = {}
    for case in group:
        check_case(DATA, case, run_case(case, state))


def test_picture_parser_rejects_misdrawn_spans():
    with pytest.raises(AssertionError):
        parse_span("5: a---d")  # d belongs in column 6
    with pytest.raises(AssertionError):
        parse_span("5: a-x-c")
    assert parse_span("5: a---c") == (b"a", b"c", 5)
    assert parse_span("7: [e,c)") == (b"e", b"c", 7)
    assert parse_span("3:     c") == (b"c", b"c", 3)


# --- brute force ---------------------------------------------------------------------------


def _stripe(s: int, snapshots) -> int:
    return sum(1 for x in snapshots if x < s)


def _expected_cover(ts, snapshots, key: bytes) -> tuple[int, ...]:
    cover = sorted({s for b, e, s in ts if b <= key < e}, reverse=True)
    if snapshots is None:
        return tuple(cover)
    kept, seen = [], set()
    for s in cover:
        st = _stripe(s, snapshots)
        if st not in seen:
            seen.add(st)
            kept.append(s)
    return tuple(kept)


def _check_against_brute_force(ts, snapshots, frags: FragmentedRangeTombstones) -> None:
    """Every probe key gets exactly the seqs that cover it (newest per stripe)."""
    points = {b for b, _, _ in ts} | {e for _, e, _ in ts}
    probes = set(points)
    for p in points:
        probes.add(p + b"\x00")
        if p:
            probes.add(p[:-1])
    probes.add(b"")
    for key in probes:
        i = frags.fragment_index(key)
        got = frags.seqs[i] if i >= 0 else ()
        assert got == _expected_cover(ts, snapshots, key), (key, got)
    # no fragment beyond what the input covers, and cuts only at input boundaries
    for b, e in zip(frags.starts, frags.ends):
        assert b in points and e in points


def test_random_inputs_match_brute_force():
    rng = random.Random(5)
    alphabet = [b"", b"a", b"aa", b"ab", b"b", b"c", b"cc", b"d", b"e", b"\xff"]
    for _ in range(2000):
        ts = [(rng.choice(alphabet), rng.choice(alphabet), rng.randint(1, 12)) for _ in range(rng.randint(0, 7))]
        snapshots = None if rng.random() < 0.5 else sorted(rng.sample(range(1, 13), rng.randint(0, 3)))
        frags = fragment(ts, snapshots)
        frags._check()
        _check_against_brute_force([t for t in ts if t[0] < t[1]], snapshots, frags)
        read_seq = rng.randint(0, 13)
        v = frags.visible(read_seq)
        v._check()
        for key in alphabet:
            want = max((s for b, e, s in ts if b <= key < e and s <= read_seq), default=0)
            if snapshots is None:
                assert frags.max_covering_seq(key, read_seq) == want
                assert v.max_covering_seq(key, read_seq) == want
        lo, hi = sorted((rng.choice(alphabet), rng.choice(alphabet)))
        clipped = fragment(truncate(frags, lo, hi), snapshots)
        for key in alphabet:
            i = clipped.fragment_index(key)
            got = clipped.seqs[i] if i >= 0 else ()
            j = frags.fragment_index(key)
            whole = frags.seqs[j] if j >= 0 else ()
            assert got == (whole if lo <= key < hi else ()), (key, lo, hi)


def test_empty_input_is_the_shared_empty_view():
    assert fragment([]) is EMPTY
    assert fragment([(b"c", b"c", 4), (b"e", b"c", 7)]) is EMPTY
    assert EMPTY.max_covering_seq(b"a", 100) == 0 and len(EMPTY) == 0
