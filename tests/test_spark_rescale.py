"""Rescale by ingestion (``antkv.spark.store.rescale``) on plain stores in a real local location.

Two old partitions (K = 16 key groups) are published as version 1 and rescaled to three.  The
tests check that the bring-in adds the source's files (the new manifest names the source's
objects, the commit uploads a small fraction of the state brought in), that a failure at any
location call or at any engine file-system call of the bring-in leaves the published version
intact and a retry succeeds, and that large values survive while the value-log bytes of clipped
key groups are accounted as garbage and reclaimed (a file holding only clipped groups deleted
whole, a mixed one relocated by GC)."""

from __future__ import annotations

import collections
import dataclasses
import os
import random

import pytest

import antkv
from antkv.fs.fault import FaultInjectionFileSystem
from antkv.fs.os_file_system import OSFileSystem
from antkv.spark import CommitCoordinator, Location, StoreOptions, open_store, release_idle_stores
from antkv.spark.store.keygroups import key_group_range, plan_rescale
from antkv.spark.store.rescale import open_rescaled_store
from antkv.spark.store.published import read_manifest

from test_spark_faults import Fault, make_faulty

K = 16
SMALL, LARGE = 100, 700  # LARGE is above the stores' min_blob_size: those values live in the value log


def _key(group: int, i: int) -> bytes:
    return group.to_bytes(2, "big") + b"\x00\x01" + b"%05d" % i


def _options(tmp_path, tables="local", **engine) -> StoreOptions:
    # max_background_jobs=0: flush, compaction and value-log GC run inline, so every run is the same
    engine = dict(min_blob_size=512, write_buffer_size=64 << 10, max_background_jobs=0, **engine)
    return StoreOptions(cache_dir=str(tmp_path / "cache"), max_changelog_bytes=16 << 10, engine=engine,
                        tables=tables, cache_disk_bytes=64 << 10 if tables == "remote" else 8 << 30)


@pytest.fixture(autouse=True)
def _no_idle_stores():
    release_idle_stores()
    yield
    release_idle_stores()


def _publish_groups(loc, options, version: int, groups_per_partition, per_group: int, size_of) -> dict:
    """Commit version ``version`` of 2 partitions, partition p writing ``per_group`` keys in each
    of ``groups_per_partition[p]``; publish it.  Returns what was written."""
    coord = CommitCoordinator(loc, "op", 2, query_id="q")
    bases = coord.base_manifests(version - 1)
    written, msgs = {}, []
    for p, groups in enumerate(groups_per_partition):
        store = open_store(loc, "op", p, version - 1, manifest=bases[p], options=options)
        for g in groups:
            for i in range(per_group):
                k, v = _key(g, i), os.urandom(size_of(i))
                store.put(k, v)
                written[k] = v
        msgs.append(store.commit())
    coord.publish(version, msgs)
    return written


def _two_partitions(loc, options, per_group=120, size_of=lambda i: LARGE if i % 2 else SMALL) -> dict:
    return _publish_groups(loc, options, 1, [range(0, 8), range(8, 16)], per_group, size_of)


def _rescale_one(loc, options, plan, version, old):
    store = open_rescaled_store(loc, "op", plan, version, old, options)
    try:
        return store.commit()
    except BaseException:
        store.abort()
        raise


def _rescale(loc, options, version: int, new_n: int):
    old = CommitCoordinator(loc, "op", new_n, query_id="q").published_manifests(version)
    plans = plan_rescale(K, len(old), new_n)
    msgs = [_rescale_one(loc, options, plan, version, old) for plan in plans]
    CommitCoordinator(loc, "op", new_n, query_id="q").publish(version + 1, msgs, bases=[old[p.base] for p in plans])
    return msgs


def _check_state(loc, options, version: int, n: int, want: dict) -> None:
    """Every partition holds exactly the keys of its key groups, with an exact key count."""
    got = {}
    manifests = CommitCoordinator(loc, "op", n, query_id="q").published_manifests(version)
    for p in range(n):
        with open_store(loc, "op", p, version, options=options) as s:
            items = dict(s.items())
            assert {int.from_bytes(k[:2], "big") for k in items} <= set(key_group_range(K, n, p))
            assert s.num_keys() == len(items)
            assert read_manifest(loc, manifests[p]).key_counts == collections.Counter(k[:2] for k in items)
            got.update(items)
    assert got == want


def _objects(manifest) -> dict:
    return {f.object: f for f in manifest.snapshot.files}


@pytest.mark.parametrize("tables", ["local", "remote"])
def test_bring_in_names_the_source_objects_and_uploads_a_fraction_of_it(tmp_path, tables):
    # small tables (8 KiB): most of the range brought in is whole tables, linked as they are (in
    # remote mode: named as the source's remote files, read from the location through the block cache)
    loc = Location(str(tmp_path / "loc"))
    options = _options(tmp_path, tables=tables, target_file_size_base=8 << 10)
    want = _two_partitions(loc, options, per_group=300, size_of=lambda i: SMALL)  # tables only
    old = CommitCoordinator(loc, "op", 3, query_id="q").published_manifests(1)
    source = read_manifest(loc, old[0])
    msgs = _rescale(loc, options, 1, 3)
    _check_state(loc, options, 2, 3, want)
    # new partition 1 keeps [8, 11) of old 1 and brings in [6, 8) from old 0
    new1 = read_manifest(loc, msgs[1].manifest)
    assert msgs[1].snapshot and new1.num_keys == 5 * 300
    reused = {o: f for o, f in _objects(new1).items() if o in _objects(source)}
    assert reused, "no object of the source partition is named"
    for o, f in reused.items():
        assert f.size == _objects(source)[o].size and f.xxh3 == _objects(source)[o].xxh3
        assert f.local != _objects(source)[o].local  # a new file number in the new database
    brought_in = 2 * 300 * (SMALL + 9)
    assert sum(f.size for f in reused.values()) >= brought_in // 2
    # uploaded: the flushed clip tombstones, the ingest's tombstone table, the boundary table
    assert msgs[1].bytes_uploaded < brought_in // 3
    # the partitions that only clip commit a changelog (two range deletions), no snapshot
    assert not msgs[0].snapshot and not msgs[2].snapshot
    assert msgs[0].bytes_uploaded < 16 << 10 and msgs[2].bytes_uploaded < 16 << 10  # the manifest, mostly
    # back to one partition: it brings in both others' ranges, and the state is still exact
    msgs = _rescale(loc, options, 2, 1)
    _check_state(loc, options, 3, 1, want)
    assert msgs[0].num_keys == len(want)
    if tables == "remote":  # no snapshot file was downloaded whole
        assert not [n for _, _, names in os.walk(tmp_path / "cache" / "objects") for n in names]


def test_a_location_fault_at_any_call_of_a_rescale_changes_nothing_and_a_retry_succeeds(tmp_path):
    loc, handler = make_faulty(str(tmp_path / "loc"))
    options = _options(tmp_path)
    want = _two_partitions(loc, options, per_group=40)
    old = CommitCoordinator(loc, "op", 3, query_id="q").published_manifests(1)
    plan = plan_rescale(K, 2, 3)[1]  # the partition that brings in
    assert plan.bring_in
    n = 0
    while True:
        n += 1
        release_idle_stores()
        handler.arm(n, crash=False)
        try:
            msg = _rescale_one(loc, options, plan, 1, old)
        except antkv.IOError as e:
            assert isinstance(e.__cause__, Fault) or "injected" in str(e)
        else:
            handler.arm(None, crash=False)
            break
        handler.arm(None, crash=False)
        assert CommitCoordinator(loc, "op", 3, query_id="q").latest_version() == 1
        assert os.listdir(tmp_path / "cache" / "work") == []  # nothing of the attempt is left
        with open_store(loc, "op", 1, 2, manifest=_rescale_one(loc, options, plan, 1, old).manifest,
                        options=options) as retried:
            assert retried.num_keys() == len(dict(retried.items())) == 5 * 40
    assert n > 5 and msg.num_keys == 5 * 40
    _check_state(loc, options, 1, 2, want)
    _rescale(loc, options, 1, 3)
    _check_state(loc, options, 2, 3, want)


def test_an_engine_fault_during_the_bring_in_changes_nothing_and_a_retry_succeeds(tmp_path):
    fs = FaultInjectionFileSystem(OSFileSystem())
    loc, options = Location(str(tmp_path / "loc")), _options(tmp_path, file_system=fs)
    want = _two_partitions(loc, options, per_group=40)
    old = CommitCoordinator(loc, "op", 3, query_id="q").published_manifests(1)
    plan = plan_rescale(K, 2, 3)[1]
    release_idle_stores()
    fs.calls, fs.record_trace, fs.trace = 0, True, []
    _rescale_one(loc, options, plan, 1, old)  # a dry run, to list the bring-in's file-system calls
    fs.record_trace = False
    release_idle_stores()
    window = [n for n, _op, path in fs.trace if f"{os.sep}ingest-" in path]
    points = [n for n, op, _path in fs.trace if window[0] <= n <= window[-1] + 8
              and op in ("create", "link", "rename", "sync", "sync_dir", "remove")]
    assert any(op == "link" for n, op, _ in fs.trace if n in points)  # the ingest links files
    failed = []
    for n in points:
        fs.calls = 0
        fs.fail_at(n)
        try:
            msg = _rescale_one(loc, options, plan, 1, old)
        except antkv.IOError as e:
            assert "injected" in str(e)
            failed.append(n)
        else:  # a failed link falls back to a copy; a failed removal of a leftover is retried later
            with open_store(loc, "op", 1, 2, manifest=msg.manifest, options=options) as s:
                assert s.num_keys() == len(dict(s.items())) == 5 * 40
        fs.disarm()
        release_idle_stores()
        assert CommitCoordinator(loc, "op", 3, query_id="q").latest_version() == 1
        assert os.listdir(tmp_path / "cache" / "work") == []
    assert len(failed) >= len(points) // 2
    _check_state(loc, options, 1, 2, want)
    _rescale(loc, options, 1, 3)
    _check_state(loc, options, 2, 3, want)


def test_large_values_survive_and_clipped_value_log_records_are_reclaimed(tmp_path):
    # the copies examined below are built from the snapshots in the location, file for file
    # (a parked copy is the committing process's database, compacted as far as it got)
    loc, options = Location(str(tmp_path / "loc")), dataclasses.replace(_options(tmp_path), park_copies=False)
    # version 1: old 0 holds groups [0, 6), old 1 groups [8, 16); version 2: old 0 adds [6, 8),
    # so old 0's value log has a file holding only groups 6 and 7 (the ones new 0 clips)
    want = _publish_groups(loc, options, 1, [range(0, 6), range(8, 16)], 60, lambda i: LARGE + i)
    want.update(_publish_groups(loc, options, 2, [range(6, 8), ()], 60, lambda i: LARGE + i))
    old = CommitCoordinator(loc, "op", 3, query_id="q").published_manifests(2)
    old0 = read_manifest(loc, old[0])
    vlogs0 = sorted(f.object for f in old0.snapshot.files if f.local.endswith(".vlog"))
    msgs = _rescale(loc, options, 2, 3)
    _check_state(loc, options, 3, 3, want)
    # new 1 brought in [6, 8): the value-log file of groups 6-7 is named, not uploaded again
    new1 = read_manifest(loc, msgs[1].manifest)
    assert vlogs0[-1] in _objects(new1)
    # Clipped value-log records become garbage when compaction drops their pointers; then:
    # new 0 clipped [6, 8), the whole of one file: deleted at that compaction, nothing rewritten;
    # new 1 clipped [11, 16), 5/8 of a mixed file: over blob_gc_threshold (0.5), GC relocates
    # the kept 3/8; new 2 clipped [8, 11), 3/8 of it: under the threshold, the file stays.
    for p in range(3):
        with open_store(loc, "op", p, 3, options=options) as s:
            db = s._db  # the engine's maintenance, as its background work runs it

            def vlogs():
                return {v["file"]: (v["total_bytes"], v["garbage_bytes"]) for v in s.engine_stats()["vlog_files"]
                        if v["total_bytes"]}

            before = vlogs()
            assert all(garbage == 0 for _, garbage in before.values())
            db.compact_range()
            compacted = vlogs()
            db.gc_value_log()
            collected = vlogs()
            if p == 0:
                gone = set(before) - set(compacted)
                assert len(gone) == 1 and compacted == collected
            elif p == 1:
                (f, (total, garbage)), = compacted.items() - before.items()
                assert garbage / total == pytest.approx(5 / 8, rel=0.01)
                assert f not in collected and set(collected) - set(compacted)  # relocated
                assert sum(t for t, _ in collected.values()) == sum(t - g for t, g in compacted.values())
            else:
                (f, (total, garbage)), = compacted.items() - before.items()
                assert garbage / total == pytest.approx(3 / 8, rel=0.01)
                assert collected == compacted
            assert s.num_keys() == len(dict(s.items()))
            for k, v in s.items():
                assert want[k] == v


def test_key_counts_per_prefix_stay_exact_through_ranges_aligned_or_not(tmp_path):
    rng = random.Random(7)
    loc, options = Location(str(tmp_path / "loc")), _options(tmp_path)
    coord = CommitCoordinator(loc, "op", 1, query_id="q")
    keys = [bytes([a, b]) + s for a in b"abcd" for b in b"abcd" for s in (b"", b"x", b"xy", b"z")] + [b"a", b""]
    model = {k: b"v" for k in keys}
    with open_store(loc, "op", 0, 0, options=options) as store:
        for k in keys:
            store.put(k, b"v")
        coord.publish(1, [store.commit()])
    for version in range(1, 7):
        store = open_store(loc, "op", 0, version, options=options)
        for _ in range(25):
            op, k = rng.random(), rng.choice(keys)
            if op < 0.15:  # a range: aligned to 2-byte prefixes, or not
                a, b = sorted((rng.choice(keys)[:rng.choice((1, 2, 3))], rng.choice(keys)))
                store.delete_range(a, b)
                model = {x: v for x, v in model.items() if not a <= x < b}
            elif op < 0.3:
                store.delete(k)
                model.pop(k, None)
            else:
                if op < 0.6:
                    store.get(k)  # read before written: "live in the base" learned for free
                store.put(k, b"v%d" % version)
                model[k] = b"v%d" % version
            assert store.num_keys() == len(model)
        msg = store.commit()
        coord.publish(version + 1, [msg])
        assert read_manifest(loc, msg.manifest).key_counts == collections.Counter(k[:2] for k in model)
        assert msg.num_keys == len(model)


def test_a_source_with_changelogs_brings_in_its_snapshot_files_and_the_changes_in_the_range(tmp_path):
    loc, options = Location(str(tmp_path / "loc")), _options(tmp_path, target_file_size_base=8 << 10)
    want = _two_partitions(loc, options, per_group=300, size_of=lambda i: SMALL)  # version 1: snapshots
    coord = CommitCoordinator(loc, "op", 2, query_id="q")
    bases = coord.base_manifests(1)
    stores = [open_store(loc, "op", p, 1, manifest=bases[p], options=options) for p in range(2)]
    s0 = stores[0]
    s0.delete_range(_key(5, 50), _key(6, 30))  # across the bring-in range's lower bound
    s0.delete(_key(7, 3))
    for k in (_key(6, 500), _key(7, 1), _key(1, 1)):
        s0.put(k, b"new " + k)
    msgs = [s.commit() for s in stores]
    assert not msgs[0].snapshot and msgs[0].objects_uploaded == 2  # a changelog and the manifest
    coord.publish(2, msgs)
    want = {k: v for k, v in want.items() if not _key(5, 50) <= k < _key(6, 30) and k != _key(7, 3)}
    want.update({k: b"new " + k for k in (_key(6, 500), _key(7, 1), _key(1, 1))})
    source = read_manifest(loc, msgs[0].manifest)
    assert source.changelogs and source.snapshot
    _rescale(loc, options, 2, 3)
    _check_state(loc, options, 3, 3, want)
    new1 = read_manifest(loc, CommitCoordinator(loc, "op", 3, query_id="q").published_manifests(3)[1])
    assert set(_objects(new1)) & set(_objects(source))  # the snapshot's files, named again
