"""The state-store model test against a local checkpoint location (``test_spark_s3.py`` runs
the same machine against a real S3 API).

A hypothesis state machine drives ``antkv.spark`` stores of two partitions and a plain dict per
partition and per published version side by side: put, delete, delete_range, get, range and
prefix scans, exact key counts, row-cache warming, commit + publish + cleanup, abort, duplicate (losing) attempts,
cold reloads from the location and loading any retained version.  After every cleanup the
location holds exactly the objects the retained versions reference.
"""

from __future__ import annotations

import collections
import shutil
import tempfile
import uuid

import pytest

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

import antkv
from antkv.spark import CommitCoordinator, Location, StoreOptions, open_store, release_idle_stores
from antkv.spark.store.published import read_manifest
from bench.s3_server import start_s3_server

KEYS = st.sampled_from([b"", b"a", b"aa", b"aab", b"ab", b"b", b"ba", b"c", b"cc", b"d", b"\xff", b"k1", b"k1z", b"k2"])
VALUES = st.one_of(st.binary(max_size=20), st.binary(min_size=200, max_size=300))
PARTS = st.integers(0, 1)
NUM_PARTITIONS = 2
RETAIN = 3
_REMOTE_CACHE = {"remote": dict(cache_disk_bytes=16 << 10)}  # a block cache smaller than the state's tables


def model_items(model: dict, lo=None, hi=None, prefix=None):
    return sorted((k, v) for k, v in model.items()
                  if (lo is None or k >= lo) and (hi is None or k < hi) and (prefix is None or k.startswith(prefix)))


def location_objects(loc, operator: str) -> set[str]:
    """Every object under the operator (markers and partition objects), by listing."""
    out = {f"{operator}/_batches/{n}" for n in loc.list_dir(f"{operator}/_batches")}
    for sub in loc.list_subdirs(operator):
        if sub.startswith("p"):
            out |= {f"{operator}/{sub}/{n}" for n in loc.list_dir(f"{operator}/{sub}")}
    return out


def referenced_objects(loc, coord, first: int, last: int) -> set[str]:
    out = set()
    for v in range(first, last + 1):
        out.add(f"{coord.operator}/_batches/{v:020d}.marker")
        for name in coord.marker(v).manifests:
            out.add(name)
            out |= read_manifest(loc, name).objects()
    return out


def make_machine(make_location, tables="local"):
    """``make_location()`` returns ``(location, cleanup callable)``: a fresh empty location.
    ``tables="remote"``: the stores read their snapshot files from the location through a
    block cache of 16 KiB (StoreOptions.tables), smaller than the state's tables together."""

    class StoreMachine(RuleBasedStateMachine):
        def __init__(self):
            super().__init__()
            self.loc, self._drop_location = make_location()
            self.cache_dir = tempfile.mkdtemp(prefix="antkv-spark-cache-")
            self.options = StoreOptions(cache_dir=self.cache_dir, max_changelog_chain=3,
                                        max_changelog_bytes=2000, engine=dict(write_buffer_size=4096),
                                        tables=tables, **_REMOTE_CACHE.get(tables, {}))
            self.coord = CommitCoordinator(self.loc, "op", NUM_PARTITIONS, query_id="model",
                                           min_versions_to_retain=RETAIN)
            self.version = 0
            self.published = {0: [{} for _ in range(NUM_PARTITIONS)]}  # version -> state per partition
            self.pending = [{} for _ in range(NUM_PARTITIONS)]  # the open batch's state per partition
            self.stores = [self._open(p, 0) for p in range(NUM_PARTITIONS)]

        def teardown(self):
            for s in getattr(self, "stores", []):
                s.abort()
            release_idle_stores()
            shutil.rmtree(self.cache_dir, ignore_errors=True)
            self._drop_location()

        def _open(self, p: int, version: int):
            bases = self.coord.base_manifests(version)
            return open_store(self.loc, "op", p, version, manifest=bases[p], options=self.options)

        # -------------------------------------------------------------- the open batch

        @rule(p=PARTS, k=KEYS, v=VALUES)
        def put(self, p, k, v):
            self.stores[p].put(k, v)
            self.pending[p][k] = v

        @rule(p=PARTS, k=KEYS)
        def delete(self, p, k):
            self.stores[p].delete(k)
            self.pending[p].pop(k, None)

        @rule(p=PARTS, a=KEYS, b=KEYS)
        def delete_range(self, p, a, b):
            a, b = min(a, b), max(a, b)
            self.stores[p].delete_range(a, b)
            for k in [k for k in self.pending[p] if a <= k < b]:
                del self.pending[p][k]

        @rule(p=PARTS, k=KEYS)
        def get(self, p, k):
            assert self.stores[p].get(k) == self.pending[p].get(k)

        @rule(p=PARTS, a=st.none() | KEYS, b=st.none() | KEYS, prefix=st.none() | st.sampled_from([b"a", b"k", b""]))
        def scan(self, p, a, b, prefix):
            got = list(self.stores[p].items(a, b, prefix=prefix))
            assert got == model_items(self.pending[p], a, b, prefix)
            assert list(self.stores[p].keys(a, b, prefix=prefix)) == [k for k, _ in got]

        @rule(p=PARTS, prefixes=st.lists(st.sampled_from([b"aa", b"ab", b"ba", b"cc", b"k1", b"k2", b"zz"]),
                                         max_size=3))
        def warm(self, p, prefixes):  # the row cache then holds these prefixes whole
            self.stores[p].warm(prefixes)

        @rule(p=PARTS)
        def count(self, p):
            assert self.stores[p].num_keys() == len(self.pending[p])

        @rule(p=PARTS)
        def abort(self, p):
            self.stores[p].abort()
            self.pending[p] = dict(self.published[self.version][p])
            self.stores[p] = self._open(p, self.version)

        # -------------------------------------------------------------- batches

        @rule(loser=st.none() | PARTS, cold=st.booleans())
        def commit_batch(self, loser, cold):
            self._commit(loser, cold)

        @rule()
        def commit_warm(self):
            self._commit(None, False)

        def _commit(self, loser, cold):
            if loser is not None:
                # a duplicate attempt of partition `loser` (speculative or retried) commits
                # first, with other writes; the driver never hears of it
                dup = self._open(loser, self.version)
                dup.put(b"k1", b"from a losing attempt")
                dup.delete(b"a")
                dup.commit()
            msgs = [s.commit() for s in self.stores]
            for p, m in enumerate(msgs):
                assert m.num_keys == len(self.pending[p])
                counts = collections.Counter(k[:2] for k in self.pending[p])  # per 2-byte key prefix
                assert read_manifest(self.loc, m.manifest).key_counts == counts
            v = self.version + 1
            result = self.coord.publish(v, msgs)
            assert not result.replayed
            self.version = v
            self.published[v] = [dict(d) for d in self.pending]
            self.coord.cleanup(v)
            first = max(1, v - RETAIN + 1)
            for old in [w for w in self.published if 0 < w < first]:
                del self.published[old]
            assert location_objects(self.loc, "op") == referenced_objects(self.loc, self.coord, first, v)
            if cold:
                release_idle_stores()  # as if each partition's next task ran in another process
            self.stores = [self._open(p, v) for p in range(NUM_PARTITIONS)]
            # every copy was just committed and parked: another process reopens it, this one reuses it
            assert [s.copy_fate for s in self.stores] == ["reopened" if cold else "reused"] * NUM_PARTITIONS

        @precondition(lambda self: self.version > 0)
        @rule(data=st.data())
        def load_retained(self, data):
            v = data.draw(st.sampled_from(sorted(self.published)))
            p = data.draw(PARTS)
            s = self._open(p, v)
            try:
                assert list(s.items()) == model_items(self.published[v][p])
                assert s.num_keys() == len(self.published[v][p])
            finally:
                s.abort()

        @precondition(lambda self: self.version > 0)
        @rule()
        def republish_is_idempotent(self):
            marker = self.coord.marker(self.version)
            again = CommitCoordinator(self.loc, "op", NUM_PARTITIONS, query_id="model", run_id=marker.run_id,
                                      min_versions_to_retain=RETAIN)
            assert again.base_manifests(self.version) == list(marker.manifests)

        @invariant()
        def versions_retained(self):
            assert all(v in self.published for v in range(max(0, self.version - RETAIN + 1), self.version + 1))

    return StoreMachine


def _local_location(tmp_root):
    def make():
        d = tempfile.mkdtemp(prefix="loc-", dir=tmp_root)
        return Location(d), lambda: shutil.rmtree(d, ignore_errors=True)

    return make


@pytest.fixture(scope="module")
def s3_server():
    """A real S3 API (moto's server mode) on 127.0.0.1, and a pyarrow S3 file system reaching it."""
    fs, stop = start_s3_server("antkv-state")
    yield fs
    stop()


def s3_location(fs):
    def make():
        root = f"antkv-state/{uuid.uuid4().hex}"
        return Location(root, filesystem=fs), lambda: fs.delete_dir_contents(root, missing_dir_ok=True)

    return make


def s3_uri(fs) -> tuple[str, Location]:
    """A new location on the S3 server of ``fs``: its URI, with the credentials and endpoint
    in it (for Spark's workers, which get no file system object), and the driver's Location."""
    settings = fs.__reduce__()[1][0]  # the file system's own settings: endpoint, credentials
    root = f"antkv-state/{uuid.uuid4().hex}"
    uri = (f"s3://{settings['access_key']}:{settings['secret_key']}@{root}"
           f"?endpoint_override={settings['endpoint_override']}&scheme=http&region=us-east-1")
    return uri, Location(root, filesystem=fs)


def test_store_model_local(tmp_path):
    machine = make_machine(_local_location(str(tmp_path)))
    run_state_machine_as_test(machine, settings=settings(max_examples=40, stateful_step_count=40))


def test_store_model_s3(s3_server):
    machine = make_machine(s3_location(s3_server))
    run_state_machine_as_test(machine, settings=settings(max_examples=8, stateful_step_count=25))


def test_store_model_remote_tables_local(tmp_path):
    machine = make_machine(_local_location(str(tmp_path)), tables="remote")
    run_state_machine_as_test(machine, settings=settings(max_examples=25, stateful_step_count=40))


def test_store_model_remote_tables_s3(s3_server):
    machine = make_machine(s3_location(s3_server), tables="remote")
    run_state_machine_as_test(machine, settings=settings(max_examples=6, stateful_step_count=25))
