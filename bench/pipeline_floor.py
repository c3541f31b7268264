"""The pipeline bench's second floor: antkv's pipeline runner with its state in a dict.

:func:`floor_batch` is a ``foreachBatch`` function that does what
:meth:`antkv.spark.StatefulPipeline.run` does to a batch in Spark and in its tasks, with one
difference: each partition's state is a :class:`DictStore`, a plain dict kept in the Python
worker between batches, in place of antkv's state store.

**Included** (the same code as antkv's, not a copy of it):

* the plan: each row's key group, ``repartitionById`` (:func:`antkv.spark.runtime.routing.route`),
  the sort by (key group, key), one Arrow stream per partition into ``mapInPandas``, one
  collected row per partition;
* in the task: the executor's antkv version check (``checked_task``), the key-group check of
  every incoming frame, the real :class:`~antkv.spark.runtime.pipeline.PartitionState` and the
  pipeline's own task body (``StatefulPipeline._chunked_function``: the whole-key chunks of
  :func:`~antkv.spark.state.chunks.whole_key_chunks`, ``_begin_chunk``'s grouping of each
  chunk, one call of the user function per chunk), the real views
  (:class:`~antkv.spark.state.views.KeyedState`: ``set_current_key`` encoding each grouping
  key, ``value_state`` registering its name, ``ValueState.get``/``update`` building each stored
  key), the output checks (``OutputCheck.fit``) and the output's Parquet files
  (:class:`~antkv.spark.runtime.output.OutputWriter`, in the floor's own location), then one
  JSON row per partition, as antkv's commit message and metrics are.

**Excluded** -- the state engine, and what only exists to publish its versions: opening a
partition's store (loading, reusing or rebuilding a working copy, a rescale's clip), the
store's reads and writes beyond a dict's (row cache, warm scans, pending writes, settling and
encoding them, the LSM), the commit (changelog, snapshot, upload, manifest), the task's
working-copy collector, and on the driver the pipeline record check, the published versions'
reads, the publication (marker, output log, cleanup of what no version needs), the metrics
and the output DataFrame.  A batch without rows is not rerun as antkv's is (the bench's
batches all have rows).  The output files are written and never published: they stay in the
floor's location until the bench removes its directory.

So antkv's batch time over this floor's is what its state engine costs, and this floor's over
the stateless one (``bench_spark_baseline.floor_batch``) is what the runner and the user
function cost.

The dicts stay in the worker between batches, as a working copy does.  A partition whose task
lands in another worker starts empty there: its answers may then differ from antkv's, its cost
does not (a key's first batch writes what later batches rewrite).
"""

from __future__ import annotations

import os

from antkv.spark.store.keygroups import DEFAULT_KEY_GROUPS

WORKER_STATE = "_antkv_pipeline_floor"  # the worker's dict of DictStores, in ``sys.__dict__``


class DictStore:
    """What the views (:mod:`antkv.spark.state.views`) call on a partition's store, over one
    dict in the worker: ``get``/``put``/``delete``/``in``/``append`` of bytes, ``get_decoded``/
    ``put_decoded`` keeping a plain row decoded as antkv's store does, ``keys``/``items``/
    ``delete_range`` by prefix (sorted, as a map state iterates), and the runner's
    ``warm_touched``, which has nothing to warm.

    Invariant: an entry is bytes, or a value decoded by ``self.codec`` (the one codec of the
    decoded entries, as in antkv's store); a missing key has no entry (None is never stored)."""

    def __init__(self):
        self.entries: dict[bytes, object] = {}
        self.codec = None

    def __len__(self) -> int:
        return len(self.entries)

    def __contains__(self, key) -> bool:
        return key in self.entries

    def get(self, key, default=None):
        value = self.entries.get(key)
        if value is None:
            return default
        return value if type(value) is bytes else self.codec.encode(value)

    def get_decoded(self, key: bytes, codec):
        value = self.entries.get(key)
        if value is None or (codec is self.codec and type(value) is not bytes):
            return value
        return codec.decode(value if type(value) is bytes else self.codec.encode(value))

    def put(self, key, value) -> None:
        self.entries[key] = bytes(value)

    def put_decoded(self, key: bytes, value, codec) -> None:
        if codec is not self.codec:
            self._use_codec(codec)
        self.entries[key] = value

    def _use_codec(self, codec) -> None:
        """Encode the entries decoded by the old codec, then keep ``codec``'s decoded."""
        old, entries = self.codec, self.entries
        if old is not None:
            for key, value in entries.items():
                if type(value) is not bytes:
                    entries[key] = old.encode(value)
        self.codec = codec

    def append(self, key: bytes, suffix: bytes) -> None:
        old = self.get(key)
        self.entries[key] = suffix if old is None else old + suffix

    def delete(self, key) -> None:
        self.entries.pop(key, None)

    def delete_range(self, start: bytes, end: bytes) -> None:
        for key in [k for k in self.entries if start <= k < end]:
            del self.entries[key]

    def keys(self, prefix: bytes = b""):
        return iter(sorted(k for k in self.entries if k.startswith(prefix)))

    def items(self, prefix: bytes = b""):
        for key in list(self.keys(prefix)):
            yield key, self.get(key)

    def warm_touched(self, touched) -> int:
        return 0


def chunked_body(func, input_columns):
    """The pipeline's own task body for ``func`` (``StatefulPipeline._chunked_function``,
    which reads nothing of its pipeline but ``func``): ``body(state, frames)`` calls ``func``
    once per chunk of whole keys and yields what it yields."""
    from types import SimpleNamespace

    from antkv.spark.runtime.pipeline import StatefulPipeline

    return StatefulPipeline._chunked_function(SimpleNamespace(func=func), list(input_columns))


class PipelineFloor:
    """One batch's work in every task of the floor, made on the driver and shipped with the
    task: what ``StatefulPipeline._task`` does between opening the store and committing it."""

    def __init__(self, func, key, schema: str, struct, input_columns, partitions: int, location,
                 operator: str, key_groups: int = DEFAULT_KEY_GROUPS):
        from antkv.spark.runtime.output_schema import OutputCheck
        from antkv.spark.store.location import as_location

        self.key = [key] if isinstance(key, str) else list(key)
        self.struct = struct  # the output's StructType (parsing DDL needs the JVM: on the driver)
        self.columns = [f.name for f in struct.fields]
        self.body = chunked_body(func, input_columns)
        self.output_check = OutputCheck(schema, operator)
        self.partitions, self.key_groups = partitions, key_groups
        self.location, self.operator = as_location(location), operator

    def run_partition(self, store, partition: int, batch_id: int, frames, timezone=None,
                      safecheck: bool = False) -> dict:
        """Run the function over partition ``partition``'s stream ``frames`` (pandas DataFrames
        sorted by key group and key, with the key-group column) on ``store``, writing the output
        of version ``batch_id + 1``; returns the partition's figures and output files."""
        import time

        from antkv.spark.runtime.output import OutputWriter
        from antkv.spark.runtime.pipeline import PartitionState, owned_frames, write_outputs
        from antkv.spark.store.keygroups import key_group_range

        K, N, p = self.key_groups, self.partitions, partition
        seen = [0]
        state = PartitionState(store, key_group_range(K, N, p), self.key, batch_id, p, N)
        writer = OutputWriter(self.location, self.operator, batch_id + 1, self.struct, timezone, safecheck)
        started = time.perf_counter()  # what antkv's PartitionMetrics.process_s times
        try:
            write_outputs(self.body(state, owned_frames(frames, K, N, p, seen)), writer, self.columns,
                          self.output_check)
            files = writer.close()
        except BaseException:
            writer.abort()
            raise
        return {"partition": p, "rows": seen[0], "output_rows": writer.rows, "entries": len(store),
                "process_s": time.perf_counter() - started,
                "outputs": list(files), "reports": state.reports}


def worker_store(location: str, operator: str, partition: int) -> DictStore:
    """Partition ``partition``'s dict in this Python worker, kept between batches (a bench
    function travels by value, so its own module globals would be new in every task)."""
    import sys

    worker = sys.__dict__.setdefault(WORKER_STATE, {})
    key = (location, operator, partition)
    store = worker.get(key)
    if store is None:
        store = worker[key] = DictStore()
    return store


def share_counting(location: str, reports: list[dict], count: int) -> float:
    """Of the output rows one batch's ``reports`` name, the share whose ``count`` column is
    ``count`` (the bench's function counts a key's rows over the batches: every key in every
    batch counts ``batch + 1`` where its partition's dict was kept)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from antkv.spark.store.location import as_location

    where = as_location(location)
    total = hits = 0
    for report in reports:
        for name in report["outputs"]:
            counts = pq.read_table(where.path(name), columns=["count"])["count"]
            total += len(counts)
            hits += pc.sum(pc.equal(counts, count)).as_py() or 0
    return hits / total if total else 0.0


def floor_batch(func, schema: str, partitions: int, location: str, key=("key",), operator: str = "floor"):
    """A ``foreachBatch`` function running ``func`` as ``StatefulPipeline(location, operator,
    key, func, schema, partitions=partitions)`` does, with :class:`DictStore` state (see the
    module docstring); the output's files go to ``location``.  Returns the function; its
    ``reports`` attribute lists each batch's per-partition figures."""
    import json
    import sys

    from pyspark import cloudpickle

    import antkv
    from antkv.spark.runtime.executor_check import checked_task
    from antkv.spark.runtime.pipeline import KEY_GROUP_COLUMN
    from antkv.spark.runtime.routing import route

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import bench/
    key = [key] if isinstance(key, str) else list(key)

    def on_batch(df, batch_id):
        from pyspark.sql.types import StructType

        batch_id = int(batch_id)
        conf = df.sparkSession.conf
        timezone = conf.get("spark.sql.session.timeZone")
        safecheck = conf.get("spark.sql.execution.pandas.convertToArrowArraySafely", "false").lower() == "true"
        floor = PipelineFloor(func, key, schema, StructType.fromDDL(schema), df.columns, partitions,
                              location, operator)

        def task(frames):
            import json

            import pandas as pd
            from pyspark import TaskContext

            p = TaskContext.get().partitionId()
            store = worker_store(location, operator, p)
            report = floor.run_partition(store, p, batch_id, frames, timezone, safecheck)
            yield pd.DataFrame({"report": [json.dumps(report)]})

        routed = route(df, key, partitions, floor.key_groups, KEY_GROUP_COLUMN)
        routed = routed.sortWithinPartitions(KEY_GROUP_COLUMN, *key)
        collected = routed.mapInPandas(checked_task(task, antkv.__version__), "report string").collect()
        on_batch.reports.append(sorted((json.loads(r["report"]) for r in collected), key=lambda r: r["partition"]))

    on_batch.reports = []
    return on_batch


def write_floor_ms(directory: str, total_bytes: int, files: int, rounds: int = 3) -> float:
    """The least time, in ms, to persist ``total_bytes`` of random bytes as ``files`` files
    in ``directory`` (each written whole, then fsynced), best of ``rounds``: what writing one
    batch's checkpoint bytes once costs on the machine's disk, whatever the store.  Added to
    the dict floor's batch, it bounds what any store that persists each batch can reach."""
    import time

    size = max(1, total_bytes // files)
    data = [os.urandom(size) for _ in range(files)]
    best = float("inf")
    for r in range(rounds):
        start = time.perf_counter()
        for i, chunk in enumerate(data):
            with open(os.path.join(directory, f"write-floor-{r}-{i}"), "wb") as f:
                f.write(chunk)
                f.flush()
                os.fsync(f.fileno())
        best = min(best, time.perf_counter() - start)
        for i in range(files):
            os.remove(os.path.join(directory, f"write-floor-{r}-{i}"))
    return best * 1000
