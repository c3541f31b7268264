"""The documentation runs: every Python block of ``README.md`` and ``docs/**/*.md`` is extracted
and executed, and so is every shell block made only of ``antkv`` commands (with ``printf`` /
``echo`` / ``cat`` feeding them), so the docs cannot rot.

Rules a documentation writer follows:

* a Python block runs alone, as a reader would paste it: in a fresh namespace, as ``__main__``,
  whose working directory is an empty temporary directory (so use relative paths), with its own
  imports; consecutive Python blocks of a file share one interpreter, as cells of a notebook
  do (each block's names are its own);
* the blocks of one file run in document order in one temporary directory (so a shell block
  may use the database an earlier block made); each shell command line runs on its own and must
  exit 0 unless the line ends with ``# exit N``;
* a block that is not meant to run alone carries the marker line ``<!-- doc-test: not run:
  REASON -->`` right before its fence; :data:`MAX_NOT_RUN` keeps that list tiny;
* a page whose blocks are steps that build on each other in one Spark session (the tutorial)
  carries :data:`ONE_SESSION`: ``tests/test_spark_docs.py`` runs it, in order, in the tests'
  shared Spark session, and this module leaves it alone;
* a page with a Python block that gets a Spark session (``SparkSession.builder``: see
  :func:`gets_a_spark_session`) is run by ``tests/test_spark_docs.py`` too, by these same rules
  but in the tests' shared Spark session, where a block's ``getOrCreate()`` gets that session
  and its ``spark.stop()`` leaves it running (so the page starts no JVM of its own), and this
  module leaves it alone.

Shell blocks with other commands (``make``, ``python -m bench``) are not run: they are listed
by :func:`test_what_runs` so a new one is seen.
"""

from __future__ import annotations

import glob
import os
import re
import shlex
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOT_RUN = "<!-- doc-test: not run:"
ONE_SESSION = "<!-- doc-test: one Spark session:"
MAX_NOT_RUN = 2
SHELL_COMMANDS = {"antkv", "printf", "echo", "cat"}
FENCE = re.compile(r"^```(\w*)\s*$")


def _docs() -> list[str]:
    files = [os.path.join(ROOT, "README.md")]
    files += sorted(glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True))
    return files


def blocks(path: str) -> list[tuple[str, int, str, bool]]:
    """``(language, line, code, marked not-run)`` of every fenced block of ``path``."""
    out = []
    lines = open(path, encoding="utf-8").read().splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if m:
            lang, start = m.group(1), i
            marked = i > 0 and lines[i - 1].startswith(NOT_RUN)
            i += 1
            body = []
            while i < len(lines) and not lines[i].startswith("```"):
                body.append(lines[i])
                i += 1
            out.append((lang, start + 1, "\n".join(body) + "\n", marked))
        i += 1
    return out


def _shell_lines(code: str) -> list[str] | None:
    """The command lines of a shell block if every command in it is one we run, else None."""
    cmds = [ln.split("#")[0].strip() if " # exit" not in ln else ln.strip() for ln in code.splitlines()]
    cmds = [c for c in cmds if c]
    for c in cmds:
        body = c.split("# exit")[0]
        for segment in re.split(r"\||>", body):
            words = shlex.split(segment)
            if words and words[0] not in SHELL_COMMANDS and not segment.strip().endswith((".jsonl", ".txt")):
                return None
    return cmds


def _env() -> dict:
    bindir = os.path.dirname(sys.executable)
    return dict(os.environ, PATH=bindir + os.pathsep + os.environ.get("PATH", ""), PYTHONPATH=ROOT)


def gets_a_spark_session(path: str) -> bool:
    """Whether a Python block of ``path`` that runs gets a Spark session
    (``SparkSession.builder``)."""
    return any(lang == "python" and not marked and "SparkSession.builder" in code
               for lang, _, code, marked in blocks(path))


def spark_session_docs() -> list[str]:
    """The pages tests/test_spark_docs.py runs in the shared Spark session: those that get a
    session, but for the one-session pages (which it runs as one sequence of steps)."""
    return [p for p in _docs() if ONE_SESSION not in open(p, encoding="utf-8").read() and gets_a_spark_session(p)]


def _standalone_docs() -> list[str]:
    """The pages whose blocks run alone here, each block group in its own interpreter (a page
    that uses Spark is tests/test_spark_docs.py's)."""
    return [p for p in _docs() if ONE_SESSION not in open(p, encoding="utf-8").read() and p not in spark_session_docs()]


@pytest.mark.parametrize("path", _standalone_docs(), ids=lambda p: os.path.relpath(p, ROOT))
def test_doc_blocks_run(path, tmp_path):
    env = _env()
    rel = os.path.relpath(path, ROOT)
    cells: list[str] = []  # the scripts of the consecutive Python blocks not run yet
    for lang, line, code, marked in blocks(path) + [("end", 0, "", False)]:
        if marked:
            continue
        if lang == "python":
            script = tmp_path / f"block_{line}.py"
            script.write_text(code)
            cells.append(str(script))
            continue
        if cells:
            _run_cells(rel, cells, tmp_path, env)
            cells = []
        if lang in ("sh", "bash", "console"):
            run_shell_block(rel, line, code, tmp_path)


def run_shell_block(rel: str, line: int, code: str, cwd) -> int:
    """Run the command lines of a shell block, each on its own in ``cwd``, if the block is made
    only of commands we run (:func:`_shell_lines`); each must exit 0, or N when the line ends
    with ``# exit N``.  Returns how many ran (0 for a block we do not run)."""
    cmds = _shell_lines(code) or []
    for cmd in cmds:
        want = 0
        m = re.search(r"# exit (\d+)\s*$", cmd)
        if m:
            want, cmd = int(m.group(1)), cmd[: m.start()].strip()
        r = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], cwd=cwd, env=_env(), capture_output=True, timeout=120)
        assert r.returncode == want, f"{rel}:{line}: `{cmd}` exited {r.returncode}: {r.stderr.decode(errors='replace')}"
    return len(cmds)


_CELLS = """
import sys, traceback
for path in sys.argv[1:]:
    with open(path, encoding="utf-8") as f:
        code = compile(f.read(), path, "exec")
    try:
        exec(code, {"__name__": "__main__", "__file__": path})
    except BaseException:
        traceback.print_exc()
        print("FAILED-CELL " + path, file=sys.stderr)
        sys.exit(1)
"""


def _run_cells(rel: str, cells: list[str], cwd, env: dict) -> None:
    """Run Python blocks (script paths) in order in one interpreter, each in a fresh namespace."""
    r = subprocess.run([sys.executable, "-c", _CELLS, *cells], cwd=cwd, env=env, capture_output=True,
                       timeout=300 * len(cells))
    err = r.stderr.decode(errors="replace")
    failed = re.search(r"FAILED-CELL .*block_(\d+)\.py", err)
    line = failed.group(1) if failed else "?"
    assert r.returncode == 0, f"{rel}:{line}: the Python block failed:\n{err}"


def test_what_runs():
    """Every Python block runs; the not-run markers stay few and give a reason; the shell blocks
    of the operator's guide all run."""
    marked = [(p, line) for p in _docs() for lang, line, _, m in blocks(p) if m]
    assert len(marked) <= MAX_NOT_RUN, marked
    for p in _docs():
        text = open(p, encoding="utf-8").read()
        for m in re.finditer(re.escape(NOT_RUN) + r"(.*?)-->", text):
            assert m.group(1).strip(), f"{p}: a not-run marker without a reason"
    python = [(p, line) for p in _docs() for lang, line, _, m in blocks(p) if lang == "python" and not m]
    assert len(python) >= 6, python
    ops = os.path.join(ROOT, "docs", "operations.md")
    shell = [code for lang, _, code, _ in blocks(ops) if lang == "sh"]
    assert shell and all(_shell_lines(code) is not None for code in shell)
