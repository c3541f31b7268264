"""A running total per key and a progress listener, shared by the Spark tests of metrics,
shipping and clusters.  Not collected (the file name does not start with ``test_``); it travels
to the executors by value, as the test files that use it do (executors cannot import tests/)."""

from __future__ import annotations

import os
import sys

import pandas as pd
from pyspark import cloudpickle

import antkv
from antkv.spark import batch_metrics

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def summing(state, rows):
    """A pipeline function: per key, the running total of ``value`` in a value state, as rows
    ``(key, total)``; the partition reports the antkv its executor ran (version, file, cwd)."""
    total = state.value_state("total", 1)
    out = []
    for key, group in state.groups(rows):
        total.update(((total.get() or (0,))[0] + int(group["value"].sum()),))
        out.append((key[0], total.get()[0]))
    state.reports["antkv"] = [antkv.__version__, antkv.__file__, os.getcwd()]
    return pd.DataFrame(out, columns=["key", "total"])


def progress_listener():
    """A ``StreamingQueryListener`` whose ``seen[batch id]`` is ``(query id, input rows,
    antkv's figures per operator)`` of each progress event (the listener bus delivers them
    asynchronously: wait for them)."""
    from pyspark.sql.streaming import StreamingQueryListener

    class Figures(StreamingQueryListener):
        def __init__(self):
            self.seen = {}

        def onQueryStarted(self, event):
            pass

        def onQueryProgress(self, event):
            p = event.progress
            self.seen[p.batchId] = (str(p.id), p.numInputRows, {op: m.figures() for op, m in batch_metrics(p).items()})

        def onQueryIdle(self, event):
            pass

        def onQueryTerminated(self, event):
            pass

    return Figures()
