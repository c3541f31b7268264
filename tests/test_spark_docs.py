"""The runnable examples of docs/spark.md run as written (on the shared local Spark)."""

import os
import re

DOC = os.path.join(os.path.dirname(__file__), "..", "docs", "spark.md")
MARK = "<!-- example: extracted and run by tests/test_spark_docs.py -->"


def test_the_pipeline_example_in_the_docs_runs(spark):
    text = open(DOC, encoding="utf-8").read()
    assert MARK in text
    block = re.search(r"```python\n(.*?)```", text[text.index(MARK):], re.S).group(1)
    assert "StatefulPipeline" in block and "assert" in block
    exec(compile(block, DOC, "exec"), {"__name__": "docs_example"})


STATE_SOURCE_MARK = "<!-- example: the state data source, run by tests/test_spark_docs.py -->"


def test_the_state_data_source_example_in_the_docs_runs(spark):
    text = open(DOC, encoding="utf-8").read()
    block = re.search(r"```python\n(.*?)```", text[text.index(STATE_SOURCE_MARK):], re.S).group(1)
    assert "read_state_df" in block and "antkv-state" in block and "assert" in block
    exec(compile(block, DOC, "exec"), {"__name__": "docs_state_source_example"})
