"""Row-based Spark processors (Spark 4.1's ``groupBy(key).transformWithState``) run unchanged
on antkv state with ``TransformWithState(..., rows=True)``, and agree with Spark.

Each processor runs over the same micro-batches on Spark's own row-based
``transformWithState`` (RocksDB provider) and on antkv; the outputs must be equal.  The
processors check the Python types of what they are handed (a tuple key, ``Row``s of every
input column, aware ``datetime``s, ``None`` for null, lists for arrays), so a value Spark and
antkv hand over differently fails the run where it happens."""

import datetime
import sys

import pytest
from pyspark import cloudpickle
from pyspark.sql import Row
from pyspark.sql.streaming.stateful_processor import StatefulProcessor

from antkv.spark import TransformWithState
from tests.test_spark_processor import both

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import tests/
MINUTE = 60_000
T0 = 1_700_000_000_000


def at(minutes: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp((T0 + minutes * MINUTE) / 1000, datetime.timezone.utc)


class Visits(StatefulProcessor):
    """Per user: visits, the sum of their (nullable) amounts, the tags seen and the last visit;
    an "idle" row once the watermark passes 10 minutes after the last visit."""

    def init(self, handle):
        self.handle = handle
        self.seen = handle.getValueState("seen", "visits long, total long, tags long, last long")

    def handleInputRows(self, key, rows, timerValues):
        assert type(key) is tuple and type(key[0]) is str, key
        visits, total, tags, last = self.seen.get() or (0, 0, 0, None)
        newest = None
        for row in rows:
            assert isinstance(row, Row) and list(row.__fields__) == ["key", "ts", "amount", "tags"], row
            assert isinstance(row.ts, datetime.datetime) and row.ts.tzinfo is not None, row.ts
            assert row.amount is None or type(row.amount) is int, row.amount
            assert type(row.tags) is list and all(type(t) is str for t in row.tags), row.tags
            visits += 1
            total += row.amount or 0
            tags += len(row.tags)
            newest = row.ts if newest is None else max(newest, row.ts)
        ms = int(newest.timestamp() * 1000)
        if last is not None:
            self.handle.deleteTimer(last + 10 * MINUTE)
        last = ms if last is None else max(last, ms)
        self.handle.registerTimer(last + 10 * MINUTE)
        self.seen.update((visits, total, tags, last))
        yield Row(key=key[0], event="visits", n=visits, total=total, last=newest)

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
        visits, total, _tags, last = self.seen.get()
        self.seen.clear()
        last_visit = datetime.datetime.fromtimestamp(last / 1000, datetime.timezone.utc)
        yield Row(event="idle", key=key[0], n=visits, total=None, last=last_visit)  # fields in another order


class Totals(StatefulProcessor):
    """Initial state, one row at a time: totals start from the initial balances."""

    def init(self, handle):
        self.total = handle.getValueState("total", "amount double")

    def handleInitialState(self, key, initialState, timerValues):
        assert isinstance(initialState, Row) and type(initialState.balance) is float, initialState
        self.total.update(((self.total.get() or (0.0,))[0] + initialState.balance,))

    def handleInputRows(self, key, rows, timerValues):
        total = (self.total.get() or (0.0,))[0]
        for row in rows:
            total += row.amount
        self.total.update((total,))
        yield Row(key=key[0], total=total)


def test_event_time_timers_and_types_equal_spark(spark, tmp_path):
    batches = [
        [("u1", at(0), 5, ["a"]), ("u1", at(2), None, []), ("u2", at(1), 7, ["a", "b"])],
        [("u1", at(4), 1, ["c"]), ("u3", at(20), None, ["x"])],   # the watermark passes u1's and u2's timers
        [("u3", at(22), 2, []), ("u4", at(40), 3, ["y"])],        # ... and u3's
    ]
    got = both(spark, tmp_path, "visits", Visits(), batches, "key string, ts timestamp, amount long, tags array<string>",
               "key string, event string, n long, total long, last timestamp", "EventTime", event_time="ts",
               rows=True)
    idle = {r[0] for r in got if r[1] == "idle"}
    assert {"u1", "u2"} <= idle and ("u1", "visits", 3, 6) in [r[:4] for r in got]


def test_initial_state_row_by_row_equals_spark(spark, tmp_path):
    initial = ([("a", 100.0), ("a", 5.5), ("c", 7.0)], "key string, balance double")
    batches = [[("a", 1.0), ("b", 2.0)], [("a", 3.0), ("c", 4.0)]]
    got = both(spark, tmp_path, "totals", Totals(), batches, "key string, amount double", "key string, total double",
               "None", initial=initial, rows=True)
    assert got == sorted([("a", 106.5), ("b", 2.0), ("a", 109.5), ("c", 11.0)])


def test_a_row_processor_must_yield_rows(spark, tmp_path):
    class Tuples(StatefulProcessor):
        def init(self, handle):
            pass

        def handleInputRows(self, key, rows, timerValues):
            yield (key[0], sum(1 for _ in rows))

    runner = TransformWithState(f"file://{tmp_path}/state", "tuples", "key", Tuples(), "key string, n long",
                                partitions=2, key_groups=16, rows=True)
    with pytest.raises(Exception, match="yields pyspark.sql.Row objects, not tuple"):
        runner.run(spark.createDataFrame([("a", 1)], "key string, v long"), 0)
    assert runner.pipeline.coordinator.latest_version() == 0  # nothing was published
    with pytest.raises(TypeError, match="rows must be a bool"):
        TransformWithState(f"file://{tmp_path}/state", "tuples", "key", Tuples(), "key string, n long",
                           partitions=2, rows="yes")


class Echo(StatefulProcessor):
    """Each input row, printed with the Python type of every value: what the processor is
    handed, compared byte for byte between Spark and antkv."""

    def init(self, handle):
        self.n = handle.getValueState("n", "n long")

    def handleInputRows(self, key, rows, timerValues):
        n = (self.n.get() or (0,))[0]
        for row in rows:
            n += 1
            typed = [(name, type(value).__name__, value) for name, value in zip(row.__fields__, row)]
            yield Row(key=repr(key), n=n, seen=repr(typed))
        self.n.update((n,))


def test_every_spark_type_reaches_a_row_processor_as_on_spark(spark, tmp_path):
    import decimal

    schema = ("key string, blob binary, day date, price decimal(10,2), ok boolean, small int, "
              "ratio float, attrs map<string,bigint>, point struct<x:bigint,y:string>, ts timestamp, "
              "local timestamp_ntz, tags array<bigint>")
    day, ts = datetime.date(2026, 11, 28), at(3)
    full = ("a", b"\x00\xff", day, decimal.Decimal("12.34"), True, 7, 0.5, {"k": 1}, (3, "p"), ts,
            datetime.datetime(2026, 11, 28, 9, 30), [1, 2])
    empty = ("b",) + (None,) * 11
    batches = [[full, empty], [("a", b"", day, decimal.Decimal("0.01"), False, -1, 1.25, {}, (None, None), ts,
                                datetime.datetime(2026, 1, 1), [])]]
    got = both(spark, tmp_path, "echo", Echo(), batches, schema, "key string, n long, seen string", "None", rows=True)
    assert len(got) == 3 and "Decimal('12.34')" in got[0][2]
