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
    """One local SparkSession for the whole test run (starting a JVM costs seconds).

    Two cores, few shuffle partitions and no UI keep the Spark tests short; every Spark test
    shares this session and must not stop it.  ``local[2,2]``: a failed task is retried once,
    as on a cluster (plain ``local[2]`` fails the job at the first task failure), which the
    exactly-once tests of ``antkv.spark`` rely on."""
    from pyspark.sql import SparkSession

    # Python workers run this interpreter (the venv's, with antkv and its dependencies), not
    # whatever ``python3`` is first on PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = (
        SparkSession.builder.master("local[2,2]")
        .appName("antkv-tests")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.default.parallelism", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
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
