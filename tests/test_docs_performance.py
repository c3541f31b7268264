"""``docs/performance.md`` holds the current results only, each reproducible.

Every results table sits under a ``**Run**`` line (the nearest one above it in its section) that
names the date of the run, the machine, and the command that reproduces it (in backticks); the
page stays short enough to read (:data:`MAX_LINES`).  Tables that describe the method rather than
results (the engines) are listed in :data:`METHOD_TABLES`.
"""

from __future__ import annotations

import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = os.path.join(ROOT, "docs", "performance.md")
MAX_LINES = 300
METHOD_TABLES = {"| name | what | notes |"}
RUN = re.compile(r"^\*\*Run\*\* (?P<date>\d{4}-\d\d-\d\d), (?P<machine>[^:`]*\bcores?\b[^`]*?)[:,].*`(?P<command>[^`]*(python|make)[^`]*)`")


def problems(text: str) -> list[str]:
    """What keeps ``text`` (a performance page) from being current and reproducible."""
    out = []
    lines = text.splitlines()
    if len(lines) > MAX_LINES:
        out.append(f"{len(lines)} lines, more than {MAX_LINES}")
    run_line = None
    in_table = False
    for number, line in enumerate(lines, 1):
        if line.startswith("## "):
            run_line = None
        elif line.startswith("**Run**"):
            if not RUN.match(line):
                out.append(f"line {number}: a **Run** line needs the date, the machine (cores) and the command in backticks")
            run_line = number
        is_row = line.startswith("|")
        if is_row and not in_table and line not in METHOD_TABLES and run_line is None:
            out.append(f"line {number}: a results table with no **Run** line above it in its section")
        in_table = is_row
    return out


def test_every_table_says_how_when_and_where_it_ran():
    assert problems(open(PAGE, encoding="utf-8").read()) == []


def test_the_check_finds_a_table_without_its_run_line():
    page = open(PAGE, encoding="utf-8").read()
    assert problems(page + "\n## New figures\n\n| a | b |\n|---|---|\n| 1 | 2 |\n")
    assert problems(page + "\n## New figures\n\n**Run** yesterday: `python -m bench`\n\n| a | b |\n|---|---|\n")
    assert problems(page + "\n" * (MAX_LINES + 1))
    good = "\n## New figures\n\n**Run** 2026-11-26, 2 cores: `python -m bench --quick`\n\n| a | b |\n|---|---|\n"
    assert problems(page + good) == problems(page)
