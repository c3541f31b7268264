"""A committed working copy outlives the Python process that made it: any process on the
machine reopens the copy parked at exactly the version it opens (``parked_copies.py``), a
process killed at any step of parking leaves nothing that is served, two processes racing for
one copy never share it, and a damaged, stale or lost attempt's copy is rebuilt, never served.

Every "other process" here is a real one (``multiprocessing`` spawn, or a child killed with
SIGKILL), sharing the local cache directory as Spark's Python workers on one machine do."""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import shutil
import signal
import time

import pytest

from antkv.spark import CommitCoordinator, CommitMessage, Location, StoreOptions, open_store, release_idle_stores
from antkv.spark.store.idle_copies import cache_for
from antkv.spark.store.parked_copies import RECORD, ParkedCopies
from antkv.spark.store.published import read_manifest

OP = "op"


@pytest.fixture
def setup(tmp_path):
    release_idle_stores()
    uri = str(tmp_path / "loc")
    options = StoreOptions(cache_dir=str(tmp_path / "cache"), max_changelog_chain=3,
                           engine=dict(write_buffer_size=16 << 10, min_blob_size=512))
    yield uri, options, CommitCoordinator(Location(uri), OP, 1, query_id="q")
    release_idle_stores()


def _writes(version: int) -> dict:
    return {b"k%03d" % ((version * 7 + i) % 60): b"v%d-%d-" % (version, i) * (1 + i * 11) for i in range(25)}


def _batch(s, version: int) -> None:
    """Batch ``version``'s writes into store ``s`` (:func:`_model` follows them)."""
    for k, val in _writes(version).items():
        s.put(k, val)
    s.delete(b"k%03d" % (version % 60))


def _model(last: int) -> dict:
    """The state after batches ``0..last-1``."""
    model = {}
    for v in range(last):
        model.update(_writes(v))
        model.pop(b"k%03d" % (v % 60), None)
    return model


def _commit_batches(uri, options, coord, first, last):
    """Batches ``first..last-1`` of partition 0 in this process, each published."""
    for v in range(first, last):
        s = open_store(uri, OP, 0, v, manifest=coord.base_manifests(v)[0], options=options)
        _batch(s, v)
        coord.publish(v + 1, [s.commit()])
        coord.cleanup(v + 1)


def _batch_in_child(args):
    """Another Python worker runs batch ``version``: what it found, and its commit message."""
    uri, options, version, manifest = args
    s = open_store(uri, OP, 0, version, manifest=manifest, options=options)
    fate, items = s.copy_fate, sorted(s.items())
    _batch(s, version)
    return fate, items, s.commit().to_json()


def _open_in_child(args):
    """Another Python worker opens the version and says what it found."""
    uri, options, version, manifest = args
    s = open_store(uri, OP, 0, version, manifest=manifest, options=options)
    try:
        return s.copy_fate, sorted(s.items()), s.num_keys()
    finally:
        s.abort()


def _parked(uri, options):
    return ParkedCopies(cache_for(options)).records(Location(uri), OP, 0)


def test_a_copy_reopened_by_another_process_equals_its_version(setup):
    """Batches alternate between two processes; each continues from the copy the other parked
    (``reopened``), never rebuilding, and the state equals the model at every version, through
    changelog and snapshot commits."""
    uri, options, coord = setup
    _commit_batches(uri, options, coord, 0, 2)
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        for v in (2, 4, 6):
            fate, items, msg = pool.apply(_batch_in_child, ((uri, options, v, coord.base_manifests(v)[0]),))
            assert fate == "reopened" and items == sorted(_model(v).items())
            coord.publish(v + 1, [CommitMessage.from_json(msg)])
            coord.cleanup(v + 1)
            s = open_store(uri, OP, 0, v + 1, manifest=coord.base_manifests(v + 1)[0], options=options)
            assert s.copy_fate == "reopened" and sorted(s.items()) == sorted(_model(v + 1).items())
            assert s.num_keys() == len(_model(v + 1))
            _batch(s, v + 1)
            coord.publish(v + 2, [s.commit()])
            coord.cleanup(v + 2)
        assert read_manifest(Location(uri), coord.base_manifests(8)[0]).snapshot is not None  # snapshots parked too
        fate, items, n = pool.apply(_open_in_child, ((uri, options, 8, coord.base_manifests(8)[0]),))
        assert fate == "reopened" and items == sorted(_model(8).items()) and n == len(_model(8))


def test_an_idle_copy_of_this_process_is_reused_before_a_parked_one_and_parking_can_be_off(setup):
    uri, options, coord = setup
    _commit_batches(uri, options, coord, 0, 1)
    s = open_store(uri, OP, 0, 1, manifest=coord.base_manifests(1)[0], options=options)
    assert s.copy_fate == "reused"
    s.abort()
    assert len(_parked(uri, options)) == 1
    off = StoreOptions(cache_dir=options.cache_dir + "-off", park_copies=False)
    uri2 = uri + "-2"
    coord2 = CommitCoordinator(Location(uri2), OP, 1, query_id="q")
    _commit_batches(uri2, off, coord2, 0, 2)
    assert _parked(uri2, off) == []
    release_idle_stores()
    s = open_store(uri2, OP, 0, 2, manifest=coord2.base_manifests(2)[0], options=off)
    assert s.copy_fate == "rebuilt"
    s.abort()


def _hold_copy_then_wait(args):
    """Run batch 2 (parking the copy), keep the idle copy open, and wait to be killed."""
    uri, options, manifest, ready = args
    _, _, msg = _batch_in_child((uri, options, 2, manifest))
    with open(ready + ".tmp", "w") as f:
        f.write(msg)
    os.rename(ready + ".tmp", ready)
    time.sleep(120)


def test_kill_9_of_the_process_holding_a_copy_while_another_takes_it_over(setup, tmp_path):
    uri, options, coord = setup
    _commit_batches(uri, options, coord, 0, 2)
    release_idle_stores()
    ready = str(tmp_path / "ready")
    holder = multiprocessing.get_context("spawn").Process(
        target=_hold_copy_then_wait, args=((uri, options, coord.base_manifests(2)[0], ready),))
    holder.start()
    try:
        deadline = time.monotonic() + 120
        while not os.path.exists(ready):
            assert holder.is_alive() and time.monotonic() < deadline
            time.sleep(0.05)
        with open(ready) as f:
            coord.publish(3, [CommitMessage.from_json(f.read())])
        s = open_store(uri, OP, 0, 3, manifest=coord.base_manifests(3)[0], options=options)
        assert s.copy_fate == "reopened"  # the holder still has its own copy open
        os.kill(holder.pid, signal.SIGKILL)  # while this process holds the copy it took over
        holder.join()
        assert sorted(s.items()) == sorted(_model(3).items())
        _batch(s, 3)
        coord.publish(4, [s.commit()])
    finally:
        if holder.is_alive():
            os.kill(holder.pid, signal.SIGKILL)
            holder.join()
    release_idle_stores()
    s = open_store(uri, OP, 0, 4, manifest=coord.base_manifests(4)[0], options=options)
    assert s.copy_fate == "reopened" and sorted(s.items()) == sorted(_model(4).items())
    s.abort()
    cache = cache_for(options)
    cache.sweep()  # the killed holder's working directory goes
    assert os.listdir(os.path.join(cache.root, "work")) == []


def _park_and_die_at(args):
    """Commit batch 1, killing this process (SIGKILL) at rename number ``n`` into the parked
    copies (1: the checkpoint in, 2: RECORD in place, 3: the older entry out)."""
    uri, options, manifest, n = args
    parked_root = os.path.join(options.cache_dir, "parked")
    real_rename, calls = os.rename, [0]

    def rename(src, dst):
        if os.fspath(dst).startswith(parked_root):
            calls[0] += 1
            if calls[0] == n:
                os.kill(os.getpid(), signal.SIGKILL)
        return real_rename(src, dst)

    os.rename = rename
    s = open_store(uri, OP, 0, 1, manifest=manifest, options=options)
    _batch(s, 1)
    s.commit()


@pytest.mark.parametrize("step", [1, 2, 3])
def test_a_process_killed_at_each_step_of_parking_leaves_nothing_served(setup, step):
    """Version 1 has two parked copies: the published attempt's and a duplicate's.  A process
    takes the published one, commits batch 1 and is killed while parking it: before its entry
    has RECORD (steps 1 and 2), or while removing the duplicate's older entry (step 3).  The
    next process serves no half-parked entry (nothing there holds version 1 now: it rebuilds,
    exactly), and the sweep removes what the killed process left."""
    uri, options, coord = setup
    attempts = [open_store(uri, OP, 0, 0, options=options) for _ in range(2)]
    for s in attempts:
        _batch(s, 0)
    msgs = [s.commit() for s in attempts]
    coord.publish(1, msgs[:1])
    release_idle_stores()
    assert sorted(r.manifest_name for r in _parked(uri, options)) == sorted(m.manifest for m in msgs)
    child = multiprocessing.get_context("spawn").Process(
        target=_park_and_die_at, args=((uri, options, coord.base_manifests(1)[0], step),))
    child.start()
    child.join()
    assert child.exitcode == -signal.SIGKILL
    left = _parked(uri, options)
    assert [r.manifest_name for r in left if r.version == 1] == [msgs[1].manifest]  # the duplicate's
    assert [r.version for r in left if r.version != 1] == ([2] if step == 3 else [])
    fate, items, n = _open_in_child((uri, options, 1, coord.base_manifests(1)[0]))
    assert fate == "rebuilt" and items == sorted(_model(1).items()) and n == len(_model(1))
    ParkedCopies(cache_for(options)).sweep()
    parked_root = os.path.join(options.cache_dir, "parked")
    for slot in os.listdir(parked_root):
        for entry in os.listdir(os.path.join(parked_root, slot)):
            assert os.path.exists(os.path.join(parked_root, slot, entry, RECORD)), entry  # no debris


def _race(args):
    uri, options, manifest, barrier = args
    s = open_store(uri, OP, 0, 2, manifest=manifest, options=options)
    try:
        barrier.wait(60)  # both opened before either lets its copy go
        return s.copy_fate, sorted(s.items())
    finally:
        s.abort()


def test_two_processes_racing_for_one_copy_one_reopens_it_the_other_rebuilds(setup):
    uri, options, coord = setup
    model = _model(2)
    _commit_batches(uri, options, coord, 0, 2)
    release_idle_stores()
    ctx = multiprocessing.get_context("spawn")
    with ctx.Manager() as manager:
        barrier = manager.Barrier(2)
        with ctx.Pool(2) as pool:
            results = pool.map(_race, [(uri, options, coord.base_manifests(2)[0], barrier)] * 2)
    assert sorted(fate for fate, _ in results) == ["rebuilt", "reopened"]
    assert all(items == sorted(model.items()) for _, items in results)


def _damage(entry_db: str, how: str) -> None:
    tables = sorted(n for n in os.listdir(entry_db) if n.endswith(".sst"))
    path = os.path.join(entry_db, tables[-1])
    if how == "flipped byte":
        with open(path, "r+b") as f:
            f.seek(os.path.getsize(path) // 2)
            b = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([b[0] ^ 0x40]))
    elif how == "truncated":
        os.truncate(path, os.path.getsize(path) - 7)
    elif how == "missing file":
        os.unlink(path)
    elif how == "file too many":
        with open(os.path.join(entry_db, "000999.sst"), "wb") as f:
            f.write(b"x" * 100)
    elif how == "damaged record":
        record = os.path.join(os.path.dirname(entry_db), RECORD)
        with open(record, "r+b") as f:
            f.seek(10)
            f.write(b"\xff")


@pytest.mark.parametrize("how", ["flipped byte", "truncated", "missing file", "file too many", "damaged record"])
def test_a_damaged_parked_copy_is_rebuilt_never_served(setup, how):
    uri, options, coord = setup
    model = _model(2)
    _commit_batches(uri, options, coord, 0, 2)
    release_idle_stores()
    slot = ParkedCopies(cache_for(options)).slot(Location(uri), OP, 0)
    (entry,) = os.listdir(slot)
    _damage(os.path.join(slot, entry, "db"), how)
    s = open_store(uri, OP, 0, 2, manifest=coord.base_manifests(2)[0], options=options)
    assert s.copy_fate == "rebuilt" and sorted(s.items()) == sorted(model.items())
    s.abort()
    assert not os.path.exists(os.path.join(slot, entry))  # the damaged entry is gone


def test_a_stale_or_lost_attempts_parked_copy_is_never_served(setup):
    """A losing duplicate attempt parks its copy of version 2 (other writes) and the winner
    does not park: the published version is rebuilt, not served from the loser's copy.  A
    parked copy of an older version whose chain the wanted one does not extend (a snapshot
    came between) is rebuilt too."""
    uri, options, coord = setup
    model = _model(1)
    _commit_batches(uri, options, coord, 0, 1)
    loser = open_store(uri, OP, 0, 1, manifest=coord.base_manifests(1)[0], options=options)
    loser.put(b"k001", b"from a losing attempt")
    loser.commit()
    release_idle_stores()
    winner_options = StoreOptions(cache_dir=options.cache_dir, max_changelog_chain=3, park_copies=False,
                                  engine=options.engine)
    w = open_store(uri, OP, 0, 1, manifest=coord.base_manifests(1)[0], options=winner_options)
    assert w.copy_fate == "rebuilt"  # the loser's copy is at version 2, not the wanted 1
    w.put(b"k002", b"the winner")
    model[b"k002"] = b"the winner"
    coord.publish(2, [w.commit()])
    release_idle_stores()
    assert [r.version for r in _parked(uri, options)] == [2]  # the loser's
    s = open_store(uri, OP, 0, 2, manifest=coord.base_manifests(2)[0], options=options)
    assert s.copy_fate == "rebuilt" and dict(s.items()).get(b"k001") != b"from a losing attempt"
    assert sorted(s.items()) == sorted(model.items())
    s.abort()
    # stale: version 2 parked from a snapshot chain that version 6 no longer extends
    uri3 = uri + "-stale"
    coord3 = CommitCoordinator(Location(uri3), OP, 1, query_id="q")
    _commit_batches(uri3, options, coord3, 0, 2)  # parks version 2
    entry = _parked(uri3, options)
    assert [r.version for r in entry] == [2]
    slot = ParkedCopies(cache_for(options)).slot(Location(uri3), OP, 0)
    os.rename(slot, slot + ".aside")  # the newer versions are parked without it
    _commit_batches(uri3, options, coord3, 2, 6)  # a snapshot at 4
    release_idle_stores()
    shutil.rmtree(slot)
    os.rename(slot + ".aside", slot)  # only the stale version 2 copy is parked now
    s = open_store(uri3, OP, 0, 6, manifest=coord3.base_manifests(6)[0], options=options)
    assert s.copy_fate == "rebuilt" and sorted(s.items()) == sorted(_model(6).items())
    s.abort()


def test_a_parked_copy_of_an_older_version_catches_up_when_the_chain_extends_it(setup):
    uri, options, coord = setup
    _commit_batches(uri, options, coord, 0, 1)  # version 1 parked
    slot = ParkedCopies(cache_for(options)).slot(Location(uri), OP, 0)
    os.rename(slot, slot + ".aside")
    _commit_batches(uri, options, coord, 1, 3)  # versions 2 and 3: changelogs on the same base
    release_idle_stores()
    shutil.rmtree(slot)
    os.rename(slot + ".aside", slot)  # as if the partition ran elsewhere since version 1
    s = open_store(uri, OP, 0, 3, manifest=coord.base_manifests(3)[0], options=options)
    assert s.copy_fate == "caught_up" and sorted(s.items()) == sorted(_model(3).items())
    s.abort()


def test_a_reused_spark_worker_parks_in_the_background_and_a_claim_waits_for_it(setup, monkeypatch):
    """In a Python worker Spark reuses (``SPARK_REUSE_WORKER``), the commit returns while the
    copy is parked in a thread; a process that wants that version meanwhile waits for the
    parking instead of rebuilding, and this worker's next batch takes its copy once parked."""
    import antkv.spark.store.parked_copies as parked

    uri, options, coord = setup
    monkeypatch.setenv("SPARK_REUSE_WORKER", "1")
    real_digests = parked._digests

    def slow_digests(db, file_map):
        time.sleep(1.5)  # a large copy's files being hashed
        return real_digests(db, file_map)

    monkeypatch.setattr(parked, "_digests", slow_digests)
    s = open_store(uri, OP, 0, 0, options=options)
    _batch(s, 0)
    t0 = time.monotonic()
    msg = s.commit()
    assert time.monotonic() - t0 < 1.5  # the commit did not wait for the parking
    coord.publish(1, [msg])
    assert _parked(uri, options) == []  # still parking
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        fate, items, n = pool.apply(_open_in_child, ((uri, options, 1, msg.manifest),))
    assert fate == "reopened" and items == sorted(_model(1).items()) and n == len(_model(1))
    s = open_store(uri, OP, 0, 1, manifest=msg.manifest, options=options)
    assert s.copy_fate == "reused" and sorted(s.items()) == sorted(_model(1).items())
    s.abort()


def test_reading_a_version_leaves_the_parked_copies_for_the_next_batch(setup):
    """``read_state`` (and the state data source) open each partition only to read it: they
    never claim a parked copy, so the query's next batch still reopens it."""
    from antkv.spark.tools.state_reader import _stores

    uri, options, coord = setup
    _commit_batches(uri, options, coord, 0, 2)
    release_idle_stores()
    for _, store in _stores(uri, OP, None, options):
        assert store.copy_fate == "rebuilt" and sorted(store.items()) == sorted(_model(2).items())
    assert [r.version for r in _parked(uri, options)] == [2]
    s = open_store(uri, OP, 0, 2, manifest=coord.base_manifests(2)[0], options=options)
    assert s.copy_fate == "reopened"
    s.abort()


def test_a_commit_whose_parking_fails_is_still_committed_and_the_next_open_rebuilds(setup, monkeypatch, caplog):
    """A full disk (or any engine error) while parking: the version is committed and
    published as usual, the failure is logged, the copy is not kept (its database may have
    turned read-only), and the next open rebuilds it exactly."""
    import antkv
    import antkv.spark.store.parked_copies as parked

    uri, options, coord = setup

    def full_disk(*args, **kwargs):
        raise antkv.IOError("No space left on device", OSError(28, "No space left on device"), "parked")

    monkeypatch.setattr(parked.ParkedCopies, "park", full_disk)
    s = open_store(uri, OP, 0, 0, options=options)
    _batch(s, 0)
    with caplog.at_level("WARNING", logger="antkv"):
        msg = s.commit()
    coord.publish(1, [msg])
    assert "committed but not parked" in caplog.text
    monkeypatch.undo()
    s = open_store(uri, OP, 0, 1, manifest=msg.manifest, options=options)
    assert s.copy_fate == "rebuilt" and sorted(s.items()) == sorted(_model(1).items())
    s.abort()


def test_parked_copies_beyond_the_disk_budget_go_least_recently_parked_first(setup):
    """Parked copies count against ``cache_disk_bytes`` with the cached objects: over it, the
    least recently parked go first, and a partition committed since keeps its copy."""
    uri, options, coord = setup
    small = StoreOptions(cache_dir=options.cache_dir, cache_disk_bytes=1, engine=options.engine)
    coords = [CommitCoordinator(Location(f"{uri}-{i}"), OP, 1, query_id="q") for i in range(3)]
    for i, c in enumerate(coords):  # three queries, one partition each, parked in turn
        _commit_batches(f"{uri}-{i}", small, c, 0, 1)
        time.sleep(0.05)  # distinct parking times
    release_idle_stores()
    held = [len(ParkedCopies(cache_for(small)).records(Location(f"{uri}-{i}"), OP, 0)) for i in range(3)]
    assert held == [0, 0, 1]  # only the newest: each parking trimmed the ones before


def test_a_parking_process_passes_over_the_whole_parked_area_once_per_interval(setup, monkeypatch):
    """Sweeping and trimming read every slot on the machine: a process parking within
    UPKEEP_EVERY_S of its last pass, with room in the disk budget, does neither (debris
    stays); once the interval has passed, the next parking removes it."""
    from antkv.spark.store import parked_copies

    uri, options, coord = setup
    _commit_batches(uri, options, coord, 0, 1)  # this process's first parking: a pass
    release_idle_stores()
    debris = os.path.join(options.cache_dir, "parked", "trash-left-by-a-killed-remover")
    os.makedirs(os.path.join(debris, "db"))
    _commit_batches(uri, options, coord, 1, 3)
    release_idle_stores()
    assert os.path.exists(debris)  # parked twice within the interval: no pass
    monkeypatch.setattr(parked_copies, "UPKEEP_EVERY_S", 0.0)
    _commit_batches(uri, options, coord, 3, 4)
    release_idle_stores()
    assert not os.path.exists(debris)
    assert [r.version for r in _parked(uri, options)] == [4]
    s = open_store(uri, OP, 0, 4, manifest=coord.base_manifests(4)[0], options=options)
    assert s.copy_fate in ("reused", "reopened") and sorted(s.items()) == sorted(_model(4).items())
    s.abort()


def test_a_parked_copy_that_verifies_but_does_not_open_is_rebuilt(setup, caplog):
    """Files that match their record but that the engine refuses (here a damaged MANIFEST
    whose record was written after the damage): the open falls back to a rebuild, logged."""
    from antkv.spark.store.parked_copies import ParkedRecord, _digests

    uri, options, coord = setup
    _commit_batches(uri, options, coord, 0, 2)
    release_idle_stores()
    slot = ParkedCopies(cache_for(options)).slot(Location(uri), OP, 0)
    (entry,) = os.listdir(slot)
    db = os.path.join(slot, entry, "db")
    (manifest,) = [n for n in os.listdir(db) if n.startswith("MANIFEST-")]
    with open(os.path.join(db, manifest), "r+b") as f:
        f.seek(20)
        f.write(b"\xde\xad\xbe\xef")
    path = os.path.join(slot, entry, RECORD)
    with open(path, "rb") as f:
        record = ParkedRecord.decode(f.read(), path)
    with open(path, "wb") as f:
        f.write(dataclasses.replace(record, files=_digests(db, record.file_map)).encode())
    with caplog.at_level("WARNING", logger="antkv"):
        s = open_store(uri, OP, 0, 2, manifest=coord.base_manifests(2)[0], options=options)
    assert s.copy_fate == "rebuilt" and sorted(s.items()) == sorted(_model(2).items())
    assert "did not open" in caplog.text
    s.abort()


def _rewrite_all(uri, options, coord, version: int, keys: int, changed: int) -> tuple[dict, str]:
    """Batch ``version`` of partition 0: the first ``changed`` of ``keys`` keys get new values
    (batch 0 writes them all); returns the state after it and the fate of the store's copy."""
    s = open_store(uri, OP, 0, version, manifest=coord.base_manifests(version)[0], options=options)
    fate, state = s.copy_fate, dict(s.items())
    for i in range(keys if version == 0 else changed):
        state[b"r%05d" % i] = b"v%d-%d" % (version, i)
        s.put(b"r%05d" % i, state[b"r%05d" % i])
    coord.publish(version + 1, [s.commit()])
    coord.cleanup(version + 1)
    return state, fate


def _parked_tables(uri, options) -> list:
    (record,) = _parked(uri, options)
    return sorted(name for name in record.files if name.endswith(".sst"))


def _rewrite_in_child(args):
    """Another Python worker runs batch ``version`` (rewriting the state): the fate of its
    copy, the state after it and the tables of the copy it parked."""
    uri, options, version = args
    coord = CommitCoordinator(Location(uri), OP, 1, query_id="q")
    state, fate = _rewrite_all(uri, options, coord, version, 3000, 3000)
    return fate, sorted(state.items()), _parked_tables(uri, options)


def test_a_changelog_commit_that_rewrote_the_state_parks_it_as_one_table(setup):
    """Batches that rewrite the state and commit changelogs would stack one more table per
    batch in the copy (each parking checkpoint flushes the batch): the process that claims it
    would merge them all to read its key groups, and compact them inside its task.  The copy
    is parked as the live state in one table instead, whether the batch reused its copy or
    reopened one another process parked, and it reopens equal to its version."""
    uri, _, coord = setup
    options = StoreOptions(cache_dir=setup[1].cache_dir, max_changelog_chain=8, snapshot_ratio=100.0)
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        for v, built in enumerate(("new", "reused")):  # this process
            state, fate = _rewrite_all(uri, options, coord, v, 3000, 3000)
            assert fate == built and len(_parked_tables(uri, options)) == 1
        fate, items, tables = pool.apply(_rewrite_in_child, ((uri, options, 2),))
        assert fate == "reopened" and len(tables) == 1
        state, fate = _rewrite_all(uri, options, coord, 3, 3000, 3000)
        assert fate == "reopened" and sorted(state.items()) != items and len(_parked_tables(uri, options)) == 1
        assert read_manifest(Location(uri), coord.base_manifests(4)[0]).snapshot is None  # all changelogs
        fate, items, n = pool.apply(_open_in_child, ((uri, options, 4, coord.base_manifests(4)[0]),))
        assert fate == "reopened" and items == sorted(state.items()) and n == 3000


def test_a_batch_that_changed_little_or_a_state_not_cached_whole_parks_its_tables_as_they_are(setup):
    """A copy is rewritten for parking only when its tables hold the state well over once and
    its row cache holds the state whole: a batch that changed a few keys keeps the tables it
    has (a table of its changes joins them), and so does a copy whose cache holds a part."""
    uri, _, coord = setup
    options = StoreOptions(cache_dir=setup[1].cache_dir, max_changelog_chain=8, snapshot_ratio=100.0)
    _rewrite_all(uri, options, coord, 0, 3000, 3000)
    state, _ = _rewrite_all(uri, options, coord, 1, 3000, 100)
    assert len(_parked_tables(uri, options)) == 2
    release_idle_stores()
    s = open_store(uri, OP, 0, 2, manifest=coord.base_manifests(2)[0], options=options)
    assert s.copy_fate == "reopened" and sorted(s.items()) == sorted(state.items())
    s.abort()
    uri2 = uri + "-uncached"
    small = dataclasses.replace(options, row_cache_bytes=1)  # no room: nothing is cached
    with multiprocessing.get_context("spawn").Pool(1) as pool:  # (a process's first store fixes its budget)
        tables, items = pool.apply(_rewrite_batches_uncached, ((uri2, small),))
    assert len(tables) == 3
    coord2 = CommitCoordinator(Location(uri2), OP, 1, query_id="q")
    s = open_store(uri2, OP, 0, 3, manifest=coord2.base_manifests(3)[0], options=small)
    assert s.copy_fate == "reopened" and sorted(s.items()) == items
    s.abort()


def _rewrite_batches_uncached(args):
    """In a new process, whose row caches get ``options``' budget: three batches rewriting the
    state; the parked copy's tables and the state."""
    uri, options = args
    coord = CommitCoordinator(Location(uri), OP, 1, query_id="q")
    for v in range(3):
        state, _ = _rewrite_all(uri, options, coord, v, 3000, 3000)
    return _parked_tables(uri, options), sorted(state.items())
