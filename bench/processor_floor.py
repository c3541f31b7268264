"""The processor bench's floor: antkv's ``StatefulProcessor`` runner with state that costs nothing.

:func:`floor_batch` is a ``foreachBatch`` function that does what
:meth:`antkv.spark.TransformWithState.run` does to a batch -- the event-time column and the
late-row filter, the routing by key group, the sort, one Arrow stream per partition, the same
runner (``transform._run_partition``: the key chunks, the handler calls, the expired timers,
the output frames), one collected row per partition -- with one difference: the processor's
handle keeps its state in plain dicts in the Python worker (:class:`DictHandle`), nothing is
encoded, nothing is opened, committed or published, and the output frames are counted, not
written.  Its batch time is the least a runner of this shape can take on the machine; the
bench gives antkv's share of it.

The dicts stay in the worker between batches, as a working copy does.  A partition whose task
lands in another worker starts empty there: its answers may then differ from antkv's, its cost
does not (a key's first batch writes what later batches rewrite).
"""

from __future__ import annotations

import heapq



class _Variable:
    def __init__(self, handle, per_key: dict):
        self._handle = handle
        self._state = per_key


class DictValueState(_Variable):
    def exists(self) -> bool:
        return self._handle.current in self._state

    def get(self):
        return self._state.get(self._handle.current)

    def update(self, newValue) -> None:  # noqa: N803 - Spark's name
        self._state[self._handle.current] = tuple(newValue)

    def clear(self) -> None:
        self._state.pop(self._handle.current, None)


class DictListState(_Variable):
    def exists(self) -> bool:
        return bool(self._state.get(self._handle.current))

    def get(self):
        return iter(self._state.get(self._handle.current, ()))

    def put(self, newState) -> None:  # noqa: N803
        self._state[self._handle.current] = [tuple(r) for r in newState]

    def appendValue(self, newState) -> None:  # noqa: N802,N803
        self._state.setdefault(self._handle.current, []).append(tuple(newState))

    def appendList(self, newState) -> None:  # noqa: N802,N803
        self._state.setdefault(self._handle.current, []).extend(tuple(r) for r in newState)

    def clear(self) -> None:
        self._state.pop(self._handle.current, None)


class DictMapState(_Variable):
    def _map(self) -> dict:
        return self._state.setdefault(self._handle.current, {})

    def exists(self) -> bool:
        return bool(self._state.get(self._handle.current))

    def getValue(self, key):  # noqa: N802
        return self._map().get(tuple(key))

    def containsKey(self, key) -> bool:  # noqa: N802
        return tuple(key) in self._map()

    def updateValue(self, key, value) -> None:  # noqa: N802
        self._map()[tuple(key)] = tuple(value)

    def removeKey(self, key) -> None:  # noqa: N802
        self._map().pop(tuple(key), None)

    def iterator(self):
        return iter(sorted(self._map().items()))

    def keys(self):
        return iter(sorted(self._map()))

    def values(self):
        return (v for _, v in sorted(self._map().items()))

    def clear(self) -> None:
        self._state.pop(self._handle.current, None)


class DictTimers:
    """A partition's timers: ``(key group, key) -> set of times`` and a heap of ``(time, key
    group, key)`` whose entries are checked against the sets when they come due."""

    def __init__(self, partition: "PartitionDicts", handle):
        self._by_key = partition.timers
        self._heap = partition.timer_heap
        self._handle = handle

    def register(self, ms) -> None:
        current = self._handle.current_with_group
        times = self._by_key.setdefault(current, set())
        if ms not in times:
            times.add(ms)
            heapq.heappush(self._heap, (ms, current[0], current[1]))

    def delete(self, ms) -> None:
        times = self._by_key.get(self._handle.current_with_group)
        if times is not None:
            times.discard(ms)

    def list(self) -> list:
        return sorted(self._by_key.get(self._handle.current_with_group, ()))

    def expired(self, key_groups, threshold: int) -> list:
        """``(time, None, key group, key)`` of every live timer due at ``threshold``, in time order."""
        heap, out = self._heap, []
        while heap and heap[0][0] <= threshold:
            ms, kg, key = heapq.heappop(heap)
            if ms in self._by_key.get((kg, key), ()):
                out.append((ms, None, kg, key))
        return out


class DictHandle:
    """A ``StatefulProcessorHandle`` whose state is the worker's dicts for one partition
    (``store``: that partition's :class:`PartitionDicts`); the runner's calls (``set_current_key``,
    ``timers``, ``clear_expired_state``) as :class:`~antkv.spark.processor.handle.ProcessorHandle`
    has them."""

    def __init__(self, store: "PartitionDicts", owned, time_mode: str, batch_timestamp_ms: int):
        self._partition = store
        self.owned = owned
        self.time_mode = time_mode
        self.batch_timestamp_ms = batch_timestamp_ms
        self.timers = DictTimers(store, self)
        self.current = None
        self.current_with_group = None

    def _per_key(self, name: str) -> dict:
        return self._partition.variables.setdefault(name, {})

    def getValueState(self, stateName, schema, ttlDurationMs=None):  # noqa: N802,N803
        return DictValueState(self, self._per_key(stateName))

    def getListState(self, stateName, schema, ttlDurationMs=None):  # noqa: N802,N803
        return DictListState(self, self._per_key(stateName))

    def getMapState(self, stateName, userKeySchema, valueSchema, ttlDurationMs=None):  # noqa: N802,N803
        return DictMapState(self, self._per_key(stateName))

    def deleteIfExists(self, stateName) -> None:  # noqa: N802,N803
        self._partition.variables.pop(stateName, None)

    def set_current_key(self, key_group: int, key: tuple) -> None:
        self.current = key
        self.current_with_group = (key_group, key)

    def clear_current_key(self) -> None:
        self.current = self.current_with_group = None

    def registerTimer(self, expiryTimestampMs) -> None:  # noqa: N802,N803
        self.timers.register(expiryTimestampMs)

    def deleteTimer(self, expiryTimestampMs) -> None:  # noqa: N802,N803
        self.timers.delete(expiryTimestampMs)

    def listTimers(self):  # noqa: N802
        return iter(self.timers.list())

    def clear_expired_state(self) -> int:
        return 0


class PartitionDicts:
    """One partition's state in a worker: each variable's dict by grouping key, the timers."""

    def __init__(self):
        self.variables: dict[str, dict] = {}
        self.timers: dict[tuple, set] = {}
        self.timer_heap: list = []

    def warm_touched(self, touched, codec=None) -> int:
        """The runner warms the key groups a batch touches densely: dicts need nothing."""
        return 0


class RunnerPartition:
    """What the runner asks of a partition's state: the store (its dicts here; an antkv store in
    ``bench/processor_split.py``), the key groups it owns and the reports it sends the driver."""

    def __init__(self, store, owned):
        self.store = store
        self.owned = owned
        self.reports: dict = {}


def floor_batch(processor_class, output_schema: str, partitions: int, rows: bool = False, query: str = "floor"):
    """A ``foreachBatch`` function running ``processor_class()`` as
    ``TransformWithState(..., "key", time_mode="EventTime", event_time_column="ts")`` does,
    with :class:`DictHandle` state (see the module docstring); ``query`` names the state, kept
    in each Python worker per query and partition (two floor queries in one session must not
    share it)."""
    import sys
    import time as _time

    from pyspark import cloudpickle
    from pyspark.sql import functions as F

    from antkv.spark.processor.transform import EVENT_MS_COLUMN, _Batch, _ddl, _run_partition
    from antkv.spark.runtime.pipeline import KEY_GROUP_COLUMN
    from antkv.spark.runtime.routing import route
    from antkv.spark.store.keygroups import DEFAULT_KEY_GROUPS, key_group_range

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import bench/
    output_columns = tuple(c.strip().split()[0] for c in _ddl(output_schema).split(","))
    seen = {"max_event_ms": None}

    def on_batch(df, batch_id):
        late = 0 if seen["max_event_ms"] is None else seen["max_event_ms"]
        input_columns = tuple(df.columns)
        row_types = None
        if rows:
            row_types = (tuple(f.dataType for f in df.schema.fields), None,
                         df.sparkSession.conf.get("spark.sql.session.timeZone"))
        df = df.withColumn(EVENT_MS_COLUMN, F.expr("unix_millis(`ts`)"))
        df = df.where(F.col(EVENT_MS_COLUMN).isNull() | (F.col(EVENT_MS_COLUMN) > late))
        limit = int(df.sparkSession.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch", "10000"))
        batch = _Batch(processor_class(), ("key",), input_columns, None, output_columns, "EventTime",
                       int(_time.time() * 1000), late, True, {}, limit, row_types)

        def task(frames):
            import sys

            import pandas as pd
            from pyspark import TaskContext

            p = TaskContext.get().partitionId()
            # the worker's dicts, kept between batches (a bench function travels by value, so
            # its own module globals would be new in every task)
            worker = sys.__dict__.setdefault("_antkv_processor_floor", {})
            dicts = worker.get((query, p))
            if dicts is None:
                dicts = worker[(query, p)] = PartitionDicts()
            state = RunnerPartition(dicts, key_group_range(DEFAULT_KEY_GROUPS, partitions, p))
            produced = sum(len(out) for out in _run_partition(batch, state, frames, DictHandle))
            newest = state.reports.get("max_event_time_ms")
            yield pd.DataFrame({"rows": [produced], "newest": [-1 if newest is None else newest]})

        routed = route(df, ["key"], partitions, DEFAULT_KEY_GROUPS, KEY_GROUP_COLUMN)
        routed = routed.sortWithinPartitions(KEY_GROUP_COLUMN, "key")
        out = routed.mapInPandas(task, "rows long, newest long").collect()
        newest = max((r["newest"] for r in out), default=-1)
        if newest >= 0:
            seen["max_event_ms"] = max(newest, seen["max_event_ms"] or newest)
    return on_batch
