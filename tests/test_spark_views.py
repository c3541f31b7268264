"""The state encodings, the typed state views and the group iterator.

The views are checked against plain dicts (hypothesis-generated operation sequences on a real
``antkv.DB``); the encodings by round trips, order and prefix properties; the group iterator
against pandas' own ``groupby``; and the whole path once on the local Spark.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import math
import os
import random
import sys

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import antkv
from antkv.spark.state.codec import decode_key, decode_row, decode_rows, encode_key, encode_row, encode_rows
from antkv.spark.state.rows_codec import ROWS as ROWS_CODEC
from antkv.spark.state.rows_codec import decode_laid_out, encode_values
from antkv.spark.runtime.routing import route
from antkv.spark.store.keygroups import KeyGroupError, KeyGroupRange, key_group_range
from antkv.spark.state.views import KeyedState, group_batch, iter_groups, row_slicer

# Spark's Python workers must run this interpreter (see test_spark_keygroups.py).
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

# --------------------------------------------------------------------------- encodings

INT64 = st.integers(-(2**64) + 1, 2**64 - 1)
FLOATS = st.floats(allow_nan=False)
DATES = st.dates()
DATETIMES = st.datetimes()
SCALARS = {
    "none": st.none(), "bool": st.booleans(), "int": INT64, "float": FLOATS,
    "bytes": st.binary(max_size=12), "str": st.text(max_size=8), "date": DATES,
    "datetime": DATETIMES,
}


def any_scalar():
    return st.one_of(*SCALARS.values())


@st.composite
def same_shape_pair(draw):
    """Two tuples whose elements have the same type position by position (a prefix of the
    other is allowed): the tuples Python can order."""
    kinds = draw(st.lists(st.sampled_from(sorted(SCALARS)), max_size=4))
    a = tuple(draw(SCALARS[k]) for k in kinds)
    b = tuple(draw(SCALARS[k]) for k in kinds[: draw(st.integers(0, len(kinds)))])
    return a, b


def _python_order(a, b):
    """-1, 0, 1 as Python orders ``a`` and ``b`` (None sorts first within a position)."""
    def keyed(t):
        return tuple((0, 0) if x is None else (1, x) for x in t)
    ka, kb = keyed(a), keyed(b)
    return (ka > kb) - (ka < kb)


@given(st.lists(any_scalar(), max_size=6).map(tuple), st.binary(max_size=4))
def test_key_round_trip_at_any_offset(key, tail):
    encoded = encode_key(key)
    decoded, end = decode_key(b"pre" + encoded + tail, 3)
    assert end == 3 + len(encoded)
    assert decoded == tuple(x.replace(tzinfo=None) if isinstance(x, dt.datetime) else x for x in key)


@given(same_shape_pair())
def test_key_order_is_python_order_and_prefix_free(pair):
    a, b = pair
    ea, eb = encode_key(a), encode_key(b)
    assert (ea > eb) - (ea < eb) == _python_order(a, b)
    if a != b:
        assert not ea.startswith(eb) and not eb.startswith(ea)


def test_key_encoding_normalises_what_spark_groups_together():
    assert encode_key((-0.0,)) == encode_key((0.0,))
    assert encode_key((float("nan"),)) == encode_key((-float("nan"),))
    assert math.isnan(decode_key(encode_key((float("nan"),)))[0][0])
    assert encode_key((np.int64(7), np.bool_(True), np.float32(0.5))) == encode_key((7, True, 0.5))
    utc = dt.timezone.utc
    aware = dt.datetime(2024, 5, 1, 12, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    assert encode_key((aware,)) == encode_key((dt.datetime(2024, 5, 1, 10),))
    assert encode_key((pd.Timestamp("2024-05-01 10:00", tz=utc),)) == encode_key((dt.datetime(2024, 5, 1, 10),))
    # the layout of a few keys, byte by byte
    assert encode_key(()) == b"\x01"
    assert encode_key((None, False, True, 0, 1, -1, 256)) == bytes.fromhex("020304 14 1501 13fe 160100 01".replace(" ", ""))
    assert encode_key(("a\x00",)) == b"\x41a\x00\xff\x00\x01"


def test_bad_keys_are_refused_clearly():
    with pytest.raises(TypeError, match="must be a tuple"):
        encode_key("user")
    with pytest.raises(TypeError, match="cannot be dict"):
        encode_key(({},))
    with pytest.raises(antkv.InvalidArgumentError, match="outside the key range"):
        encode_key((2**64,))
    with pytest.raises(antkv.InvalidArgumentError, match="nanoseconds"):
        encode_key((pd.Timestamp("2024-01-01 00:00:00.000000001"),))
    for bad in (b"", b"\x41abc", b"\x99\x01", b"\x20\x00", b"\x16\x01"):
        with pytest.raises(antkv.CorruptionError):
            decode_key(bad)


ROW_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), FLOATS, st.binary(max_size=40),
              st.text(max_size=10), DATES, DATETIMES),
    lambda inner: st.lists(inner, max_size=3).map(tuple),
    max_leaves=8,
)
ROWS = st.lists(ROW_VALUES, max_size=5).map(tuple)


@given(st.lists(ROWS, max_size=4))
def test_rows_round_trip_and_concatenate(rows):
    for row in rows:
        assert decode_row(encode_row(row)) == row
    assert decode_rows(b"".join(encode_row(r) for r in rows)) == rows
    assert encode_rows(rows) == b"".join(encode_row(r) for r in rows)


@given(ROWS)
def test_every_truncated_row_is_a_corruption(row):
    encoded = encode_row(row)
    for cut in range(len(encoded)):
        with pytest.raises(antkv.CorruptionError):
            decode_row(encoded[:cut])


def _sample_rows():
    """400 rows of every value the row encoding takes, from a fixed seed."""
    rnd = random.Random(52)
    makers = [lambda d: None, lambda d: False, lambda d: True, lambda d: rnd.randint(-70, 70),
              lambda d: rnd.randint(-2**70, 2**70), lambda d: rnd.random() * 1e6,
              lambda d: rnd.randbytes(rnd.choice([0, 5, 127, 128, 300])), lambda d: "s\u00e9" * rnd.randrange(70),
              lambda d: dt.date(2000, 1, 1) + dt.timedelta(days=rnd.randrange(20000)),
              lambda d: dt.datetime(2026, 1, 1) + dt.timedelta(microseconds=rnd.randrange(10**12)),
              lambda d: tuple(value(d + 1) for _ in range(rnd.randrange(4)))]

    def value(depth):
        return makers[rnd.randrange(11 if depth < 2 else 10)](depth)
    return [tuple(value(0) for _ in range(rnd.choice([0, 1, 3, 5, 130]))) for _ in range(400)]


def test_row_encoding_is_the_stored_format():
    """The bytes of rows already stored: these rows encoded as every earlier release did (the
    digest was taken of them), and a few written out."""
    assert encode_row((None, (4, 5, 6))).hex() == "020009030308030a030c"
    assert encode_row((1700000000000, (-1, 64, -65, 2**64 - 1, None))).hex() == \
        "020380a0abfef9620905030103800103810103feffffffffffffffff0300"
    assert encode_key((7,)).hex() == "150701" and encode_key((256,)).hex() == "16010001"
    digest = hashlib.sha256(b"|".join(encode_row(r) for r in _sample_rows())).hexdigest()
    assert digest == "32b24debdf36f6ae97218c04453ed353f298bebdd444103788a8f8b9d4012fea"


INT_ROWS = st.lists(st.one_of(st.none(), st.integers(-70, 70), INT64, st.integers(-(2**80), 2**80)), max_size=6)


@given(st.lists(INT_ROWS.map(tuple), max_size=40), st.integers(1, 4), st.one_of(st.none(), INT64), st.booleans())
def test_row_pieces_encode_as_the_codec(rows, width, expiry, pairs):
    """Rows of ints encoded from table pieces, a batch's values in bulk, are the codec's bytes;
    values of mixed shapes fall back to it."""
    same = [(r + (None,) * width)[:width] for r in rows] * 2  # one width: the bulk paths' shape
    values = [((expiry, r),) for r in same] if pairs else [(r,) for r in same]
    assert encode_values(values) == [encode_rows(v) for v in values]
    if pairs:  # expiries that differ (None beside ints): the expiry's piece per value
        varied = [((None if i % 2 else expiry, r),) for i, r in enumerate(same)]
        assert encode_values(varied) == [encode_rows(v) for v in varied]
    mixed = values + [((1, "x"),), ((True, (1,)),), ((1.5,),), ((1,), (2,))]
    assert encode_values(mixed) == [encode_rows(v) for v in mixed]
    assert ROWS_CODEC.encode_many(values) == [ROWS_CODEC.encode(v) for v in values]


_EDGES = [0, -1, 1, 63, 64, -64, -65, 127, 128, -(2**63), 2**63 - 1, 2**62, -(2**62) - 1]


@settings(max_examples=60)
@given(st.integers(128, 700), st.sampled_from([(-64, 63), (-(2**20), 2**20), (0, 2**42), (-(2**63), 2**63 - 1),
                                               (2**63 - 5, 2**63 + 5), (-(2**70), 2**70),
                                               (2**41 - 3, 2**41 + 3), (2**48, 2**55), (-(2**55), -(2**48))]),
       st.integers(0, 3), st.booleans(), st.randoms(use_true_random=False))
def test_long_columns_of_large_ints_encode_as_the_codec(n, bounds, nones, pairs, rnd):
    """A batch's columns of mostly large ints (times, ids), which are encoded column by column
    in numpy, encode as the codec does: every length of varint, both signs, 64-bit edges, and
    the columns that fall back (Nones among them, ints beyond 64 bits, mostly small ints), and
    columns whose pieces are all of one length, or but for a few, at a length's edge."""
    low, high = bounds
    column = [rnd.choice(_EDGES) if rnd.random() < 0.1 else rnd.randint(low, high) for _ in range(n)]
    rows = [(v, rnd.randint(low, high), None if i < nones else rnd.randint(-64, 63)) for i, v in enumerate(column)]
    values = [((None, r),) for r in rows] if pairs else [(r,) for r in rows]
    assert encode_values(values) == [encode_rows(v) for v in values]
    if pairs:  # expiries of large ints too
        values = [((v, r),) for v, r in zip(column, rows)]
        assert encode_values(values) == [encode_rows(v) for v in values]


def test_batches_larger_than_one_numpy_pass_encode_as_the_codec():
    """A batch's rows of ints are encoded in numpy some thousands at a time: passes whose
    pieces differ in length (small ints in one, times in ms in the next, an int beyond 64 bits
    in the last, which sends the batch back to the codec's pieces) join as the codec's bytes."""
    from antkv.spark.state.rows_codec import _JOIN_ROWS

    n = 2 * _JOIN_ROWS + 5
    rows = [(i % 50, -(i % 7), 1) if i < _JOIN_ROWS else (1700000000000 + i, i, -i) for i in range(n)]
    for values in ([(r,) for r in rows], [((None, r),) for r in rows], [((i * 1000, r),) for i, r in enumerate(rows)]):
        assert encode_values(values) == [encode_rows(v) for v in values]
    rows[-1] = (2**64, 0, 0)
    values = [(r,) for r in rows]
    assert encode_values(values) == [encode_rows(v) for v in values]


_LEAVES = st.sampled_from(["small", "int", "huge", None, True, False])


def _sample_row(tree) -> tuple:
    """A row of the layout ``tree`` (as :data:`_LAYOUTS` draws them), with small ints."""
    return tuple(_sample_row(leaf) if isinstance(leaf, list) else 7 if leaf in ("small", "int", "huge") else leaf
                 for leaf in tree)
_LAYOUTS = st.recursive(st.lists(_LEAVES, min_size=1, max_size=4),
                        lambda inner: st.lists(st.one_of(_LEAVES, inner, st.just([])), min_size=1, max_size=4),
                        max_leaves=8)


@settings(max_examples=60)
@given(_LAYOUTS, st.integers(64, 200), st.integers(0, 40), st.randoms(use_true_random=False))
def test_values_of_one_layout_decode_in_bulk_as_the_codec(layout, n, noise, rnd):
    """Values laid out alike (rows of ints, Nones, bools and rows, each int's varint of one
    length) decode in bulk as the codec decodes each, to the same types; among other values
    (other layouts, text, bytes that are no rows, empty values) of any lengths, whatever is
    decoded in bulk is what the codec decodes, and the rest is left."""
    def value(tree, size):
        out = []
        for leaf in tree:
            if isinstance(leaf, list):
                out.append(value(leaf, size))
            elif leaf == "small":
                out.append(rnd.randint(-64, 63))
            elif leaf == "int":  # a zigzag of 2**size up to 2**(size + 7): a varint of one length
                out.append(rnd.choice([1, -1]) * rnd.randint((1 << (size - 1)) + 1, (1 << (size + 6)) - 1))
            elif leaf == "huge":
                out.append(rnd.choice([2**62 + rnd.randrange(2**61), -(2**62) - rnd.randrange(2**61), 2**70]))
            else:
                out.append(leaf)
        return tuple(out)
    def leaves(tree):
        return [x for leaf in tree for x in (leaves(leaf) if isinstance(leaf, list) else [leaf])]
    size = rnd.choice([7, 14, 28, 42, 56])
    raws = [encode_rows((value(layout, size),)) for _ in range(n)]
    decoded = decode_laid_out(raws)
    for raw, got in zip(raws, decoded):
        assert got is None or repr(got) == repr(tuple(decode_rows(raw)))
    kinds = set(leaves(layout))
    if "huge" not in kinds and kinds & {"small", "int"}:
        assert len({len(r) for r in raws}) == 1  # (the case is one layout)
        assert None not in decoded  # one layout, ints of at most 9 varint bytes: all in bulk
    others = [encode_rows(((1, "x" * rnd.randrange(20)),)), os.urandom(rnd.randrange(1, 30)), b"",
              encode_rows(((rnd.randrange(1 << 40), None),)), encode_rows(((1.5,),))]
    mixed = raws + [rnd.choice(others) for _ in range(noise)]
    rnd.shuffle(mixed)
    for raw, got in zip(mixed, decode_laid_out(mixed)):
        if got is not None:
            assert repr(got) == repr(tuple(decode_rows(raw)))


@settings(max_examples=80)
@given(st.one_of(st.binary(min_size=1, max_size=24),
                 st.tuples(_LAYOUTS, st.integers(1, 40)).map(  # a row cut short: a tag or varint at the end
                     lambda cut: encode_rows((_sample_row(cut[0]),))[:cut[1]])),
       st.randoms(use_true_random=False))
@example(b"\x01\x09", random.Random(0))  # a nested row's tag, then the end
@example(b"\x02\x03\x80", random.Random(0))  # a varint running past the end
@example(b"\x05\x00", random.Random(0))  # a count beyond the values
def test_bulk_decoding_reads_bytes_that_are_no_rows_without_failing(base, rnd):
    """Values of one length that are not rows, or rows only in part (timer sets, damaged
    bytes: a nested row's tag at the very end, a count or varint running past it), are left
    or decoded as the codec decodes them; the bulk decoder never raises."""
    alphabet = [0, 1, 2, 3, 9, 0x7F, 0x80, 0x81, 0xFF]
    group = [base] + [bytes(b if rnd.random() < 0.9 else rnd.choice(alphabet) for b in base) for _ in range(80)]
    for raw, got in zip(group, decode_laid_out(group)):
        if got is not None:
            assert repr(got) == repr(tuple(decode_rows(raw)))


@given(st.lists(st.one_of(st.binary(max_size=300), st.integers(-(2**70), 2**70), st.none()), min_size=1,
                max_size=5), st.integers(32, 80), st.randoms(use_true_random=False))
def test_rows_with_bytes_columns_encode_in_bulk_as_the_codec(shape, n, rnd):
    """A batch's rows of one width whose columns hold ints and Nones or bytes (of any
    lengths, heads of one to three bytes) encode in bulk as the codec does, one by one."""
    def cell(example):
        if type(example) is bytes:
            return bytes(rnd.randrange(256) for _ in range(rnd.choice([0, 5, 127, 128, 200, len(example)])))
        return example if example is None else rnd.randrange(-(2**40), 2**40)
    values = [(tuple(cell(e) for e in shape),) for _ in range(n)]
    assert encode_values(values) == [encode_rows(v) for v in values]
    values[-1] = ((1.5,) + values[-1][0][1:],)  # a float: the batch falls back to the codec
    assert encode_values(values) == [encode_rows(v) for v in values]


def test_row_encoding_is_compact_and_refuses_bad_values():
    value = os.urandom(1024)
    assert len(encode_row((value, 7))) == 1 + 1 + 2 + 1024 + 2  # count, tag+len, bytes, int
    assert encode_row((np.int64(-3), np.bool_(False))) == encode_row((-3, False))
    with pytest.raises(TypeError, match="must be a tuple"):
        encode_row(b"value")
    with pytest.raises(TypeError, match="cannot hold set"):
        encode_row(({1},))
    with pytest.raises(antkv.CorruptionError, match="unknown row tag"):
        decode_row(b"\x01\x7f")
    with pytest.raises(antkv.CorruptionError, match="expected one encoded row, found 2"):
        decode_row(encode_row((1,)) * 2)


# --------------------------------------------------------------------------- views vs dicts

OWNED = KeyGroupRange(4, 8)
GROUPING_KEYS = st.tuples(st.integers(4, 7), st.sampled_from([("a",), ("a\x00",), ("ab",), ("b",), (None,)]))
SMALL_ROWS = st.tuples(st.integers(-3, 3), st.binary(max_size=3))
MAP_KEYS = st.sampled_from([(1,), (2,), (-1,), (10,), (None,)])

OPS = st.one_of(
    st.tuples(st.just("value.update"), GROUPING_KEYS, SMALL_ROWS),
    st.tuples(st.just("value.clear"), GROUPING_KEYS),
    st.tuples(st.just("list.put"), GROUPING_KEYS, st.lists(SMALL_ROWS, max_size=3)),
    st.tuples(st.just("list.appendValue"), GROUPING_KEYS, SMALL_ROWS),
    st.tuples(st.just("list.appendList"), GROUPING_KEYS, st.lists(SMALL_ROWS, max_size=3)),
    st.tuples(st.just("list.clear"), GROUPING_KEYS),
    st.tuples(st.just("map.updateValue"), GROUPING_KEYS, MAP_KEYS, SMALL_ROWS),
    st.tuples(st.just("map.removeKey"), GROUPING_KEYS, MAP_KEYS),
    st.tuples(st.just("map.clear"), GROUPING_KEYS),
)


@pytest.fixture(scope="module")
def shared_db(tmp_path_factory):
    db = antkv.open(str(tmp_path_factory.mktemp("views") / "db"))
    yield db
    db.close()


def _check_key(state, views, model, gk):
    value, items, mapping = views
    state.set_current_key(*gk)
    expected_value = model["value"].get(gk)
    assert value.get() == expected_value and value.exists() == (expected_value is not None)
    expected_list = model["list"].get(gk, [])
    assert list(items.get()) == expected_list and items.exists() == bool(expected_list)
    expected_map = model["map"].get(gk, {})
    ordered = sorted(expected_map.items(), key=lambda kv: encode_key(kv[0]))
    assert list(mapping.iterator()) == ordered
    assert list(mapping.keys()) == [k for k, _ in ordered]
    assert list(mapping.values()) == [v for _, v in ordered]
    assert mapping.exists() == bool(expected_map)
    for k in [(1,), (2,), (-1,), (10,), (None,)]:
        assert mapping.containsKey(k) == (k in expected_map)
        assert mapping.getValue(k) == expected_map.get(k)


@settings(max_examples=60)
@given(st.lists(OPS, max_size=30))
def test_views_match_dicts(shared_db, ops):
    shared_db.delete_range(b"", b"\xff\xff\xff\xff")
    state = KeyedState(shared_db, OWNED)
    views = (state.value_state("total", 1), state.list_state("events", 2), state.map_state("by_page", 3))
    value, items, mapping = views
    model = {"value": {}, "list": {}, "map": {}}
    for op, gk, *args in ops:
        state.set_current_key(*gk)
        if op == "value.update":
            value.update(args[0])
            model["value"][gk] = args[0]
        elif op == "value.clear":
            value.clear()
            model["value"].pop(gk, None)
        elif op in ("list.put", "list.appendList") and not args[0]:
            with pytest.raises(antkv.InvalidArgumentError, match="empty list"):
                (items.put if op == "list.put" else items.appendList)(args[0])
        elif op == "list.put":
            items.put(args[0])
            model["list"][gk] = list(args[0])
        elif op == "list.appendValue":
            items.appendValue(args[0])
            model["list"].setdefault(gk, []).append(args[0])
        elif op == "list.appendList":
            items.appendList(args[0])
            model["list"].setdefault(gk, []).extend(args[0])
        elif op == "list.clear":
            items.clear()
            model["list"].pop(gk, None)
        elif op == "map.updateValue":
            mapping.updateValue(args[0], args[1])
            model["map"].setdefault(gk, {})[args[0]] = args[1]
        elif op == "map.removeKey":
            mapping.removeKey(args[0])
            model["map"].get(gk, {}).pop(args[0], None)
        elif op == "map.clear":
            mapping.clear()
            model["map"].pop(gk, None)
        _check_key(state, views, model, gk)
    for gk in {gk for _, gk, *_ in ops}:
        _check_key(state, views, model, gk)


def test_views_refuse_what_they_cannot_own(tmp_path):
    with antkv.open(str(tmp_path / "db")) as db:
        state = KeyedState(db, key_group_range(16, 4, 1))  # [4, 8)
        value = state.value_state("count", 1)
        with pytest.raises(antkv.InvalidArgumentError, match="no current key"):
            value.get()
        with pytest.raises(KeyGroupError, match=r"key group 8 is outside .*\[4, 8\)"):
            state.set_current_key(8, ("u",))
        with pytest.raises(antkv.InvalidArgumentError, match="already a value state with id 1"):
            state.list_state("count", 2)
        with pytest.raises(TypeError):
            state.set_current_key(4, "u")
        state.set_current_key(4, ("u",))
        value.update((1,))
    with antkv.open(str(tmp_path / "db")) as db:  # the id's owner survives a reopen
        state = KeyedState(db, KeyGroupRange(4, 8))
        with pytest.raises(antkv.InvalidArgumentError, match="state id 1 belongs to value state 'count'"):
            state.map_state("pages", 1)
        state.set_current_key(4, ("u",))
        assert state.value_state("count", 1).get() == (1,)


# --------------------------------------------------------------------------- groups


FRAMES = st.lists(
    st.tuples(st.integers(0, 3), st.sampled_from(["x", "y", None]), st.integers(0, 2), st.integers()),
    max_size=40,
).map(lambda rows: pd.DataFrame(rows, columns=["kg", "user", "region", "payload"]))


@given(FRAMES)
def test_iter_groups_matches_pandas_groupby(frame):
    ours = {}
    previous = None
    for key_group, key, rows in iter_groups(frame, "kg", ["user", "region"]):
        assert (key_group, key) not in ours
        order = (key_group, tuple((0, "") if k is None else (1, k) for k in key))
        assert previous is None or previous < order
        previous = order
        assert (rows["kg"] == key_group).all()
        ours[(key_group, key)] = sorted(rows["payload"].tolist())
    theirs = {}
    for (kg, user, region), rows in frame.groupby(["kg", "user", "region"], dropna=False):
        user = None if pd.isna(user) else user
        theirs[(int(kg), (user, int(region)))] = sorted(rows["payload"].tolist())
    assert ours == theirs


def test_iter_groups_reads_arrow_and_keyed_state_walks_the_groups(tmp_path):
    batch = pa.record_batch({"kg": [5, 4, 5, 4], "user": ["b", "a", "b", "c"], "n": [1, 2, 3, 4]})
    assert [(g, k, r["n"].tolist()) for g, k, r in iter_groups(batch, "kg", "user")] == [
        (4, ("a",), [2]), (4, ("c",), [4]), (5, ("b",), [1, 3])]
    assert list(iter_groups(pd.DataFrame({"kg": [], "user": []}), "kg", ["user"])) == []
    grouped = group_batch(batch, "kg", ["user"])  # column-wise work over all groups at once
    assert len(grouped) == 3 and grouped.keys == [("a",), ("c",), ("b",)]
    assert np.add.reduceat(grouped.frame["n"].to_numpy(), grouped.starts).tolist() == [2, 4, 4]
    assert (grouped.ends - grouped.starts).tolist() == [1, 1, 2]
    with pytest.raises(antkv.InvalidArgumentError, match="not in the frame"):
        list(iter_groups(batch, "kg", ["missing"]))
    with antkv.open(str(tmp_path / "db")) as db:
        state = KeyedState(db, KeyGroupRange(4, 6))
        total = state.value_state("total", 1)
        for key, rows in state.groups(batch, "kg", ["user"]):
            total.update((int(rows["n"].sum()),))
        state.set_current_key(5, ("b",))
        assert total.get() == (4,)


# --------------------------------------------------------------------------- on Spark


def test_a_stateful_batch_job_on_spark_equals_spark_aggregation(spark, tmp_path):
    """Two batches through routed partitions, each with its own antkv database and typed
    state; the state after both equals Spark's own aggregation of all the rows."""
    from pyspark import TaskContext

    k, n = 64, 3
    root = str(tmp_path)

    def update(batches):
        partition = TaskContext.get().partitionId()
        with antkv.open(os.path.join(root, f"p{partition}")) as db:
            state = KeyedState(db, key_group_range(k, n, partition))
            count, last = state.value_state("count", 1), state.list_state("amounts", 2)
            for frame in batches:
                for key, rows in state.groups(frame, "__key_group", ["user"]):
                    old = count.get()
                    count.update(((old[0] if old else 0) + len(rows),))
                    last.appendList([(int(a),) for a in rows["amount"]])
                    yield pd.DataFrame({"user": [key[0]], "count": [count.get()[0]],
                                        "amounts": [sum(a for (a,) in last.get())]})

    schema = "user string, count long, amounts long"
    events = spark.range(600).selectExpr("CAST(id % 50 AS STRING) AS user", "id AS amount")
    for batch in (events.where("id < 300"), events.where("id >= 300")):
        out = route(batch, ["user"], n, k).mapInPandas(update, schema).toPandas()
    expected = events.groupBy("user").agg({"amount": "sum", "*": "count"}).toPandas()
    expected = expected.rename(columns={"count(1)": "count", "sum(amount)": "amounts"})
    got = out.set_index("user").sort_index()
    want = expected.set_index("user").sort_index()[["count", "amounts"]]
    assert got.equals(want.astype(got.dtypes.to_dict()))


@given(FRAMES, st.data())
def test_row_slicer_gives_ilocs_rows_numbered_from_zero(frame, data):
    payload = frame["payload"]
    frame = frame.assign(
        when=pd.to_datetime(payload % 10**9, unit="s"), ratio=payload / 7, even=payload % 2 == 0,
        # every kind of block: NumPy (int, float, bool, object), datetime-like (naive and
        # timezone-aware, sliced by their backing arrays) and 1-D extension arrays (category,
        # nullable int, string: pandas' own block slicing)
        region_cat=frame["region"].astype("category"), count=pd.array(payload % 5, dtype="Int64"),
        label=frame["user"].astype("string"), utc=pd.to_datetime(payload % 10**9, unit="s", utc=True))
    if len(frame):  # a column from a date_range (the frame keeps no frequency for it)
        frame["daily"] = pd.date_range("2026-01-01", periods=len(frame), freq="D")
    slicer = row_slicer(frame)
    assert slicer.__name__ == "by_blocks"  # the installed pandas takes the block-manager path
    start = data.draw(st.integers(0, len(frame)))
    end = data.draw(st.integers(start, len(frame)))
    rows = slicer(start, end)
    expected = frame.iloc[start:end].reset_index(drop=True)
    pd.testing.assert_frame_equal(rows, expected)
    assert isinstance(rows.index, pd.RangeIndex) and rows.index.start == 0
    rows["added"] = 1  # a processor may add, replace and drop columns of its rows ...
    rows["ratio"] = "replaced"
    rows.insert(0, "first", 2.5)
    del rows["payload"]
    assert list(rows.columns) == ["first"] + [c for c in expected.columns if c != "payload"] + ["added"]
    assert (rows["ratio"] == "replaced").all() and (rows["added"] == 1).all()
    assert "added" not in frame.columns  # ... and neither the batch nor the next slice changes
    pd.testing.assert_frame_equal(frame.iloc[start:end].reset_index(drop=True), expected)
    pd.testing.assert_frame_equal(slicer(start, end), expected)
