"""The soak bench's stream and the one keyed state machine every engine runs over it.

**The stream** (:class:`SoakStream`, deterministic from ``seed``): batch ``b`` is one Parquet
file of ``rows`` rows, all with the event time ``T(b) = BASE_MS + b`` minutes.  Each row names a
key drawn from a Zipf distribution (exponent ``zipf``) over a key space that grows linearly from
a tenth of ``keys`` to ``keys`` over the first ``growth`` share of the batches, then stays flat
(key ``k00000000`` is the hottest).  An ``op`` says what the row does: ``UPSERT`` (insert when
the key has no state, update when it has) with a value of random, hence incompressible and
per-row different, bytes -- 100 B to 4 KiB, a ``LARGE_SHARE`` of them so close to 4 KiB that
the stored state entry is above antkv's value-log threshold (``min_blob_size``, 4 KiB) -- or
``DELETE`` (a ``delete_share`` of the rows).  ``seq`` numbers the rows of the whole stream.

**The state machine** (:func:`apply_rows`): a key's state is one row ``(start, last, count,
bytes, seqsum, value)``: the event times of its first and latest row, how many upserts it took,
their value bytes, the sum of their ``seq``, and the latest value.  A key whose latest event is
``ttl_ms`` older than the watermark expires (an event-time timer at ``last + ttl_ms``).  When a
key's state ends -- a ``DELETE``, or expiry -- one output row closes it: the aggregate, the
CRC-32 and size of the value read back from the state, and the reason.  A key's rows of one
batch are applied in ``seq`` order, and a key found expired when its rows arrive is closed
first, so the output does not depend on whether the engine fired the timer before the batch
(Spark runs a batch without data for it) or after it (antkv, in the next batch).

``ttl_ms`` is ``ttl_batches`` minutes and a half: a deadline never equals a watermark (every
watermark is some ``T(b)``), so ``<`` and ``<=`` comparisons of the engines agree.  The state
reaches a steady size: the keys touched in the last ``ttl_batches + 1`` batches.

The end of the stream is two more files (:meth:`SoakStream.flush_files`): one ``NOOP`` row far
in the future, which moves every engine's watermark past every deadline, and an empty file, the
batch in which antkv's runners fire the timers that watermark expired.  After them every key's
state has been closed, so the output rows of two engines, as multisets, must be equal.
"""

from __future__ import annotations

import os
import zlib

UPSERT, DELETE, NOOP = 0, 1, 2
BASE_MS = 1_700_000_000_000
MINUTE_MS = 60_000
MIN_VALUE, MAX_VALUE = 100, 4096
LARGE_FROM = 4064  # values from here up: the stored entry (value + its row encoding) is over 4 KiB
LARGE_SHARE = 0.15
INPUT_SCHEMA = "key string, op int, seq long, value binary, ms long, ts timestamp"
STATE_SCHEMA = "start long, last long, count long, bytes long, seqsum long, value binary"
OUTPUT_SCHEMA = ("key string, start long, last long, count long, bytes long, seqsum long, "
                 "crc long, size long, reason string")
OUTPUT_COLUMNS = ["key", "start", "last", "count", "bytes", "seqsum", "crc", "size", "reason"]


def ttl_ms(ttl_batches: int) -> int:
    return ttl_batches * MINUTE_MS + MINUTE_MS // 2


GROWTH = 0.3  # the share of the batches over which the key space grows


class SoakStream:
    """The input of the bench; see the module docstring.  ``file(b)`` is the same for a seed."""

    def __init__(self, *, seed: int, batches: int, rows: int, keys: int, zipf: float = 1.1,
                 growth: float = GROWTH, delete_share: float = 0.05, ttl_batches: int = 10):
        import numpy as np

        if min(batches, rows, keys, ttl_batches) < 1 or zipf <= 0 or not 0 <= delete_share < 1 or not 0 <= growth <= 1:
            raise ValueError("batches, rows, keys and ttl_batches must be positive, zipf > 0, "
                             "delete_share and growth in [0, 1)")
        self.seed, self.batches, self.rows, self.keys = seed, batches, rows, keys
        self.zipf, self.growth, self.delete_share, self.ttl_batches = zipf, growth, delete_share, ttl_batches
        self.ttl_ms = ttl_ms(ttl_batches)
        self._cumulative = np.cumsum(1.0 / np.arange(1, keys + 1, dtype=np.float64) ** zipf)

    def key_space(self, batch: int) -> int:
        """How many keys batch ``batch`` draws from."""
        first = max(1, self.keys // 10)
        grow_batches = max(1, int(self.batches * self.growth))
        if batch >= grow_batches:
            return self.keys
        return first + (self.keys - first) * batch // grow_batches

    def event_ms(self, batch: int) -> int:
        return BASE_MS + batch * MINUTE_MS

    def table(self, batch: int):
        """Batch ``batch`` as a pyarrow Table (the stream's schema)."""
        import numpy as np
        import pyarrow as pa

        rng = np.random.default_rng([self.seed, batch])
        n = self.rows
        space = self.key_space(batch)
        ranks = np.searchsorted(self._cumulative[:space], rng.random(n) * self._cumulative[space - 1])
        ranks = np.minimum(ranks, space - 1)
        ops = np.where(rng.random(n) < self.delete_share, DELETE, UPSERT).astype(np.int32)
        large = rng.random(n) < LARGE_SHARE
        small = np.exp(rng.uniform(np.log(MIN_VALUE), np.log(LARGE_FROM), n))
        sizes = np.where(large, rng.integers(LARGE_FROM, MAX_VALUE + 1, n), small.astype(np.int64))
        sizes = np.where(ops == DELETE, 0, sizes).astype(np.int64)
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        data = rng.bytes(int(offsets[-1]))
        values = pa.Array.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
        ms = self.event_ms(batch)
        return pa.table({
            "key": pa.array([f"k{r:08d}" for r in ranks.tolist()]),
            "op": pa.array(ops),
            "seq": pa.array(np.arange(batch * n, (batch + 1) * n, dtype=np.int64)),
            "value": values,
            "ms": pa.array(np.full(n, ms, dtype=np.int64)),
            "ts": pa.array(np.full(n, ms * 1000, dtype=np.int64), pa.timestamp("us")),
        })

    def flush_tables(self):
        """The two files after the last batch (module docstring): a far-future ``NOOP`` row, then
        nothing."""
        import pyarrow as pa

        far = self.event_ms(self.batches) + (self.ttl_batches + 2) * MINUTE_MS
        noop = pa.table({"key": ["~flush"], "op": pa.array([NOOP], pa.int32()), "seq": pa.array([-1], pa.int64()),
                         "value": pa.array([b""], pa.large_binary()), "ms": pa.array([far], pa.int64()),
                         "ts": pa.array([far * 1000], pa.timestamp("us"))})
        return [noop, noop.slice(0, 0)]

    def event_ms_of_file(self, index: int) -> int:
        """The largest event time of file ``index`` (batches, then the flush files); -1: none."""
        if index < self.batches:
            return self.event_ms(index)
        return self.event_ms(self.batches) + (self.ttl_batches + 2) * MINUTE_MS if index == self.batches else -1

    def write_file(self, directory: str, index: int) -> str:
        """File ``index`` (batches, then the two flush files) into ``directory``; its name."""
        import pyarrow.parquet as pq

        table = self.table(index) if index < self.batches else self.flush_tables()[index - self.batches]
        name = f"batch-{index:05d}.parquet"
        tmp = os.path.join(directory, "." + name)
        pq.write_table(table, tmp, compression="none", use_dictionary=False)
        os.rename(tmp, os.path.join(directory, name))
        return name


# --------------------------------------------------------------------------- the state machine


def closed_row(key: str, agg: tuple, reason: str) -> tuple:
    start, last, count, nbytes, seqsum, value = agg
    value = bytes(value)
    return (key, start, last, count, nbytes, seqsum, zlib.crc32(value), len(value), reason)


def apply_rows(key: str, agg: tuple | None, rows, watermark_ms: int, ttl: int):
    """One key's rows of a batch applied to its state ``agg`` (None: no state): ``(new agg or
    None, closed rows)``.  ``rows`` is a pandas DataFrame with ``op``, ``seq``, ``value``, ``ms``."""
    closed = []
    if agg is not None and agg[1] + ttl < watermark_ms:
        closed.append(closed_row(key, agg, "expired"))
        agg = None
    order = rows["seq"].to_numpy().argsort(kind="stable")
    ops = rows["op"].to_numpy()[order].tolist()
    seqs = rows["seq"].to_numpy()[order].tolist()
    times = rows["ms"].to_numpy()[order].tolist()
    values = rows["value"].to_numpy()[order]
    for op, seq, t, value in zip(ops, seqs, times, values):
        if op == DELETE:
            if agg is not None:
                closed.append(closed_row(key, agg, "deleted"))
                agg = None
        elif op == UPSERT:
            value = bytes(value)
            if agg is None:
                agg = (t, t, 1, len(value), seq, value)
            else:
                agg = (agg[0], max(agg[1], t), agg[2] + 1, agg[3] + len(value), agg[4] + seq, value)
    return agg, closed


def _frame(rows: list[tuple]):
    import pandas as pd

    return pd.DataFrame(rows, columns=OUTPUT_COLUMNS)


# --------------------------------------------------------------------------- the four engines' code


def apply_function(ttl: int):
    """For ``applyInPandasWithState`` with ``GroupStateTimeout.EventTimeTimeout``."""

    def soak(key, frames, state):
        k = key[0]
        if state.hasTimedOut:
            closed = [closed_row(k, tuple(state.get), "expired")]
            state.remove()
        else:
            import pandas as pd

            rows = pd.concat(list(frames), ignore_index=True)
            agg, closed = apply_rows(k, tuple(state.get) if state.exists else None, rows,
                                     state.getCurrentWatermarkMs(), ttl)
            if agg is None:
                if state.exists:
                    state.remove()
            else:
                state.update(agg)
                state.setTimeoutTimestamp(agg[1] + ttl)
        if closed:
            yield _frame(closed)

    return soak


def processor_class():
    """The ``StatefulProcessor`` run by Spark's ``transformWithStateInPandas`` and, unchanged, by
    :class:`antkv.spark.TransformWithState` (``EventTime`` mode).  The TTL is the class's ``ttl``."""
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    class SoakProcessor(StatefulProcessor):
        ttl = ttl_ms(10)

        def init(self, handle):
            self.handle = handle
            self.agg = handle.getValueState("agg", STATE_SCHEMA)

        def handleInputRows(self, key, rows, timerValues):
            import pandas as pd

            old = tuple(self.agg.get()) if self.agg.exists() else None
            frame = pd.concat(list(rows), ignore_index=True)
            agg, closed = apply_rows(key[0], old, frame, timerValues.getCurrentWatermarkInMs(), self.ttl)
            old_timer = None if old is None else old[1] + self.ttl
            new_timer = None if agg is None else agg[1] + self.ttl
            if old_timer is not None and old_timer != new_timer:
                self.handle.deleteTimer(old_timer)
            if agg is None:
                if old is not None:
                    self.agg.clear()
            else:
                self.agg.update(agg)
                if new_timer != old_timer:
                    self.handle.registerTimer(new_timer)
            if closed:
                yield _frame(closed)

        def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
            if self.agg.exists():
                agg = tuple(self.agg.get())
                self.agg.clear()
                yield _frame([closed_row(key[0], agg, "expired")])

        def close(self):
            pass

    return SoakProcessor


def with_ttl(cls, ttl: int):
    """``cls`` (a processor class) with the TTL ``ttl``."""
    return type(cls.__name__, (cls,), {"ttl": ttl})


class PipelineFunction:
    """The state function of :class:`antkv.spark.StatefulPipeline`: the same state machine.

    A pipeline has no timers, so expiry is kept by hand the way a timer service keeps it: an
    index per partition (a map state under the grouping key ``("~expiry",)`` in the partition's
    first key group) from ``(deadline, key group, key)`` to nothing, ordered by deadline.  At the
    first call of each partition's batch, every entry below the watermark closes its key.  The
    driver sets ``watermark_ms`` before each batch (the largest event time of the batches
    before: what Spark's and antkv's event-time runners use)."""

    INDEX_KEY = ("~expiry",)

    def __init__(self, ttl: int):
        self.ttl = ttl
        self.watermark_ms = 0

    def __call__(self, state, rows):
        from antkv.spark.runtime.pipeline import KEY_GROUP_COLUMN

        agg_state = state.value_state("agg", 1)
        index = state.map_state("expiry", 2)
        index_group = state.owned.start
        closed = []
        if "expired" not in state.reports:
            state.set_current_key(index_group, self.INDEX_KEY)
            due = []
            for (deadline, group, key), _ in index.iterator():
                if deadline >= self.watermark_ms:
                    break
                due.append((deadline, group, key))
            for deadline, group, key in due:
                index.removeKey((deadline, group, key))
            for deadline, group, key in due:
                state.set_current_key(group, (key,))
                closed.append(closed_row(key, agg_state.get(), "expired"))
                agg_state.clear()
            state.reports["expired"] = len(due)
        for (key,), group in state.groups(rows):
            key_group = int(group[KEY_GROUP_COLUMN].iat[0])
            old = agg_state.get()
            agg, out = apply_rows(key, old, group, self.watermark_ms, self.ttl)
            closed += out
            if agg is None:
                if old is not None:
                    agg_state.clear()
            else:
                agg_state.update(agg)
            old_deadline = None if old is None else old[1] + self.ttl
            new_deadline = None if agg is None else agg[1] + self.ttl
            if old_deadline != new_deadline:
                state.set_current_key(index_group, self.INDEX_KEY)
                if old_deadline is not None:
                    index.removeKey((old_deadline, key_group, key))
                if new_deadline is not None:
                    index.updateValue((new_deadline, key_group, key), ())
        if closed:
            yield _frame(closed)
