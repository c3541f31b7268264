"""antkv on a real Spark standalone cluster: a master and two workers on 127.0.0.1, one core each
(the ``spark_cluster`` fixture, ``tests/spark_cluster.py``).

The test session holds the local SparkContext, and a process holds one; so the cluster's
driver is a subprocess: ``pytest`` on :data:`ON_THE_CLUSTER` with ``ANTKV_SPARK_MASTER`` set.
Those are the exactly-once fault tests (a task failing after its commit, duplicate attempts),
a pipeline's batch jobs rescaled 2 -> 2 -> 3 -> 1 whose output and state equal plain Spark's
(with snapshot files downloaded whole, and read remotely through each machine's block cache),
a row-based processor whose output equals Spark's row-based ``transformWithState``,
and the checks only a cluster gives meaning to (``tests/spark_cluster_checks.py``: the state
data source reads in both executors, a killed Python worker's task retried on the other
executor).  Every one of them must pass, none skipped.  Then antkv shipped with the job to
executors whose Python lacks it (``tests/spark_cluster_shipping.py``), in a driver of its own."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

from spark_cluster import driver_env
from wheel_env import bare_venv, build_wheel, can_import_antkv

TESTS = os.path.dirname(os.path.abspath(__file__))
ON_THE_CLUSTER = [
    "test_spark_exactly_once.py::test_task_failing_after_its_commit_is_retried_exactly_once",
    "test_spark_exactly_once.py::test_duplicate_attempts_count_once",
    "test_spark_pipeline.py::test_batch_jobs_with_rescale_2_3_1_equal_plain_spark[local]",
    "test_spark_pipeline.py::test_batch_jobs_with_rescale_2_3_1_equal_plain_spark[remote]",
    "test_spark_row_processor.py::test_event_time_timers_and_types_equal_spark",
    "spark_cluster_checks.py",
]
EXPECTED = 2 + 2 + 1 + 2  # test cases in ON_THE_CLUSTER (the pipeline's: download and remote tables; S3 runs
# on the local session only, to keep the cluster's run short)


def test_exactly_once_rescale_output_and_state_source_on_a_standalone_cluster(spark_cluster, tmp_path):
    junit = tmp_path / "cluster.xml"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}", "--durations=0",
         f"--basetemp={tmp_path / 'driver'}", *[os.path.join(TESTS, t) for t in ON_THE_CLUSTER]],
        cwd=os.path.dirname(TESTS), env=driver_env(spark_cluster), capture_output=True, text=True, timeout=1200)
    report = f"{proc.stdout[-8000:]}\n{proc.stderr[-3000:]}"
    print(proc.stdout[-4000:])  # the driver's summary, with every test's duration (pytest -s shows it)
    assert proc.returncode == 0, report
    cases = ET.parse(junit).getroot().iter("testcase")
    outcomes = {f"{c.get('classname')}.{c.get('name')}": [e.tag for e in c] for c in cases}
    assert len(outcomes) == EXPECTED, outcomes
    assert all(not tags for tags in outcomes.values()), outcomes  # no failure, error or skip
    assert spark_cluster.alive_workers() == 2  # the cluster outlived its driver


def test_antkv_shipped_with_the_job_to_workers_whose_python_lacks_it(spark_cluster, tmp_path):
    """``tests/spark_cluster_shipping.py`` in a driver of its own: the executors run a Python
    without antkv (checked here first, and again in the executors), and the driver ships this
    checkout's wheel, as a ``.zip``, with ``SparkContext.addPyFile``."""
    wheel = build_wheel(str(tmp_path / "dist"))
    shipped = wheel[: -len(".whl")] + ".zip"
    shutil.copy(wheel, shipped)
    python = bare_venv(str(tmp_path / "executor-venv"))
    imported, said = can_import_antkv(python)
    assert not imported and "No module named 'antkv'" in said, said
    junit = tmp_path / "shipping.xml"
    env = dict(driver_env(spark_cluster), ANTKV_SPARK_EXECUTOR_PYTHON=python, PYSPARK_PYTHON=python,
               ANTKV_SHIPPED_ZIP=shipped)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}", "--durations=0",
         f"--basetemp={tmp_path / 'driver'}", os.path.join(TESTS, "spark_cluster_shipping.py")],
        cwd=os.path.dirname(TESTS), env=env, capture_output=True, text=True, timeout=600)
    print(proc.stdout[-3000:])
    assert proc.returncode == 0, f"{proc.stdout[-8000:]}\n{proc.stderr[-3000:]}"
    cases = list(ET.parse(junit).getroot().iter("testcase"))
    assert len(cases) == 1 and not list(cases[0]), [(c.get("name"), [e.tag for e in c]) for c in cases]
    assert spark_cluster.alive_workers() == 2
