"""Shared test settings: invariant checks on, hypothesis deterministic and bounded."""

import logging
import os
import sys

import pytest
from hypothesis import HealthCheck, settings

os.environ.setdefault("ANTKV_INVARIANTS", "1")

settings.register_profile(
    "antkv",
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    print_blob=True,
)
settings.load_profile("antkv")


@pytest.fixture
def quiet_recovery():
    """Silence the antkv logger: sweeps recover thousands of damaged databases, and every torn
    tail and removed file is logged as a warning."""
    logger = logging.getLogger("antkv")
    old = logger.level
    logger.setLevel(logging.ERROR)
    yield
    logger.setLevel(old)


@pytest.fixture(scope="session")
def spark():
    """One SparkSession for the whole test run (starting a JVM costs seconds).

    Two cores, few shuffle partitions and no UI keep the Spark tests short; every Spark test
    shares this session and must not stop it.  ``local[2,2]``: a failed task is retried once,
    as on a cluster (plain ``local[2]`` fails the job at the first task failure), which the
    exactly-once tests of ``antkv.spark`` rely on.

    With ``ANTKV_SPARK_MASTER`` set (a ``spark://`` URL: the subprocess driver of
    ``tests/test_spark_cluster.py``), the session runs on that standalone cluster instead:
    executors of 512 MB that find antkv on ``PYTHONPATH``, and a failed task is never retried
    on the executor where it failed (so a retry runs on the other executor).  With
    ``ANTKV_SPARK_EXECUTOR_PYTHON`` also set, the executors run that Python, which has no
    antkv, nothing puts antkv on their path (the driver ships it), and the UI's REST API is on.

    ``ANTKV_SPARK_CONF`` (``name=value;name=value``) adds settings: the subprocess driver of
    ``tests/test_spark_worker_churn.py`` turns Python worker reuse off with it.

    The driver's JVM, and a cluster's executors, run with ``spark_cluster.JVM_OPTIONS`` (the
    client compiler only, one collector thread: the tests' jobs are short)."""
    from pyspark.sql import SparkSession

    from spark_cluster import JVM_OPTIONS

    # Python workers run this interpreter (the venv's, with antkv and its dependencies), not
    # whatever ``python3`` is first on PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    master = os.environ.get("ANTKV_SPARK_MASTER", "local[2,2]")
    builder = (
        SparkSession.builder.master(master)
        .appName("antkv-tests")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.default.parallelism", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.driver.memory", "2g")
        .config("spark.driver.extraJavaOptions", JVM_OPTIONS)
    )
    if not master.startswith("local"):
        executor_python = os.environ.get("ANTKV_SPARK_EXECUTOR_PYTHON")
        builder = (
            builder.config("spark.executor.memory", "512m")
            .config("spark.executor.extraJavaOptions", JVM_OPTIONS)
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.pyspark.python", executor_python or sys.executable)
            .config("spark.task.maxFailures", "3")
            .config("spark.excludeOnFailure.enabled", "true")
            .config("spark.excludeOnFailure.task.maxTaskAttemptsPerExecutor", "1")
            .config("spark.excludeOnFailure.stage.maxFailedTasksPerExecutor", "100")
            .config("spark.excludeOnFailure.application.maxFailedTasksPerExecutor", "100")
        )
        if executor_python:  # a Python without antkv: the driver ships it (tests/spark_cluster_shipping.py)
            # no exclusion: a task without antkv fails on both executors, and a third attempt
            # would wait two minutes for an executor the exclusion allows
            builder = (builder.config("spark.ui.enabled", "true").config("spark.ui.port", "0")
                       .config("spark.excludeOnFailure.enabled", "false"))
        else:
            builder = builder.config("spark.executorEnv.PYTHONPATH", os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for setting in filter(None, os.environ.get("ANTKV_SPARK_CONF", "").split(";")):
        name, _, value = setting.partition("=")  # a subprocess driver's own settings
        builder = builder.config(name.strip(), value.strip())
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture
def antkv_cli(capsysbinary):
    """``antkv_cli(*argv) -> (exit status, stdout, stderr)``: the ``antkv`` command run in this
    process (arguments may be paths)."""
    from antkv.tools.cli import main

    def run(*argv):
        code = main([os.fspath(a) for a in argv])
        cap = capsysbinary.readouterr()
        return code, cap.out.decode(), cap.err.decode()

    return run


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory):
    """A Spark standalone master and two workers on 127.0.0.1 (``tests/spark_cluster.py``),
    started by the first test that asks for it and stopped, every process of it, at the end of
    the session (also when a test or the start failed)."""
    from spark_cluster import start_cluster

    cluster = start_cluster(str(tmp_path_factory.mktemp("spark-cluster")))
    try:
        yield cluster
    finally:
        cluster.stop()


def pytest_itemcollected(item):
    """Under ``pytest -n`` (pytest-xdist, ``--dist loadgroup``), every test that uses a Spark
    session fixture runs in one worker, so they still share one Spark session; the
    engine's tests spread over the other workers.  (Marked as each test is collected: xdist
    reads the marks in its own ``pytest_collection_modifyitems``.)  A test that uses only the
    cluster drives it from a subprocess (``tests/test_spark_cluster.py``), not through the
    session: it is a group of its own, so it runs beside the session's tests."""
    fixtures = set(getattr(item, "fixturenames", ()))
    if "spark" in fixtures:
        item.add_marker(pytest.mark.xdist_group("spark"))
    elif "spark_cluster" in fixtures:
        item.add_marker(pytest.mark.xdist_group("spark-cluster"))
