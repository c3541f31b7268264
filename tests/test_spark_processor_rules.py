"""The StatefulProcessorHandle's rules and state values, as Spark has them, without a Spark job.

A processor's handle is made as a task makes it (a partition's store, its key groups, a time
mode and a batch time); ``init`` and the handlers are called in Spark's order.  Checked here:
Spark's refusals (a state object used after ``deleteIfExists``, state variables created
outside ``init``, timers outside the handlers, a state name defined twice) raise pyspark's
``PySparkRuntimeError`` as Spark does; state values of every type come back as Spark's Python
types and a value that does not fit its schema is refused naming the variable and the field;
the pipeline record; the output schema check.
"""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import pandas as pd
import pytest
from pyspark.errors import PySparkRuntimeError
from pyspark.sql import Row
from pyspark.sql.types import ArrayType, DecimalType, IntegerType, LongType, MapType, StringType, StructField, StructType

import antkv
from antkv.spark import Location, StoreOptions, open_store, release_idle_stores
from antkv.spark.processor.handle import DeclaringHandle, ProcessorHandle
from antkv.spark.runtime.output_schema import OutputCheck
from antkv.spark.store.keygroups import KeyGroupError, key_group_range
from antkv.spark.store.pipeline_record import check_key_columns, ensure_pipeline_record, read_pipeline_record

K = 8
NOW = 1_700_000_000_000


@pytest.fixture
def store(tmp_path):
    s = open_store(Location(str(tmp_path / "loc")), "op", 0, 0, manifest=None,
                   options=StoreOptions(cache_dir=str(tmp_path / "cache")))
    yield s
    s.abort()
    release_idle_stores()


def handle_for(store, time_mode="ProcessingTime"):
    return ProcessorHandle(store, key_group_range(K, 1, 0), time_mode, NOW)


# --------------------------------------------------------------------------- handle rules


def test_a_state_object_used_after_delete_if_exists_answers_as_spark_s_client(store):
    """Spark's client texts for a variable deleteIfExists removed (its own, "value state" of a
    list included), the same class; a list's get and a map's iterators are empty; getting the
    name again in init makes the older object work again, as Spark's objects act on a name.
    tests/test_spark_processor_suite.py checks the same calls against Spark."""
    h = handle_for(store)
    old = h.getValueState("s", "n long")
    h.set_current_key(1, ("a",))
    old.update((5,))
    h2 = handle_for(store)  # the next batch's init: the old object is deleted with its state
    stale = h2.getValueState("s", "n long")
    items = h2.getListState("l", "v string")
    m = h2.getMapState("m", "k string", "v long")
    for name in ("s", "l", "m"):
        h2.deleteIfExists(name)
    h2.set_current_key(1, ("a",))
    said = {
        stale.exists: "Error checking value state exists: Value state s is not initialized.",
        stale.get: "Error getting value state: Value state s is not initialized.",
        lambda: stale.update((1,)): "Error updating value state: Value state s is not initialized.",
        stale.clear: "Error clearing value state: Value state s is not initialized.",
        items.exists: "Error checking value state exists: List state l is not initialized.",
        lambda: items.put([("x",)]): "Error updating value state: List state l is not initialized.",
        lambda: items.appendValue(("x",)): "Error updating value state: List state l is not initialized.",
        lambda: items.appendList([("x",)]): "Error updating value state: List state l is not initialized.",
        items.clear: "Error clearing value state: List state l is not initialized.",
        m.exists: "Error checking map state exists: Map state m is not initialized.",
        lambda: m.getValue(("k",)): "Error getting value: Map state m is not initialized.",
        lambda: m.containsKey(("k",)): "Error checking if map state contains key: Map state m is not initialized.",
        lambda: m.updateValue(("k",), (1,)): "Error updating map state value: Map state m is not initialized.",
        lambda: m.removeKey(("k",)): "Error removing key from map state: Map state m is not initialized.",
        m.clear: "Error clearing map state: Map state m is not initialized.",
    }
    for use, text in said.items():
        with pytest.raises(PySparkRuntimeError) as e:
            use()
        assert str(e.value) == text and e.value.getCondition() is None
        assert isinstance(e.value, antkv.InvalidArgumentError)
    assert list(items.get()) == [] and list(m.iterator()) == list(m.keys()) == list(m.values()) == []
    h3 = handle_for(store)  # the state is gone: a new object of that name starts empty
    fresh = h3.getValueState("s", "n long")
    h3.set_current_key(1, ("a",))
    assert fresh.get() is None and not fresh.exists()
    h4 = handle_for(store)  # deleted, then got again in init: the older object works again
    first = h4.getValueState("s", "n long")
    h4.deleteIfExists("s")
    again = h4.getValueState("s", "n long")
    h4.set_current_key(1, ("a",))
    first.update((7,))
    assert again.get() == (7,) and first.exists()


def test_a_row_is_any_iterable_of_its_fields_as_spark_s_client_takes_it(store):
    """Spark's client makes a row of ``tuple(value)``: a bare one-character string is the row
    of one string field (``containsKey("0")``), a list or a generator too; a value that is not
    iterable is a TypeError, as in Spark.  tests/test_spark_processor_suite.py checks these
    against Spark."""
    h = handle_for(store, "None")
    m = h.getMapState("m", "k string", "n long")
    v = h.getValueState("v", "s string")
    h.set_current_key(1, ("a",))
    m.updateValue("0", (1,))
    assert m.containsKey("0") and m.containsKey(("0",)) and m.getValue("0") == (1,)
    m.updateValue(["c"], [3])
    m.updateValue((c for c in "g"), (4,))
    assert sorted(m.iterator()) == [(("0",), (1,)), (("c",), (3,)), (("g",), (4,))]
    m.removeKey("c")
    assert not m.containsKey(["c"])
    v.update("z")
    assert v.get() == ("z",)
    for bad in (5, None, 2.5):
        with pytest.raises(TypeError, match="object is not iterable"):
            m.updateValue(bad, (1,))
        with pytest.raises(TypeError, match="object is not iterable"):
            m.updateValue(("x",), bad)
        with pytest.raises(TypeError, match="object is not iterable"):
            v.update(bad)
    with pytest.raises(antkv.InvalidArgumentError, match="1 field"):
        m.updateValue("ab", (1,))  # two characters: two fields (Spark fails the task)


def test_state_variables_are_created_and_deleted_in_init_only_and_timers_used_in_handlers(store):
    h = handle_for(store)
    with pytest.raises(PySparkRuntimeError, match="INVALID_HANDLE_STATE.*register_timer"):
        h.registerTimer(NOW + 1)  # in init()
    with pytest.raises(PySparkRuntimeError, match="list_timers"):
        h.listTimers()
    h.getValueState("v", "n long")
    h.set_current_key(1, ("a",))  # handleInputRows
    for create in (lambda: h.getValueState("w", "n long"), lambda: h.getListState("w", "n long"),
                   lambda: h.getMapState("w", "k string", "n long"), lambda: h.deleteIfExists("v")):
        with pytest.raises(PySparkRuntimeError, match="STATE_STORE_CANNOT_PERFORM_OPERATION_WITH_INVALID_HANDLE_STATE"):
            create()
    h.registerTimer(NOW + 1)
    assert list(h.listTimers()) == [NOW + 1]
    none = handle_for(store, "None")
    none.set_current_key(1, ("a",))
    with pytest.raises(PySparkRuntimeError, match="INVALID_TIME_MODE"):
        none.registerTimer(NOW)
    with pytest.raises(PySparkRuntimeError, match="CANNOT_USE_TTL_FOR_TIME_MODE"):
        handle_for(store, "EventTime").getValueState("t", "n long", ttlDurationMs=5)
    with pytest.raises(KeyGroupError):
        h.set_current_key(K, ("a",))


def test_the_driver_refuses_a_value_or_list_state_defined_twice():
    d = DeclaringHandle("None")
    d.getValueState("s", "n long")
    with pytest.raises(PySparkRuntimeError, match="DUPLICATE_STATE_VARIABLE_DEFINED"):
        d.getListState("s", "n long")
    d.getMapState("m", "k string", "v long")
    d.getMapState("m", "k string", "v long")  # Spark's driver does not check maps
    with pytest.raises(antkv.InvalidArgumentError, match="unsupported state type 'nosuchtype'"):
        d.getValueState("x", "n nosuchtype")


# --------------------------------------------------------------------------- state values


COMPOSITE = ("id long, tags array<string>, attrs map<string, int>, at struct<x: double, y: double>, "
             "price decimal(10, 2), day date, seen timestamp, raw binary, nested array<struct<k: string, n: long>>")


def test_composite_state_values_come_back_as_spark_types(store):
    h = handle_for(store, "None")
    v = h.getValueState("v", COMPOSITE)
    schema = StructType([StructField("n", LongType()), StructField("tags", ArrayType(StringType())),
                         StructField("m", MapType(StringType(), IntegerType())), StructField("d", DecimalType(5, 1))])
    lst = h.getListState("l", schema)
    m = h.getMapState("m", "k string", "pos struct<x: int, y: int>, names array<string>")
    h.set_current_key(1, ("a",))
    seen = dt.datetime(2024, 5, 1, 12, 30, tzinfo=dt.timezone.utc)
    v.update((1, ["x", "y"], {"a": 1}, {"x": 1, "y": 2.5}, Decimal("9.99"), dt.date(2024, 5, 1), seen, b"\x00z",
              [Row(k="p", n=2), {"k": "q", "n": 3}]))
    got = v.get()
    assert type(got) is tuple and got[0] == 1
    assert got[1] == ["x", "y"] and type(got[1]) is list
    got[1].append("z")  # a list, as Spark returns it
    assert got[2] == {"a": 1}
    assert got[3] == Row(x=1.0, y=2.5) and got[3].asDict() == {"x": 1.0, "y": 2.5} and got[3].y == 2.5
    assert got[4] == Decimal("9.99") and got[5] == dt.date(2024, 5, 1) and got[7] == b"\x00z"
    assert got[6].replace(tzinfo=None).astimezone(dt.timezone.utc) == seen  # local wall time, as Spark
    assert got[8] == [Row(k="p", n=2), Row(k="q", n=3)]
    lst.put([(1, ["a"], {"k": 2}, 3), (2, [], {}, None)])
    lst.appendValue((3, None, None, Decimal("1.5")))
    assert list(lst.get()) == [(1, ["a"], {"k": 2}, Decimal("3.0")), (2, [], {}, None), (3, None, None, Decimal("1.5"))]
    m.updateValue(("p",), (Row(x=1, y=2), ["n1"]))
    m.updateValue(("q",), ({"x": 3, "y": 4}, []))
    assert m.getValue(("p",)) == (Row(x=1, y=2), ["n1"])
    assert dict(m.iterator()) == {("p",): (Row(x=1, y=2), ["n1"]), ("q",): (Row(x=3, y=4), [])}
    # committed and read back from the stored bytes, not from any cache
    h2 = handle_for(store, "None")
    v2 = h2.getValueState("v", COMPOSITE)
    h2.set_current_key(1, ("a",))
    assert v2.get()[3].asDict() == {"x": 1.0, "y": 2.5} and v2.get()[1] == ["x", "y"]


def test_a_value_read_again_sees_every_write_since_whoever_made_it(store):
    """``exists()`` then ``get()`` read the store once (the handle remembers what exists()
    read); a write of the value in between, by any state object of that name, and a new
    current key, are seen, and a restored value is a new object at every read."""
    h = handle_for(store)
    a = h.getValueState("v", "n long")
    b = h.getValueState("v", "n long")  # Spark's state objects act on a name
    tags = h.getValueState("tags", "tags array<string>")
    h.set_current_key(1, ("k",))
    assert not a.exists()
    b.update((1,))
    assert a.get() == (1,) and a.exists()
    b.clear()
    assert a.get() is None and not a.exists()
    a.update((2,))
    assert a.exists() and b.get() == (2,) and a.get() == (2,)
    h.set_current_key(1, ("other",))
    assert a.get() is None and not a.exists()
    b.update((3,))
    h.set_current_key(1, ("k",))
    assert a.get() == (2,) and b.exists()
    h.set_current_key(1, ("other",))
    assert a.get() == (3,)
    tags.update((["x"],))
    assert tags.exists()
    got = tags.get()
    got[0].append("y")
    assert tags.get() == (["x"],)


@pytest.mark.parametrize("value, words", [
    ((1, "x"), "value state 's', field 'tags': expects array<string>, got str"),
    ((1, ["a", 2]), r"field 'tags'\[1\]: expects string, got int 2"),
    (("1", []), "field 'id': expects bigint, got str '1'"),
    ((1.5, []), "field 'id': expects bigint, got float"),
    ((2 ** 63, []), "field 'id': expects bigint, got 9223372036854775808 .out of range"),
    ((1, [], 7), "has 2 field"),
])
def test_a_value_that_does_not_fit_is_refused_naming_the_state_and_field(store, value, words):
    h = handle_for(store, "None")
    s = h.getValueState("s", "id long, tags array<string>")
    h.set_current_key(1, ("a",))
    with pytest.raises(antkv.InvalidArgumentError, match=words):
        s.update(value)
    assert s.get() is None  # nothing was written


def test_map_state_values_and_user_keys_are_checked(store):
    h = handle_for(store, "None")
    m = h.getMapState("m", "k int", "v map<string, decimal(4, 2)>")
    h.set_current_key(1, ("a",))
    with pytest.raises(antkv.InvalidArgumentError, match="user key of map state 'm', field 'k': expects int, got str"):
        m.updateValue(("x",), ({},))
    with pytest.raises(antkv.InvalidArgumentError, match=r"map state 'm', field 'v'\['a'\]: expects decimal\(4,2\), got 123.4"):
        m.updateValue((1,), ({"a": Decimal("123.4")},))
    with pytest.raises(antkv.InvalidArgumentError, match="expects int, got 4294967296"):
        m.containsKey((1 << 32,))
    m.updateValue((1,), ({"a": 3},))
    assert m.getValue((1,)) == ({"a": Decimal("3.00")},)


# --------------------------------------------------------------------------- pipeline record


def test_the_pipeline_record_is_sealed_checked_and_named_when_damaged(tmp_path):
    loc = Location(str(tmp_path / "loc"))
    with pytest.raises(antkv.InvalidArgumentError, match=r"key columns \['user'\] are not in the DataFrame"):
        check_key_columns(["uid", "v"], ["user"])
    ensure_pipeline_record(loc, "op", ["user"], 16)
    assert read_pipeline_record(loc, "op") == {"format": 1, "key_groups": 16, "key": ["user"]}
    raw = loc.read("op/pipeline.json")
    assert raw.startswith(b"AKVSPK")  # the envelope of every other object
    ensure_pipeline_record(loc, "op", ["user"], 16)
    with pytest.raises(antkv.InvalidArgumentError, match=r"key columns \['user'\]; this run groups by \['session'\]"):
        ensure_pipeline_record(loc, "op", ["session"], 16)
    with pytest.raises(KeyGroupError):
        ensure_pipeline_record(loc, "op", ["user"], 32)
    loc.delete("op/pipeline.json")
    loc.write("op/pipeline.json", raw[:-5])
    with pytest.raises(antkv.CorruptionError, match="pipeline.json"):
        ensure_pipeline_record(loc, "op", ["user"], 16)
    loc.delete("op/pipeline.json")
    loc.write("op/pipeline.json", json.dumps({"key_groups": 16, "key": ["user"]}).encode())
    with pytest.raises(antkv.CorruptionError, match="pipeline.json"):
        read_pipeline_record(loc, "op")


def test_a_pipeline_with_missing_or_other_key_columns_writes_nothing(spark, tmp_path):
    from antkv.spark import StatefulPipeline

    def func(state, rows):
        return None

    df = spark.createDataFrame([("a", 1)], "uid string, v long")
    pipe = StatefulPipeline(f"file://{tmp_path}/loc", "op", ["user"], func, "uid string", partitions=1, key_groups=4)
    with pytest.raises(antkv.InvalidArgumentError, match=r"\['user'\] are not in the DataFrame"):
        pipe.run(df)
    assert not (tmp_path / "loc" / "op").exists()  # nothing written, not even the record
    StatefulPipeline(f"file://{tmp_path}/loc", "op", ["uid"], func, "uid string", partitions=1, key_groups=4).run(df)
    other = StatefulPipeline(f"file://{tmp_path}/loc", "op", ["v"], func, "uid string", partitions=1, key_groups=4)
    with pytest.raises(antkv.InvalidArgumentError, match=r"keeps state by the key columns \['uid'\]"):
        other.run(df)
    assert other.coordinator.latest_version() == 1


# --------------------------------------------------------------------------- output schema


def test_output_columns_are_checked_naming_column_expected_and_found():
    check = OutputCheck("key string, n long, amount decimal(10, 2), ratio double", "counts")
    good = check.fit(pd.DataFrame({"key": ["a"], "n": [1], "amount": [5], "ratio": [1]}))
    assert good["amount"].tolist() == [Decimal(5)]  # Spark's int-to-decimal coercion
    nullable = check.fit(pd.DataFrame({"key": [None, "b"], "n": [None, 2.0], "amount": pd.Series([None, 1], dtype=object),
                                       "ratio": [0.5, None]}))
    assert nullable["amount"].tolist() == [None, Decimal(1)]
    for frame, words in [
        (pd.DataFrame({"key": ["a"], "n": ["abc"], "amount": [1], "ratio": [1.0]}),
         "output of 'counts': column 'n' expects bigint, found string values .* e.g. str 'abc'"),
        (pd.DataFrame({"key": [1], "n": [1], "amount": [1], "ratio": [1.0]}), "column 'key' expects string, found integer"),
        (pd.DataFrame({"key": ["a"], "n": [1.5], "amount": [1], "ratio": [1.0]}), "column 'n' expects bigint, found floating"),
        (pd.DataFrame({"key": ["a"], "n": [1], "amount": ["x"], "ratio": [1.0]}), r"column 'amount' expects decimal\(10,2\)"),
        (pd.DataFrame({"key": ["a"], "n": [1], "amount": [1.0], "ratio": [1.0]}), "column 'amount' .* found floating"),
    ]:
        with pytest.raises(antkv.InvalidArgumentError, match=words):
            check.fit(frame)


def test_a_schema_of_integers_fits_as_the_general_rules_do():
    """A schema whose fields are all nullable integers of one type checks a row with one loop
    (``StateSchema._int_bound``): it takes and refuses exactly what the field-by-field rules do."""
    import re

    from antkv.spark.state.schema import StateSchema

    for ddl in ("a long, b long, c long", "a int", "a short, b short"):
        fast, general = StateSchema(ddl, "x"), StateSchema(ddl, "x")
        assert fast._int_bound
        general._int_bound = 0
        width = fast.width
        bound = fast._int_bound
        for row in [(1,) * width, (None,) * width, (bound - 1,) * width, (-bound,) * width, (bound,) * width,
                    (-bound - 1,) * width, (True,) * width, (1.0,) * width, ("1",) * width, (1,) * (width + 1),
                    [1] * width, (0,) * (width - 1) + (bound,)]:
            try:
                expected = general.fit(row)
            except antkv.InvalidArgumentError as e:
                with pytest.raises(antkv.InvalidArgumentError, match=re.escape(str(e))):
                    fast.fit(row)
            else:
                assert fast.fit(row) == expected and type(fast.fit(row)) is type(expected)
