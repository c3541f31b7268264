"""The Spark state store: commit cost against the change, load times, objects in the location.

Usage::

    .venv/bin/python bench/bench_spark_store.py [--keys 1000000] [--value-size 100]
                                                [--small-batches 100] [--dir /tmp] [--quick]

One partition's state of ``--keys`` keys (16-byte keys, ``--value-size``-byte values from
``os.urandom``: incompressible and distinct per key and per batch) is committed to a checkpoint
location on the local file system by two stores, alternating which goes first:

* **antkv** -- ``antkv.spark``: ``open_store`` at the published version, ``put`` each changed
  key, ``commit()``, then the driver's ``publish`` + ``cleanup`` (all counted in commit time);
* **rocksdb (Spark's scheme)** -- what Spark's RocksDB state store provider does per batch
  (``RocksDB.scala`` / ``RocksDBFileManager.scala``): one read per put to keep the key count
  (``getFromBatchAndDB``), a write batch, flush, a RocksDB checkpoint (hard links), then copy
  to the location every SST file not copied before plus the metadata files (MANIFEST,
  CURRENT, OPTIONS, logs).  Same keys, same values, through ``rocksdict``, compression off.

Figures: for batches changing 1%, 10% and 100% of the keys, the time of the writes, the time
of the commit and the bytes written to the location; then the load time of the newest version
into a new process's store with a cold local cache (everything downloaded), a warm cache (files
present, the working copy rebuilt) and a held working copy; then, on a second location,
``--small-batches`` batches of 10 changed keys each, with the number of objects in the
location after each.  Single runs on a shared machine: expect +-10% noise.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from antkv.spark import CommitCoordinator, Location, StoreOptions, open_store, release_idle_stores  # noqa: E402

MiB = 1 << 20


def key(i: int) -> bytes:
    return b"key%013d" % i


class AntkvStore:
    name = "antkv"

    def __init__(self, root: str, options: StoreOptions):
        self.loc = Location(os.path.join(root, "location"))
        self.coord = CommitCoordinator(self.loc, "bench", 1, query_id="bench")
        self.options = options
        self.version = 0

    def batch(self, items) -> dict:
        t0 = time.perf_counter()
        s = open_store(self.loc, "bench", 0, self.version, manifest=self.coord.base_manifests(self.version)[0],
                       options=self.options)
        t1 = time.perf_counter()
        put = s.put
        for k, v in items:
            put(k, v)
        t2 = time.perf_counter()
        msg = s.commit()
        self.version += 1
        self.coord.publish(self.version, [msg])
        self.coord.cleanup(self.version)
        t3 = time.perf_counter()
        return dict(open=t1 - t0, writes=t2 - t1, commit=t3 - t2, bytes=msg.bytes_uploaded,
                    objects=msg.objects_uploaded, kind="snapshot" if msg.snapshot else "changelog",
                    keys=msg.num_keys)


class SparkRocksDBScheme:
    name = "rocksdb"

    def __init__(self, root: str):
        import rocksdict

        self.rd = rocksdict
        opts = rocksdict.Options(raw_mode=True)
        opts.create_if_missing(True)
        opts.set_compression_type(rocksdict.DBCompressionType.none())
        self.work = os.path.join(root, "work")
        self.location = os.path.join(root, "location")
        os.makedirs(self.location)
        self.db = rocksdict.Rdict(self.work, options=opts)
        self.copied: dict[str, int] = {}
        self.num_keys = 0
        self.version = 0

    def batch(self, items) -> dict:
        t1 = time.perf_counter()
        wb = self.rd.WriteBatch(raw_mode=True)
        get = self.db.get
        seen = set()
        for k, v in items:
            if k not in seen and get(k) is None:  # Spark's put reads to keep numKeys
                self.num_keys += 1
            seen.add(k)
            wb.put(k, v)
        t2 = time.perf_counter()
        self.db.write(wb)
        self.db.flush()
        self.version += 1
        ckpt = os.path.join(os.path.dirname(self.work), f"checkpoint-{self.version}")
        self.rd.Checkpoint(self.db).create_checkpoint(ckpt)
        nbytes = nobjects = 0
        dest = os.path.join(self.location, str(self.version))
        os.makedirs(dest)
        for name in os.listdir(ckpt):
            src = os.path.join(ckpt, name)
            size = os.path.getsize(src)
            if name.endswith(".sst"):
                if self.copied.get(name) == size:
                    continue  # already in the location: referenced, not copied
                self.copied[name] = size
            shutil.copyfile(src, os.path.join(dest, name))
            nbytes += size
            nobjects += 1
        shutil.rmtree(ckpt)
        t3 = time.perf_counter()
        return dict(open=0.0, writes=t2 - t1, commit=t3 - t2, bytes=nbytes, objects=nobjects,
                    kind="checkpoint", keys=self.num_keys)

    def close(self):
        self.db.close()


def batch_items(rng: random.Random, nkeys: int, fraction: float, value_size: int):
    n = max(1, int(nkeys * fraction))
    ids = range(nkeys) if n == nkeys else rng.sample(range(nkeys), n)
    return [(key(i), os.urandom(value_size)) for i in ids]


def fmt(r: dict) -> str:
    return (f"writes {r['writes']:7.2f} s  commit {r['commit']:7.3f} s  uploaded {r['bytes'] / MiB:8.2f} MiB "
            f"in {r['objects']:3d} objects  ({r['kind']}, {r['keys']} keys)")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--keys", type=int, default=1_000_000)
    p.add_argument("--value-size", type=int, default=100)
    p.add_argument("--small-batches", type=int, default=100)
    p.add_argument("--dir", default=tempfile.gettempdir())
    p.add_argument("--quick", action="store_true", help="100,000 keys")
    p.add_argument("--engines", default="antkv,rocksdb")
    a = p.parse_args(argv)
    if a.quick:
        a.keys = 100_000
    root = tempfile.mkdtemp(prefix="bench-spark-store-", dir=a.dir)
    rng = random.Random(14)
    options = StoreOptions(cache_dir=os.path.join(root, "cache"), memory_bytes=512 * MiB)
    engines = []
    for name in a.engines.split(","):
        d = os.path.join(root, name)
        os.makedirs(d)
        engines.append(AntkvStore(d, options) if name == "antkv" else SparkRocksDBScheme(d))
    print(f"state: {a.keys:,} keys x {a.value_size} B values (incompressible), one partition, location on {a.dir}")
    try:
        steps = [("initial load (100%)", 1.0), ("1% changed", 0.01), ("10% changed", 0.10),
                 ("100% changed", 1.0)]
        for i, (label, fraction) in enumerate(steps):
            items = batch_items(rng, a.keys, fraction, a.value_size)
            order = engines if i % 2 == 0 else engines[::-1]
            for e in order:
                r = e.batch(items)
                print(f"{label:22s} {e.name:8s} {fmt(r)}")
        # 1% batches through antkv's periodic snapshot (and RocksDB's compactions)
        for i in range(options.max_changelog_chain + 1):
            items = batch_items(rng, a.keys, 0.01, a.value_size)
            for e in (engines if i % 2 == 0 else engines[::-1]):
                label = f"1% changed, run {i + 1}"
                print(f"{label:22s} {e.name:8s} {fmt(e.batch(items))}")
        ant = next((e for e in engines if e.name == "antkv"), None)
        if ant is not None:
            load_times(ant, options, root)
            small_batches(root, a.small_batches, a.value_size)
    finally:
        for e in engines:
            if hasattr(e, "close"):
                e.close()
        release_idle_stores()
        shutil.rmtree(root, ignore_errors=True)


def load_times(ant: AntkvStore, options: StoreOptions, root: str) -> None:
    v = ant.version
    manifest = ant.coord.base_manifests(v)[0]
    release_idle_stores()
    for label in ("cold cache", "warm cache"):
        times = []
        for i in range(3):
            # cold: a new, empty cache directory each time; warm: the last one, files present
            d = os.path.join(root, f"cold-cache-{i if label == 'cold cache' else 2}")
            opts = StoreOptions(cache_dir=d, memory_bytes=options.memory_bytes)
            t0 = time.perf_counter()
            s = open_store(ant.loc, "bench", 0, v, manifest=manifest, options=opts)
            times.append(time.perf_counter() - t0)
            s.abort()
        print(f"load version {v}, {label:18s} {sorted(times)[1]:7.3f} s (median of 3: {', '.join('%.3f' % t for t in times)})")
    s = open_store(ant.loc, "bench", 0, v, manifest=manifest, options=options)
    s.put(b"x", b"y")
    msg = s.commit()
    t0 = time.perf_counter()
    s = open_store(ant.loc, "bench", 0, v + 1, manifest=msg.manifest, options=options)
    t1 = time.perf_counter()
    s.abort()
    print(f"load version {v + 1}, {'held working copy':18s} {t1 - t0:7.3f} s")


def _count_objects(loc: Location) -> int:
    total = len(loc.list_dir("small/_batches"))
    for sub in loc.list_subdirs("small"):
        if sub.startswith("p"):
            total += len(loc.list_dir(f"small/{sub}"))
    return total


def small_batches(root: str, n: int, value_size: int) -> None:
    options = StoreOptions(cache_dir=os.path.join(root, "cache"))
    loc = Location(os.path.join(root, "small-location"))
    retain = 2
    coord = CommitCoordinator(loc, "small", 1, query_id="small", min_versions_to_retain=retain)
    rng = random.Random(7)
    counts = []
    for v in range(n):
        s = open_store(loc, "small", 0, v, manifest=coord.base_manifests(v)[0], options=options)
        for i in rng.sample(range(10_000), 10):
            s.put(key(i), os.urandom(value_size))
        coord.publish(v + 1, [s.commit()])
        coord.cleanup(v + 1)
        counts.append(_count_objects(loc))
    print(f"{n} batches of 10 changed keys (min_versions_to_retain={retain}, max_changelog_chain="
          f"{options.max_changelog_chain}): objects in the location after each batch: max {max(counts)}, "
          f"last {counts[-1]}; first 12: {counts[:12]}")


if __name__ == "__main__":
    main()
