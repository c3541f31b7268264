"""antkv as the state engine of PySpark pipelines.

Pipelines (``runtime/pipeline.py``): a vectorised, keyed state function over typed value, list
and map state, run on batch DataFrames and streaming queries (``foreachBatch``), rescalable at
any batch boundary; a batch's output stays in the executors and is published exactly once with
the state (``runtime/output.py``: ``read_output``).  Spark 4 ``StatefulProcessor`` classes run
unchanged on the same pipelines (``processor/transform.py``: ``TransformWithState``,
``transform_with_state``).  A query on Spark's own state store moves to antkv mid-stream
(``tools/migrate.py``: ``migrate_transform_with_state``, ``migrate_apply_in_pandas_with_state``,
``copy_query_progress``).  Underneath:

A state store is one versioned key-value store per ``(checkpoint location, operator,
partition)``: tasks open it at the version the driver names, read and write it, and commit the
next version to the checkpoint location (any ``pyarrow.fs`` URI) as uniquely named objects;
the driver publishes each batch with one write-once marker.  ``docs/spark-design.md`` explains the
model, the protocol and its guarantees; ``docs/spark-format.md`` the layout of a location.

    from antkv.spark import open_store, CommitCoordinator

    coord = CommitCoordinator("s3://bucket/state", "agg", num_partitions=4, query_id="q1")
    bases = coord.base_manifests(0)                      # driver: version 0 is empty
    store = open_store("s3://bucket/state", "agg", 2, 0, manifest=bases[2])   # in a task
    store.put(b"k", b"v"); msg = store.commit()          # the task returns msg
    coord.publish(1, messages); coord.cleanup(1)         # driver, with every partition's msg
"""

from antkv.spark.store.commit_message import CommitMessage
from antkv.spark.store.commit_protocol import CleanupResult, CommitCoordinator, CommitError, ConcurrentWriterError, PublishResult
from antkv.spark.store.location import Location
from antkv.spark.processor.transform import TransformWithState, transform_with_state
from antkv.spark.tools.migrate import (
    MigrationResult,
    copy_query_progress,
    migrate_apply_in_pandas_with_state,
    migrate_transform_with_state,
)
from antkv.spark.tools.state_reader import read_state
from antkv.spark.runtime.pipeline import BatchMetrics, BatchResult, PartitionMetrics, PartitionState, StatefulPipeline
from antkv.spark.runtime.output import output_versions, read_output
from antkv.spark.runtime.spark_status import batch_metrics
from antkv.spark.store.idle_copies import release_idle_stores
from antkv.spark.store.opening import open_store
from antkv.spark.store.state_store import StateStore
from antkv.spark.store.store_options import StoreOptions

__all__ = [
    "StatefulPipeline",
    "TransformWithState",
    "transform_with_state",
    "PartitionState",
    "BatchResult",
    "BatchMetrics",
    "PartitionMetrics",
    "batch_metrics",
    "read_output",
    "output_versions",
    "read_state",
    "migrate_apply_in_pandas_with_state",
    "migrate_transform_with_state",
    "copy_query_progress",
    "MigrationResult",
    "read_state_df",
    "register_state_source",
    "StateDataSource",
    "open_store",
    "StateStore",
    "StoreOptions",
    "Location",
    "CommitMessage",
    "CommitCoordinator",
    "CommitError",
    "ConcurrentWriterError",
    "PublishResult",
    "CleanupResult",
    "release_idle_stores",
]


def __getattr__(name: str):
    """The ``antkv-state`` data source's names, imported on first use: they need pyspark, which
    a task that only opens stores does not load."""
    if name in ("read_state_df", "register_state_source", "StateDataSource"):
        from antkv.spark.tools import state_source

        return getattr(state_source, name)
    raise AttributeError(f"module 'antkv.spark' has no attribute {name!r}")
