"""More processors in the style of Spark's own transformWithStateInPandas tests, on Spark and antkv.

Each runs over the same micro-batches on Spark's ``transformWithStateInPandas`` (RocksDB state
store provider) and on antkv's ``TransformWithState``, and the outputs must be equal
(``test_spark_processor.both``): composite state types (arrays, maps, structs, decimals) in
value, list and map state, used the way Spark users write them (``Row.asDict()``, ``list.append``,
dict lookups); ``deleteIfExists`` in ``init``, ``listTimers`` and event-time timers with a late
event, on a runner restarted at every batch; list and map state with and without a TTL.
"""

from __future__ import annotations

import os
import random
import sys
from decimal import Decimal

import pandas as pd
import pytest
from pyspark import cloudpickle
from pyspark.sql import Row
from pyspark.sql.streaming.stateful_processor import StatefulProcessor

from antkv.spark import StoreOptions

from test_spark_processor import MINUTE, T0, both, run_on_antkv, run_on_spark
from test_spark_store_model import s3_server, s3_uri  # noqa: F401

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import tests/

PROFILE = ("count long, tags array<string>, last struct<item: string, qty: int>, "
           "totals map<string, bigint>, spent decimal(10, 2)")


class CompositeProfile(StatefulProcessor):
    """Value, list and map state of composite types, read and changed as Spark's types."""

    def init(self, handle):
        self.profile = handle.getValueState("profile", PROFILE)
        self.history = handle.getListState("history", "item string, attrs map<string, int>")
        self.by_item = handle.getMapState("by_item", "item string", "first struct<qty: int>, qtys array<int>")

    def handleInputRows(self, key, rows, timerValues):
        count, tags, last, totals, spent = self.profile.get() or (0, [], None, {}, Decimal("0.00"))
        for frame in rows:
            for item, qty in zip(frame["item"], frame["qty"]):
                qty = int(qty)
                count += 1
                if item not in tags:
                    tags.append(item)
                last = Row(item=item, qty=qty)
                totals[item] = totals.get(item, 0) + qty
                spent += Decimal(qty) / 4
                self.history.appendValue((item, {"q": qty}))
                known = self.by_item.getValue((item,))
                first, qtys = ({"qty": qty}, []) if known is None else (known[0].asDict(), known[1])
                self.by_item.updateValue((item,), (first, qtys + [qty]))
        self.profile.update((count, tags, last, totals, spent.quantize(Decimal("0.01"))))
        count, tags, last, totals, spent = self.profile.get()
        history = [f"{i}:{a['q']}" for i, a in self.history.get()]
        items = ";".join(f"{k[0]}={v[0].qty}/{','.join(map(str, v[1]))}" for k, v in sorted(self.by_item.iterator()))
        yield pd.DataFrame({
            "key": [key[0]], "count": [count], "tags": ["|".join(tags)],
            "last": [f"{last.asDict()['item']}x{last.qty}"],
            "totals": [",".join(f"{k}={totals[k]}" for k in sorted(totals))],
            "spent": [f"{float(spent):.2f}"], "history": [" ".join(history)], "items": [items]})


def test_composite_state_types_equal_spark(spark, tmp_path):
    batches = [[("a", "x", 1), ("a", "y", 2), ("b", "x", 3)], [("a", "x", 4), ("c", "z", 5)],
               [("b", "y", 6), ("b", "x", 7), ("a", "z", 1)]]
    got = both(spark, tmp_path, "profile", CompositeProfile(), batches, "key string, item string, qty int",
               "key string, count long, tags string, last string, totals string, spent string, history string, "
               "items string", "None")
    assert ("a", 4, "x|y|z", "zx1", "x=5,y=2,z=1", "2.00", "x:1 y:2 x:4 z:1", "x=1/1,4;y=2/2;z=1/1") in got


@pytest.mark.parametrize("where", ["local", "s3"])
def test_composite_state_types_with_remote_tables_equal_spark(spark, tmp_path, where, request):
    # antkv reads its tables from the location (a local directory, or the S3 server the tests
    # start) through a 4 KiB block cache, a small fraction of the state
    # (StoreOptions.tables="remote"); a restarted runner at every batch
    rnd = random.Random(3)
    batches = [[(f"k{rnd.randrange(300):03d}", rnd.choice("xyz"), rnd.randrange(9)) for _ in range(500)]
               for _ in range(3)]
    schema = "key string, item string, qty int"
    out = ("key string, count long, tags string, last string, totals string, spent string, history string, "
           "items string")
    want = run_on_spark(spark, str(tmp_path), "profile", CompositeProfile(), batches, schema, out, "None")
    options = StoreOptions(tables="remote", cache_disk_bytes=4096, cache_dir=str(tmp_path / "cache"),
                           max_changelog_chain=1)
    uri = None
    if where == "s3":
        uri, location = s3_uri(request.getfixturevalue("s3_server"))
    got, _ = run_on_antkv(spark, str(tmp_path), "profile", CompositeProfile(), batches, schema, out, "None",
                          restart=True, options=options, location=uri)
    assert got == want
    if uri is None:
        tables = {n: os.path.getsize(os.path.join(d, n)) for d, _, names in os.walk(tmp_path / "antkv") for n in names}
    else:
        tables = {}
        for p in location.list_subdirs("profile"):
            tables.update(location.list_sizes(f"profile/{p}"))
    tables = {n: size for n, size in tables.items() if n.endswith((".sst", ".vlog"))}
    assert sum(tables.values()) >= 10 * 4096  # the snapshot files the location retains
    assert not [n for _, _, names in os.walk(tmp_path / "cache" / "objects") for n in names]


class DeleteAndTimers(StatefulProcessor):
    """deleteIfExists in init (a scratch state that starts empty in every batch), a count kept
    across batches and restarts, an event-time timer 10 minutes after each event, listTimers."""

    def init(self, handle):
        self.handle = handle
        handle.deleteIfExists("scratch")
        self.scratch = handle.getValueState("scratch", "n long")
        self.count = handle.getValueState("count", "n long")

    def handleInputRows(self, key, rows, timerValues):
        had_scratch = self.scratch.exists()
        n = 0
        for frame in rows:
            for ts in frame["ts"]:
                self.handle.registerTimer(int(pd.Timestamp(ts).value // 1_000_000) + 10 * MINUTE)
                n += 1
        count = (self.count.get() or (0,))[0] + n
        self.count.update((count,))
        self.scratch.update((n,))
        timers = ",".join(str(t - T0) for t in sorted(self.handle.listTimers()))
        yield pd.DataFrame({"key": [key[0]], "what": ["input"], "n": [count], "scratch": [int(had_scratch)],
                            "timers": [timers]})

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
        expiry = expiredTimerInfo.getExpiryTimeInMs()
        later = ",".join(str(t - T0) for t in sorted(self.handle.listTimers()) if t > expiry)
        yield pd.DataFrame({"key": [key[0]], "what": [f"timer {expiry - T0}"], "n": [(self.count.get() or (0,))[0]],
                            "scratch": [int(self.scratch.exists())], "timers": [later]})


def test_delete_if_exists_list_timers_and_late_events_on_a_restarted_runner_equal_spark(spark, tmp_path):
    def at(minutes):
        return pd.Timestamp(T0 + minutes * MINUTE, unit="ms").to_pydatetime()
    batches = [
        [("a", at(0)), ("a", at(3)), ("b", at(1))],
        [("a", at(5)), ("c", at(12))],            # the watermark passes a's and b's first timers
        [("b", at(2)), ("c", at(30)), ("a", at(31))],   # b at 2 min is late (watermark 12 min): dropped
        [("d", at(32))],
    ]
    got = both(spark, tmp_path, "deltimers", DeleteAndTimers(), batches, "key string, ts timestamp",
               "key string, what string, n long, scratch long, timers string", "EventTime",
               event_time="ts", restart=True)
    assert ("a", "input", 2, 0, f"{10 * MINUTE},{13 * MINUTE}") in got
    assert ("b", "timer 660000", 1, 0, "") in got and not any(r[0] == "b" and r[1] == "input" and r[2] == 2 for r in got)


class ListMapTTL(StatefulProcessor):
    """List and map state with a TTL of 1 ms (gone by the next batch) and of an hour (kept),
    and a map without TTL."""

    def init(self, handle):
        self.recent = handle.getListState("recent", "item string", ttlDurationMs=1)
        self.kept = handle.getListState("kept", "item string", ttlDurationMs=3_600_000)
        self.short = handle.getMapState("short", "item string", "n long", ttlDurationMs=1)
        self.hour = handle.getMapState("hour", "item string", "n long", ttlDurationMs=3_600_000)
        self.ever = handle.getMapState("ever", "item string", "n long")

    def handleInputRows(self, key, rows, timerValues):
        before = (len(list(self.recent.get())), len(list(self.short.keys())), len(list(self.hour.keys())))
        for frame in rows:
            for item in frame["item"]:
                self.recent.appendValue((item,))
                self.kept.appendValue((item,))
                for state in (self.short, self.hour, self.ever):
                    state.updateValue((item,), ((state.getValue((item,)) or (0,))[0] + 1,))
        yield pd.DataFrame({"key": [key[0]], "recent_before": [before[0]], "short_before": [before[1]],
                            "hour_before": [before[2]], "kept": [len(list(self.kept.get()))],
                            "ever": [",".join(f"{k[0]}={v[0]}" for k, v in sorted(self.ever.iterator()))]})


def test_list_and_map_state_with_and_without_ttl_equal_spark(spark, tmp_path):
    batches = [[("a", "x"), ("a", "y"), ("b", "x")], [("a", "x"), ("b", "z")], [("a", "y"), ("c", "x")]]
    got = both(spark, tmp_path, "listmapttl", ListMapTTL(), batches, "key string, item string",
               "key string, recent_before long, short_before long, hour_before long, kept long, ever string",
               "ProcessingTime")
    assert ("a", 0, 0, 2, 4, "x=2,y=2") in got  # the 1 ms TTL emptied recent and short; the hour kept them


class SparkAnswers(StatefulProcessor):
    """What Spark's client answers: every call on value, list and map state that
    deleteIfExists removed in init, and user keys and values given as a bare string, a list, a
    generator, a ``Row`` or something not iterable; one output row per call, with what it
    returned or the class and text of what it raised."""

    def init(self, handle):
        self.gone_value = handle.getValueState("gone_value", "n long")
        self.gone_list = handle.getListState("gone_list", "n long")
        self.gone_map = handle.getMapState("gone_map", "k string", "n long")
        for name in ("gone_value", "gone_list", "gone_map"):
            handle.deleteIfExists(name)
        self.items = handle.getMapState("items", "item string", "n long")
        self.word = handle.getValueState("word", "w string")

    def handleInputRows(self, key, rows, timerValues):
        import numpy as np
        from pyspark.errors import PySparkRuntimeError

        v, lst, m, items = self.gone_value, self.gone_list, self.gone_map, self.items
        n = sum(len(frame) for frame in rows)
        calls = {
            "value.exists": v.exists, "value.get": v.get, "value.update": lambda: v.update((1,)),
            "value.clear": v.clear,
            "list.exists": lst.exists, "list.get": lambda: list(lst.get()), "list.put": lambda: lst.put([(1,)]),
            "list.appendValue": lambda: lst.appendValue((1,)), "list.appendList": lambda: lst.appendList([(1,)]),
            "list.clear": lst.clear,
            "map.exists": m.exists, "map.getValue": lambda: m.getValue(("a",)),
            "map.containsKey": lambda: m.containsKey(("a",)), "map.updateValue": lambda: m.updateValue(("a",), (1,)),
            "map.iterator": lambda: list(m.iterator()), "map.keys": lambda: list(m.keys()),
            "map.values": lambda: list(m.values()), "map.removeKey": lambda: m.removeKey(("a",)), "map.clear": m.clear,
            "key.bare.contains": lambda: items.containsKey("0"),
            "key.bare.get": lambda: items.getValue("0"),
            "key.bare.update": lambda: items.updateValue("0", (n,)),
            "key.list": lambda: items.updateValue(["c"], [np.int64(n)]),
            "key.generator": lambda: items.updateValue((c for c in "g"), (n + 1,)),
            "key.row": lambda: items.updateValue(Row(item="r"), (n + 2,)),
            "key.int": lambda: items.updateValue(5, (1,)),
            "value.int": lambda: items.updateValue(("x",), 7),
            "value.none": lambda: items.updateValue(("x",), None),
            "key.bare.remove": lambda: items.removeKey("c") if n > 1 else None,
            "word.bare": lambda: self.word.update("z" if n > 1 else "y"),
            "word.get": self.word.get,
            "items": lambda: sorted(items.iterator()),
        }
        out = []
        for name, call in calls.items():
            try:
                said = f"ok {call()!r}"
            except PySparkRuntimeError as e:  # Spark's class, and its text
                said = f"PySparkRuntimeError {e}"
            except TypeError:
                said = "TypeError"
            out.append((key[0], name, said))
        yield pd.DataFrame(out, columns=["key", "call", "said"])


def test_handle_errors_and_bare_keys_equal_spark(spark, tmp_path):
    batches = [[("a", 1), ("b", 2), ("b", 3)], [("a", 4), ("a", 5)]]
    args = ("answers", SparkAnswers(), batches, "key string, v long", "key string, call string, said string", "None")
    want = run_on_spark(spark, str(tmp_path), *args)
    got, _ = run_on_antkv(spark, str(tmp_path), *args)
    assert [row for row in got if row not in want] == [] and [row for row in want if row not in got] == []
    assert got == want
    said = {(k, call): s for k, call, s in got}
    assert said[("a", "value.exists")] == ("PySparkRuntimeError Error checking value state exists: "
                                           "Value state gone_value is not initialized.")
    assert said[("a", "key.bare.contains")] == "ok True"  # batch 1 finds what batch 0 put under "0"
    assert said[("b", "key.int")] == "TypeError"
