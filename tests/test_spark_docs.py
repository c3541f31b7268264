"""The runnable example of docs/spark.md runs as written (on the shared local Spark)."""

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
