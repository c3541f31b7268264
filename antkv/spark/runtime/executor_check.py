"""The first thing every antkv task does on an executor: check that the executor's Python has
the antkv the driver runs.

A task's body (the closure :class:`~antkv.spark.runtime.pipeline.StatefulPipeline` builds)
names antkv's modules.  Unpickled on an executor whose Python lacks antkv it would fail inside
Spark's worker with a bare ``No module named 'antkv'``; on an executor with another version it
could read or write state in a format the driver does not expect.  So the driver ships the
body pickled inside a small function that cloudpickle carries by value (this module is
registered with ``cloudpickle.register_pickle_by_value``: unpickling it imports nothing of
antkv), and that function, in the task, before the body is unpickled and so before any state is
opened or any file written:

* imports ``antkv``; if that fails, raises ``RuntimeError`` naming the driver's version, the
  executor's Python and the import error;
* compares ``antkv.__version__`` with the driver's; on a difference, raises ``antkv.Error``
  naming both versions and where the executor's antkv comes from.

Either way the task fails at its first attempt and every retry, so the job fails and nothing is
published.  The check costs one import lookup and a string comparison per task.
"""

from __future__ import annotations

import sys


def checked_task(task, driver_version: str):
    """``task`` (a function of an iterator of batches, for ``mapInPandas``/``mapInArrow``)
    wrapped so that it first runs :func:`check_executor` against ``driver_version``."""
    import pickle

    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    payload = cloudpickle.dumps(task, protocol=pickle.HIGHEST_PROTOCOL)

    def run_checked(batches):
        check_executor(driver_version)
        return pickle.loads(payload)(batches)

    return run_checked


def check_executor(driver_version: str) -> None:
    """Raise unless this Python imports antkv ``driver_version`` (see the module docstring)."""
    import importlib

    try:
        antkv = importlib.import_module("antkv")
    except ImportError as e:
        raise RuntimeError(
            f"antkv is missing on this executor: the driver runs antkv {driver_version}, this executor's "
            f"Python ({sys.executable}) cannot import antkv ({e}); nothing was read or written. Ship antkv "
            f"with the job (spark.submit.pyFiles / --py-files, see docs/spark-howto.md) or install "
            f"antkv {driver_version} on every executor") from None
    found = getattr(antkv, "__version__", "unknown")
    if found != driver_version:
        raise antkv.Error(
            f"antkv version mismatch: the driver runs antkv {driver_version}, this executor's Python "
            f"({sys.executable}) imports antkv {found} from {getattr(antkv, '__file__', '?')}; nothing was "
            f"read or written. Ship the driver's antkv with the job (spark.submit.pyFiles / --py-files, "
            f"see docs/spark-howto.md) or install antkv {driver_version} on every executor")
