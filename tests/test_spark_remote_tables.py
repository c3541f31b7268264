"""Remote tables (``StoreOptions(tables="remote")``): the state is read from the location by
ranges through the machine's block cache (``antkv/spark/store/block_cache.py``).

The tests run one workload (reads, read-modify-writes, deletes, a range deletion, batches in
"new processes") in remote mode with a block cache about a tenth of the state and in download
mode, on a local location and on a real S3 API, and compare every answer; then the faults: a
location read failing in the middle of a task, entries of the block cache damaged on disk, and
a local disk that is full while the cache writes."""

from __future__ import annotations

import errno
import os
import random
import shutil
import socket
import threading
import time
import uuid

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

import antkv
from antkv.fs.fault import FaultInjectionFileSystem
from antkv.fs.os_file_system import OSFileSystem
from antkv.spark import CommitCoordinator, Location, StoreOptions, open_store, release_idle_stores
from antkv.spark.store.block_cache import BlockCache
from antkv.spark.store.idle_copies import blocks_for
from antkv.spark.store.local_cache import tree_bytes
from antkv.spark.store.published import read_manifest

from bench.s3_server import start_s3_server
from test_spark_store_model import s3_location, s3_server  # noqa: F401

BUDGET = 64 << 10  # the block cache of the remote stores


@pytest.fixture(autouse=True)
def _no_idle_stores():
    release_idle_stores()
    yield
    release_idle_stores()


def _options(cache_dir, tables="remote", **kw) -> StoreOptions:
    if tables == "remote":
        kw.setdefault("cache_disk_bytes", BUDGET)
    return StoreOptions(cache_dir=str(cache_dir), tables=tables, max_changelog_chain=2,
                        engine=dict(write_buffer_size=64 << 10, min_blob_size=512, max_background_jobs=0), **kw)


def _value(rnd: random.Random, k: bytes) -> bytes:
    return k * 4 + rnd.randbytes(rnd.choice([60, 150, 700]))  # 700 B: in the value log (min_blob_size)


def _workload(loc, options, batches: int, keys: int = 4000, seed: int = 7) -> tuple[dict, list]:
    """Run ``batches`` batches on one partition and publish each; returns the final state and
    every answer the stores gave (gets, counts, scans of a range), for comparison."""
    rnd = random.Random(seed)
    coord = CommitCoordinator(loc, "op", 1, query_id="q")
    model: dict[bytes, bytes] = {}
    answers = []
    for v in range(1, batches + 1):
        store = open_store(loc, "op", 0, v - 1, manifest=coord.base_manifests(v - 1)[0], options=options)
        try:
            for _ in range(keys if v == 1 else keys // 4):
                k = b"k%06d" % rnd.randrange(keys * 2)
                got = store.get(k)
                assert got == model.get(k)
                answers.append(got)
                model[k] = _value(rnd, k)
                store.put(k, model[k])
            for _ in range(20):
                k = b"k%06d" % rnd.randrange(keys * 2)
                store.delete(k)
                model.pop(k, None)
            lo = b"k%06d" % rnd.randrange(keys * 2)
            hi = lo[:-2] + b"99"
            store.delete_range(lo, hi)
            for k in [k for k in model if lo <= k < hi]:
                del model[k]
            scan = list(store.items(b"k0010", b"k0012"))
            assert scan == sorted((k, x) for k, x in model.items() if b"k0010" <= k < b"k0012")
            answers.append(scan)
            assert store.num_keys() == len(model)
            message = store.commit()
        except BaseException:
            store.abort()
            raise
        coord.publish(v, [message])
        coord.cleanup(v)
        if v % 2 == 0:
            release_idle_stores()  # the next batch runs in "another process" (the parked copy)
    return model, answers


def _read_all(loc, options, version: int) -> dict:
    with open_store(loc, "op", 0, version, options=options) as store:
        return dict(store.items())




@pytest.mark.parametrize("where", ["local", "s3"])
def test_a_state_ten_times_the_block_cache_gives_the_answers_of_download_mode(tmp_path, where, request):
    if where == "s3":
        make = s3_location(request.getfixturevalue("s3_server"))
        (remote_loc, drop_a), (local_loc, drop_b) = make(), make()
    else:
        remote_loc, local_loc = Location(str(tmp_path / "a")), Location(str(tmp_path / "b"))
        drop_a = drop_b = lambda: None
    try:
        remote = _options(tmp_path / "remote-cache")
        want, answers = _workload(local_loc, _options(tmp_path / "local-cache", tables="local"), batches=6)
        got, remote_answers = _workload(remote_loc, remote, batches=6)
        assert remote_answers == answers and got == want
        manifest = read_manifest(remote_loc, CommitCoordinator(remote_loc, "op", 1, query_id="q").marker(6).manifests[0])
        state_bytes = sum(f.size for f in manifest.snapshot.files) if manifest.snapshot else 0
        assert state_bytes >= 10 * BUDGET
        blocks = blocks_for(remote)
        assert blocks.usage() <= BUDGET * 5 // 4  # checked after every sixteenth of the budget written
        assert not os.listdir(tmp_path / "remote-cache" / "objects")  # nothing was downloaded whole
        # a cold open reads only metadata; the reads then go through the block cache
        release_idle_stores()
        fresh = _options(tmp_path / "cold-cache", park_copies=False)
        cold = blocks_for(fresh)
        with open_store(remote_loc, "op", 0, 6, options=fresh) as store:
            assert cold.fetches <= 1  # the engine's open checks one table's last bytes (its magic)
            assert cold.fetched_bytes <= cold.chunk_bytes
            assert dict(store.items()) == want
        assert cold.fetched_bytes > 0
        cold_dir = tmp_path / "cold-cache"
        assert sum(tree_bytes(str(cold_dir / d)) for d in os.listdir(cold_dir) if d != "blocks") < state_bytes // 4
    finally:
        drop_a()
        drop_b()


def publish_one_table(loc: Location, options: StoreOptions) -> dict[bytes, bytes]:
    """Version 1 of partition 0: 40,000 keys in order (about 4 MiB), committed as a snapshot of
    one table (``options`` sets a small ``max_changelog_bytes`` and a large write buffer)."""
    coord = CommitCoordinator(loc, "op", 1, query_id="q")
    with open_store(loc, "op", 0, 0, manifest=None, options=options) as store:
        want = {b"k%07d" % i: b"%07d" % i * 16 for i in range(40000)}
        for k, v in want.items():
            store.put(k, v)
        coord.publish(1, [store.commit()])
    release_idle_stores()
    return want


def test_a_scan_fetches_large_ranges_and_point_reads_one_chunk(tmp_path):
    # one table of about 4 MiB (64 chunks): the keys in order, values small enough for the table
    loc = Location(str(tmp_path / "loc"))
    engine = dict(write_buffer_size=64 << 20, max_background_jobs=0)
    want = publish_one_table(loc, StoreOptions(cache_dir=str(tmp_path / "cache"), tables="remote", park_copies=False,
                                               engine=engine, max_changelog_bytes=1 << 20))
    fresh = StoreOptions(cache_dir=str(tmp_path / "cold"), tables="remote", park_copies=False, engine=engine)
    blocks = blocks_for(fresh)
    with open_store(loc, "op", 0, 1, options=fresh) as store:
        assert store.get(b"k0020000") == want[b"k0020000"]
        assert blocks.misses == blocks.fetches <= 3  # footer and index at the tail, one data chunk
        opened = blocks.stats()
        assert dict(store.items()) == want
    scan = {k: blocks.stats()[k] - opened[k] for k in ("misses", "fetches")}
    assert blocks.chunk_bytes == 64 << 10 and scan["misses"] >= 48
    assert scan["fetches"] * 4 <= scan["misses"]  # read-ahead: 1, 2, 4, ... 64 chunks per request
    release_idle_stores()
    again = blocks.stats()
    with open_store(loc, "op", 0, 1, options=fresh) as store:
        assert dict(store.items()) == want
    after = blocks.stats()
    assert after["fetches"] == again["fetches"] and after["hits"] > again["hits"]  # all from local disk


def test_a_prefetch_fetches_a_batchs_scattered_keys_in_few_requests(tmp_path):
    # about 4 MiB of state in the location; a cold block cache of 1 MiB (a quarter of it)
    loc = Location(str(tmp_path / "loc"))
    engine = dict(write_buffer_size=64 << 20, max_background_jobs=0)
    load = StoreOptions(cache_dir=str(tmp_path / "load"), park_copies=False, engine=engine, max_changelog_bytes=1 << 20)
    want = publish_one_table(loc, load)
    batch = [b"k%07d" % i for i in random.Random(3).sample(range(40000), 400)] + [b"absent"]

    def first_batch(cache: str, prefetch: bool) -> tuple[int, int]:
        """(requests of the prefetch, requests of the reads after it) of a batch on a cold cache."""
        opts = StoreOptions(cache_dir=str(tmp_path / cache), tables="remote", park_copies=False, engine=engine,
                            cache_disk_bytes=1 << 20)
        blocks = blocks_for(opts)
        store = open_store(loc, "op", 0, 1, options=opts)
        try:
            opened, opened_bytes = blocks.fetches, blocks.fetched_bytes
            fetched = store.prefetch(batch) if prefetch else 0
            # returned what its requests read (the plan's reads of index and filter blocks aside)
            assert 0 <= fetched <= blocks.fetched_bytes - opened_bytes and (fetched > 0) == prefetch
            prefetched = blocks.fetches
            assert [store.get(k) for k in batch] == [want.get(k) for k in batch]
            store.put(b"k0000001", b"new")
            reads = blocks.fetches - prefetched
            assert blocks.held_bytes() >= fetched and (prefetch or blocks.held_bytes() == 0)  # held for the batch ...
            store.commit()
        except BaseException:
            store.abort()
            raise
        assert blocks.held_bytes() == 0  # ... and dropped when it ends
        return prefetched - opened, reads

    one_by_one = first_batch("cold-a", prefetch=False)
    assert one_by_one[0] == 0 and one_by_one[1] >= 40  # a request per chunk the keys fall in
    requests, reads = first_batch("cold-b", prefetch=True)
    assert reads == 0  # every chunk a read needed was fetched by the prefetch ...
    assert requests * 8 <= one_by_one[1], (requests, one_by_one)  # ... in requests of up to 64 adjacent chunks
    # the next batch on the same machine: what the disk cache kept is read from there and held,
    # so the chunks the batch fetches and caches cannot evict it before the reads
    assert os.listdir(blocks_for(StoreOptions(cache_dir=str(tmp_path / "cold-b"), cache_disk_bytes=1 << 20)).root)
    assert first_batch("cold-b", prefetch=True)[1] == 0
    with open_store(loc, "op", 0, 1, options=load) as store:
        assert store.prefetch(batch) == 0  # download mode: nothing to do


def _object_entries(blocks: BlockCache, loc: Location, ref) -> set[str]:
    """The block cache's entries of object ``ref`` of ``loc`` (file names)."""
    key = blocks.object_key(loc, ref)
    return {os.path.basename(p) for p in _entries(blocks) if os.path.basename(p).startswith(key + "-")}


def test_a_compaction_reads_its_inputs_past_the_block_cache(tmp_path):
    # version 1 is one table of about 4 MiB; a block cache of 1 MiB (16 KiB chunks).  A batch
    # reads a few keys (their chunks are kept) and commits a snapshot: its flush makes a second
    # level-0 table, and the compaction that merges both reads the 4 MiB table whole
    loc = Location(str(tmp_path / "loc"))
    want = publish_one_table(loc, StoreOptions(cache_dir=str(tmp_path / "load"), park_copies=False,
                                               max_changelog_bytes=1 << 20,
                                               engine=dict(write_buffer_size=64 << 20, max_background_jobs=0)))
    coord = CommitCoordinator(loc, "op", 1, query_id="q")
    (table,) = read_manifest(loc, coord.marker(1).manifests[0]).snapshot.files
    assert table.size > 4 << 20
    opts = StoreOptions(cache_dir=str(tmp_path / "cache"), tables="remote", park_copies=False, cache_disk_bytes=1 << 20,
                        snapshot_ratio=1e-9,  # a snapshot at once; the batch's change set counts its keys
                        engine=dict(write_buffer_size=64 << 20, max_background_jobs=0, level0_file_num_compaction_trigger=2))
    blocks = blocks_for(opts)
    store = open_store(loc, "op", 0, 1, manifest=coord.base_manifests(1)[0], options=opts)
    try:
        for i in range(0, 40000, 4000):
            k = b"k%07d" % i
            assert store.get(k) == want[k]
            want[k] = b"new" + k
            store.put(k, want[k])
        hot = set(map(os.path.basename, _entries(blocks)))  # the chunks the point reads and the open needed
        kept = _object_entries(blocks, loc, table)
        before = blocks.stats()
        message = store.commit()
    except BaseException:
        store.abort()
        raise
    coord.publish(2, [message])
    after = blocks.stats()
    new_files = read_manifest(loc, message.manifest).snapshot.files
    assert table.object not in {f.object for f in new_files}  # the compaction rewrote the table
    assert _object_entries(blocks, loc, table) == kept  # it kept none of the table's chunks it read ...
    assert hot <= set(map(os.path.basename, _entries(blocks)))  # ... and evicted none of the batch's
    assert (after["passed_by"] - before["passed_by"]) * blocks.chunk_bytes >= table.size - len(kept) * blocks.chunk_bytes - (64 << 10)
    # the commit handed the compaction's output over: its first quarter of the budget is kept,
    # what a scan of it would keep
    output = max(new_files, key=lambda f: f.size)
    assert output.size > 4 << 20
    key = blocks.object_key(loc, output)
    assert _object_entries(blocks, loc, output) == {f"{key}-{i:08d}" for i in range((1 << 18) // blocks.chunk_bytes)}
    release_idle_stores()
    assert _read_all(loc, opts, 2) == want


def test_a_scan_larger_than_the_block_cache_keeps_a_quarter_of_it(tmp_path):
    # one table of about 4 MiB, a block cache of 1 MiB (16 KiB chunks): a scan of it keeps its
    # first chunks, up to a quarter of the budget (plus the read-ahead window that passes it),
    # then reads past the cache, and the chunks a point read kept before stay
    loc = Location(str(tmp_path / "loc"))
    engine = dict(write_buffer_size=64 << 20, max_background_jobs=0)
    want = publish_one_table(loc, StoreOptions(cache_dir=str(tmp_path / "load"), park_copies=False, engine=engine,
                                               max_changelog_bytes=1 << 20))
    opts = StoreOptions(cache_dir=str(tmp_path / "cache"), tables="remote", park_copies=False, engine=engine,
                        cache_disk_bytes=1 << 20)
    blocks = blocks_for(opts)
    with open_store(loc, "op", 0, 1, options=opts) as store:
        assert store.get(b"k0039000") == want[b"k0039000"]
        hot = set(map(os.path.basename, _entries(blocks)))
        assert dict(store.items()) == want
    assert blocks.passed_by * blocks.chunk_bytes >= 3 << 20  # most of the table was not kept ...
    scanned = set(map(os.path.basename, _entries(blocks))) - hot
    assert 0 < len(scanned) * blocks.chunk_bytes <= (1 << 20) // 2  # ... only its first chunks were
    assert hot <= set(map(os.path.basename, _entries(blocks)))  # and nothing was evicted for the scan
    release_idle_stores()
    again = blocks.stats()
    with open_store(loc, "op", 0, 1, options=opts) as store:
        assert dict(store.items()) == want
    assert blocks.stats()["hits"] - again["hits"] >= 16  # the next scan finds its first chunks here


class _ReadFaults(pafs.FileSystemHandler):
    """A local file system whose ranged reads fail from the ``fail_at``-th one on while armed."""

    def __init__(self, inner):
        self.inner = inner
        self.reads = 0
        self.fail_at = None

    def _read(self, what):
        self.reads += 1
        if self.fail_at is not None and self.reads >= self.fail_at:
            raise OSError(f"injected: the location did not answer a read of {what}")

    def get_type_name(self):
        return "read-faults"

    def normalize_path(self, path):
        return path

    def get_file_info(self, paths):
        return self.inner.get_file_info(paths)

    def get_file_info_selector(self, selector):
        return self.inner.get_file_info(selector)

    def create_dir(self, path, recursive):
        self.inner.create_dir(path, recursive=recursive)

    def delete_dir(self, path):
        self.inner.delete_dir(path)

    def delete_dir_contents(self, path, missing_dir_ok=False):
        self.inner.delete_dir_contents(path, missing_dir_ok=missing_dir_ok)

    def delete_root_dir_contents(self):
        raise OSError("not used")

    def delete_file(self, path):
        self.inner.delete_file(path)

    def move(self, src, dest):
        self.inner.move(src, dest)

    def copy_file(self, src, dest):
        self.inner.copy_file(src, dest)

    def open_input_stream(self, path):
        return self.inner.open_input_stream(path)

    def open_input_file(self, path):
        return pa.PythonFile(_FaultyReader(self.inner.open_input_file(path), self, path), mode="r")

    def open_output_stream(self, path, metadata):
        self.inner.create_dir(path.rsplit("/", 1)[0], recursive=True)
        return self.inner.open_output_stream(path)

    def open_append_stream(self, path, metadata):
        raise OSError("not used")


class _FaultyReader:
    def __init__(self, f, handler, path):
        self._f, self._handler, self._path = f, handler, path

    def read(self, n=-1):
        self._handler._read(self._path)
        return self._f.read(n)

    def __getattr__(self, name):
        return getattr(self._f, name)


def test_a_location_read_failing_mid_task_fails_the_task_and_a_retry_succeeds(tmp_path):
    handler = _ReadFaults(pafs.LocalFileSystem())
    loc = Location(str(tmp_path / "loc"), filesystem=pafs.PyFileSystem(handler))
    want, _ = _workload(loc, _options(tmp_path / "cache", park_copies=False), batches=3)
    release_idle_stores()
    published = CommitCoordinator(loc, "op", 1, query_id="q").marker(3)
    opts = _options(tmp_path / "cold", park_copies=False)

    def task():
        return _task_on_version_3(loc, published, opts)

    handler.fail_at = handler.reads + 3  # the third ranged read of the task
    with pytest.raises(antkv.IOError, match="injected: the location did not answer"):
        task()
    assert handler.reads >= handler.fail_at
    handler.fail_at = None
    state, message = task()  # Spark's retry, in the same process
    assert state == want
    coord = CommitCoordinator(loc, "op", 1, query_id="q")
    coord.publish(4, [message])
    assert CommitCoordinator(loc, "op", 1, query_id="q").marker(3) == published  # unchanged
    assert _read_all(loc, opts, 4) == {**want, b"new": b"row"}


class _StallingProxy:
    """A TCP proxy on 127.0.0.1 in front of a server.  While ``stalled`` is set it holds every
    byte the server sends back (a location that stops answering mid-request); a response held
    longer than ``give_up_s`` has its connection dropped instead."""

    def __init__(self, host: str, port: int, give_up_s: float = 15.0):
        self.upstream = (host, port)
        self.give_up_s = give_up_s
        self.stalled = threading.Event()
        self.held = 0  # responses held while stalled
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.upstream)
            for src, dst, answer in ((client, upstream, False), (upstream, client, True)):
                threading.Thread(target=self._pipe, args=(src, dst, answer), daemon=True).start()

    def _pipe(self, src, dst, answer: bool):
        try:
            while data := src.recv(1 << 16):
                if answer and self.stalled.is_set():
                    self.held += 1
                    deadline = time.monotonic() + self.give_up_s
                    while self.stalled.is_set() and time.monotonic() < deadline:
                        time.sleep(0.01)
                    if self.stalled.is_set():
                        break  # held too long: drop the connection
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

    def close(self):
        self._server.close()


def _task_on_version_3(loc: Location, published, opts: StoreOptions, after_open=None):
    """A task of batch 4 on partition 0: open version 3, read the whole state, write one row,
    commit; ``(state read, commit message)``.  A failure aborts the store and is raised."""
    store = open_store(loc, "op", 0, 3, manifest=published.manifests[0], options=opts)
    try:
        if after_open is not None:
            after_open()
        state = dict(store.items())
        store.put(b"new", b"row")
        return state, store.commit()
    except BaseException:
        store.abort()
        raise


def test_a_location_read_that_stalls_times_out_and_a_retry_succeeds(tmp_path):
    """A real S3 API behind a proxy that stops answering mid-task: the read fails after
    ``location_timeout_s`` with an antkv.IOError naming the object; the retry succeeds and the
    published version is unchanged."""
    proxies = []

    def front(host, port):
        proxies.append(_StallingProxy(host, port))
        return "127.0.0.1", proxies[0].port

    fs, stop = start_s3_server("stall", front=front)
    proxy = proxies[0]
    try:
        loc = Location(f"stall/{uuid.uuid4().hex}", filesystem=fs)
        whole = _options(tmp_path / "cache", tables="local", park_copies=False)  # fewer requests to write it
        want, _ = _workload(loc, whole, batches=3, keys=1000)
        release_idle_stores()
        published = CommitCoordinator(loc, "op", 1, query_id="q").marker(3)
        opts = _options(tmp_path / "cold", park_copies=False, location_timeout_s=2.0)

        def task(stall: bool):
            # with stall, the location stops answering after the open
            return _task_on_version_3(loc, published, opts, proxy.stalled.set if stall else None)

        t0 = time.monotonic()
        with pytest.raises(antkv.IOError, match=r"timed out after 2 s reading \d+ bytes at offset \d+ of "
                                                r"stall/\w+/op/p00000/\d{20}-[0-9a-f]{16}-\d{6}\.(sst|vlog)") as err:
            task(stall=True)
        assert err.value.errno == errno.ETIMEDOUT
        assert time.monotonic() - t0 < 10  # the deadline, not the proxy giving up
        assert proxy.held >= 1
        proxy.stalled.clear()
        state, message = task(stall=False)  # Spark's retry, in the same process
        assert state == want
        CommitCoordinator(loc, "op", 1, query_id="q").publish(4, [message])
        assert CommitCoordinator(loc, "op", 1, query_id="q").marker(3) == published  # unchanged
        assert _read_all(loc, whole, 4) == {**want, b"new": b"row"}
    finally:
        proxy.stalled.clear()
        proxy.close()
        stop()


def test_the_location_timeout_is_refused_when_not_a_positive_number():
    with pytest.raises(antkv.InvalidArgumentError):
        StoreOptions(location_timeout_s=0)
    with pytest.raises(TypeError):
        StoreOptions(location_timeout_s="30")


def _entries(blocks: BlockCache) -> list[str]:
    return [os.path.join(d, n) for d, _, names in os.walk(blocks.root) for n in names
            if n != "LOCK" and ".tmp-" not in n]


def _cached_state(tmp_path):
    """Three published versions, the third read once so that the block cache holds it:
    ``(location, options, state, block cache)``; no working copy is left open."""
    loc = Location(str(tmp_path / "loc"))
    opts = _options(tmp_path / "cache", cache_disk_bytes=64 << 20, park_copies=False)
    want, _ = _workload(loc, opts, batches=3)
    release_idle_stores()
    assert _read_all(loc, opts, 3) == want
    release_idle_stores()
    return loc, opts, want, blocks_for(opts)


def test_a_damaged_cache_entry_is_dropped_and_read_again(tmp_path):
    loc, opts, want, blocks = _cached_state(tmp_path)
    damaged = _entries(blocks)
    assert damaged
    for i, path in enumerate(damaged):
        with open(path, "r+b") as f:  # one flipped byte: in the chunk, or in the trailer
            size = os.fstat(f.fileno()).st_size
            at = size - 1 if i % 2 else size // 2
            f.seek(at)
            b = f.read(1)
            f.seek(at)
            f.write(bytes([b[0] ^ 0x40]))
    before = blocks.stats()
    assert _read_all(loc, opts, 3) == want
    after = blocks.stats()
    # each damaged entry read was dropped; read-ahead may fetch the next ones before they are read
    assert 0 < after["corrupt_dropped"] - before["corrupt_dropped"] <= len(damaged)
    assert after["fetches"] > before["fetches"]
    for path in damaged:  # each written again, whole
        key, index = os.path.basename(path).rsplit("-", 1)
        assert blocks.get(key, int(index)) is not None
    assert blocks.stats()["corrupt_dropped"] == after["corrupt_dropped"]
    release_idle_stores()
    assert _read_all(loc, opts, 3) == want  # the entries written again check
    assert blocks.stats()["corrupt_dropped"] == after["corrupt_dropped"]


class _FullDisk(FaultInjectionFileSystem):
    """The local file system, except that creating a file fails with ENOSPC (the injector's
    fault for a create) while ``full`` is set."""

    full = False

    def create(self, path):
        if self.full:
            self.fail_at(self.calls + 1)
        return super().create(path)


def test_a_full_local_disk_evicts_and_skips_instead_of_failing_the_task(tmp_path):
    loc, opts, want, blocks = _cached_state(tmp_path)
    held = blocks.usage()
    disk = blocks.file_system = _FullDisk(OSFileSystem.instance())
    try:
        for f in _entries(blocks)[: len(_entries(blocks)) // 2]:
            os.unlink(f)  # half the state must be read again, and cannot be kept
        disk.full = True
        assert _read_all(loc, opts, 3) == want
        assert blocks.full_skipped > 0
        assert blocks.usage() < held // 2  # the full disk evicted
        disk.full = False
        release_idle_stores()
        assert _read_all(loc, opts, 3) == want
    finally:
        blocks.file_system = OSFileSystem.instance()


@pytest.mark.parametrize("tables", ["local", "remote"])
def test_a_copy_holding_a_quarter_of_the_block_cache_in_new_tables_commits_a_snapshot(tmp_path, tables):
    # batch 1's writes reach the working copy's tables (in write batches of 4,096, 64 KiB
    # memtables) well beyond 16 KiB, a quarter of the block cache: in remote mode its commit is a
    # snapshot, which hands them over to the location, and batch 2's is a changelog again
    loc = Location(str(tmp_path / "loc"))
    opts = StoreOptions(cache_dir=str(tmp_path / "cache"), tables=tables, cache_disk_bytes=BUDGET,
                        max_changelog_chain=100, engine=dict(write_buffer_size=64 << 10, max_background_jobs=0))
    coord = CommitCoordinator(loc, "op", 1, query_id="q")
    snapshots = []
    for v, n in ((0, 10000), (1, 10)):
        with open_store(loc, "op", 0, v, manifest=coord.base_manifests(v)[0], options=opts) as store:
            for i in range(n):
                store.put(b"k%06d" % i, b"%d" % v * 100)
            message = store.commit()
        snapshots.append(message.snapshot)
        coord.publish(v + 1, [message])
    assert snapshots == [tables == "remote", False]
    release_idle_stores()
    assert _read_all(loc, opts, 2) == {b"k%06d" % i: (b"1" if i < 10 else b"0") * 100 for i in range(10000)}


def test_remote_mode_is_refused_with_a_bad_value():
    with pytest.raises(antkv.InvalidArgumentError, match="tables must be one of"):
        StoreOptions(tables="cloud")
    with pytest.raises(TypeError):
        StoreOptions(tables=1)
    assert StoreOptions().tables == "local"


def test_processes_sharing_one_block_cache_read_the_same_state(tmp_path):
    """Four processes scan one version at once through one small block cache (evicting all
    the while); each gets the whole state."""
    import subprocess
    import sys

    loc_dir, cache = str(tmp_path / "loc"), str(tmp_path / "shared")
    want, _ = _workload(Location(loc_dir), _options(tmp_path / "cache", park_copies=False), batches=2)
    expected = sum(len(k) + len(v) for k, v in want.items())
    code = (
        "import sys; from antkv.spark import Location, StoreOptions, open_store\n"
        f"opts = StoreOptions(cache_dir={cache!r}, tables='remote', cache_disk_bytes={BUDGET}, park_copies=False)\n"
        "for _ in range(3):\n"
        f"    with open_store(Location({loc_dir!r}), 'op', 0, 2, options=opts) as s:\n"
        "        print(sum(len(k) + len(v) for k, v in s.items()))\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, env=env) for _ in range(4)]
    outs = [p.communicate(timeout=300)[0].split() for p in procs]
    assert [p.returncode for p in procs] == [0] * 4
    assert all([int(x) for x in out] == [expected] * 3 for out in outs)
    shutil.rmtree(cache, ignore_errors=True)
