"""A state store's appends of decoded values (``StateStore.append_decoded``, a list state's
element given as a row): encoded when the batch's writes settle, in bulk, yet every read of
the batch -- bytes, decoded, membership, a scan, the key count -- sees them at once, mixed
with puts, appends of bytes, decoded puts and deletes of the same keys, whether the key's
earlier value is in the row cache, only in the database, or nowhere; and the committed
versions hold exactly what a plain dict of the same writes holds."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from antkv.spark import StoreOptions, open_store, release_idle_stores
from antkv.spark.state.codec import encode_row
from antkv.spark.state.rows_codec import ROWS

KEYS = st.sampled_from([b"aa1", b"aa2", b"ab1", b"ba1", b"ba2"])
ROW = st.tuples(st.integers(-(1 << 45), 1 << 45), st.none() | st.text(max_size=4))
OPS = st.one_of(
    st.tuples(st.just("append_decoded"), KEYS, ROW),
    st.tuples(st.just("append"), KEYS, ROW),
    st.tuples(st.just("put"), KEYS, ROW),
    st.tuples(st.just("put_decoded"), KEYS, ROW),
    st.tuples(st.just("delete"), KEYS),
    st.tuples(st.just("get"), KEYS),
    st.tuples(st.just("get_decoded"), KEYS),
    st.tuples(st.just("contains"), KEYS),
    st.tuples(st.just("scan")),
    st.tuples(st.just("count")),
    st.tuples(st.just("warm")),
)
BATCHES = st.lists(st.tuples(st.lists(OPS, max_size=30), st.booleans()), min_size=1, max_size=4)
OPTIONS = {
    "defaults": {},
    "settling every few writes, the change set outgrown": {"max_changelog_bytes": 2000},
    "row cache evicting": {"row_cache_bytes": 1024},
}


def _run(store, model: dict, op) -> None:
    name, key = op[0], op[1] if len(op) > 1 else None
    if name == "append_decoded":
        store.append_decoded(key, (op[2],), ROWS)
        model[key] = model.get(key, b"") + encode_row(op[2])
    elif name == "append":
        store.append(key, encode_row(op[2]))
        model[key] = model.get(key, b"") + encode_row(op[2])
    elif name == "put":
        store.put(key, encode_row(op[2]))
        model[key] = encode_row(op[2])
    elif name == "put_decoded":
        store.put_decoded(key, (op[2],), ROWS)
        model[key] = encode_row(op[2])
    elif name == "delete":
        store.delete(key)
        model.pop(key, None)
    elif name == "get":
        assert store.get(key) == model.get(key)
    elif name == "get_decoded":
        assert store.get_decoded(key, ROWS) == (None if key not in model else ROWS.decode(model[key]))
    elif name == "contains":
        assert (key in store) == (key in model)
    elif name == "scan":
        assert list(store.items()) == sorted(model.items())
    elif name == "count":
        assert store.num_keys() == len(model)
    elif name == "warm":
        store.warm([b"aa", b"ab", b"ba"], ROWS)


@pytest.mark.parametrize("options", OPTIONS.values(), ids=list(OPTIONS))
def test_appended_values_are_read_at_once_and_committed_as_a_dict_holds_them(tmp_path_factory, options):
    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(BATCHES)
    def run(batches):
        root = tmp_path_factory.mktemp("appends")
        store_options = StoreOptions(cache_dir=str(root / "cache"), park_copies=False, **options)
        location = f"file://{root}/state"
        model: dict[bytes, bytes] = {}
        manifest = None
        for version, (ops, commit) in enumerate(batches):
            store = open_store(location, "op", 0, version, manifest=manifest, options=store_options)
            attempt = dict(model)
            for op in ops:
                _run(store, attempt, op)
            if not commit:
                store.abort()  # nothing of the batch remains: the next opens the same version
                release_idle_stores()
                batches_left = version
                break
            manifest = store.commit().manifest
            model = attempt
        else:
            batches_left = len(batches)
        release_idle_stores()  # the version rebuilt from the location: a cold row cache
        store = open_store(location, "op", 0, batches_left, manifest=manifest, options=store_options)
        assert dict(store.items()) == model and store.num_keys() == len(model)
        store.abort()
        release_idle_stores()

    run()


def test_a_value_that_cannot_be_encoded_fails_the_settle_and_leaves_the_appends(tmp_path):
    """A value ``encode_many`` refuses fails the read that settles the batch, and the batch's
    appends stay pending: a later read still gives the key's value, and the batch aborts
    cleanly."""
    store = open_store(f"file://{tmp_path}/state", "op", 0, 0,
                       options=StoreOptions(cache_dir=str(tmp_path / "cache"), park_copies=False))
    store.append_decoded(b"k", ((1, "a"),), ROWS)
    store.append_decoded(b"k", ((2, "b"),), ROWS)
    store.append_decoded(b"j", (object(),), ROWS)  # not a row of a type the codec encodes
    with pytest.raises(TypeError):
        list(store.items())
    assert store.get(b"k") == encode_row((1, "a")) + encode_row((2, "b"))
    assert b"j" in store
    store.abort()
    release_idle_stores()
