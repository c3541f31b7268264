"""The newest version that loads survives the loss or truncation of any one object.

A three-batch run of two partitions (changelogs, then a snapshot with engine tables and
value-log files) is stopped after each of its batches; one object of the location -- a
marker, a manifest, a changelog or a snapshot file -- is deleted or truncated; the run then
goes on in the same process, whose working copies are still open (each later batch builds on
the newest published version and may fail), with one more batch.  Then a new process, with
an empty local cache, opens every published version: some version must load, and every
version that loads must hold exactly what was committed for it.  Locally and on a real S3
API (moto on 127.0.0.1).  The store API is used directly: no Spark job is needed.
"""

from __future__ import annotations

import fnmatch
import re
import uuid

import pyarrow.fs as pafs
import pytest

import antkv
from antkv.spark import CommitCoordinator, Location, StoreOptions, open_store, release_idle_stores

from test_spark_store_model import location_objects, s3_server  # noqa: F401

P = 2
BATCHES = 3


def writes(i: int) -> list[dict]:
    """Batch i's puts (small values and value-log sized ones) and one delete, per partition."""
    out = []
    for p in range(P):
        w = {b"k%02d" % j: (b"%d-%d-%d" % (i, p, j)) * (1 if j % 2 else 400) for j in range(i, i + 5)}
        w[b"k%02d" % (i - 1)] = None
        out.append(w)
    return out


def applied(state: list[dict], batch: list[dict]) -> list[dict]:
    out = []
    for before, w in zip(state, batch):
        after = dict(before)
        for k, v in w.items():
            if v is None:
                after.pop(k, None)
            else:
                after[k] = v
        out.append(after)
    return out


def run_batch(loc, coord, version: int, batch: list[dict], options) -> None:
    bases = coord.base_manifests(version)
    msgs = []
    for p in range(P):
        store = open_store(loc, "op", p, version, manifest=bases[p], options=options)
        try:
            for k, v in batch[p].items():
                store.delete(k) if v is None else store.put(k, v)
            msgs.append(store.commit())
        except BaseException:
            store.abort()
            raise
    coord.publish(version + 1, msgs)
    coord.cleanup(version + 1)


def damage(loc: Location, name: str, how: str) -> None:
    data = loc.read(name)
    loc.delete(name)
    if how == "truncate":
        loc.write(name, data[: len(data) // 2])


def loadable_versions(view: Location, committed: dict, cache_dir: str) -> list[int]:
    """Every published version that loads as a new process would load it -- through ``view``,
    the same objects under another location identity (so no working copy this process holds
    is used), with an empty local cache -- each checked against what was committed for it."""
    options = StoreOptions(cache_dir=cache_dir)
    loaded = []
    for base in view.list_dir("op/_batches"):
        if not base.endswith(".marker"):
            continue
        v = int(base.split(".")[0])
        try:
            state = []
            for p in range(P):
                with open_store(view, "op", p, v, options=options) as s:
                    state.append(dict(s.items()))
        except antkv.Error:
            continue
        assert state == committed[v], f"version {v} loads with other contents than were committed"
        loaded.append(v)
    return loaded


def options_for(tmp_path) -> StoreOptions:
    # a snapshot at the third version (a chain of two changelogs at most), with engine tables
    # and value-log files
    return StoreOptions(cache_dir=str(tmp_path / "cache"), max_changelog_chain=2, snapshot_ratio=1000.0,
                        engine=dict(write_buffer_size=16 << 10, min_blob_size=1000))


def one_run(make_location, tmp_path, stop: int, victim: str | None, how: str):
    """Batches 1..stop, ``how`` to ``victim`` (a name pattern relative to the location), then
    the rest of the run and one batch more in the same process.  Checks that every version
    published after the damage loads, and that the newest version that loaded right after
    the damage (if any did) still loads, or a newer one does."""
    release_idle_stores()
    loc, view = make_location()
    options = options_for(tmp_path)
    coord = CommitCoordinator(loc, "op", P, query_id="q")
    committed = {0: [{} for _ in range(P)]}
    for i in range(1, stop + 1):
        run_batch(loc, coord, i - 1, writes(i), options)
        committed[i] = applied(committed[i - 1], writes(i))
    if victim is None:  # the names with their attempt ids (random) as wildcards
        return sorted({re.sub(r"-[0-9a-f]{16}", "-*", o) for o in location_objects(loc, "op")})
    matching = sorted(fnmatch.filter(location_objects(loc, "op"), victim))
    assert matching, victim
    damage(loc, matching[0], how)
    before = loadable_versions(view, committed, str(tmp_path / f"fresh-{uuid.uuid4().hex}"))
    for i in range(stop + 1, BATCHES + 2):
        v = coord.latest_version()
        try:
            run_batch(loc, coord, v, writes(i), options)
        except antkv.Error:
            continue  # refused; the next batch tries again from the newest published version
        committed[v + 1] = applied(committed[v], writes(i))
    after = loadable_versions(view, committed, str(tmp_path / f"fresh-{uuid.uuid4().hex}"))
    what = f"after {how} of {matching[0]} at batch {stop}"
    listed = [int(b.split(".")[0]) for b in view.list_dir("op/_batches") if b.endswith(".marker")]
    assert all(v in after for v in listed if v > stop), (what, listed, after)  # published after: loads
    if before:
        assert after and max(after) >= max(before), (what, before, after)
    return before, after


def every_damage(make_location, tmp_path, hows, stops=range(1, BATCHES + 1), per_kind=False) -> int:
    """Damage each object of each stop in each way of ``hows`` (or, ``per_kind``, the newest
    object of each kind: marker, manifest, changelog, table, value-log file)."""
    cases = survived = 0
    for stop in stops:
        victims = one_run(make_location, tmp_path, stop, None, "")
        if per_kind:
            by_kind: dict[str, list[str]] = {}
            for victim in victims:
                by_kind.setdefault(victim.rsplit(".", 1)[-1], []).append(victim)
            victims = [names[-1] for names in by_kind.values()]
        for victim in victims:
            for how in hows:
                before, _ = one_run(make_location, tmp_path, stop, victim, how)
                cases += 1
                survived += bool(before)
    assert survived > cases // 2  # most damage leaves an older version whole: it must be kept
    return cases


def test_any_one_lost_or_truncated_object_leaves_the_newest_loadable_version_local(tmp_path):
    roots = iter(range(10**6))

    def make():
        name = f"loc{next(roots)}"
        return (Location(str(tmp_path / name)),
                Location(name, filesystem=pafs.SubTreeFileSystem(str(tmp_path), pafs.LocalFileSystem())))

    objects = one_run(make, tmp_path, BATCHES, None, "")
    kinds = {o.rsplit(".", 1)[-1] for o in objects}
    assert {"marker", "manifest", "changelog", "sst", "vlog"} <= kinds, kinds  # every kind is damaged
    assert every_damage(make, tmp_path, ("delete", "truncate")) > 40


def test_any_one_lost_or_truncated_object_leaves_the_newest_loadable_version_s3(tmp_path, s3_server):
    """On S3, the newest object of each kind at the last stop (a changelog, a snapshot's table
    and value-log file, a manifest, a marker) is damaged: what S3 adds is how the location
    reads a missing or short object, the same for every object of a kind.  Every object of
    every stop is the local test's."""
    def make():
        name = uuid.uuid4().hex
        return (Location(f"antkv-state/{name}", filesystem=s3_server),
                Location(name, filesystem=pafs.SubTreeFileSystem("antkv-state", s3_server)))

    objects = one_run(make, tmp_path, BATCHES, None, "")
    kinds = {o.rsplit(".", 1)[-1] for o in objects}
    assert {"marker", "manifest", "changelog", "sst", "vlog"} <= kinds, kinds
    assert every_damage(make, tmp_path, ("delete", "truncate"), stops=(BATCHES,), per_kind=True) == 2 * 5


def test_a_held_copy_is_not_built_on_when_its_newest_changelog_is_lost(tmp_path):
    """Versions 1-3 published, the newest changelog deleted, a batch in the process that still
    holds the copies: the batch is refused before anything is published, and version 2 loads."""
    loc = Location(str(tmp_path / "loc"))
    options = StoreOptions(cache_dir=str(tmp_path / "cache"), max_changelog_chain=100, snapshot_ratio=1000.0)
    coord = CommitCoordinator(loc, "op", P, query_id="q")
    committed = {0: [{} for _ in range(P)]}
    release_idle_stores()
    for i in (1, 2, 3):
        run_batch(loc, coord, i - 1, writes(i), options)
        committed[i] = applied(committed[i - 1], writes(i))
    newest = [o for o in location_objects(loc, "op") if o.endswith(".changelog") and "/p00000/" in o
              and "%020d-" % 3 in o]
    assert len(newest) == 1
    loc.delete(newest[0])
    with pytest.raises(antkv.CorruptionError, match="lacks"):
        run_batch(loc, coord, 3, writes(4), options)
    assert coord.latest_version() == 3
    view = Location("loc", filesystem=pafs.SubTreeFileSystem(str(tmp_path), pafs.LocalFileSystem()))
    assert loadable_versions(view, committed, str(tmp_path / "fresh")) == [2]


def test_publish_refuses_a_manifest_naming_a_missing_object(tmp_path):
    from antkv.spark import CommitError

    loc = Location(str(tmp_path / "loc"))
    options = StoreOptions(cache_dir=str(tmp_path / "cache"))
    coord = CommitCoordinator(loc, "op", 1, query_id="q")
    store = open_store(loc, "op", 0, 0, manifest=None, options=options)
    store.put(b"a", b"1")
    msg = store.commit()
    changelog = [o for o in location_objects(loc, "op") if o.endswith(".changelog")]
    loc.delete(changelog[0])
    with pytest.raises(CommitError, match="lacks .*changelog"):
        coord.publish(1, [msg])
    assert coord.latest_version() == 0


@pytest.fixture(autouse=True)
def _release():
    yield
    release_idle_stores()

