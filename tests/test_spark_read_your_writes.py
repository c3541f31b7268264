"""A batch's reads see its own writes, whatever the mix of state operations.

Hypothesis draws a sequence of a processor's state calls (value, list and map state, timers)
over a few grouping keys in two key groups, and the runner's own calls between them (a scan of
the expired timers, the key count, warming key groups into the row cache), batch after batch.
Every read is checked against a plain-Python model at once: the value just written, the list
just appended to, the map entry just removed, the timer just registered.  The stores run with
a change set small enough that a batch outgrows it (its writes then go to the engine at once)
and a row cache small enough to evict, beside the defaults, so every write path is met.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from antkv.spark import StoreOptions, open_store, release_idle_stores
from antkv.spark.processor.handle import ProcessorHandle
from antkv.spark.state.codec import encode_key
from antkv.spark.store.keygroups import key_group_prefix, key_group_range

KEY_GROUPS = 4
GROUPING_KEYS = [(0, ("a",)), (0, ("b",)), (1, ("a",)), (1, (7,))]
SCHEMA = "n long, s string"
ROWS = st.tuples(st.integers(-(1 << 40), 1 << 40), st.text(max_size=6))
TIMES = st.integers(0, 5)

OPS = st.one_of(
    st.tuples(st.just("value_update"), ROWS),
    st.tuples(st.just("value_get")),
    st.tuples(st.just("value_clear")),
    st.tuples(st.just("list_append"), ROWS),
    st.tuples(st.just("list_put"), st.lists(ROWS, min_size=1, max_size=3)),
    st.tuples(st.just("list_get")),
    st.tuples(st.just("list_clear")),
    st.tuples(st.just("map_put"), TIMES, ROWS),
    st.tuples(st.just("map_remove"), TIMES),
    st.tuples(st.just("map_get"), TIMES),
    st.tuples(st.just("map_iterate")),
    st.tuples(st.just("timer_register"), TIMES),
    st.tuples(st.just("timer_delete"), TIMES),
    st.tuples(st.just("timer_list")),
    st.tuples(st.just("expired"), TIMES),
    st.tuples(st.just("count")),
    st.tuples(st.just("warm")),
)
# a batch: (grouping key index, operation) pairs; a stream: batches
BATCHES = st.lists(st.lists(st.tuples(st.integers(0, len(GROUPING_KEYS) - 1), OPS), max_size=40),
                   min_size=1, max_size=4)

OPTIONS = {
    "defaults": {},
    "change set outgrown": {"max_changelog_bytes": 300},
    "row cache evicting": {"row_cache_bytes": 2048, "engine": {"write_buffer_size": 4096}},
    # each committed copy parked: the batch's writes reach the engine there, or never (rewritten)
    "parked": {"park_copies": True},
}


class Model:
    """Every grouping key's value, list, map and timers, as plain Python objects."""

    def __init__(self):
        self.values, self.lists, self.maps, self.timers = {}, {}, {}, {}

    def keys_stored(self) -> int:
        """The stored keys this state takes (a value, a list and a map entry are one each, and
        so are the timers of a key group) plus the three variables' registrations and the
        timers' layout version."""
        return (4 + len(self.values) + len(self.lists) + sum(len(m) for m in self.maps.values())
                + len({GROUPING_KEYS[i][0] for i, t in self.timers.items() if t}))


def _check_all(handle, value, listed, mapped, model: Model) -> None:
    """Every grouping key's state as the model has it: what earlier batches left, read (and
    kept decoded) before this batch writes."""
    for index, (kg, key) in enumerate(GROUPING_KEYS):
        handle.set_current_key(kg, key)
        assert value.get() == model.values.get(index)
        assert list(listed.get()) == model.lists.get(index, [])
        assert [tuple(mapped.getValue(k)) for k, _ in mapped.iterator()] == [
            v for _, v in sorted(model.maps.get(index, {}).items())]


def _run_batch(store, model: Model, ops, check_first: bool) -> None:
    handle = ProcessorHandle(store, key_group_range(KEY_GROUPS, 1, 0), "EventTime", 0)
    value = handle.getValueState("v", SCHEMA)
    listed = handle.getListState("l", SCHEMA)
    mapped = handle.getMapState("m", "k long", SCHEMA)
    if check_first:
        _check_all(handle, value, listed, mapped, model)
    for index, op in ops:
        kg, key = GROUPING_KEYS[index]
        handle.set_current_key(kg, key)
        name, args = op[0], op[1:]
        if name == "value_update":
            value.update(args[0])
            model.values[index] = args[0]
        elif name == "value_get":
            assert value.get() == model.values.get(index)
            assert value.exists() == (index in model.values)
        elif name == "value_clear":
            value.clear()
            model.values.pop(index, None)
        elif name == "list_append":
            listed.appendValue(args[0])
            model.lists.setdefault(index, []).append(args[0])
        elif name == "list_put":
            listed.put(args[0])
            model.lists[index] = list(args[0])
        elif name == "list_get":
            assert list(listed.get()) == model.lists.get(index, [])
        elif name == "list_clear":
            listed.clear()
            model.lists.pop(index, None)
        elif name == "map_put":
            mapped.updateValue((args[0],), args[1])
            model.maps.setdefault(index, {})[args[0]] = args[1]
        elif name == "map_remove":
            mapped.removeKey((args[0],))
            model.maps.get(index, {}).pop(args[0], None)
        elif name == "map_get":
            got = mapped.getValue((args[0],))
            assert (None if got is None else tuple(got)) == model.maps.get(index, {}).get(args[0])
            assert mapped.containsKey((args[0],)) == (args[0] in model.maps.get(index, {}))
        elif name == "map_iterate":
            assert list(mapped.iterator()) == [((k,), v) for k, v in sorted(model.maps.get(index, {}).items())]
        elif name == "timer_register":
            handle.registerTimer(args[0])
            model.timers.setdefault(index, set()).add(args[0])
        elif name == "timer_delete":
            handle.deleteTimer(args[0])
            model.timers.get(index, set()).discard(args[0])
        elif name == "timer_list":
            assert list(handle.listTimers()) == sorted(model.timers.get(index, ()))
        elif name == "expired":  # the runner's scan of the expired timers, mid-batch here
            fired = [(t, kg, key) for t, _, kg, key in handle.timers.expired(range(KEY_GROUPS), args[0])]
            assert fired == sorted(
                ((t, *GROUPING_KEYS[i]) for i, ts in sorted(model.timers.items(), key=lambda it: GROUPING_KEYS[it[0]][0])
                 for t in ts
                 if t <= args[0]), key=lambda f: (f[0], encode_key(f[2])))  # stable: key group order
        elif name == "count":
            assert store.num_keys() == model.keys_stored()
        elif name == "warm":  # as the runner does when a batch touches a key group densely
            store.warm([key_group_prefix(g) for g in range(KEY_GROUPS)])
    handle.clear_current_key()
    for index in [i for i, m in model.maps.items() if not m]:
        del model.maps[index]
    for index in [i for i, t in model.timers.items() if not t]:
        del model.timers[index]


@pytest.mark.parametrize("options", list(OPTIONS), ids=list(OPTIONS))
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=BATCHES)
def test_reads_see_the_batchs_own_writes(tmp_path_factory, options, batches):
    work = tmp_path_factory.mktemp("ryw")
    opts = StoreOptions(cache_dir=str(work / "cache"), **{"park_copies": False, **OPTIONS[options]})
    loc = f"file://{work}/loc"
    model, manifest = Model(), None
    try:
        for version, ops in enumerate(batches):
            store = open_store(loc, "op", 0, version, manifest=manifest, options=opts)
            try:
                _run_batch(store, model, ops, check_first=version % 2 == 1)  # (others start cold)
                assert store.num_keys() == model.keys_stored()
                manifest = store.commit().manifest
            finally:
                store.abort()
    finally:
        release_idle_stores()
