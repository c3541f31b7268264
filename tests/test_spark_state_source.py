"""The ``antkv-state`` data source on the real local Spark: every state kind, any retained
version, equal to ``read_state``; bad options refused clearly.

A processor keeps every kind of state a ``StatefulProcessor`` can (value state with and without
a TTL, list state with a TTL, map state, processing-time timers) over three batches, the third
on another number of partitions; a ``StatefulPipeline`` (the demo's function) keeps the
pipeline's value, list and map state.  For each retained version the source's rows, parsed
back, are exactly ``read_state``'s dict, and the TTL expiries and timers are those the clock
gave."""

from __future__ import annotations

import json
import os
import sys

import pandas as pd
import pytest
from pyspark import cloudpickle
from pyspark.sql.streaming.stateful_processor import StatefulProcessor

import antkv
from antkv.spark import CommitCoordinator, StatefulPipeline, open_store, release_idle_stores, TransformWithState, read_state, read_state_df, register_state_source
from antkv.spark.tools.demo import OUTPUT_SCHEMA, click_state, write_event_files
from antkv.spark.state.views import KeyedState
from antkv.spark.store.keygroups import key_group_range
from antkv.spark.tools.state_reader import published_version

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import tests/

HOUR = 3_600_000
MINUTE = 60_000
T0 = 1_700_000_000_000


class AllKinds(StatefulProcessor):
    """Per key: a count (no TTL), the batch's count (TTL an hour), the items seen (list, TTL
    an hour), counts per item (map) and one processing-time timer per batch, ten minutes on."""

    def init(self, handle):
        self.handle = handle
        self.count = handle.getValueState("count", "n long")
        self.recent = handle.getValueState("recent", "n long", ttlDurationMs=HOUR)
        self.items = handle.getListState("items", "item string, ts long", ttlDurationMs=HOUR)
        self.per_item = handle.getMapState("per_item", "item string", "n long")

    def handleInputRows(self, key, rows, timerValues):
        n = 0
        for frame in rows:
            for item, ts in zip(frame["item"], frame["ts"]):
                self.items.appendValue((item, int(ts)))
                before = self.per_item.getValue((item,))
                self.per_item.updateValue((item,), ((before[0] if before else 0) + 1,))
                n += 1
        self.count.update(((self.count.get() or (0,))[0] + n,))
        self.recent.update((n,))
        self.handle.registerTimer(timerValues.getCurrentProcessingTimeInMs() + 10 * MINUTE)
        yield pd.DataFrame({"key": [key[0]], "n": [n]})

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
        yield pd.DataFrame({"key": [key[0]], "n": [-1]})


def _rows(batch: int) -> list[tuple[str, str, int]]:
    return [(f"k{(batch * 3 + i) % 7}", f"item{i % 3}", batch * 100 + i) for i in range(12)]


@pytest.fixture(scope="module")
def processor_location(spark, tmp_path_factory):
    """Three batches of AllKinds (partitions 2, 2, 3; one minute apart), every version kept;
    returns (location, {version: processing time of the batch that made it})."""
    root = tmp_path_factory.mktemp("state-source")
    location = "file://" + str(root / "state")
    now = [T0]
    times = {}
    for batch, partitions in enumerate([2, 2, 3]):
        now[0] = T0 + batch * MINUTE
        runner = TransformWithState(location, "kinds", "key", AllKinds(), "key string, n long",
                                    time_mode="ProcessingTime", partitions=partitions, key_groups=16,
                                    clock=lambda: now[0] / 1000, min_versions_to_retain=5)
        runner.run(spark.createDataFrame(_rows(batch), "key string, item string, ts long"), batch)
        times[batch + 1] = now[0]
    return location, times


def _tuples(value):
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def _fold(rows) -> dict:
    """The source's JSON rows back into read_state's dict."""
    out: dict = {}
    for r in rows:
        key = tuple(json.loads(r["key"]).values())
        states = out.setdefault(r["stateVarName"], {})
        value = _tuples(json.loads(r["value"]))
        if r["stateVarType"] == "value":
            states[key] = value
        elif r["stateVarType"] == "list":
            states.setdefault(key, []).append(value)
        else:
            states.setdefault(key, {})[_tuples(json.loads(r["user_map_key"]))] = value
    return out


def test_every_kind_of_processor_state_equals_read_state_at_every_retained_version(spark, processor_location):
    location, times = processor_location
    for version, partitions in ((1, 2), (2, 2), (3, 3)):
        df = read_state_df(spark, location, "kinds", version)
        assert df.rdd.getNumPartitions() == partitions  # one Spark partition per state partition
        rows = df.collect()
        want = read_state(location, "kinds", version)
        assert set(want) == {"count", "recent", "items", "per_item"}
        assert _fold(rows) == want
        assert {r["partition_id"] for r in rows} <= set(range(partitions))
        assert len({r["partition_id"] for r in rows}) >= 2
        kinds = {r["stateVarName"]: r["stateVarType"] for r in rows}
        assert kinds == {"count": "value", "recent": "value", "items": "list", "per_item": "map"}
        # TTL: the expiry is the writing batch's processing time plus the TTL; none without one
        for r in rows:
            if r["stateVarName"] in ("count", "per_item"):
                assert r["expiration_timestamp_ms"] is None
            else:
                assert r["expiration_timestamp_ms"] - HOUR in {times[v] for v in range(1, version + 1)}
        newest = max(r["expiration_timestamp_ms"] for r in rows if r["stateVarName"] == "recent")
        assert newest == times[version] + HOUR
        # the same version by Spark's batch numbering
        assert sorted(map(tuple, read_state_df(spark, location, "kinds", batch_id=version - 1).collect())) == \
            sorted(map(tuple, rows))


def test_timers_and_unflattened_collections(spark, processor_location):
    location, times = processor_location
    timers = read_state_df(spark, location, "kinds", 3, timers=True).collect()
    want = set()
    for batch in range(3):
        want |= {(k, times[batch + 1] + 10 * MINUTE) for k, _, _ in _rows(batch)}
    assert {(json.loads(r["key"])["key"], r["expiration_timestamp_ms"]) for r in timers} == want
    assert {r["stateVarType"] for r in timers} == {"timer"} and all(r["value"] is None for r in timers)
    # flattenCollectionTypes=false: one row per (key, state variable)
    whole = read_state_df(spark, location, "kinds", 3, flatten=False).collect()
    state = read_state(location, "kinds", 3)
    by_var = {}
    for r in whole:
        by_var.setdefault(r["stateVarName"], {})[tuple(json.loads(r["key"]).values())] = _tuples(json.loads(r["value"]))
    assert by_var["items"] == {k: tuple(v) for k, v in state["items"].items()}
    assert by_var["per_item"] == {k: tuple(m.items()) for k, m in state["per_item"].items()}
    assert len(whole) == sum(len(v) for v in state.values())


def test_a_declared_schema_gets_typed_values_and_one_variable(spark, processor_location):
    location, _ = processor_location
    df = read_state_df(spark, location, "kinds", 3, state_var="per_item",
                       schema="key struct<key string>, user_map_key struct<item string>, "
                              "value struct<n bigint>, partition_id int")
    got = {(r["key"]["key"], r["user_map_key"]["item"]): r["value"]["n"] for r in df.collect()}
    state = read_state(location, "kinds", 3)["per_item"]
    assert got == {(k[0], uk[0]): v[0] for k, m in state.items() for uk, v in m.items()}
    assert df.groupBy().sum("value.n").collect()[0][0] == sum(len(_rows(b)) for b in range(3))


def test_a_pipelines_state_equals_read_state(spark, tmp_path):
    events = tmp_path / "events"
    write_event_files(str(events), 0, 2, users=30, events=80, payload_bytes=8)
    location = "file://" + str(tmp_path / "state")
    for f in range(2):
        StatefulPipeline(location, "clicks", ["user"], click_state, OUTPUT_SCHEMA, partitions=2,
                         key_groups=32, query_id="t").run(spark.read.parquet(str(events / f"events-{f:05d}.parquet")))
    rows = read_state_df(spark, location, "clicks").collect()
    want = read_state(location, "clicks")
    assert {r["stateVarName"] for r in rows} == {"clicks", "recent", "pages"}
    recent = [r for r in rows if r["stateVarName"] == "recent"]
    for r in recent:  # the payload is bytes: base64 in JSON
        ts, page, payload = json.loads(r["value"])
        assert isinstance(ts, int) and isinstance(page, str) and isinstance(payload, str)
    import base64

    def unbase64(states):
        return {k: [(ts, page, base64.b64decode(p)) for ts, page, p in v] for k, v in states.items()}

    got = _fold(rows)
    got["recent"] = unbase64(got["recent"])
    assert got == want


def test_bad_options_are_refused_clearly(spark, processor_location, tmp_path):
    location, _ = processor_location
    with pytest.raises(antkv.InvalidArgumentError, match=r"no published version 9 \(published: 1..3\)"):
        read_state_df(spark, location, "kinds", 9)
    with pytest.raises(antkv.InvalidArgumentError, match="'nope' has no published version"):
        read_state_df(spark, location, "nope")
    with pytest.raises(antkv.InvalidArgumentError, match="exclude each other"):
        read_state_df(spark, location, "kinds", state_var="count", timers=True)
    with pytest.raises(antkv.InvalidArgumentError, match="batchId .* or version, not both"):
        read_state_df(spark, location, "kinds", 2, batch_id=1)
    with pytest.raises(TypeError):
        read_state_df(spark, location, "kinds", "2")
    register_state_source(spark)
    for options, message in [({}, "needs option operator"),
                             ({"operator": "kinds", "batchid": "two"}, "option batchId must be an integer"),
                             ({"operator": "kinds", "batch": "2"}, r"unknown option\(s\) \['batch'\]"),
                             ({"operator": "kinds", "flattenCollectionTypes": "yes"}, "must be true or false"),
                             ({"operator": "kinds", "version": "0"}, "version 0 is the empty state")]:
        with pytest.raises(Exception, match=message):
            spark.read.format("antkv-state").options(**options).load(location).collect()
    with pytest.raises(Exception, match=r"no column\(s\) \['nope'\]"):
        spark.read.format("antkv-state").schema("nope string").option("operator", "kinds").load(location).collect()
    with pytest.raises(Exception, match=r"no state variable .missing. in partition \d \(it has .count., .items., .per_item., .recent.\)"):
        read_state_df(spark, location, "kinds", state_var="missing").collect()


def test_damaged_objects_are_corruption_errors_naming_them(spark, tmp_path):
    """Built on the driver (no executor holds a working copy of it, so the tasks read the
    manifests): a damaged manifest fails the read in the executors, a damaged marker at once."""
    location = str(tmp_path / "state")
    coord = CommitCoordinator(location, "clicks", 2, query_id="q")
    messages = []
    for p in range(2):
        store = open_store(location, "clicks", p, 0, manifest=None)
        state = KeyedState(store, key_group_range(16, 2, p))
        count = state.value_state("count", 1)
        for u in range(8):
            if u % 16 in state.owned:
                state.set_current_key(u % 16, (f"u{u}",))
                count.update((u,))
        messages.append(store.commit())
    coord.publish(1, messages)
    release_idle_stores()  # the commits left working copies in this process: read_state must load
    _, manifests = published_version(location, "clicks", 1)
    damaged = os.path.join(location, manifests[1])
    os.chmod(damaged, 0o644)
    with open(damaged, "r+b") as f:
        f.seek(10)
        f.write(b"\xff\xff\xff")
    with pytest.raises(antkv.CorruptionError, match=os.path.basename(damaged)):
        read_state(location, "clicks")
    with pytest.raises(Exception, match=f"CorruptionError: .*{os.path.basename(damaged)}"):
        read_state_df(spark, location, "clicks").collect()
    marker = os.path.join(location, "clicks", "_batches", "%020d.marker" % 1)
    os.chmod(marker, 0o644)
    with open(marker, "r+b") as f:
        f.write(b"\x00\x00")
    with pytest.raises(antkv.CorruptionError, match="marker"):
        read_state_df(spark, location, "clicks")
