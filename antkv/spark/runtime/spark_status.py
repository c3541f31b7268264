"""antkv's work where Spark users look: job descriptions, and each batch's figures for a
``StreamingQueryListener``.

**Job descriptions.**  :func:`describing_jobs` sets ``spark.job.description`` (what
``SparkContext.setJobDescription`` sets) around an antkv Spark action, so its jobs and stages
read ``antkv <operator> batch <b>: <phase>`` in the Spark UI, its REST API
(``/api/v1/applications/<app>/jobs``) and the event log; under a streaming query the query's own
description (``id = ..., runId = ..., batch = ...``) follows on the next lines.  The previous
description is restored afterwards.  The job group is left alone: a streaming query cancels its
jobs through it when it stops.

**Per-batch figures.**  Spark gives code under ``foreachBatch`` no way to add to the batch's
``StreamingQueryProgress``: ``observe()`` on a DataFrame computed there never reaches the
progress (only an ``observe`` in the streaming plan itself does, and antkv's figures exist only
after its tasks ran).  So the pipeline records each batch's
:class:`~antkv.spark.runtime.pipeline.BatchMetrics` here, keyed by the streaming query's id and
batch id (the local properties Spark sets on the thread running ``foreachBatch``), before
``foreachBatch`` returns -- hence before Spark posts that batch's progress event -- and a
listener in the driver reads them with :func:`batch_metrics`::

    class AntkvFigures(StreamingQueryListener):
        def onQueryProgress(self, event):
            for operator, m in antkv.spark.batch_metrics(event.progress).items():
                print(event.progress.batchId, operator, m.figures())

The figures of the newest :data:`RETAINED_BATCHES` batches of each query are kept (Spark's own
``spark.sql.streaming.numRecentProgressUpdates`` default).  Under Spark Connect, ``foreachBatch``
runs in another process than the listener: there the figures are in ``metrics_path`` and the log.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from contextlib import contextmanager

DESCRIPTION = "spark.job.description"
QUERY_ID = "sql.streaming.queryId"  # set by Spark on the thread running a streaming batch
BATCH_ID = "streaming.sql.batchId"
RETAINED_BATCHES = 100

_lock = threading.Lock()
_by_query: dict[str, OrderedDict] = {}  # query id -> batch id -> {operator: BatchMetrics}


@contextmanager
def describing_jobs(spark_context, text: str):
    """Within the block, jobs started by this thread carry ``text`` as their description (the
    thread's previous description on the lines after it), restored afterwards."""
    previous = spark_context.getLocalProperty(DESCRIPTION)
    # a streaming query's own description starts with a line break (after the query's name)
    spark_context.setLocalProperty(DESCRIPTION, "\n".join([text, previous.lstrip("\n")]) if previous else text)
    try:
        yield
    finally:
        spark_context.setLocalProperty(DESCRIPTION, previous)


def record_batch(spark_context, operator: str, metrics) -> None:
    """Keep ``metrics`` (a batch's ``BatchMetrics``) for :func:`batch_metrics` when this thread
    runs a streaming query's batch; outside one, do nothing."""
    query_id = spark_context.getLocalProperty(QUERY_ID)
    if not query_id:
        return
    batch = spark_context.getLocalProperty(BATCH_ID)
    batch_id = int(batch) if batch is not None else metrics.batch_id
    with _lock:
        batches = _by_query.setdefault(query_id, OrderedDict())
        batches.setdefault(batch_id, {})[operator] = metrics
        batches.move_to_end(batch_id)
        while len(batches) > RETAINED_BATCHES:
            batches.popitem(last=False)


def batch_metrics(progress) -> dict:
    """``{operator: BatchMetrics}`` of every antkv pipeline that ran in the streaming batch
    ``progress`` describes: a ``StreamingQueryProgress`` (``event.progress`` in
    ``StreamingQueryListener.onQueryProgress``) or the dict of ``query.lastProgress``.  Empty
    when no pipeline ran in it (or it is older than the newest :data:`RETAINED_BATCHES`)."""
    if isinstance(progress, dict):
        query_id, batch_id = progress.get("id"), progress.get("batchId")
    else:
        query_id, batch_id = getattr(progress, "id", None), getattr(progress, "batchId", None)
    if query_id is None or batch_id is None:
        raise TypeError("progress must be a StreamingQueryProgress or the dict of query.lastProgress")
    with _lock:
        return dict(_by_query.get(str(query_id), {}).get(int(batch_id), {}))
