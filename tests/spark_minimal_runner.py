"""The tests' minimal runner of the exactly-once protocol (the product's pipelines are
:mod:`antkv.spark.runtime.pipeline` and :mod:`antkv.spark.processor.transform`).

Run one stateful batch on Spark: every partition updates its state store, the driver publishes.

This is the minimal runner the exactly-once protocol needs; richer APIs build on its two steps.

1. :func:`map_with_state` -- on the executors, ``mapInPandas``: the task of partition ``p``
   opens its store at ``version - 1`` with the manifest the driver read from the published
   marker, calls ``process(store, batches)`` (an iterator of pandas DataFrames in, one out),
   commits, and emits one extra row carrying the :class:`CommitMessage` as JSON in column
   ``_antkv_commit`` (the output columns null).  A task that fails aborts its store; one that
   fails *after* committing (or a speculative or duplicate attempt) leaves a commit nobody
   publishes.
2. :func:`publish_batch` -- on the driver, with the collected rows: split the commit messages
   from the output, publish version ``version`` (only if every partition reported against the
   expected base), clean up, and return the output.

The DataFrame must have exactly ``coordinator.num_partitions`` partitions, each holding the
keys its partition owns (e.g. ``df.repartition(n, key)``, or ``repartitionById``).  The output
travels to the driver: suited to results of modest size; for a streaming query, call
:func:`run_batch` inside ``foreachBatch`` with ``version = batch_id + 1``.
"""

from __future__ import annotations

import antkv

from antkv.spark.store.commit_message import CommitMessage
from antkv.spark.store.commit_protocol import CommitCoordinator, PublishResult
from antkv.spark.store.opening import open_store
from antkv.spark.store.store_options import StoreOptions

COMMIT_COLUMN = "_antkv_commit"


def map_with_state(df, coordinator: CommitCoordinator, version: int, process, schema: str,
                   options: StoreOptions | None = None):
    """The DataFrame of step 1 (lazy): ``schema`` (a DDL string) plus ``_antkv_commit``."""
    import pandas as pd
    from pyspark import TaskContext

    if version < 1:
        raise antkv.InvalidArgumentError("a batch makes version >= 1")
    n = df.rdd.getNumPartitions()
    if n != coordinator.num_partitions:
        raise antkv.InvalidArgumentError(
            f"the DataFrame has {n} partitions, the state has {coordinator.num_partitions}")
    from pyspark.sql.types import StructType

    names = [f.name for f in StructType.fromDDL(schema).fields]
    bases = coordinator.base_manifests(version - 1)
    location, operator = coordinator.location, coordinator.operator
    out_schema = f"{schema}, {COMMIT_COLUMN} string"

    def task(batches):
        p = TaskContext.get().partitionId()
        store = open_store(location, operator, p, version - 1, manifest=bases[p], options=options)
        try:
            for out in process(store, batches):
                yield out.assign(**{COMMIT_COLUMN: None})
            msg = store.commit()
        except BaseException:
            store.abort()
            raise
        row = {c: [None] for c in names}
        row[COMMIT_COLUMN] = [msg.to_json()]
        yield pd.DataFrame(row)

    return df.mapInPandas(task, out_schema)


def publish_batch(coordinator: CommitCoordinator, version: int, rows) -> tuple[object, PublishResult]:
    """Step 2: ``rows`` is the collected pandas DataFrame of step 1."""
    is_commit = rows[COMMIT_COLUMN].notna()
    messages = [CommitMessage.from_json(j) for j in rows.loc[is_commit, COMMIT_COLUMN]]
    result = coordinator.publish(version, messages)
    coordinator.cleanup(version)
    output = rows.loc[~is_commit].drop(columns=[COMMIT_COLUMN]).reset_index(drop=True)
    return output, result


def run_batch(df, coordinator: CommitCoordinator, version: int, process, schema: str,
              options: StoreOptions | None = None) -> tuple[object, PublishResult]:
    """Both steps: returns ``(output as pandas, PublishResult)``."""
    rows = map_with_state(df, coordinator, version, process, schema, options).toPandas()
    return publish_batch(coordinator, version, rows)
