"""The docs describe the product as it is, not how it was made.

``README.md`` and every page under ``docs/`` must not name the project's work items, branches or
commits, nor carry dated lab entries: a reader wants the current answer, and history lives in the
commit messages.  :data:`BANNED` lists what is refused, each pattern with the reason it gives;
:func:`offences` is what the test and its own checks use.

Dates are allowed on one kind of line only: the line that states when a benchmark table ran,
which starts with ``**Run**`` (``docs/performance.md`` gives every table one, with the command
and the machine; ``tests/test_docs_performance.py`` checks that).
"""

from __future__ import annotations

import glob
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN_LINE = "**Run**"

# (pattern, why it is refused); matched case-insensitively against each line of prose and code
BANNED: list[tuple[str, str]] = [
    (r"\b(issues?|tickets?|pr|pull requests?|work items?)\s*#?\d+", "names a work item"),
    (r"\(#\d+\)", "names a work item by number"),
    (r"\bstops?\s+\d+\b", "names a work item (a stop)"),
    (r"\b(this|that|previous|next|last|earlier|later|another|other|work|coding|lab)\s+sessions?\b(?![-\s]+(window|processor|time zone|scoped|fixture))",
     "speaks of a work session"),
    (r"\bsessions?['’]s?\s+(work|branch|notes?|commit)", "speaks of a work session"),
    (r"\b(this|that|my|our|feature|topic|git|main|merged?|other|both)\s+branch(es)?\b", "names a branch"),
    (r"\bbranch(es)?\s+(point|above|below|name|was|were|merged)\b", "names a branch"),
    (r"\bbranch\s+`", "names a branch"),
    (r"\bbranch(ed)?\s+(off|from)\b", "names a branch"),
    (r"\bgit\s+(archive|checkout|log|show|diff|revert|merge|rebase|cherry-pick)\b", "points at the repository's history"),
    (r"\bcommits?\s+[0-9a-f]{7,40}\b", "names a commit"),
    (r"\btried and (dropped|not kept)\b", "is a lab note (tried and dropped)"),
    (r"\b(changes|results|notes|runs?) of \d{4}-\d\d-\d\d\b", "is a dated lab entry"),
    (r"(?<![-\w])runs? \d+(-\d+)?\b", "numbers lab runs"),
    (r"\b(before|after) (this|the last) change\b", "is a before/after lab note"),
]
DATE = re.compile(r"\b(19|20)\d\d-[01]\d-[0-3]\d\b")
# a commit hash outside code: 7 to 40 hex digits with at least one letter and one digit
HASH = re.compile(r"(?<![0-9A-Za-z_x])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}(?![0-9A-Za-z_])")
COMPILED = [(re.compile(p, re.I), why) for p, why in BANNED]


def pages() -> list[str]:
    return [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True))


def offences(text: str) -> list[tuple[int, str, str]]:
    """``(line number, matched text, reason)`` of every banned phrase of ``text``."""
    out = []
    in_code = False
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            in_code = not in_code
            continue
        for pattern, why in COMPILED:
            for m in pattern.finditer(line):
                out.append((number, m.group(0), why))
        if not line.startswith(RUN_LINE):
            for m in DATE.finditer(line):
                out.append((number, m.group(0), f"is a date outside a {RUN_LINE} line"))
        if not in_code:
            prose = re.sub(r'fromhex\("[^"]*"\)', "", line)
            for m in HASH.finditer(prose):
                out.append((number, m.group(0), "looks like a commit hash"))
    return out


def test_no_page_names_work_items_branches_commits_or_lab_dates():
    found = []
    for path in pages():
        rel = os.path.relpath(path, ROOT)
        for number, what, why in offences(open(path, encoding="utf-8").read()):
            found.append(f"{rel}:{number}: {what!r} {why}")
    assert not found, "\n".join(found)


def test_the_patterns_catch_what_they_ban():
    """Each kind of lab note seen in earlier docs is caught; ordinary product text passes."""
    banned = [
        "Issue 4 at 1,000,000 keys",
        "what issue 6 asks",
        "fixed (#123)",
        "found in an earlier session",
        "the notes of stop 3",
        "as this session showed",
        "measured on this branch",
        "**Before** (the branch point, 5f2d30f)",
        "(2026-11-21, branch `read-speed`)",
        "`/tmp/old` holds commit 2debb77",
        "Tried and dropped: a dict update",
        "**Changes of 2026-11-24:**",
        "in runs 8-11",
        "run 1, before the last change",
        "main at c3fb181's worker-process flush",
        "**Results, 2026-11-24** (100,000 keys)",
    ]
    for text in banned:
        assert offences(text), text
    allowed = [
        "**Run** 2026-11-24, 2 cores: `python -m bench.bench_small --num 300000 --rounds 3`",
        "the session window processor; a SparkSession; the session time zone",
        "the session-scoped `spark` fixture and the test session; at op #77",
        "only a non-VALUE entry takes the slower branch that resolves pointers",
        "`--runs 3` gives 3 runs per figure; the 10 rounds",
        "a commit writes its objects, then its manifest; the commit point",
        "stop the query (`query.stop()`), then restart it; a non-stop stream",
        "assert data[:4] == bytes.fromhex(\"1d000000\")",
        "magic \"AKVSPK\"; xxh3_64 of all before; 0xFFF0; p00001",
        "a deadline of 1,000 ms and 12 keys; 9,876,543 bytes",
    ]
    for text in allowed:
        assert not offences(text), (text, offences(text))
