"""The Spark pages of the docs run as written, on the shared local Spark session, so no page
starts a JVM of its own.

* A page that carries :data:`ONE_SESSION` (the tutorial) is a sequence of steps: its Python
  blocks run in document order in one namespace, in the test's one Spark session, and its shell
  blocks (``antkv`` commands, as ``tests/test_docs.py`` runs them) run between them, all in one
  empty working directory.
* Any other page with a Python block that gets a Spark session (the reference, the how-to:
  ``test_docs.spark_session_docs``) runs by ``tests/test_docs.py``'s rules -- every block that
  runs, in document order, each Python block in a fresh namespace as ``__main__``, the shell
  blocks between them, all in one empty working directory -- in the shared session: a block's
  ``SparkSession.builder...getOrCreate()`` gets that session (its builder's runtime SQL settings
  apply to it; settings a running session cannot change, such as the master, are ignored, as
  Spark does for any second ``getOrCreate``), and its ``spark.stop()`` leaves the session
  running.  The page's settings are put back afterwards, so the tests after it see the session
  as it was.

``tests/test_docs.py`` leaves both kinds of page to this module.
"""

import os
import re

import pytest
from pyspark.sql import SparkSession

from test_docs import ONE_SESSION, ROOT, _docs, _shell_lines, blocks, run_shell_block, spark_session_docs

PAGES = [p for p in _docs() if ONE_SESSION in open(p, encoding="utf-8").read()]
SESSION_PAGES = spark_session_docs()


def test_the_tutorial_is_one_of_the_pages():
    assert os.path.join(ROOT, "docs", "spark-tutorial.md") in PAGES


def test_the_reference_and_the_how_to_run_in_the_shared_session():
    assert {os.path.join(ROOT, "docs", page) for page in ("spark-reference.md", "spark-howto.md")} <= set(SESSION_PAGES)


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
            assert _shell_lines(code) is not None, f"{rel}:{line}: a shell block of a one-session page runs only antkv commands"
            ran["sh"] += run_shell_block(rel, line, code, tmp_path)
    assert ran["python"] >= 3, ran


def _runtime_settings(spark) -> dict[str, str]:
    return dict(spark.conf.getAll)


def _put_back(spark, before: dict[str, str]) -> None:
    """Give the session the settings of ``before`` again, the way a block's builder changed
    them: ``getOrCreate()`` applies a builder's settings to the running session (those it cannot
    change, such as the master, are only recorded there).  A setting the page added is unset
    where the session allows it; one it does not allow is inert, as it was when added."""
    now = _runtime_settings(spark)
    changed = {name: value for name, value in before.items() if now.get(name) != value}
    if changed:
        SparkSession.builder.config(map=changed).getOrCreate()
    for name in now.keys() - before.keys():
        if spark.conf.isModifiable(name):
            spark.conf.unset(name)


@pytest.mark.parametrize("path", SESSION_PAGES, ids=lambda p: os.path.relpath(p, ROOT))
def test_a_spark_page_runs_in_the_shared_session(spark, path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rel = os.path.relpath(path, ROOT)
    stopped = []
    monkeypatch.setattr(SparkSession, "stop", lambda session: stopped.append(session))
    before = _runtime_settings(spark)
    python = [line for lang, line, _, marked in blocks(path) if lang == "python" and not marked]
    ran = []
    try:
        for lang, line, code, marked in blocks(path):
            if marked:
                continue
            if lang == "python":
                exec(compile(code, f"{rel}:{line}", "exec"), {"__name__": "__main__"})
                ran.append(line)
            elif lang in ("sh", "bash", "console"):
                run_shell_block(rel, line, code, tmp_path)
    finally:
        _put_back(spark, before)
    assert ran == python and python
    assert all(session is spark for session in stopped), "a block stopped a session that is not the shared one"
    after = _runtime_settings(spark)
    assert {name: after.get(name) for name in before} == before
    assert not [name for name in after.keys() - before.keys() if spark.conf.isModifiable(name)]


STATE_SOURCE_DOC = os.path.join(ROOT, "docs", "spark-reference.md")
STATE_SOURCE_MARK = "<!-- example: the state data source, run by tests/test_spark_docs.py -->"


def test_the_state_data_source_example_is_a_block_run_here():
    """The marked example reads the state through ``read_state_df`` and ``antkv-state`` and
    checks what it reads; it runs with its page, in the shared session."""
    text = open(STATE_SOURCE_DOC, encoding="utf-8").read()
    block = re.search(r"```python\n(.*?)```", text[text.index(STATE_SOURCE_MARK):], re.S).group(1)
    assert "read_state_df" in block and "antkv-state" in block and "assert" in block
    assert any(lang == "python" and not marked and code == block for lang, _, code, marked in blocks(STATE_SOURCE_DOC))
    assert STATE_SOURCE_DOC in SESSION_PAGES
