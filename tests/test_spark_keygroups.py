"""Key groups, the stored key layout, rescale planning and routing on a real local Spark.

The range arithmetic and the rescale plan are checked with hypothesis over every K and N;
clipping and bringing in are checked on real databases (each partition an ``antkv.DB``); the
routing tests run the JVM expressions on the session's local Spark.
"""

from __future__ import annotations

import os
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

import antkv
from antkv.spark.runtime.routing import key_group_column, partition_column, route
from antkv.spark.store.keygroups import (
    DEFAULT_KEY_GROUPS,
    KEY_GROUP_COUNT_KEY,
    MAX_KEY_GROUPS,
    METADATA_PREFIX,
    KeyGroupError,
    KeyGroupRange,
    check_key_group_count,
    check_partition_key_groups,
    clip_to_key_groups,
    ensure_key_group_count,
    key_group_prefix,
    key_group_range,
    partition_for_key_group,
    plan_rescale,
    state_prefix,
)

# Spark's Python workers must run this interpreter (the one with pandas and antkv installed);
# set before the session-scoped SparkSession starts, which is after collection.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


@st.composite
def k_and_n(draw, max_k=MAX_KEY_GROUPS):
    k = draw(st.one_of(st.integers(1, 64), st.integers(1, max_k)))
    n = draw(st.one_of(st.integers(1, min(k, 8)), st.integers(1, k)))
    return k, n


# --------------------------------------------------------------------------- K and N


@pytest.mark.parametrize("bad", [0, -1, MAX_KEY_GROUPS + 1, 1 << 20])
def test_key_group_count_out_of_range_is_refused(bad):
    with pytest.raises(KeyGroupError, match="key_groups must be in 1..32768"):
        key_group_range(bad, 1, 0)
    assert issubclass(KeyGroupError, antkv.InvalidArgumentError)


@pytest.mark.parametrize("bad", [True, 4.0, "4096", None])
def test_key_group_count_of_wrong_type_is_a_type_error(bad):
    with pytest.raises(TypeError):
        key_group_range(bad, 1, 0)


def test_partitions_must_not_exceed_key_groups():
    with pytest.raises(KeyGroupError, match="partitions must be in 1..16"):
        key_group_range(16, 17, 0)
    with pytest.raises(KeyGroupError, match="partition must be in 0..2"):
        key_group_range(16, 3, 3)
    with pytest.raises(KeyGroupError, match="key group must be in 0..15"):
        partition_for_key_group(16, 3, 16)


def test_ranges_are_flinks():
    # computeKeyGroupRangeForOperatorIndex(128, 3, i): [0, 42], [43, 85], [86, 127]
    assert [key_group_range(128, 3, p) for p in range(3)] == [
        KeyGroupRange(0, 43), KeyGroupRange(43, 86), KeyGroupRange(86, 128)]
    assert [key_group_range(10, 4, p) for p in range(4)] == [
        KeyGroupRange(0, 3), KeyGroupRange(3, 5), KeyGroupRange(5, 8), KeyGroupRange(8, 10)]
    assert key_group_range(DEFAULT_KEY_GROUPS, 1, 0) == KeyGroupRange(0, 4096)
    assert key_group_range(MAX_KEY_GROUPS, MAX_KEY_GROUPS, MAX_KEY_GROUPS - 1) == KeyGroupRange(
        MAX_KEY_GROUPS - 1, MAX_KEY_GROUPS)


@given(k_and_n(), st.data())
def test_ranges_tile_the_key_groups_and_invert(kn, data):
    k, n = kn
    ranges = [key_group_range(k, n, p) for p in range(n)]
    assert ranges[0].start == 0 and ranges[-1].stop == k
    for before, after in zip(ranges, ranges[1:]):
        assert before.stop == after.start
    sizes = {len(r) for r in ranges}
    assert min(sizes) >= 1 and max(sizes) - min(sizes) <= 1  # balanced to one group
    for g in data.draw(st.lists(st.integers(0, k - 1), max_size=50)) + [0, k - 1]:
        p = partition_for_key_group(k, n, g)
        assert g in ranges[p]


def test_changing_k_is_refused_with_a_clear_error():
    assert check_key_group_count(None, 4096) == 4096
    assert check_key_group_count(4096, 4096) == 4096
    with pytest.raises(KeyGroupError, match="cannot change after the first batch.*4096.*1024"):
        check_key_group_count(4096, 1024)


def test_k_is_recorded_in_the_store_and_a_change_refused(tmp_path):
    with antkv.open(str(tmp_path / "db")) as db:
        assert ensure_key_group_count(db, 4096) == 4096
        assert ensure_key_group_count(db, 4096) == 4096
    with antkv.open(str(tmp_path / "db")) as db:
        with pytest.raises(KeyGroupError, match="cannot change after the first batch"):
            ensure_key_group_count(db, 128)
        assert db.get(KEY_GROUP_COUNT_KEY) == b"\x00\x00\x10\x00"
        assert ensure_key_group_count(db, 4096) == 4096
        db.put(KEY_GROUP_COUNT_KEY, b"\x10\x00")
        with pytest.raises(antkv.CorruptionError, match="2 bytes, not 4"):
            ensure_key_group_count(db, 4096)


def test_a_row_outside_the_partition_fails_at_once():
    check_partition_key_groups([3, 4, 5], 16, 3, 0)
    check_partition_key_groups([], 16, 3, 2)
    with pytest.raises(KeyGroupError, match=r"partition 0 of 3 owns key groups \[0, 6\).*2 row"):
        check_partition_key_groups([0, 6, 15], 16, 3, 0)
    with pytest.raises(KeyGroupError, match="first: key group 12, owned by partition 2"):
        check_partition_key_groups([12], 16, 3, 1)
    with pytest.raises(KeyGroupError, match="key group 99, not a key group of 16"):
        check_partition_key_groups([5, 99], 16, 3, 0)
    with pytest.raises(KeyGroupError, match="must be integers"):
        check_partition_key_groups([0.5], 16, 3, 0)


# --------------------------------------------------------------------------- key layout


def test_key_layout_bytes():
    assert key_group_prefix(0) == b"\x00\x00"
    assert key_group_prefix(4095) == b"\x0f\xff"
    assert key_group_prefix(MAX_KEY_GROUPS) == b"\x80\x00"  # the end of the last range
    assert state_prefix(258, 7) == b"\x01\x02\x00\x07"
    assert KeyGroupRange(3, 5).key_bounds() == (b"\x00\x03", b"\x00\x05")
    assert key_group_prefix(MAX_KEY_GROUPS) < METADATA_PREFIX  # metadata lies above every group
    with pytest.raises(KeyGroupError):
        state_prefix(0, 1 << 16)


def _fill(db, groups, per_group=3, state_ids=(0, 1)):
    """Write a few keys per (group, state id); returns the set of keys written."""
    keys = set()
    for g in groups:
        for sid in state_ids:
            for i in range(per_group):
                key = state_prefix(g, sid) + b"user-%d" % i
                db.put(key, b"v" * (i + 1))
                keys.add(key)
    db.put(METADATA_PREFIX + b"meta", b"kept")
    return keys


def _state_keys(db):
    return {k for k in db.keys() if not k.startswith(METADATA_PREFIX)}


def test_one_delete_range_removes_exactly_a_run_of_key_groups(tmp_path):
    with antkv.open(str(tmp_path / "db")) as db:
        written = _fill(db, range(16))
        db.flush()
        begin, end = KeyGroupRange(5, 9).key_bounds()
        db.delete_range(begin, end)
        assert _state_keys(db) == {k for k in written if not 5 <= int.from_bytes(k[:2], "big") < 9}
        assert db.get(METADATA_PREFIX + b"meta") == b"kept"


# --------------------------------------------------------------------------- rescale


@given(st.integers(1, 300).flatmap(
    lambda k: st.tuples(st.just(k), st.integers(1, min(k, 12)), st.integers(1, min(k, 12)))))
def test_rescale_plan_invariants(args):
    k, old_n, new_n = args
    plans = plan_rescale(k, old_n, new_n)
    assert [p.partition for p in plans] == list(range(new_n))
    old_ranges = [key_group_range(k, old_n, p) for p in range(old_n)]
    for plan in plans:
        assert plan.key_groups == key_group_range(k, new_n, plan.partition)
        overlaps = {p: len(r.intersection(plan.key_groups)) for p, r in enumerate(old_ranges)}
        assert overlaps[plan.base] == max(overlaps.values())
        assert plan.base == min(p for p, o in overlaps.items() if o == overlaps[plan.base])
        # the base minus the clipped bytes is the base's share of the new range
        base = old_ranges[plan.base]
        clipped = set()
        for begin, end in plan.clip:
            assert begin < end
            clipped |= set(range(int.from_bytes(begin, "big"), int.from_bytes(end, "big")))
        kept = set(base) - clipped
        assert clipped <= set(base)
        assert kept == set(base.intersection(plan.key_groups))
        assert len(plan.clip) <= 2
        # kept + brought in == the new range, disjointly, each from inside its source
        covered = list(kept)
        for source, r in plan.bring_in:
            assert source != plan.base and len(r) > 0
            assert set(r) <= set(old_ranges[source])
            covered.extend(r)
        assert sorted(covered) == list(plan.key_groups)
        sources = {plan.base} | {s for s, _ in plan.bring_in}
        assert sources == {p for p, o in overlaps.items() if o > 0}
    if old_n == new_n:
        assert all(p.base == p.partition and not p.clip and not p.bring_in for p in plans)


def _group_of(key: bytes) -> int:
    return int.from_bytes(key[:2], "big")


def _rescale_on_disk(tmp_path, k, olds: list, new_n: int, step: str) -> list:
    """Rescale the partitions ``olds`` (open databases) to ``new_n`` partitions the way the
    plan says: copy the base (a checkpoint), clip it, ingest the brought-in ranges from
    checkpoints of their sources."""
    news = []
    for plan in plan_rescale(k, len(olds), new_n):
        path = str(tmp_path / f"{step}-{plan.partition}")
        olds[plan.base].checkpoint(path)
        db = antkv.open(path)
        clip_to_key_groups(db, plan)
        base_range = key_group_range(k, len(olds), plan.base)
        assert {_group_of(key) for key in _state_keys(db)} == set(
            base_range.intersection(plan.key_groups))
        for source, r in plan.bring_in:
            begin, end = r.key_bounds()
            cp = str(tmp_path / f"{step}-{plan.partition}-from-{source}")
            olds[source].checkpoint(cp)
            db.ingest_database(cp, begin, end)
        news.append(db)
    return news


def test_rescale_2_to_3_to_1_on_real_databases_keeps_exactly_the_state(tmp_path):
    k = 16
    olds = []
    everything = {}
    for p in range(2):
        db = antkv.open(str(tmp_path / f"start-{p}"))
        for key in _fill(db, key_group_range(k, 2, p)):
            everything[key] = db.get(key)
        db.flush()
        olds.append(db)
    for step, new_n in (("three", 3), ("one", 1), ("four", 4)):
        news = _rescale_on_disk(tmp_path, k, olds, new_n, step)
        for db in olds:
            db.close()
        union = {}
        for p, db in enumerate(news):
            owned = key_group_range(k, new_n, p)
            for key, value in db.items():
                if key.startswith(METADATA_PREFIX):
                    continue
                assert _group_of(key) in owned
                union[key] = value
        assert union == everything
        olds = news
    for db in olds:
        db.close()


# --------------------------------------------------------------------------- Spark routing


def _landing(spark, k, n, rows=3000, partition_col=None):
    """Route ``rows`` keyed rows with K=k and N=n; in each task check the key groups and report
    (key, key group, partition) per row."""
    import pandas as pd
    from pyspark import TaskContext

    def observe(batches):
        partition = TaskContext.get().partitionId()
        for batch in batches:
            check_partition_key_groups(batch["__key_group"], k, n, partition)
            yield pd.DataFrame({
                "user": batch["user"], "region": batch["region"],
                "key_group": batch["__key_group"], "partition": partition,
            })

    df = spark.range(rows).selectExpr("CAST(id % 997 AS STRING) AS user", "CAST(id % 3 AS INT) AS region")
    if partition_col is None:
        routed = route(df, ["user", "region"], n, k)
    else:
        routed = df.withColumn("__key_group", key_group_column(["user", "region"], k))
        routed = routed.repartitionById(n, partition_col(routed))
    schema = "user string, region int, key_group int, partition int"
    return routed.mapInPandas(observe, schema).toPandas()


@pytest.mark.parametrize("k", [16, DEFAULT_KEY_GROUPS])
def test_every_row_lands_in_the_partition_owning_its_key_group(spark, k):
    groups_by_n = {}
    for n in (2, 3):
        seen = _landing(spark, k, n)
        assert len(seen) == 3000
        assert seen["partition"].nunique() == n
        for g, p in zip(seen["key_group"], seen["partition"]):
            assert partition_for_key_group(k, n, int(g)) == p
        per_key = seen.groupby(["user", "region"])["key_group"].nunique()
        assert (per_key == 1).all()  # a key has one key group
        groups_by_n[n] = seen.drop_duplicates(["user", "region"]).set_index(["user", "region"])["key_group"]
    # the key group depends on the key and K only, never on N
    assert groups_by_n[2].sort_index().equals(groups_by_n[3].sort_index())
    assert groups_by_n[2].between(0, k - 1).all()


def test_the_jvm_owner_expression_equals_the_python_one_for_every_key_group(spark):
    """partition_column divides in doubles; check it against floor(g * N / K) exhaustively at
    the largest K and at a few K and N that do not divide each other."""
    from pyspark.sql import functions as F

    cases = [(MAX_KEY_GROUPS, n) for n in (1, 3, 7, 1000, 32767, MAX_KEY_GROUPS)] + [
        (4096, 3), (4093, 17), (100, 99)]
    g = F.col("id").cast("int")
    columns = [F.when(g < k, partition_column(g, k, n)).alias(f"p{i}") for i, (k, n) in enumerate(cases)]
    got = spark.range(MAX_KEY_GROUPS).select(g.alias("g"), *columns).toPandas()
    assert len(got) == MAX_KEY_GROUPS
    for i, (k, n) in enumerate(cases):
        owned = got[got["g"] < k]
        assert (owned[f"p{i}"] == owned["g"] * n // k).all(), (k, n)


def test_a_row_sent_to_the_wrong_partition_fails_loudly(spark):
    k, n = 16, 3

    def off_by_one(df):
        return (partition_column("__key_group", k, n) + 1) % n

    from pyspark.errors import PythonException

    with pytest.raises(PythonException) as failure:
        _landing(spark, k, n, rows=200, partition_col=off_by_one)
    message = str(failure.value)
    assert "KeyGroupError" in message
    assert "owns key groups" in message and "route rows with antkv.spark.runtime.routing.route" in message
