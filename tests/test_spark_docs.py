"""The Spark pages of the docs run as written, on the shared local Spark session.

* A page that carries :data:`ONE_SESSION` (the tutorial) is a sequence of steps: its Python
  blocks run in document order in one namespace, in the test's one Spark session, and its shell
  blocks (``antkv`` commands, as ``tests/test_docs.py`` runs them) run between them, all in one
  empty working directory.  ``tests/test_docs.py`` leaves such a page to this module.
* The state data source example of the reference runs in the shared session too (it also runs
  alone, in its own interpreter, under ``tests/test_docs.py``).
"""

import glob
import os
import re
import subprocess

import pytest

from test_docs import ONE_SESSION, ROOT, _env, _shell_lines, blocks

PAGES = sorted(p for p in glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True)
               if ONE_SESSION in open(p, encoding="utf-8").read())


def test_the_tutorial_is_one_of_the_pages():
    assert os.path.join(ROOT, "docs", "spark-tutorial.md") in PAGES


@pytest.mark.parametrize("path", PAGES, ids=lambda p: os.path.relpath(p, ROOT))
def test_a_one_session_page_runs_in_order(spark, path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rel = os.path.relpath(path, ROOT)
    namespace = {"__name__": "docs_page"}
    ran = {"python": 0, "sh": 0}
    for lang, line, code, marked in blocks(path):
        assert not marked, f"{rel}:{line}: every block of a one-session page runs"
        if lang == "python":
            exec(compile(code, f"{rel}:{line}", "exec"), namespace)
            ran["python"] += 1
        elif lang in ("sh", "bash", "console"):
            cmds = _shell_lines(code)
            assert cmds is not None, f"{rel}:{line}: a shell block of a one-session page runs only antkv commands"
            for cmd in cmds:
                r = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], cwd=tmp_path, env=_env(),
                                   capture_output=True, timeout=120)
                assert r.returncode == 0, f"{rel}:{line}: `{cmd}` exited {r.returncode}: {r.stderr.decode(errors='replace')}"
                ran["sh"] += 1
    assert ran["python"] >= 3, ran


STATE_SOURCE_DOC = os.path.join(ROOT, "docs", "spark-reference.md")
STATE_SOURCE_MARK = "<!-- example: the state data source, run by tests/test_spark_docs.py -->"


def test_the_state_data_source_example_in_the_docs_runs(spark):
    text = open(STATE_SOURCE_DOC, encoding="utf-8").read()
    block = re.search(r"```python\n(.*?)```", text[text.index(STATE_SOURCE_MARK):], re.S).group(1)
    assert "read_state_df" in block and "antkv-state" in block and "assert" in block
    exec(compile(block, STATE_SOURCE_DOC, "exec"), {"__name__": "docs_state_source_example"})
