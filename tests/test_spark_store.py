"""The state store's guarantees, each on a local location and on a real S3 API (moto on
127.0.0.1): damaged or missing objects are CorruptionErrors naming them, the driver refuses
incomplete or mismatched batches and a second query, replays keep the first publication, the
executor-local cache is reused, shared between processes and kept within its disk budget, one
memory budget per process, bad input, and the bound on objects in the location."""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import antkv
from antkv.spark import (
    CommitCoordinator,
    CommitError,
    CommitMessage,
    ConcurrentWriterError,
    Location,
    StoreOptions,
    open_store,
    release_idle_stores,
)
from antkv.spark.store.local_cache import LocalCache
from antkv.spark.store.location import as_location, partition_dir
from antkv.spark.store.memory import worker_memory
from antkv.spark.store.objects import (
    KIND_CHANGELOG,
    _changelog_payload,
    decode_changelog,
    encode_changelog,
    file_digest,
    seal,
)
from antkv.spark.store.published import read_manifest

from test_spark_store_model import location_objects, referenced_objects, s3_server  # noqa: F401 (a fixture)

P = 2


@pytest.fixture(params=["local", "s3"])
def loc(request, tmp_path):
    if request.param == "local":
        return Location(str(tmp_path / "loc"))
    fs = request.getfixturevalue("s3_server")
    return Location(f"antkv-state/{uuid.uuid4().hex}", filesystem=fs)


@pytest.fixture
def options(tmp_path):
    release_idle_stores()
    yield StoreOptions(cache_dir=str(tmp_path / "cache"), max_changelog_chain=3,
                       engine=dict(write_buffer_size=16 << 10, min_blob_size=512))
    release_idle_stores()


def batch(loc, coord, version, options, writes=None, *, publish=True):
    """One batch: every partition puts ``writes`` (default: 20 keys of this version)."""
    bases = coord.base_manifests(version)
    msgs = []
    for p in range(P):
        s = open_store(loc, coord.operator, p, version, manifest=bases[p], options=options)
        for k, v in (writes or {b"k%03d" % i: b"v%d-%d-" % (version, p) * (1 + i * 7) for i in range(20)}).items():
            s.put(k, v)
        msgs.append(s.commit())
    if publish:
        coord.publish(version + 1, msgs)
        coord.cleanup(version + 1)
    return msgs


def state(loc, version, p, options):
    with open_store(loc, "op", p, version, options=options) as s:
        return dict(s.items())


# ---------------------------------------------------------------------- damage


def test_missing_and_damaged_objects_are_corruption_errors_naming_them(loc, options):
    coord = CommitCoordinator(loc, "op", P, query_id="q")
    for v in range(5):  # changelogs 1-3, a snapshot at 4 (chain of 3), a changelog at 5
        batch(loc, coord, v, options)
    manifest = coord.marker(5).manifests[0]
    m = read_manifest(loc, manifest)
    assert m.snapshot is not None and m.changelogs
    victims = [manifest, m.changelogs[0].object, m.snapshot.files[0].object]
    for victim in victims:
        original = loc.read(victim)
        for damaged in (None, original[:-1], original[:10] + bytes([original[10] ^ 1]) + original[11:]):
            release_idle_stores()
            _replace(loc, victim, damaged)
            # a cold cache: every object is read from the location
            cold = StoreOptions(cache_dir=options.cache_dir + f"-{uuid.uuid4().hex[:6]}", max_changelog_chain=3)
            with pytest.raises(antkv.CorruptionError) as e:
                open_store(loc, "op", 0, 5, options=cold)
            assert victim.rsplit("/", 1)[-1] in str(e.value)
        _replace(loc, victim, original)
    marker = "op/_batches/%020d.marker" % 5
    original = loc.read(marker)
    _replace(loc, marker, original[:-3])
    with pytest.raises(antkv.CorruptionError, match="00000000000000000005.marker"):
        open_store(loc, "op", 0, 5, options=options)
    _replace(loc, marker, original)
    with pytest.raises(antkv.CorruptionError, match="00000000000000000009.marker"):
        open_store(loc, "op", 0, 9, options=options)  # never published
    assert state(loc, 5, 0, options) == {b"k%03d" % i: b"v4-0-" * (1 + i * 7) for i in range(20)}


def _replace(loc, name, data):
    loc.delete(name)
    if data is not None:
        loc.write(name, data)


def test_manifest_of_another_partition_or_version_is_refused(loc, options):
    coord = CommitCoordinator(loc, "op", P, query_id="q")
    batch(loc, coord, 0, options)
    batch(loc, coord, 1, options)
    release_idle_stores()
    m1, m2 = coord.marker(1).manifests, coord.marker(2).manifests
    with pytest.raises(antkv.CorruptionError, match="partition 1"):
        open_store(loc, "op", 0, 2, manifest=m2[1], options=options)
    with pytest.raises(antkv.CorruptionError, match="version 1"):
        open_store(loc, "op", 0, 2, manifest=m1[0], options=options)


# ---------------------------------------------------------------------- the driver


def test_publish_refuses_incomplete_duplicate_or_mismatched_batches(loc, options):
    coord = CommitCoordinator(loc, "op", P, query_id="q")
    batch(loc, coord, 0, options)
    msgs = batch(loc, coord, 1, options, publish=False)
    cases = {
        "no commit message from partitions": msgs[:1],
        "two commit messages": msgs + msgs[1:],
        "published base": [msgs[0], dataclasses.replace(msgs[1], base=msgs[0].base)],
        "message is for": [msgs[0], dataclasses.replace(msgs[1], version=5)],
        "no such partition": msgs + [dataclasses.replace(msgs[1], partition=7)],
        "not a manifest of this partition": [msgs[0], dataclasses.replace(msgs[1], manifest=msgs[0].manifest)],
    }
    for expected, bad in cases.items():
        with pytest.raises(CommitError, match=expected):
            coord.publish(2, bad)
        assert not loc.exists("op/_batches/%020d.marker" % 2)
    assert not coord.publish(2, msgs).replayed
    assert coord.publish(2, msgs).marker.manifests == tuple(m.manifest for m in msgs)  # idempotent
    with pytest.raises(TypeError):
        coord.publish(3, ["not a message"])


def test_a_second_query_is_refused(loc, options):
    a = CommitCoordinator(loc, "op", P, query_id="query-a")
    b = CommitCoordinator(loc, "op", P, query_id="query-b")
    msgs_a = batch(loc, a, 0, options, publish=False)
    msgs_b = batch(loc, b, 0, options, {b"x": b"from b"}, publish=False)
    a.publish(1, msgs_a)
    with pytest.raises(ConcurrentWriterError, match="query-a"):
        b.publish(1, msgs_b)  # both built on version 0: the marker decides
    with pytest.raises(ConcurrentWriterError, match="query-a"):
        b.base_manifests(1)  # b cannot build on a's versions either
    assert state(loc, 1, 0, options)[b"k000"] == b"v0-0-"


def test_replayed_batch_keeps_the_first_publication(loc, options):
    first = CommitCoordinator(loc, "op", P, query_id="q")
    batch(loc, first, 0, options)
    batch(loc, first, 1, options, {b"k": b"first run"})
    # the driver died after publishing 2, before Spark's commit log: a new run replays batch 2
    second = CommitCoordinator(loc, "op", P, query_id="q")
    msgs = batch(loc, second, 1, options, {b"k": b"first run"}, publish=False)
    result = second.publish(2, msgs)
    assert result.replayed and result.marker.run_id == first.run_id
    second.cleanup(2)
    for name in (m.manifest for m in msgs):
        assert not loc.exists(name)  # the replay's objects were garbage, now collected
    assert state(loc, 2, 1, options)[b"k"] == b"first run"
    batch(loc, second, 2, options, {b"k": b"next"})  # the new run goes on from the marker
    assert state(loc, 3, 1, options)[b"k"] == b"next"


# ---------------------------------------------------------------------- local cache and memory


def test_working_copies_are_reused_and_rebuilt_when_the_published_version_differs(loc, options):
    coord = CommitCoordinator(loc, "op", P, query_id="q")
    for v in range(5):
        batch(loc, coord, v, options)
    cache = LocalCache(options.resolved_cache_dir(), options.cache_disk_bytes)
    before = location_objects(loc, "op")
    s = open_store(loc, "op", 0, 5, manifest=coord.marker(5).manifests[0], options=options)
    assert s.version == 5 and s.get(b"k001") == b"v4-0-" * 8
    s.put(b"x", b"y")
    loser = s.commit()  # version 6 that is never published
    s = open_store(loc, "op", 0, 5, manifest=coord.marker(5).manifests[0], options=options)
    assert s.get(b"x") is None  # the held copy was at the loser's version 6: rebuilt
    s.abort()
    assert loc.exists(loser.manifest) and location_objects(loc, "op") - before == {loser.manifest} | {
        n for n in location_objects(loc, "op") - before if n.startswith(loser.manifest[:-9])}
    # every cached file still has the bytes its manifest records (hard links are never written)
    for v in (4, 5):
        for name in coord.marker(v).manifests:
            m = read_manifest(loc, name)
            for ref in m.snapshot.files if m.snapshot else ():
                path = cache.object_path(loc, ref.object)
                if os.path.exists(path):
                    assert file_digest(path) == (ref.size, ref.xxh3)


def _load_in_child(args):
    uri, cache_dir, version = args
    release_idle_stores()
    opts = StoreOptions(cache_dir=cache_dir)
    with open_store(uri, "op", 0, version, options=opts) as s:
        return sorted(s.items())


def test_local_cache_is_shared_by_processes_and_kept_within_its_disk_budget(tmp_path):
    uri = str(tmp_path / "loc")
    options = StoreOptions(cache_dir=str(tmp_path / "cache"), max_changelog_chain=1,
                           engine=dict(write_buffer_size=16 << 10, min_blob_size=512))
    loc = Location(uri)
    coord = CommitCoordinator(loc, "op", P, query_id="q")
    for v in range(3):
        batch(loc, coord, v, options)
    release_idle_stores()
    expected = sorted(state(loc, 3, 0, options).items())
    shared = str(tmp_path / "shared-cache")
    ctx = multiprocessing.get_context("spawn")  # no fork of a process that may run a JVM bridge
    with ctx.Pool(3) as pool:
        results = pool.map(_load_in_child, [(uri, shared, 3)] * 6)
    assert all(r == expected for r in results)
    cache = LocalCache(shared, 1 << 40)
    m = read_manifest(loc, coord.marker(3).manifests[0])
    files = [cache.object_path(loc, f.object) for f in m.snapshot.files]
    assert files and all(os.stat(f).st_nlink == 1 for f in files)  # one copy each, no working copy left
    assert cache.sweep() == 0  # the children removed their working copies
    # a budget of 1 byte: every file no working copy uses goes, used ones stay
    small = LocalCache(shared, 1)
    with open_store(loc, "op", 0, 3, options=StoreOptions(cache_dir=shared, cache_disk_bytes=1)) as s:
        small.evict()
        assert all(os.path.exists(f) for f in files)  # linked into the open working copy
        assert sorted(s.items()) == expected
    release_idle_stores()
    assert small.evict() > 0 and small.usage() == 0


def _commit_in_child(args):
    """Another Python worker runs partition 1's batch 1 (as Spark may give it any free one)."""
    uri, cache_dir, manifest, chain, park = args
    options = StoreOptions(cache_dir=cache_dir, max_changelog_chain=chain, park_copies=park)
    with open_store(uri, "op", 1, 1, manifest=manifest, options=options) as s:
        s.put(b"from-the-other-worker", b"1")
        s.delete(b"k0001")
        return s.commit().to_json()


@pytest.mark.parametrize("snapshot", [False, True])
@pytest.mark.parametrize("park", [False, True])
def test_a_copy_another_process_moved_past_catches_up_by_its_changelogs(tmp_path, snapshot, park):
    """Partition 1's version 2 is committed by another process.  With parked copies, this
    process reopens the copy that process parked.  Without, this process's copy of it, at
    version 1, catches up by applying that version's changelog -- when version 2 is a
    changelog on the same snapshot; a version 2 that is a new snapshot is rebuilt instead.
    Either way the state read is the rebuilt one's."""
    uri, cache_dir = str(tmp_path / "loc"), str(tmp_path / "cache")
    options = StoreOptions(cache_dir=cache_dir, park_copies=park)
    loc = Location(uri)
    coord = CommitCoordinator(loc, "op", P, query_id="q")
    release_idle_stores()
    batch(loc, coord, 0, options, {b"k%04d" % i: b"%06d" % i * 10 for i in range(300)})  # held here at version 1
    bases = coord.base_manifests(1)
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        args = (uri, cache_dir, bases[1], 1 if snapshot else 8, park)  # a chain of 1: version 2 is a snapshot
        other = CommitMessage.from_json(pool.apply(_commit_in_child, (args,)))
    assert other.snapshot == snapshot
    s = open_store(loc, "op", 0, 1, manifest=bases[0], options=options)
    s.put(b"k0000", b"new")
    coord.publish(2, [s.commit(), other])
    s = open_store(loc, "op", 1, 2, manifest=coord.marker(2).manifests[1], options=options)
    if park:
        assert s.copy_fate == "reopened" and s.reused_working_copy and s.memo == {}
    else:
        assert s.reused_working_copy == s.caught_up_working_copy == (not snapshot) and s.memo == {}
        assert s.copy_fate == ("rebuilt" if snapshot else "caught_up")
    caught_up = sorted(s.items())
    s.abort()
    release_idle_stores()
    with open_store(loc, "op", 1, 2, manifest=coord.marker(2).manifests[1], options=options) as s:
        assert not s.reused_working_copy and not s.caught_up_working_copy and caught_up == sorted(s.items())
        assert s.copy_fate == "rebuilt"  # the parked copy was claimed by the store aborted above
    assert dict(caught_up)[b"from-the-other-worker"] == b"1" and b"k0001" not in dict(caught_up)
    assert len(caught_up) == 300
    release_idle_stores()


def test_every_store_of_a_process_shares_one_memory_budget(tmp_path, options):
    loc = Location(str(tmp_path / "loc"))
    stores = [open_store(loc, op, p, 0, options=options) for op in ("a", "b") for p in range(2)]
    cache, wbm = worker_memory(options.memory_bytes)
    assert all(s._db.options.block_cache is cache and s._db.options.write_buffer_manager is wbm for s in stores)
    for s in stores:
        s.abort()


def test_a_working_copy_leaves_flushing_to_the_shared_write_buffer_manager(loc, options):
    """A copy's memtable limit (256 MiB) is above the engine's default: the process's write
    buffer manager bounds all copies together.  Its data blocks (16 KiB) are larger than the
    engine's default too (docs/spark-design.md).  ``StoreOptions.engine`` overrides both."""
    with open_store(loc, "op", 0, 0, options=StoreOptions(cache_dir=options.cache_dir)) as s:
        assert s._db.options.write_buffer_size == 256 << 20 > antkv.Options().write_buffer_size
        assert s._db.options.block_size == 16 << 10 > antkv.Options().block_size
        s.abort()
    with open_store(loc, "op", 0, 0, options=options) as s:  # the fixture's engine override
        assert s._db.options.write_buffer_size == options.engine["write_buffer_size"] < 1 << 20
        s.abort()
    with open_store(loc, "op", 0, 0, options=StoreOptions(cache_dir=options.cache_dir, engine={"block_size": 4096})) as s:
        assert s._db.options.block_size == 4096
        s.abort()


# ---------------------------------------------------------------------- input and bounds


def test_bad_input_is_a_clear_error_and_loses_nothing(loc, options):
    s = open_store(loc, "op", 0, 0, options=options)
    s.put(b"a", b"1")
    with pytest.raises(TypeError):
        s.put("str key", b"v")
    with pytest.raises(TypeError):
        s.get(5)
    with pytest.raises(antkv.InvalidArgumentError):
        s.delete_range(b"z", b"a")
    s.delete_range(b"q", b"q")
    assert s.get(b"a") == b"1" and s.num_keys() == 1
    msg = s.commit()
    assert CommitMessage.from_json(msg.to_json()) == msg
    with pytest.raises(antkv.DBClosedError):
        s.put(b"b", b"2")
    for bad, err in [(dict(operator="_x"), antkv.InvalidArgumentError), (dict(operator=3), TypeError),
                     (dict(partition=-1), antkv.InvalidArgumentError), (dict(version=-1), antkv.InvalidArgumentError),
                     (dict(version=0, manifest="x"), antkv.InvalidArgumentError)]:
        kw = dict(operator="op", partition=0, version=1, manifest=msg.manifest) | bad
        with pytest.raises(err):
            open_store(loc, kw.pop("operator"), kw.pop("partition"), kw.pop("version"), options=options, **kw)
    with pytest.raises(antkv.InvalidArgumentError):
        StoreOptions(max_changelog_chain=0)
    with pytest.raises(TypeError):
        StoreOptions(memory_bytes="1G")
    with pytest.raises(antkv.InvalidArgumentError):
        CommitCoordinator(loc, "op", P, query_id="q", min_versions_to_retain=1)
    with pytest.raises(antkv.InvalidArgumentError):
        Location("nosuchscheme://x/y")
    with pytest.raises(antkv.InvalidArgumentError):
        CommitMessage.from_json("{}")


def test_abort_leaves_no_trace(loc, options):
    coord = CommitCoordinator(loc, "op", P, query_id="q")
    batch(loc, coord, 0, options)
    before = location_objects(loc, "op")
    s = open_store(loc, "op", 0, 1, options=options)
    s.put(b"k000", b"changed")
    s.delete_range(b"", b"\xff")
    s.abort()
    assert location_objects(loc, "op") == before
    assert state(loc, 1, 0, options)[b"k000"] == b"v0-0-"


def test_objects_in_the_location_stay_bounded(tmp_path, options):
    loc = Location(str(tmp_path / "loc"))
    retain, chain = 3, options.max_changelog_chain
    coord = CommitCoordinator(loc, "op", P, query_id="q", min_versions_to_retain=retain)
    counts = []
    for v in range(40):
        batch(loc, coord, v, options, {b"k%03d" % (v % 50): os.urandom(100), b"big%d" % (v % 3): os.urandom(600)})
        counts.append(len(location_objects(loc, "op")))
    files = max(len(read_manifest(loc, n).snapshot.files) for n in coord.marker(40).manifests)
    # docs/spark.md: markers R + per partition (R manifests + R + C - 1 changelogs + snapshot files)
    bound = retain + P * (retain + retain + chain - 1 + (retain // chain + 2) * files)
    assert max(counts[10:]) <= bound, (counts, bound)


def _cached_files(cache, loc, partition):
    root = cache.object_path(loc, partition_dir("op", partition))
    return {os.path.join(root, n) for n in os.listdir(root)} if os.path.isdir(root) else set()


def test_the_local_cache_keeps_a_partitions_newest_snapshot_not_every_one(tmp_path, options):
    """A snapshot commit drops the partition's cached files its new snapshot does not name
    (they left the location once no retained version named them), so the cache of a steady
    stream stays flat instead of growing to its disk budget; what a working copy links stays."""
    loc = Location(str(tmp_path / "loc"))
    coord = CommitCoordinator(loc, "op", P, query_id="q")
    cache = LocalCache(options.resolved_cache_dir(), options.cache_disk_bytes)
    sizes = []
    for v in range(24):  # a new snapshot every 3 batches (max_changelog_chain), compactions rewriting files
        batch(loc, coord, v, options, {b"k%03d" % (v * 7 + i): os.urandom(300) for i in range(40)})
        snap = read_manifest(loc, coord.marker(v + 1).manifests[0]).snapshot
        named = set() if snap is None else {cache.object_path(loc, f.object) for f in snap.files}
        held = _cached_files(cache, loc, 0)
        assert named <= held  # the newest snapshot stays cached
        extra = {f for f in held - named if os.stat(f).st_nlink == 1}
        assert not extra, sorted(extra)  # nothing unlinked beyond it
        sizes.append(sum(os.path.getsize(f) for f in held))
    assert max(sizes[12:]) < 3 * min(sizes[12:])  # flat, not growing batch after batch
    # every retained version still opens, downloading what the cache dropped
    release_idle_stores()
    for v in (23, 24):
        assert state(loc, v, 0, options) == state(loc, v, 0, StoreOptions(cache_dir=str(tmp_path / "cold")))


def test_dropping_superseded_files_keeps_named_and_linked_ones(tmp_path):
    cache = LocalCache(str(tmp_path / "cache"), 1 << 30)
    loc = Location(str(tmp_path / "loc"))
    root = cache.object_path(loc, "op/p00000")
    os.makedirs(root)
    for n in ("a.sst", "b.sst", "c.sst", "d.sst.tmp-1-x"):
        with open(os.path.join(root, n), "wb") as f:
            f.write(b"x" * 10)
    os.link(os.path.join(root, "b.sst"), str(tmp_path / "linked"))
    assert cache.drop_superseded(loc, "op/p00000", ["op/p00000/a.sst"]) == 10
    assert sorted(os.listdir(root)) == ["a.sst", "b.sst", "d.sst.tmp-1-x"]
    assert cache.drop_superseded(loc, "op/p00001", []) == 0  # a partition never cached


def test_key_count_reads_the_base_per_key_or_by_one_scan(tmp_path, options):
    loc = Location(str(tmp_path / "loc"))
    coord = CommitCoordinator(loc, "op", 1, query_id="q")
    s = open_store(loc, "op", 0, 0, options=options)
    for i in range(100):
        s.put(b"k%03d" % i, b"v")
    coord.publish(1, [s.commit()])
    # few blind writes: a point read of the base per key
    s = open_store(loc, "op", 0, 1, manifest=coord.base_manifests(1)[0], options=options)
    s.put(b"k001", b"w")  # existed
    s.put(b"new", b"w")  # did not
    s.delete(b"k002")  # existed
    s.delete(b"missing")  # did not
    assert s.get(b"k003") == b"v"  # read before written: learned, not read again
    s.delete(b"k003")
    s.delete_range(b"k010", b"k020")  # ten keys of the base
    s.put(b"k015", b"back")
    msg = s.commit()
    assert msg.num_keys == 100 + 1 - 1 - 1 - 10 + 1
    coord.publish(2, [msg])
    # most of the base blind-written: one scan of it
    s = open_store(loc, "op", 0, 2, manifest=msg.manifest, options=options)
    for i in range(0, 100, 2):
        s.put(b"k%03d" % i, b"x")
    for i in range(1, 100, 4):
        s.delete(b"k%03d" % i)
    expected = {k: v for k, v in state(loc, 2, 0, options).items()}
    expected.update({b"k%03d" % i: b"x" for i in range(0, 100, 2)})
    for i in range(1, 100, 4):
        expected.pop(b"k%03d" % i, None)
    assert s.num_keys() == len(expected) == s.commit().num_keys


def test_a_committed_or_aborted_store_refuses_reads_and_writes(tmp_path, options):
    loc = Location(str(tmp_path / "loc"))
    for finish in ("commit", "abort"):
        s = open_store(loc, "op", 0, 0, options=options)
        s.put(b"k", b"v")
        getattr(s, finish)()
        for call in (lambda: s.get(b"k"), lambda: list(s.items()), lambda: s.keys(), lambda: s.put(b"a", b"b"),
                     lambda: s.delete(b"k"), lambda: s.commit(), lambda: s.num_keys()):
            with pytest.raises(antkv.DBClosedError):
                call()


def test_a_late_cleanup_of_an_older_version_keeps_what_newer_versions_need(tmp_path, options):
    loc = Location(str(tmp_path / "loc"))
    coord = CommitCoordinator(loc, "op", P, query_id="q")
    for v in range(6):
        batch(loc, coord, v, options)
    coord.cleanup(3)  # late: versions 4..6 are published
    release_idle_stores()
    for v in (5, 6):
        assert state(loc, v, 1, options) == {b"k%03d" % i: b"v%d-1-" % (v - 1) * (1 + i * 7) for i in range(20)}


def test_leftovers_of_interrupted_local_writes_block_nothing_and_are_collected(tmp_path, options):
    root = tmp_path / "loc"
    loc = Location(str(root))
    coord = CommitCoordinator(loc, "op", P, query_id="q")
    batch(loc, coord, 0, options)
    # what a crash in the middle of writing marker 2 and a manifest of version 2 leaves
    leftovers = [root / "op" / "_batches" / ("%020d.marker.tmp-0badf00d" % 2),
                 root / "op" / "p00000" / ("%020d-%s.manifest.tmp-12345678" % (2, "0" * 16))]
    for f in leftovers:
        f.write_bytes(b"torn")
    batch(loc, coord, 1, options)
    assert all(not f.exists() for f in leftovers)
    assert location_objects(loc, "op") == referenced_objects(loc, coord, 1, 2)
    assert state(loc, 2, 0, options)[b"k000"] == b"v1-0-"


@pytest.mark.parametrize("kernel_copy", [True, False])
def test_a_local_upload_writes_the_files_bytes_once_whichever_way_it_copies(tmp_path, monkeypatch, kernel_copy):
    """A local upload copies in the kernel where it can, else through memory (a system
    refusing ``sendfile`` between the two files): the same bytes, and never an overwrite."""
    import errno

    if not kernel_copy:
        def refuse(*args):
            raise OSError(errno.EINVAL, "sendfile refused")
        monkeypatch.setattr(os, "sendfile", refuse)
    data = os.urandom(3 << 20) + b"tail"
    src = tmp_path / "table.sst"
    src.write_bytes(data)
    loc = Location(str(tmp_path / "loc"))
    loc.upload("op/p00000/obj.sst", str(src))
    assert loc.read("op/p00000/obj.sst") == data
    with pytest.raises(antkv.IOError, match="already exists"):
        loc.upload("op/p00000/obj.sst", str(src))
    assert loc.read("op/p00000/obj.sst") == data
    assert sorted(os.listdir(tmp_path / "loc" / "op" / "p00000")) == ["obj.sst"]  # no temporary file left


def test_a_held_copy_lists_once_and_reads_nothing_and_a_rebuild_downloads_only_missing_files(tmp_path, options):
    from test_spark_faults import make_faulty

    loc, counter = make_faulty(str(tmp_path / "loc"))
    coord = CommitCoordinator(Location(str(tmp_path / "loc")), "op", 1, query_id="q")
    for v in range(5):  # changelogs 1-3, a snapshot at 4 (uploaded from here, so cached), a changelog at 5
        s = open_store(loc, "op", 0, v, manifest=coord.base_manifests(v)[0], options=options)
        s.put(b"k%d" % v, b"v" * 600)
        coord.publish(v + 1, [s.commit()])
    manifest = coord.base_manifests(5)[0]
    counter.arm(None, False)
    open_store(loc, "op", 0, 5, manifest=manifest, options=options).abort()  # held: one listing, no read
    assert counter.log == [f"list {loc.path('op/p00000')}"]
    counter.arm(None, False)
    s = open_store(loc, "op", 0, 5, manifest=manifest, options=options)  # parked: the same
    assert s.copy_fate == "reopened" and counter.log == [f"list {loc.path('op/p00000')}"]
    assert sorted(s.keys()) == [b"k%d" % v for v in range(5)]
    s.abort()  # the claimed copy goes with the aborted batch
    counter.arm(None, False)
    with open_store(loc, "op", 0, 5, manifest=manifest, options=options) as s:  # rebuilt from the cache
        assert s.copy_fate == "rebuilt"
        assert sorted(s.keys()) == [b"k%d" % v for v in range(5)]
    calls = list(counter.log)
    m = read_manifest(loc, manifest)
    assert m.snapshot is not None and len(m.changelogs) == 1
    assert calls == [f"read {loc.path(manifest)}", f"read {loc.path(m.changelogs[0].object)}",
                     f"list {loc.path('op/p00000')}"]


def test_a_batch_changing_more_than_its_change_set_holds_keeps_nothing_per_key(tmp_path, options):
    """The change set is bounded by ``max_changelog_bytes``, each key's Python objects counted:
    a batch that outgrows it keeps no entry per changed or read key (its memory does not grow
    with its input), commits a snapshot and still counts its keys exactly."""
    options = dataclasses.replace(options, max_changelog_bytes=64 << 10)
    loc = Location(str(tmp_path / "loc"))
    coord = CommitCoordinator(loc, "op", 1, query_id="q")
    s = open_store(loc, "op", 0, 0, options=options)
    model = {b"k%05d" % i: b"v" for i in range(300)}
    for k, v in model.items():
        s.put(k, v)
    coord.publish(1, [s.commit()])
    s = open_store(loc, "op", 0, 1, manifest=coord.base_manifests(1)[0], options=options)
    for i in range(5000):
        k = b"k%05d" % (i % 300)
        assert s.get(k) == model.get(k)
        s.put(b"k%05d" % i, b"w")
        model[b"k%05d" % i] = b"w"
        if i % 7 == 0:
            s.delete(b"k%05d" % (i // 2))
            model.pop(b"k%05d" % (i // 2), None)
        assert len(s._changes) + len(s._base_live) <= (64 << 10) // 160  # bounded, whatever the batch
    assert not s._changes and not s._base_live  # outgrown: nothing kept per key
    assert s.num_keys() == len(model)
    msg = s.commit()
    assert msg.snapshot and msg.num_keys == len(model)
    coord.publish(2, [msg])
    assert state(loc, 2, 0, options) == model


def test_membership_answers_from_the_entry_without_reading_the_value_log(tmp_path, options):
    """``key in store`` (and the typed views' ``exists``/``containsKey``) answers from the
    change set, the row cache or the database's entry: on a copy rebuilt from the location
    whose value-log files are then emptied, membership still answers while ``get`` fails."""
    options = dataclasses.replace(options, max_changelog_bytes=1)  # a snapshot: tables and value logs
    loc = Location(str(tmp_path / "loc"))
    coord = CommitCoordinator(loc, "op", 1, query_id="q")
    s = open_store(loc, "op", 0, 0, options=options)
    big = os.urandom(4096)  # above min_blob_size: kept in the value log
    for i in range(20):
        s.put(b"big%02d" % i, big)
    coord.publish(1, [s.commit()])
    release_idle_stores()  # the next open rebuilds its copy from the location
    s = open_store(loc, "op", 0, 1, manifest=coord.base_manifests(1)[0], options=options)
    try:
        vlogs = [os.path.join(d, f) for d, _, files in os.walk(s._copy.work.db_path) for f in files
                 if f.endswith(".vlog")]
        assert vlogs
        for path in vlogs:  # emptied in place: the open database holds them open
            os.truncate(path, 0)
        s.delete(b"big01")
        assert b"big00" in s and b"big19" in s
        assert b"big01" not in s and b"nothing" not in s
        with pytest.raises(antkv.Error):
            s.get(b"big02")
    finally:
        s.abort()


def test_a_changelog_is_sized_before_it_is_encoded(tmp_path):
    """A commit bounds its changelog's size from below (the records' size, and the ratio of the
    compressed head when they compress) to skip encoding one a snapshot replaces anyway.  The
    bound is the exact size of a changelog of incompressible values -- the commit then never
    encodes one only to find it too large -- and below the size of a compressible one; with a
    snapshot ratio of 0.5, a batch that rewrote its state with random values commits a snapshot."""
    def floor(ranges, changes):  # the bound encode_changelog asks refuse about, or None if it does not ask
        asked = []
        out = encode_changelog(ranges, changes, lambda floor: asked.append(floor) or True)
        assert (out is None) == bool(asked)  # refused: no changelog
        return asked[0] if asked else None

    rnd = {b"k%06d" % i: os.urandom(1024) for i in range(2000)}
    rnd.update({b"gone%03d" % i: None for i in range(50)})
    assert floor([(b"a", b"b")], rnd) == len(encode_changelog([(b"a", b"b")], rnd))
    text = {b"k%06d" % i: b"%06d the same words again and again " % i * 20 for i in range(2000)}
    encoded = len(encode_changelog([], text))
    assert encoded < 0.5 * sum(map(len, text.values())) and 0 < floor([], text) <= encoded
    assert floor([], {b"a": b"1", b"b": None}) is None  # under the sample: encoded without asking
    for changes, ranges in ((rnd, [(b"a", b"b")]), (text, [])):  # not refused: the same changelog
        assert encode_changelog(ranges, changes, lambda floor: False) == encode_changelog(ranges, changes)
    loc, options = f"file://{tmp_path}/state", StoreOptions(cache_dir=str(tmp_path / "cache"), snapshot_ratio=0.5)
    coord = CommitCoordinator(loc, "op", 1, query_id="q")
    for version in (1, 2):
        store = open_store(loc, "op", 0, version - 1, manifest=coord.base_manifests(version - 1)[0], options=options)
        for key in rnd:
            store.put(key, os.urandom(1024))
        msg = store.commit()
        assert msg.snapshot
        coord.publish(version, [msg])
    assert read_manifest(as_location(loc), msg.manifest).changelogs == ()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.binary(max_size=6), st.binary(max_size=6)), max_size=3),
       st.dictionaries(st.binary(max_size=6), st.none() | st.binary(max_size=40), max_size=30),
       st.booleans())
def test_a_changelog_decodes_to_its_ranges_then_its_changes_in_order(ranges, changes, text):
    """A changelog decodes to the range deletions and the point changes it was encoded from,
    in order, compressed or not (``text``: values that compress)."""
    if text:
        changes = {k: None if v is None else v + b" again and again" * 30 for k, v in changes.items()}
    got_ranges, keys, values, size = decode_changelog(encode_changelog(ranges, changes), "c")
    assert got_ranges == ranges
    assert list(zip(keys, values)) == list(changes.items())
    assert all(type(k) is bytes for k in keys) and all(v is None or type(v) is bytes for v in values)
    assert size == len(_changelog_payload(ranges, list(changes), list(changes.values())))


def test_a_malformed_changelog_is_a_corruption_error_at_every_cut():
    """Every cut of a changelog's records that ends inside a record (sealed with a valid
    checksum: the decoder's own checks), a range deletion after a point change and an unknown
    record kind are CorruptionErrors; a cut at a record's end decodes to the records before it."""
    ranges, changes = [(b"a", b"c")], {b"k1": b"v" * 7, b"k2": None, b"k3": b""}
    payload = _changelog_payload(ranges, list(changes), list(changes.values()))
    ends = {0}
    for i in range(1, 4):
        ends.add(len(_changelog_payload(ranges, list(changes)[:i - 1], list(changes.values())[:i - 1])))
    ends.add(len(_changelog_payload(ranges, [], [])))
    ends.add(len(payload))
    for cut in range(len(payload) + 1):
        data = seal(KIND_CHANGELOG, payload[:cut])
        if cut in ends:
            got = decode_changelog(data, "c")
            assert len(got[0]) + len(got[1]) == sum(e <= cut for e in sorted(ends)) - 1
        else:
            with pytest.raises(antkv.CorruptionError):
                decode_changelog(data, "c")
    for bad in (_changelog_payload([], [b"k"], [b"v"]) + _changelog_payload([(b"a", b"b")], [], []),
                b"\x07" + payload[1:]):
        with pytest.raises(antkv.CorruptionError):
            decode_changelog(seal(KIND_CHANGELOG, bad), "c")


def test_a_snapshot_after_the_state_was_rewritten_holds_it_once_in_one_table(tmp_path):
    """A snapshot commit after batches that rewrote the state (the row cache holding all of
    it) replaces the working copy's database by the live state in one table: the snapshot
    names that one table, whatever tables the batches before left.  A snapshot after a
    batch that changed little keeps the tables and uploads only what is new.  The state
    reads back exactly, in the copy and rebuilt."""
    loc = f"file://{tmp_path}/state"
    options = StoreOptions(cache_dir=str(tmp_path / "cache"), snapshot_ratio=0.5, max_changelog_chain=1)
    coord = CommitCoordinator(loc, "op", 1, query_id="q")
    model = {}

    def batch(version, keys):
        store = open_store(loc, "op", 0, version - 1, manifest=coord.base_manifests(version - 1)[0], options=options)
        for k in keys:
            model[k] = os.urandom(1024)
            store.put(k, model[k])
        store.delete(b"k0000")
        model.pop(b"k0000", None)
        assert dict(store.items()) == model
        msg = store.commit()
        coord.publish(version, [msg])
        return msg, read_manifest(as_location(loc), msg.manifest)

    every = [b"k%04d" % i for i in range(2000)]
    for version in (1, 2, 3):
        msg, manifest = batch(version, every)
        tables = [f for f in manifest.snapshot.files if f.local.endswith(".sst")]
        assert msg.snapshot and len(tables) == 1 and tables[0].size < 1.2 * 2000 * 1024
        assert manifest.snapshot.bytes < 1.3 * 2000 * 1024  # no table of an earlier batch
    assert not batch(4, every[:10])[0].snapshot  # a small change: a changelog
    msg, manifest = batch(5, every[10:20])  # a snapshot (the chain is full) after small changes
    assert msg.snapshot and msg.bytes_uploaded < 100 << 10
    tables = [f for f in manifest.snapshot.files if f.local.endswith(".sst")]
    # the state's table, and the small ones of the batches since (each commit parks a
    # checkpoint, which flushes): the state is still held once
    assert 2 <= len(tables) <= 3 and manifest.snapshot.bytes < 1.3 * 2000 * 1024
    release_idle_stores()
    store = open_store(loc, "op", 0, 5, manifest=coord.base_manifests(5)[0], options=options)
    assert dict(store.items()) == model and store.num_keys() == len(model)
    store.abort()


def _snapshots_beyond_the_row_cache(args):
    """In a new process whose row caches hold nothing: snapshot commits of a state of 5,000
    keys of 1 KiB, the batches writing every key, all but 3, then 80% of them; per batch the
    snapshot's tables and bytes, and the compaction bytes the copy's database read before the
    next batch; finally the state rebuilt."""
    loc, cache_dir = args
    options = StoreOptions(cache_dir=cache_dir, snapshot_ratio=0.5, max_changelog_chain=1, row_cache_bytes=1)
    coord = CommitCoordinator(loc, "op", 1, query_id="q")
    every = [b"k%04d" % i for i in range(5000)]
    model, batches = {}, []
    for version, keys in ((1, every), (2, every[3:]), (3, every[: len(every) * 4 // 5])):
        store = open_store(loc, "op", 0, version - 1, manifest=coord.base_manifests(version - 1)[0], options=options)
        if version > 1:
            batches[-1].append(store.engine_stats()["compaction_bytes_read"])
        for k in keys:
            model[k] = os.urandom(1024)
            store.put(k, model[k])
        msg = store.commit()
        coord.publish(version, [msg])
        snapshot = read_manifest(as_location(loc), msg.manifest).snapshot
        batches.append([msg.snapshot, len([f for f in snapshot.files if f.local.endswith(".sst")]), snapshot.bytes])
    store = open_store(loc, "op", 0, 3, manifest=coord.base_manifests(3)[0], options=options)
    batches[-1].append(store.engine_stats()["compaction_bytes_read"])
    store.abort()
    release_idle_stores()
    store = open_store(loc, "op", 0, 3, manifest=coord.base_manifests(3)[0], options=options)
    rebuilt = dict(store.items()) == model
    store.abort()
    return batches, rebuilt


def test_a_batch_that_rewrote_nearly_every_key_snapshots_one_table_whatever_the_row_cache_holds(tmp_path):
    """A snapshot after a batch that rewrote the state is the state in one table, written from
    memory (no compaction), even when the row cache could keep none of it: the batch's
    change set holds the values it wrote, and the few keys it left (records a batch never
    rewrites) are read from the database.  A batch that left more than an eighth of the keys
    is compacted instead (its tables hold the state 1.8 times).  The state reads back
    exactly, rebuilt."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:  # (a process's first store fixes its budget)
        batches, rebuilt = pool.apply(_snapshots_beyond_the_row_cache, ((f"file://{tmp_path}/state", str(tmp_path / "cache")),))
    state_bytes = 5000 * (5 + 1024)
    for snapshot, tables, nbytes, compacted in batches[:2]:
        assert snapshot and tables == 1 and nbytes < 1.3 * state_bytes and compacted == 0
    snapshot, tables, nbytes, compacted = batches[2]
    assert snapshot and nbytes < 1.3 * state_bytes and compacted > state_bytes
    assert rebuilt


def test_a_state_rewritten_to_nothing_snapshots_an_empty_database(tmp_path):
    """A batch that deletes every key, committed as a rewritten snapshot, leaves an empty
    state that reads back empty, rebuilt too, and takes new keys."""
    loc = f"file://{tmp_path}/state"
    options = StoreOptions(cache_dir=str(tmp_path / "cache"), max_changelog_bytes=1)  # snapshots only
    coord = CommitCoordinator(loc, "op", 1, query_id="q")
    for version, value in ((1, os.urandom(1024)), (2, None), (3, b"back")):
        store = open_store(loc, "op", 0, version - 1, manifest=coord.base_manifests(version - 1)[0], options=options)
        store.put(b"zz", b"x")  # over max_changelog_bytes: a snapshot commit
        for i in range(2000):
            key = b"k%04d" % i
            if value is None:
                store.get(key)
                store.delete(key)
            elif version == 1 or i < 3:
                store.put(key, value)
        store.delete(b"zz")
        msg = store.commit()
        coord.publish(version, [msg])
        if version == 2:
            assert msg.snapshot and msg.num_keys == 0
            assert [f for f in read_manifest(as_location(loc), msg.manifest).snapshot.files
                    if f.local.endswith(".sst")] == []
            release_idle_stores()
    store = open_store(loc, "op", 0, 3, manifest=coord.base_manifests(3)[0], options=options)
    assert dict(store.items()) == {b"k%04d" % i: b"back" for i in range(3)}
    store.abort()


@pytest.mark.parametrize("row_cache_bytes", [1, None])
def test_a_snapshot_holds_the_live_state_about_once_whatever_batches_stacked(tmp_path, row_cache_bytes):
    """Batches that rewrite every key stack a run each in the working copy (each commit parks
    a checkpoint, which flushes).  A snapshot then holds the live state about once, whether
    the row cache holds the state whole (the state is rewritten into one table) or not (the
    copy is compacted first), and a copy rebuilt from it reads one run."""
    loc = f"file://{tmp_path}/state"
    options = StoreOptions(cache_dir=str(tmp_path / "cache"), max_changelog_chain=3, snapshot_ratio=100.0,
                           row_cache_bytes=row_cache_bytes)
    coord = CommitCoordinator(loc, "op", 1, query_id="q")
    keys = [b"k%05d" % i for i in range(1500)]
    live = 0
    for version in range(4):  # changelogs at 1-3, a snapshot at 4 (the chain is full)
        s = open_store(loc, "op", 0, version, manifest=coord.base_manifests(version)[0], options=options)
        values = {k: os.urandom(600) for k in keys}
        for k, v in values.items():
            s.put(k, v)
        msg = s.commit()
        coord.publish(version + 1, [msg])
        live = sum(len(k) + len(v) for k, v in values.items())
    m = read_manifest(as_location(loc), msg.manifest)
    assert msg.snapshot and m.snapshot.bytes < 1.3 * live, (m.snapshot.bytes, live)
    release_idle_stores()
    cold = dataclasses.replace(options, park_copies=False)
    with open_store(loc, "op", 0, 4, manifest=coord.base_manifests(4)[0], options=cold) as s:
        assert s.copy_fate == "rebuilt" and dict(s.items()) == values
        assert int(s._db.property("antkv.estimate-num-keys")) == len(keys)  # one run: each key once
    release_idle_stores()


def test_warming_the_last_prefix_holds_it_whole(tmp_path):
    """The prefix ``ff ff`` (the operator's metadata keys) has no prefix after it: warming it
    scans to the end of the keys and holds it whole, as any other."""
    options = StoreOptions(cache_dir=str(tmp_path / "cache"), park_copies=False)
    s = open_store(f"file://{tmp_path}/state", "op", 0, 0, options=options)
    s.put(b"\xff\xffmeta", b"m")
    s.put(b"\x00\x01k", b"v")
    manifest = s.commit().manifest
    s = open_store(f"file://{tmp_path}/state", "op", 0, 1, manifest=manifest, options=options)
    assert s.warm([b"\xff\xff", b"\x00\x01"]) == 2
    assert s.get(b"\xff\xffmeta") == b"m" and s.get(b"\xff\xffnone") is None and s.get(b"\x00\x01k") == b"v"
    s.abort()
    release_idle_stores()
