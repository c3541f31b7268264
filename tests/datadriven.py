"""The reader of Pebble-style data-driven test files (``tests/testdata/*.txt``).

A file is a list of cases.  Each case is a command line (a command and its arguments), input
lines, a line ``----`` and the expected output, ended by a blank line; ``#`` starts a comment
line between cases.  Every test file that reads one says what its commands mean and how it
draws its output.
"""

from __future__ import annotations

import re

from antkv.manifest.version_edit import FileMetaData


def parse_cases(path: str) -> list[dict]:
    """``[{line, cmd, args, input, expected}]`` from the data file."""
    cases = []
    with open(path, encoding="utf-8") as fh:
        lines = fh.read().split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip() or line.startswith("#"):
            i += 1
            continue
        start = i + 1
        words = line.split()
        cmd, args = words[0], words[1:]
        i += 1
        inp = []
        while lines[i] != "----":
            assert lines[i].strip(), f"line {i + 1}: blank line before ----"
            inp.append(lines[i])
            i += 1
        i += 1
        exp = []
        while i < len(lines) and lines[i].strip():
            exp.append(lines[i].rstrip())
            i += 1
        assert exp, f"line {start}: no expected output"
        cases.append({"line": start, "cmd": cmd, "args": args, "input": inp, "expected": exp})
    return cases


def check_case(path: str, case: dict, got: list[str]) -> None:
    """Fail with the file position, the command, what came out and what the file wants."""
    assert got == case["expected"], "\n".join(
        [f"{path}:{case['line']}: {case['cmd']} {' '.join(case['args'])}", "got:"] + got + ["want:"] + case["expected"]
    )


def keyword_args(args: list[str]) -> dict[str, str]:
    """``name=value`` arguments (a bare ``name`` means ``name=``)."""
    out = {}
    for a in args:
        name, _, value = a.partition("=")
        out[name] = value
    return out


# --- tables: the notation the picker and version-edit files share ----------------------------
#
#   7:a-c                 table 7 holding keys a..c (size 100, seqs 0-0)
#   7:a-c/300@5-9         ... of 300 bytes holding seqs 5..9
#   7:a-c/300@5-9+v3=40   ... pointing at 40 bytes of value-log file 3 (repeatable)
#   7:a-c)                ... whose largest key c is exclusive (a range tombstone's end)

_TABLE = re.compile(r"^(\d+):([^-/@+)]+)-([^-/@+)]+)(\))?(?:/(\d+))?(?:@(\d+)-(\d+))?((?:\+v\d+=\d+)*)$")


def parse_table(token: str) -> FileMetaData:
    """The table a token describes."""
    m = _TABLE.match(token)
    assert m, f"bad table token {token!r} (e.g. 7:a-c/300@5-9+v3=40)"
    refs = {}
    for ref in m.group(8).split("+")[1:]:
        vnum, nbytes = ref[1:].split("=")
        refs[int(vnum)] = int(nbytes)
    return FileMetaData(
        number=int(m.group(1)),
        size=int(m.group(5) or 100),
        smallest=m.group(2).encode(),
        largest=m.group(3).encode(),
        largest_exclusive=m.group(4) is not None,
        smallest_seq=int(m.group(6) or 0),
        largest_seq=int(m.group(7) or 0),
        blob_refs=refs,
    )


def render_table(f: FileMetaData, full: bool = False) -> str:
    """The token of table ``f`` (``full``: with size, seqs and value-log references)."""
    s = f"{f.number}:{f.smallest.decode()}-{f.largest.decode()}" + (")" if f.largest_exclusive else "")
    if full:
        s += f"/{f.size}@{f.smallest_seq}-{f.largest_seq}"
        s += "".join(f"+v{v}={n}" for v, n in sorted(f.blob_refs.items()))
    return s
