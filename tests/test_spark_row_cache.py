"""The row cache of a state store's working copy: honest memory charges, eviction, the one
budget per process (charged to the block cache, shared fairly, idle caches reclaimed first),
admission that keeps a cache hitting when the state outgrows it, warming from
changelogs, and reads that stay exact across batches, reuse and rebuilds."""

from __future__ import annotations

import os
import tracemalloc

import pytest

import antkv
from antkv.spark import StoreOptions, open_store, release_idle_stores
from antkv.spark.store.decoded_charge import LONG_VALUE, decoded_charge
from antkv.spark.store.row_cache import ADMIT_EVERY, CHUNK, ENTRY_OVERHEAD, MISSING, PREFIX_LEN, RowBudget, RowCache


@pytest.mark.parametrize("n, key_len, value_len", [(20000, 16, 30), (30000, 28, 0), (5000, 40, 200)])
def test_entries_are_charged_what_they_take(n, key_len, value_len):
    raw = os.urandom(n * (key_len + value_len))
    step = key_len + value_len
    tracemalloc.start()
    try:
        rows = RowCache(RowBudget(1 << 30, None))
        for i in range(n):
            rows.put(raw[i * step:i * step + key_len], raw[i * step + key_len:(i + 1) * step])
        measured, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert rows.used == n * (key_len + value_len + ENTRY_OVERHEAD)
    assert 0.7 <= measured / rows.used <= 1.3, (measured, rows.used)


@pytest.mark.parametrize("make", [
    lambda i: ((i, i * 7, i << 40),),  # a row of longs: short, charged per stored byte
    lambda i: ((i, "v%07d" % i * 128),),  # a row holding a 1 KiB string
    lambda i: tuple((i, j, None) for j in range(100, 160)),  # a list of 60 rows of ints
    lambda i: ((i, ("b%05d" % i).encode() * 50, 2.5, (i, "nested" * 30)),),  # bytes, a float, a nested row
])
def test_decoded_values_are_charged_at_least_what_they_take_and_long_ones_not_much_more(make):
    """A decoded value is charged at least the memory its objects and dict slot take
    (tracemalloc); a value of LONG_VALUE bytes or more is charged its measured size, so a row
    holding a long string is not charged per stored byte what a row of numbers costs."""
    from antkv.spark.state.rows_codec import ROWS

    n = 3000
    raws = [ROWS.encode(make(i)) for i in range(n)]
    rows = RowCache(RowBudget(1 << 30, None))
    keys = [b"key%06d" % i for i in range(n)]
    rows.write_many(dict(zip(keys, raws)))
    bare = rows.used
    tracemalloc.start()
    try:
        values = list(map(ROWS.decode, raws))
        rows.keep_decoded(keys, raws, values, ROWS)
        del values
        measured, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(rows.decoded) == n
    charged = rows.used - bare
    assert charged >= measured, (charged, measured)
    if len(raws[0]) >= LONG_VALUE:
        assert charged <= 1.5 * measured, (charged, measured)


def _held_whole(store) -> tuple[set, list]:
    """The key groups the store's row cache holds whole, and the live keys it holds in them:
    what scans of those key groups would return."""
    store.num_keys()  # (settles the batch's writes into the row cache)
    rows = store._rows
    whole = set(rows.complete)
    return whole, [k for k, v in rows.rows.items() if v is not None and k[:PREFIX_LEN] in whole]


def test_a_full_cache_admits_one_new_key_in_admit_every_evicting_its_oldest_entries():
    budget = RowBudget(2 * CHUNK, None)
    rows = RowCache(budget)
    value = b"v" * 20_000
    admitted = []
    for i in range(40 + 8 * ADMIT_EVERY):
        key = b"k%03d" % i
        if rows.put(key, value):
            admitted.append(key)
        assert (key in rows.rows) == (admitted[-1:] == [key])
        assert rows.used <= rows.chunks * CHUNK <= budget.limit
    assert rows.chunks == 2 and budget.lent == 2 * CHUNK
    filled = next(i for i, k in enumerate(admitted) if k != b"k%03d" % i)  # what fit before it was full
    late = admitted[filled:]
    assert len(late) == (40 + 8 * ADMIT_EVERY - filled) // ADMIT_EVERY  # one newcomer in ADMIT_EVERY
    assert list(rows.rows) == admitted[len(late):]  # each evicted the oldest entry
    newest = late[-1]
    rows.put(newest, b"w" * 60_000)  # rewriting a key never evicts it, nor is refused
    assert rows.rows[newest] == b"w" * 60_000 and rows.used <= rows.chunks * CHUNK
    rows.put(b"huge", b"x" * (3 * CHUNK))  # larger than the whole budget: not cached, nothing lost
    assert rows.rows.get(b"huge", MISSING) is MISSING and newest in rows.rows
    rows.close()
    assert budget.lent == 0 and rows.rows == {}


def test_a_cache_below_its_share_takes_chunks_from_idle_caches_least_recently_used_first():
    budget = RowBudget(2 * CHUNK, None)
    first, second, busy = RowCache(budget), RowCache(budget), RowCache(budget)
    for rows, tag in ((first, b"a"), (second, b"b")):
        rows.activate()
        rows.put(tag, b"x" * (CHUNK // 2))
        rows.deactivate()
    assert budget.lent == 2 * CHUNK
    busy.activate()
    busy.put(b"c", b"x" * (CHUNK // 2))
    assert first.rows == {} and first.chunks == 0  # the least recently active went first
    assert second.rows == {b"b": b"x" * (CHUNK // 2)}
    second.activate()  # in use again: never reclaimed
    busy.put(b"d", b"x" * (CHUNK // 2))  # busy holds its share (2 chunks, 2 caches holding them)
    assert b"b" in second.rows and budget.lent <= budget.limit
    assert b"c" in busy.rows and b"d" not in busy.rows  # a newcomer refused, not an entry evicted
    second.deactivate()
    busy.put(b"e", b"x" * (CHUNK // 2))  # at its share still: idle second keeps its chunk
    assert second.chunks == 1 and b"b" in second.rows


def test_caches_used_in_turn_keep_hitting_when_their_state_outgrows_the_budget():
    """Two working copies used in turn, batch after batch, each reading then rewriting every
    key of a state that together is three times the budget: each keeps a share that hits."""
    budget = RowBudget(8 * CHUNK, None)
    copies = [RowCache(budget), RowCache(budget)]
    value_len = 2000
    per_copy = 3 * budget.limit // 2 // (value_len + 8 + ENTRY_OVERHEAD)
    for batch in range(8):
        hits = 0
        for n, rows in enumerate(copies):
            rows.activate()
            for i in range(per_copy):
                key = b"%d-%06d" % (n, i)
                if rows.lookup(key) is MISSING:
                    rows.put(key, b"o" * value_len)  # the engine's answer, as StateStore.get caches it
                else:
                    hits += 1
                rows.write_many([(key, b"n" * value_len)])  # the batch's write of the key
                assert rows.used <= rows.chunks * CHUNK and budget.lent <= budget.limit
            rows.deactivate()
        assert sum(c.chunks for c in copies) * CHUNK == budget.lent
    # at best a third of the state fits; insertion-order eviction alone hits nothing here
    assert abs(copies[0].chunks - copies[1].chunks) <= 1
    assert hits >= 0.25 * 2 * per_copy, hits


def test_the_budget_is_charged_to_the_block_cache():
    cache = antkv.Cache(8 * CHUNK)
    budget = RowBudget(4 * CHUNK, cache)
    rows = RowCache(budget)
    for i in range(12):
        rows.put(b"k%d" % i, b"v" * (CHUNK // 4))
    assert budget.lent == rows.chunks * CHUNK and cache.usage == budget.lent > 0
    rows.close()
    assert cache.usage == 0 and budget.lent == 0


@pytest.mark.parametrize("park", [False, True])
def test_store_reads_stay_exact_through_reuse_rebuilds_and_range_deletes(tmp_path, park):
    """Every other batch opens in "another process" (this one's idle copies dropped): a
    rebuilt copy's row cache is warm (it read the state whole), a reopened parked copy's
    starts cold; both read exactly."""
    options = StoreOptions(cache_dir=str(tmp_path / "cache"), park_copies=park)
    location = f"file://{tmp_path}/state"
    model: dict[bytes, bytes] = {}
    manifest = None
    for version in range(6):
        store = open_store(location, "op", 0, version, manifest=manifest, options=options)
        if version:
            assert store.copy_fate == ("reused" if version % 2 else "reopened" if park else "rebuilt")
            cached = {k: v for k, v in store._rows.rows.items() if v is not None}
            assert (bool(cached) or store.copy_fate == "reopened") and all(
                model.get(k) == v for k, v in cached.items())  # warm and exact
        for k in list(model)[: len(model) // 2]:
            assert store.get(k) == model[k]
        for i in range(300):
            key = b"k%04d" % ((i * 7 + version * 13) % 500)
            if i % 5 == 4:
                store.delete(key)
                model.pop(key, None)
            else:
                model[key] = b"%d-%d" % (version, i)
                store.put(key, model[key])
            assert store.get(key) == model.get(key)
        if version == 3:
            store.delete_range(b"k01", b"k02")
            model = {k: v for k, v in model.items() if not b"k01" <= k < b"k02"}
        assert dict(store.items()) == model
        assert all(store.get(b"k%04d" % i) == model.get(b"k%04d" % i) for i in range(500))
        assert store.num_keys() == len(model)
        manifest = store.commit().manifest
        if version % 2:
            release_idle_stores()  # the next batch rebuilds the copy, as in another process


def test_a_prefix_read_whole_answers_absent_keys_until_an_entry_of_it_is_evicted():
    rows = RowCache(RowBudget(2 * CHUNK, None))
    big = b"v" * (CHUNK // 4)
    assert rows.fill([(b"aa1", b"x"), (b"aa2", b"y"), (b"ab1", big)]) == 3
    assert rows.complete == {b"aa", b"ab"}
    assert rows.lookup(b"aa1") == b"x" and rows.lookup(b"aa9") is None  # absent: known
    assert rows.lookup(b"ac1") is MISSING  # a prefix not read whole: unknown
    rows.discard(b"aa1")  # a delete keeps the prefix whole: the key is now absent
    assert rows.lookup(b"aa1") is None and b"aa" in rows.complete
    for i in range(8 * ADMIT_EVERY):  # more than the budget: the oldest entries go, and their prefixes' wholeness
        rows.put(b"zz%d" % i, big)
    assert rows.rows.get(b"ab1", MISSING) is MISSING and b"ab" not in rows.complete
    assert rows.lookup(b"ab1") is MISSING  # not "absent": the cache no longer knows
    rows.drop_range(b"a", b"b")
    assert not rows.complete


def test_warm_reads_key_groups_whole_and_counts_stay_exact(tmp_path):
    # every changelog is big enough for a snapshot: each reload is a snapshot alone, a cold cache
    options = StoreOptions(cache_dir=str(tmp_path / "cache"), snapshot_ratio=1e-9)
    location = f"file://{tmp_path}/state"
    store = open_store(location, "op", 0, 0, options=options)
    model = {b"aa%d" % i: b"a%d" % i for i in range(5)} | {b"ab1": b"b", b"k1x": b"k"}
    for k, v in model.items():
        store.put(k, v)
    manifest = store.commit().manifest
    release_idle_stores()
    store = open_store(location, "op", 0, 1, manifest=manifest, options=options)
    assert store._rows.rows == {}  # rebuilt from a snapshot alone: nothing cached
    assert store.get(b"zz2") is None  # cached as absent, before its prefix is read whole
    assert store.warm([b"aa", b"zz"]) == 5
    assert store.warm([b"aa"]) == 0  # already whole
    assert store.get(b"aa9") is None and store.get(b"zz1") is None and store.get(b"ab1") == b"b"
    with pytest.raises(antkv.InvalidArgumentError):
        store.warm([b"a"])
    store.put(b"aa9", b"new")  # blind writes in a whole prefix: their base liveness is known
    store.delete(b"aa0")
    store.put(b"zz1", b"z")
    del model[b"aa0"]
    model |= {b"aa9": b"new", b"zz1": b"z"}
    whole, keys = _held_whole(store)  # what scans of the whole prefixes would return
    assert whole == {b"aa", b"zz"} and sorted(keys) == sorted(k for k in model if k[:2] in whole)
    assert store.num_keys() == len(model)
    assert all(store.get(k) == v for k, v in model.items())
    manifest = store.commit().manifest
    store = open_store(location, "op", 0, 2, manifest=manifest, options=options)
    assert dict(store.items()) == model and store.num_keys() == len(model)
    store.abort()


@pytest.mark.parametrize("seed", range(8))
def test_a_chain_of_changelogs_applied_as_one_equals_applied_one_by_one(tmp_path, seed):
    """WorkingCopy.apply_changelogs merges a chain (range deletions first, each key's last
    change): the database and the row cache end as replaying each changelog in turn leaves
    them, whole and clipped to a range, from a base that has keys of its own."""
    import random

    import xxhash

    from antkv.spark.store.local_cache import LocalCache
    from antkv.spark.store.location import Location
    from antkv.spark.store.objects import FileRef, encode_changelog
    from antkv.spark.store.row_cache import RowBudget
    from antkv.spark.store.working_copy import WorkingCopy

    rng = random.Random(seed)
    loc = Location(str(tmp_path / "loc"))
    refs = []
    for i in range(4):
        ranges = sorted(tuple(sorted((b"%03d" % rng.randrange(40), b"%03d" % rng.randrange(40))))
                        for _ in range(rng.randrange(4)))
        changes = {b"%03d" % rng.randrange(40): (None if rng.random() < 0.3 else os.urandom(rng.randrange(9)))
                   for _ in range(20)}
        data = encode_changelog(ranges, changes)
        loc.write(f"op/c{i}", data)
        refs.append(FileRef(f"op/c{i}", len(data), xxhash.xxh3_128_hexdigest(data)))
    for bounds in ((None, None), (b"010", b"030")):
        states = []
        for one_by_one in (False, True):
            copy = WorkingCopy(LocalCache(str(tmp_path / "cache"), 1 << 30), antkv.Options(),
                               RowCache(RowBudget(1 << 30, None)))
            try:
                copy.open_empty()
                copy.db.write(antkv.WriteBatch().put(b"020", b"base").put(b"035", b"base"))
                for chunk in ([[r] for r in refs] if one_by_one else [refs]):
                    copy.apply_changelogs(loc, chunk, *bounds)
                rows = {k: copy.rows.lookup(k) for k in (b"%03d" % i for i in range(40))}
                states.append((dict(copy.db.items()), {k: v for k, v in rows.items() if v is not MISSING}))
            finally:
                copy.destroy()
        assert states[0] == states[1]
        assert states[0][0]  # the case is not empty


def test_a_new_state_and_a_copy_rebuilt_from_changelogs_alone_hold_their_key_groups_whole(tmp_path):
    """An empty base's key groups are known empty (warming them reads nothing), and a copy
    rebuilt from a manifest without a snapshot (its changelogs bring every key, into the cache
    too) holds the manifest's key groups whole: the next batch reads nothing to warm them.
    (No parked copy: a reopened one starts with a cold row cache.)"""
    options = StoreOptions(cache_dir=str(tmp_path / "cache"), park_copies=False)
    location = f"file://{tmp_path}/state"
    store = open_store(location, "op", 0, 0, options=options)
    touched = {b"aa": 3, b"ab": 1}
    assert store.warm_touched(touched) == 0  # nothing to read, yet held whole
    assert _held_whole(store)[0] == {b"aa", b"ab"}
    model = {b"aa%d" % i: b"a%d" % i for i in range(3)} | {b"ab1": b"b"}
    for k, v in model.items():
        store.put(k, v)
    manifest = store.commit().manifest
    release_idle_stores()  # the next batch rebuilds the copy, as in another process
    store = open_store(location, "op", 0, 1, manifest=manifest, options=options)
    whole, keys = _held_whole(store)
    assert whole == {b"aa", b"ab"} and sorted(keys) == sorted(model)
    assert store.warm_touched(touched) == 0  # held whole already: no scan
    assert store.get(b"aa9") is None and all(store.get(k) == v for k, v in model.items())
    store.put(b"aa9", b"new")  # a blind write in a whole key group: counted without a read
    store.delete(b"aa0")
    model = {k: v for k, v in model.items() if k != b"aa0"} | {b"aa9": b"new"}
    assert store.num_keys() == len(model) and dict(store.items()) == model
    manifest = store.commit().manifest
    release_idle_stores()
    store = open_store(location, "op", 0, 2, manifest=manifest, options=options)
    assert dict(store.items()) == model and store.num_keys() == len(model)
    store.abort()


def test_a_chain_writes_no_deletion_of_a_key_the_copy_knows_is_absent(tmp_path):
    """A deletion in a chain of a key absent from the copy (its key group held whole, the key
    not cached: a timer registered and deleted again) is not written; the others are."""
    import xxhash

    from antkv.spark.store.local_cache import LocalCache
    from antkv.spark.store.location import Location
    from antkv.spark.store.objects import FileRef, encode_changelog
    from antkv.spark.store.row_cache import RowBudget
    from antkv.spark.store.working_copy import WorkingCopy

    loc = Location(str(tmp_path / "loc"))
    refs = []
    for i, changes in enumerate(({b"aa3": b"new", b"aa1": None}, {b"aa3": None, b"aa9": None, b"ab1": None})):
        data = encode_changelog([], changes)
        loc.write(f"op/c{i}", data)
        refs.append(FileRef(f"op/c{i}", len(data), xxhash.xxh3_128_hexdigest(data)))
    copy = WorkingCopy(LocalCache(str(tmp_path / "cache"), 1 << 30), antkv.Options(), RowCache(RowBudget(1 << 30, None)))
    try:
        copy.open_empty()
        copy.db.write(antkv.WriteBatch().put(b"aa1", b"base").put(b"aa2", b"base").put(b"ab1", b"base"))
        copy.rows.fill(copy.db.items(b"aa", b"ab"))  # key group "aa" held whole, "ab" not
        before = int(copy.db.property("antkv.last-sequence"))
        copy.apply_changelogs(loc, refs)
        assert dict(copy.db.items()) == {b"aa2": b"base"}
        assert int(copy.db.property("antkv.last-sequence")) - before == 2  # aa1 and ab1 deleted, no more
        assert [copy.rows.lookup(k) for k in (b"aa1", b"aa3", b"aa9")] == [None, None, None]
    finally:
        copy.destroy()


@pytest.mark.parametrize("seed", range(24))
def test_filling_a_chunk_at_a_time_equals_marking_and_putting_each_entry(seed, monkeypatch):
    """RowCache.fill stores whole chunks at once when they fit; the cache must end as marking
    each prefix when reached and putting each entry leaves it -- entries, wholeness, charge --
    with budgets that hold everything, part of it, or less than one chunk of entries, with
    entries cached before the fill, and with chunks of a few entries (a prefix spanning
    chunks); and a prefix held whole must hold every entry of it."""
    import random

    from antkv.spark.store import row_cache

    rng = random.Random(seed)
    if seed % 2:
        monkeypatch.setattr(row_cache, "_FILL_CHUNK", rng.choice([1, 3, 7]))
    items = sorted({b"%c%c%05d" % (97 + rng.randrange(3), 97 + rng.randrange(3), rng.randrange(10**5)):
                    os.urandom(rng.choice([0, 10, 300])) for _ in range(rng.choice([50, 3000, 9000]))}.items())
    before = [(k, b"old") for k, _ in rng.sample(items, min(len(items), rng.choice([0, 5])))]
    limit = rng.choice([1 << 30, 4 * CHUNK, CHUNK])
    states = []
    for bulk in (True, False):
        rows = RowCache(RowBudget(limit, None))
        for k, v in before:
            rows.put(k, v)
        if bulk:
            assert rows.fill(iter(items)) == len(items)
        else:
            last = None
            for k, v in items:
                if k[:row_cache.PREFIX_LEN] != last:
                    rows.complete.add(k[:row_cache.PREFIX_LEN])
                    last = k[:row_cache.PREFIX_LEN]
                rows.put(k, v)
        states.append((list(rows.rows.items()), set(rows.complete), rows.used, rows.chunks))
        assert all(rows.rows.get(k, MISSING) == v for k, v in items if k[:row_cache.PREFIX_LEN] in rows.complete)
        rows.close()
    assert states[0] == states[1]


class _CountingCodec:
    """The state layer's codec (rows), counting its decodes, one by one and in bulk."""

    def __init__(self):
        from antkv.spark.state.rows_codec import ROWS

        self.rows, self.decodes, self.bulk_decodes = ROWS, 0, 0

    def encode(self, value):
        return self.rows.encode(value)

    def decode(self, raw):
        self.decodes += 1
        return self.rows.decode(raw)

    def decode_some(self, raws):
        values = self.rows.decode_some(raws)
        self.bulk_decodes += len(values) - values.count(None)
        return values


def test_decoded_values_are_dropped_with_their_bytes_and_charged_while_kept():
    """Every change to a key's bytes drops its decoded value first (the module docstring's
    invariant) and gives its charge back; a codec switch drops them all."""
    codec, other = _CountingCodec(), _CountingCodec()
    rows = RowCache(RowBudget(1 << 30, None))
    raws = {b"k%d" % i: codec.encode((((i, "x" * i * (1 + 40 * (i % 2))),),)[0]) for i in range(8)}  # short, long
    for k, raw in raws.items():
        rows.put(k, raw)
    bare = rows.used

    def keep_all():
        keys = [k for k in raws if k in rows.rows]
        rows.keep_decoded(keys, [rows.rows[k] for k in keys], [codec.decode(rows.rows[k]) for k in keys], codec)

    keep_all()
    assert rows.decoded == {k: codec.decode(raw) for k, raw in raws.items()}
    assert rows.used == bare + sum(decoded_charge(r, codec.decode(r)) for r in raws.values())
    rows.put(b"k0", codec.encode(((9, "new"),)))  # a new value
    rows.write_many({b"k1": codec.encode(((8, "dict"),)), b"k2": None})  # the store's settle
    rows.write_many([(b"k3", codec.encode(((7, "pairs"),)))])  # a changelog's records
    rows.discard(b"k4")
    assert set(rows.decoded) == {b"k5", b"k6", b"k7"}
    rows.drop_range(b"k5", b"k6")
    assert set(rows.decoded) == {b"k6", b"k7"}
    for k, decoded in rows.decoded.items():
        assert decoded == codec.decode(rows.rows[k])
    rows.use_codec(other)
    assert rows.decoded == {}
    expected = sum(len(k) + len(v) + ENTRY_OVERHEAD for k, v in rows.rows.items())
    assert rows.used == expected  # every charge of a dropped decoded value given back
    rows.clear()
    assert rows.used == 0 and rows.decoded == {}


@pytest.mark.parametrize("seed", range(4))
def test_a_batch_written_in_bulk_equals_each_entry_written_then_its_decoded_value_kept(seed):
    """``write_many`` of a dict with decoded values to keep -- charged in bulk for a batch
    whose keys are all new, all rewritten or all deleted, entry by entry otherwise -- leaves
    the cache as ``put`` / ``discard`` of each entry, then ``keep_decoded``, does: the same
    bytes, decoded values and charge, whatever the batch's shape and what the cache held."""
    import random

    from antkv.spark.state.rows_codec import ROWS

    rng = random.Random(seed)
    bulk, each = RowCache(RowBudget(1 << 30, None)), RowCache(RowBudget(1 << 30, None))
    keys = [b"%02d-key-%04d" % (i % 5, i) for i in range(400)]
    met = set()  # the shapes met with decoded values held
    for batch in range(60):
        shape = rng.choice(["new", "rewritten", "deleted", "mixed", "redecoded", "resized", "uniform"])
        held = [k for k in keys if bulk.rows.get(k, MISSING) not in (MISSING, None)]
        pool = {"new": [k for k in keys if k not in bulk.rows], "mixed": keys,
                "redecoded": list(bulk.decoded), "resized": list(bulk.decoded),
                "uniform": [k for k in held if len(bulk.rows[k]) == 11]}.get(shape, held)
        # (redecoded: every key held decoded is given a decoded value; resized: a short one;
        # uniform: keys holding values of one length, some decoded, given values of another)
        if shape == "uniform" and len(pool) < 20:
            shape, pool = "redecoded", keys  # (values of one length written first, all decoded)
        chosen = rng.sample(pool, min(len(pool), rng.randrange(1, 120)))
        if shape == "uniform":  # some of them no longer held decoded
            undecoded = [k for k in chosen if rng.random() < 0.3]
            bulk.drop_decoded(undecoded)
            each.drop_decoded(undecoded)
        changes, keep = {}, {}
        for k in chosen:
            if shape == "deleted" or (shape == "mixed" and rng.random() < 0.3):
                changes[k] = None
            elif shape == "uniform" or (shape == "redecoded" and pool is keys):
                value = (((1 << 41) + rng.randrange(1 << 20), rng.randrange(9)),)  # 11 bytes stored
                if shape == "uniform" and rng.random() < 0.5:
                    value = ((value[0][0], value[0][1], 7),)  # 13 bytes
                changes[k] = ROWS.encode(value)
                keep[k] = value
            else:
                value = ((rng.randrange(-5, 1 << 40), (rng.randrange(9),) * rng.randrange(4)),)
                if shape != "resized" and rng.random() < 0.2:  # long enough to be charged its objects' size
                    value = ((rng.randrange(9), "s" * rng.randrange(100, 400)),)
                changes[k] = ROWS.encode(value)
                if shape in ("redecoded", "resized") or rng.random() < 0.7:
                    keep[k] = value
        if rng.random() < 0.1:  # a key the cache holds as absent
            k = rng.choice(keys)
            bulk.put(k, None)
            each.put(k, None)
        bulk.write_many(dict(changes), dict(keep), ROWS)
        for k, v in changes.items():
            if v is None:
                each.discard(k)
            else:
                each.put(k, v)
        each.keep_decoded(list(keep), [changes[k] for k in keep], list(keep.values()), ROWS)
        assert bulk.rows == each.rows and list(bulk.rows) == list(each.rows)
        assert bulk.decoded == each.decoded and bulk.used == each.used, (batch, shape)
        expected = sum(len(k) + (0 if v is None else len(v)) + ENTRY_OVERHEAD for k, v in bulk.rows.items())
        expected += sum(decoded_charge(bulk.rows[k], v) for k, v in bulk.decoded.items())
        assert bulk.used == expected
        if bulk.decoded and chosen:
            met.add(shape)
    assert met == {"new", "rewritten", "deleted", "mixed", "redecoded", "resized", "uniform"}


@pytest.mark.parametrize("first", [0, 1000])  # the values before: of two lengths; of one
@pytest.mark.parametrize("length", [100, 2000])
def test_a_rewrite_of_decoded_values_that_does_not_fit_drops_them_and_stays_exact(length, first):
    """A batch rewriting every key the cache holds decoded, with values whose decoded charge
    the budget cannot take -- short ones (charged by their length) or long ones (their objects
    measured): its bytes are written entry by entry (making room), the decoded values dropped,
    and every charge stays exact."""
    from antkv.spark.state.rows_codec import ROWS

    rows = RowCache(RowBudget(CHUNK, None))
    keys = [b"k%04d" % i for i in range(200)]
    small = {k: ((first + i,),) for i, k in enumerate(keys)}
    rows.write_many({k: ROWS.encode(v) for k, v in small.items()}, dict(small), ROWS)
    assert rows.decoded == small
    large = {k: ((i, "x" * length),) for i, k in enumerate(keys)}  # more than the budget, bytes and decoded
    rows.write_many({k: ROWS.encode(v) for k, v in large.items()}, dict(large), ROWS)
    assert all(rows.rows[k] == ROWS.encode(v) for k, v in rows.decoded.items())
    assert all(rows.rows.get(k, ROWS.encode(large[k])) == ROWS.encode(large[k]) for k in keys)
    expected = sum(len(k) + len(v) + ENTRY_OVERHEAD for k, v in rows.rows.items())
    expected += sum(decoded_charge(rows.rows[k], v) for k, v in rows.decoded.items())
    assert rows.used == expected <= CHUNK


def test_a_value_written_or_read_decoded_is_read_in_the_next_batches_without_decoding(tmp_path):
    """``put_decoded`` keeps its value decoded when it settles, ``get_decoded`` keeps what it
    decodes: the next batches (the copy reused) read both without decoding; a value written as
    bytes is decoded once, then not again; a later write of bytes is read as written."""
    options = StoreOptions(cache_dir=str(tmp_path / "cache"), park_copies=False)
    location = f"file://{tmp_path}/state"
    codec = _CountingCodec()
    s = open_store(location, "op", 0, 0, options=options)
    s.put_decoded(b"a", ((1, "one"),), codec)
    s.put(b"b", codec.encode(((2, "two"),)))
    assert s.get_decoded(b"a", codec) == ((1, "one"),) and s.get(b"a") == codec.encode(((1, "one"),))
    manifest = s.commit().manifest
    for version in (1, 2):
        s = open_store(location, "op", 0, version, manifest=manifest, options=options)
        assert s.copy_fate == "reused"
        before = codec.decodes
        assert s.get_decoded(b"a", codec) == ((1, "one"),)
        assert s.get_decoded(b"b", codec) == ((2, "two"),)
        assert codec.decodes - before == (1 if version == 1 else 0)  # b's bytes, decoded once
        manifest = s.commit().manifest
    s = open_store(location, "op", 0, 3, manifest=manifest, options=options)
    s.put(b"a", codec.encode(((3, "bytes"),)))
    assert s.get_decoded(b"a", codec) == ((3, "bytes"),)  # pending
    manifest = s.commit().manifest  # settled: a's decoded value dropped with its old bytes
    s = open_store(location, "op", 0, 4, manifest=manifest, options=options)
    assert s.copy_fate == "reused" and s.get_decoded(b"a", codec) == ((3, "bytes"),)
    s.abort()
    release_idle_stores()


@pytest.mark.parametrize("seed", range(3))
def test_keeping_a_key_groups_decoded_values_at_once_equals_keeping_each(seed):
    """``keep_decoded`` of many keys the cache holds, none decoded yet (a warmed key group's,
    stored at once when they fit) leaves the cache as keeping them one at a time does: the
    same decoded values and charge; keys whose bytes differ or are not held are skipped."""
    import random

    from antkv.spark.state.rows_codec import ROWS

    rng = random.Random(seed)
    at_once, each = RowCache(RowBudget(1 << 30, None)), RowCache(RowBudget(1 << 30, None))
    values = {b"kg%04d" % i: ((rng.randrange(1 << 41), ("s" * rng.choice([1, 300]),)),) for i in range(300)}
    raws = {k: ROWS.encode(v) for k, v in values.items()}
    for cache in (at_once, each):
        cache.fill(sorted(raws.items()))
        cache.keep_decoded([b"kg0000"], [raws[b"kg0000"]], [values[b"kg0000"]], ROWS)  # one decoded already
    keys = list(values)
    at_once.keep_decoded(keys, [raws[k] for k in keys], [values[k] for k in keys], ROWS)
    for k in keys:
        each.keep_decoded([k], [raws[k]], [values[k]], ROWS)
    assert at_once.decoded == each.decoded == values and at_once.used == each.used
    other = [b"kg9999", b"kg0001"]  # not held; held with other bytes
    at_once.keep_decoded(other, [b"\x01\x03\x02", b"\x01\x03\x04"], [((1,),), ((2,),)], ROWS)
    assert at_once.decoded == values and at_once.used == each.used


def test_keeping_a_just_read_key_groups_decoded_values_takes_the_budget_they_need_at_once(monkeypatch):
    """A cache that has just read key groups holds budget for their bytes only: keeping all
    their decoded values at once takes the chunks they need in one step, with no charge
    worked out value by value, and leaves the cache as keeping them one at a time does."""
    from antkv.spark.state.rows_codec import ROWS
    from antkv.spark.store import row_cache

    one_by_one = []
    monkeypatch.setattr(row_cache, "decoded_charge", lambda raw, value: one_by_one.append(raw) or decoded_charge(raw, value))

    at_once, each = RowCache(RowBudget(1 << 30, None)), RowCache(RowBudget(1 << 30, None))
    values = {b"kg%06d" % i: ((1_700_000_000_000 + i, i % 7, None),) for i in range(20_000)}
    raws = {k: ROWS.encode(v) for k, v in values.items()}
    for cache in (at_once, each):
        cache.fill(sorted(raws.items()))
    chunks_for_bytes = at_once.chunks
    keys = list(values)
    at_once.keep_decoded(keys, [raws[k] for k in keys], [values[k] for k in keys], ROWS)
    assert one_by_one == []
    for k in keys:
        each.keep_decoded([k], [raws[k]], [values[k]], ROWS)
    assert at_once.decoded == each.decoded == values
    assert at_once.used == each.used and at_once.chunks == each.chunks > chunks_for_bytes
    assert at_once.used <= at_once.chunks * CHUNK


def test_warming_with_a_codec_leaves_a_reopened_copys_reads_nothing_to_decode(tmp_path):
    """A copy reopened from the machine starts with a cold row cache: warming its key groups
    with the batch's codec decodes their values in bulk, so that its reads decode none one by
    one and return what was written; values of other layouts are decoded when read."""
    options = StoreOptions(cache_dir=str(tmp_path / "cache"))
    location = f"file://{tmp_path}/state"
    codec = _CountingCodec()
    store = open_store(location, "op", 0, 0, options=options)
    model = {}
    for i in range(600):
        key = b"%c%c-key-%04d" % (i % 3, 0, i)
        model[key] = ((None, (1_700_000_000_000 + 977 * i, i % 50, i % 2 == 0)),)
        store.put_decoded(key, model[key], codec)
    odd = {b"\x00\x00-odd-%d" % i: ((i, "text %d" % i),) for i in range(3)}  # a layout of their own
    for k, v in odd.items():
        store.put_decoded(k, v, codec)
    manifest = store.commit().manifest
    release_idle_stores()  # the next batch reopens the parked copy, as in another process
    store = open_store(location, "op", 0, 1, manifest=manifest, options=options)
    assert store.copy_fate == "reopened"
    touched = {bytes((g, 0)): 200 for g in range(3)}
    assert store.warm_touched(touched, codec) == len(model) + len(odd)
    assert codec.bulk_decodes == len(model)
    assert all(repr(store.get_decoded(k, codec)) == repr(v) for k, v in model.items())
    assert codec.decodes == 0
    assert all(store.get_decoded(k, codec) == v for k, v in odd.items()) and codec.decodes == len(odd)
    store.abort()
    release_idle_stores()


def test_the_whole_state_is_every_live_key_in_order_only_when_the_count_matches():
    rows = RowCache(RowBudget(1 << 30, None))
    rows.write_many([(b"b", b"2"), (b"a", b"1"), (b"c", b"3")])
    assert rows.whole_state(3) == ([b"a", b"b", b"c"], [b"1", b"2", b"3"])
    assert rows.whole_state(4) is None  # a key the cache lacks
    rows.put(b"0", None)  # known absent: not part of the state
    assert rows.whole_state(3) == ([b"a", b"b", b"c"], [b"1", b"2", b"3"])
    assert rows.whole_state(4) is None
