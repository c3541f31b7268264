"""A batch's settled writes wait beside the working copy's database (``WorkingCopy.deferred``)
until something reads the database beyond one key, or the committed copy is parked.

Each test checks both sides: that the writes really did not reach the engine yet (so the
check that follows reads them from where they wait), and that every way of reading -- a point
read of a key the row cache evicted, membership, a scan, warming a key group, the key count,
the next batch opened any way -- sees them.
"""

from __future__ import annotations

import pytest

import antkv
from antkv.spark import StoreOptions, open_store, release_idle_stores
from antkv.spark.store.working_copy import WorkingCopy

KEYS = [b"k%03d" % i for i in range(200)]  # one prefix ("k0", "k1"): two key groups' worth


@pytest.fixture
def uri(tmp_path):
    release_idle_stores()
    yield f"file://{tmp_path}/loc"
    release_idle_stores()


def _options(tmp_path, cache: str = "cache") -> StoreOptions:
    # (no row_cache_bytes: the first store of a process fixes the row caches' budget for every
    # later test in it; a test forgets its cached rows itself, as evictions would)
    return StoreOptions(cache_dir=str(tmp_path / cache))


def _base(uri, options) -> str:
    """Version 1: every key at ``base-<key>``; returns its manifest."""
    s = open_store(uri, "op", 0, 0, options=options)
    for k in KEYS:
        s.put(k, b"base-" + k)
    return s.commit().manifest


def _engine_value(store, key):
    """What the working copy's database itself holds for ``key`` (not its deferred writes)."""
    return store._copy._db.get(key)


def test_point_reads_membership_and_the_count_see_writes_the_engine_has_not_had(tmp_path, uri):
    options = _options(tmp_path)
    manifest = _base(uri, options)
    s = open_store(uri, "op", 0, 1, manifest=manifest, options=options)
    model = {k: b"base-" + k for k in KEYS}
    for i, k in enumerate(KEYS):
        if i % 3 == 0:
            s.delete(k)
            model.pop(k)
        else:
            s.put(k, b"new-%d" % i + bytes(100))
            model[k] = b"new-%d" % i + bytes(100)
    assert s.num_keys() == len(model)  # (settles the writes; counting reads no key's value)
    s._rows.clear()  # as evictions would: every read below misses the row cache
    assert len(s._copy.deferred) == len(KEYS)
    assert _engine_value(s, KEYS[0]) == b"base-" + KEYS[0]  # the engine still holds the base
    assert _engine_value(s, KEYS[1]) == b"base-" + KEYS[1]
    for k in KEYS:
        assert s.get(k) == model.get(k)
        assert (k in s) == (k in model)
    s._rows.clear()
    s.append(KEYS[1], b"+")  # a read-modify-write of an evicted key
    model[KEYS[1]] += b"+"
    assert s.get(KEYS[1]) == model[KEYS[1]]
    assert dict(s.items()) == model  # a scan: the deferred writes go to the engine first
    assert not s._copy.deferred and _engine_value(s, KEYS[1]) == model[KEYS[1]]
    assert _engine_value(s, KEYS[0]) is None
    s.abort()


def test_warming_a_key_group_keeps_the_batchs_writes_to_it(tmp_path, uri):
    options = _options(tmp_path)
    manifest = _base(uri, options)
    s = open_store(uri, "op", 0, 1, manifest=manifest, options=options)
    s.put(b"k095", b"new")
    s.delete(b"k096")
    assert s.num_keys() == len(KEYS) - 1
    assert _engine_value(s, b"k095") == b"base-k095"  # waiting beside the engine
    s._rows.clear()  # as evictions would: the row cache holds no key group whole, nor the writes
    assert s.warm([b"k0"]) == 99  # key group "k0" read from the engine into the row cache
    assert s.get(b"k095") == b"new" and s.get(b"k096") is None and b"k096" not in s
    assert s.get(b"k097") == b"base-k097"
    s.abort()


def test_a_range_deletion_and_an_abort_over_deferred_writes(tmp_path, uri):
    options = _options(tmp_path)
    manifest = _base(uri, options)
    s = open_store(uri, "op", 0, 1, manifest=manifest, options=options)
    s.put(b"k050x", b"inside")
    s.put(b"k150", b"after")
    s.num_keys()
    s.delete_range(b"k040", b"k060")  # older than the range: deleted with it
    s.put(b"k045", b"again")  # newer than the range: kept
    expected = {k: b"base-" + k for k in KEYS if not b"k040" <= k < b"k060"}
    expected.update({b"k150": b"after", b"k045": b"again"})
    assert dict(s.items()) == expected and s.num_keys() == len(expected)
    s.abort()  # nothing of the batch remains: the next open holds version 1
    s = open_store(uri, "op", 0, 1, manifest=manifest, options=options)
    assert dict(s.items()) == {k: b"base-" + k for k in KEYS}
    s.abort()


@pytest.mark.parametrize("changed", ["every key", "a few keys"])
@pytest.mark.parametrize("reopen", ["reused", "reopened", "rebuilt"])
def test_the_next_batch_sees_a_committed_batchs_writes_however_it_opens(tmp_path, uri, changed, reopen):
    """Every key changed: parking replaces the database by the row cache's state (the deferred
    writes never reach the engine); a few: parking writes them first.  Either way the next
    batch -- on this process's idle copy, on the parked copy, or on a copy rebuilt from the
    location -- holds the committed version exactly."""
    options = _options(tmp_path)
    manifest = _base(uri, options)
    s = open_store(uri, "op", 0, 1, manifest=manifest, options=options)
    model = {k: b"base-" + k for k in KEYS}
    for k in KEYS if changed == "every key" else KEYS[::40]:
        s.put(k, b"v2-" + k)
        model[k] = b"v2-" + k
    s.delete(KEYS[3])
    model.pop(KEYS[3])
    msg = s.commit()
    if reopen != "reused":
        release_idle_stores()
    if reopen == "rebuilt":  # (a cache directory holding no parked copy)
        options = _options(tmp_path, cache="other-cache")
    s = open_store(uri, "op", 0, 2, manifest=msg.manifest, options=options)
    assert s.copy_fate == reopen
    assert dict(s.items()) == model and s.num_keys() == len(model)
    s.abort()


def test_a_copy_whose_deferred_writes_fail_at_parking_is_dropped_and_the_version_stands(
        tmp_path, uri, monkeypatch, caplog):
    """A full disk when the deferred writes reach the engine at parking: the version is
    committed (the location alone makes a changelog durable), the copy is not kept, and the
    next open builds the version exactly from what else there is."""
    options = _options(tmp_path)
    manifest = _base(uri, options)
    s = open_store(uri, "op", 0, 1, manifest=manifest, options=options)
    s.put(KEYS[0], b"v2")

    def full_disk(self):
        raise antkv.IOError("No space left on device", OSError(28, "No space left on device"), "db")

    monkeypatch.setattr(WorkingCopy, "write_deferred", full_disk)
    with caplog.at_level("WARNING", logger="antkv"):
        msg = s.commit()
    assert "committed but not parked" in caplog.text
    monkeypatch.undo()
    s = open_store(uri, "op", 0, 2, manifest=msg.manifest, options=options)
    assert s.copy_fate in ("rebuilt", "caught_up")  # (from version 1's parked copy) not version 2's copy
    assert dict(s.items()) == {**{k: b"base-" + k for k in KEYS}, KEYS[0]: b"v2"}
    s.abort()


def _unparked(tmp_path) -> StoreOptions:
    return StoreOptions(cache_dir=str(tmp_path / "cache"), park_copies=False)


def test_a_copy_kept_unparked_carries_its_writes_into_the_next_batch(tmp_path, uri):
    """Not parked, the idle copy keeps a committed batch's writes beside the engine: the next
    batch reads them there -- point reads of evicted keys, membership, scans -- and its key
    count, when it blind-writes keys it knows nothing of, counts them as the base's."""
    options = _unparked(tmp_path)
    manifest = _base(uri, options)
    s = open_store(uri, "op", 0, 1, manifest=manifest, options=options)
    model = {k: b"base-" + k for k in KEYS}
    for k in KEYS[::2]:
        s.put(k, b"v2-" + k)
        model[k] = b"v2-" + k
    s.put(b"k999", b"born in v2")  # a key the base lacks
    model[b"k999"] = b"born in v2"
    s.delete(KEYS[1])
    model.pop(KEYS[1])
    msg = s.commit()
    s = open_store(uri, "op", 0, 2, manifest=msg.manifest, options=options)
    assert s.copy_fate == "reused"
    assert _engine_value(s, KEYS[0]) == b"base-" + KEYS[0]  # carried: the engine lacks version 2's writes
    assert _engine_value(s, b"k999") is None
    s._rows.clear()  # as evictions would: the batch knows nothing of any key
    assert s.get(KEYS[0]) == model[KEYS[0]] and s.get(KEYS[1]) is None and KEYS[1] not in s
    s._rows.clear()
    s.put(b"k999", b"v3")  # blind writes of keys version 2 made live and deleted
    s.put(KEYS[1], b"v3")
    model.update({b"k999": b"v3", KEYS[1]: b"v3"})
    assert s.num_keys() == len(model)
    msg = s.commit()
    assert msg.num_keys == len(model)
    s = open_store(uri, "op", 0, 3, manifest=msg.manifest, options=options)
    assert dict(s.items()) == model and s.num_keys() == len(model)
    s.abort()  # the copy is dropped with what it carried; the location holds every version
    s = open_store(uri, "op", 0, 3, manifest=msg.manifest, options=options)
    assert s.copy_fate == "rebuilt" and dict(s.items()) == model
    s.abort()


def test_an_unparked_copy_writes_what_it_carries_once_it_is_large(tmp_path, uri, monkeypatch):
    """The writes a copy carries are bounded (``_CARRY_BYTES``): beyond it they reach the
    engine at the commit, and the next batch holds the version all the same."""
    from antkv.spark.store import working_copy

    monkeypatch.setattr(working_copy, "_CARRY_BYTES", 4096)
    options = _unparked(tmp_path)
    manifest = _base(uri, options)
    model = {k: b"base-" + k for k in KEYS}
    s = open_store(uri, "op", 0, 1, manifest=manifest, options=options)
    for k in KEYS[:4]:  # about 0.3 KiB: carried
        s.put(k, b"v2-" + k)
        model[k] = b"v2-" + k
    s = open_store(uri, "op", 0, 2, manifest=s.commit().manifest, options=options)
    assert len(s._copy.deferred) == 4 and _engine_value(s, KEYS[0]) == b"base-" + KEYS[0]
    for k in KEYS[2:150]:  # about 14 KiB with what was carried: written at the commit
        s.put(k, b"v3-" + k)
        model[k] = b"v3-" + k
    s = open_store(uri, "op", 0, 3, manifest=s.commit().manifest, options=options)
    assert s.copy_fate == "reused" and not s._copy.deferred
    assert _engine_value(s, KEYS[0]) == b"v2-" + KEYS[0] and _engine_value(s, KEYS[2]) == b"v3-" + KEYS[2]
    assert dict(s.items()) == model
    s.abort()


def test_warming_key_groups_the_deferred_writes_do_not_touch_leaves_them_deferred(tmp_path, uri):
    """A batch's earlier frames wrote other key groups: warming the next frame's reads them
    from the engine without writing what waits (which stays beside the engine), and every
    read of either sees the batch's state."""
    options = _options(tmp_path)
    manifest = _base(uri, options)
    s = open_store(uri, "op", 0, 1, manifest=manifest, options=options)
    s._rows.clear()  # as a reopened copy's cold row cache: no key group held whole
    s.put(b"k095", b"new")  # key group "k0"
    s.delete(b"k096")
    assert s.warm([b"k1"]) == 100  # key group "k1" read from the engine; "k0"'s writes wait
    assert s._copy.deferred and _engine_value(s, b"k095") == b"base-k095"
    assert s.get(b"k150") == b"base-k150" and s.get(b"k095") == b"new" and s.get(b"k096") is None
    assert s.num_keys() == len(KEYS) - 1
    assert s.warm([b"k0"]) == 99  # now a key group they touch: written first, then read
    assert not s._copy.deferred and _engine_value(s, b"k095") == b"new"
    assert s.get(b"k095") == b"new" and b"k096" not in s and s.get(b"k097") == b"base-k097"
    s.abort()
