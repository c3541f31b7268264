"""Spark stops a UDF's idle Python workers after a minute, so a streaming query with batches a
minute or more apart runs each batch's tasks in new workers.  This runs pipelines with Python
worker reuse off (every task in a new worker: the same situation, without waiting a minute)
in a subprocess driver, as the cluster suite does (a process holds one SparkContext), and
checks that the state and output are exact and that every task continued from the copy parked
on the machine instead of rebuilding (``tests/spark_worker_churn_checks.py``)."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

TESTS = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.xdist_group("spark-churn")  # its own JVM, beside the session's tests
def test_every_task_in_a_new_python_worker_gives_the_exact_state_and_output(tmp_path):
    junit = tmp_path / "churn.xml"
    env = dict(os.environ, ANTKV_SPARK_CONF="spark.python.worker.reuse=false", PYSPARK_PYTHON=sys.executable)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}",
         f"--basetemp={tmp_path / 'driver'}", os.path.join(TESTS, "spark_worker_churn_checks.py")],
        cwd=os.path.dirname(TESTS), env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"{proc.stdout[-8000:]}\n{proc.stderr[-3000:]}"
    outcomes = [[e.tag for e in c] for c in ET.parse(junit).getroot().iter("testcase")]
    assert len(outcomes) == 1 and outcomes == [[]], outcomes  # one check, passed, not skipped
