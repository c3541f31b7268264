"""A long stream, batch after batch: antkv's Spark runners against Spark's RocksDB state store.

Usage::

    .venv/bin/python bench/bench_spark_soak.py --quick                 # a smoke run: 4 tiny batches
    .venv/bin/python bench/bench_spark_soak.py                         # 100 batches, the full size
        [--batches 100] [--rows 2000] [--keys 20000] [--ttl-batches 5] [--partitions 4]
        [--engines antkv-pipeline spark-apply ...] [--memory-mib M] [--seed 1] [--dir /tmp]
        [--json out.json] [--plots DIR] [--keep]

One stream (``bench/soak_workload.py``: Zipf-skewed keys over a key space that grows then
stays flat, values of 100 B to 4 KiB, some stored in antkv's value log, upserts and deletes,
event-time expiry, so the state reaches a steady size) runs through one streaming query per
engine in one local Spark (``local[2]``, ``--partitions`` state partitions):

* **antkv-pipeline** -- :class:`antkv.spark.StatefulPipeline` under ``foreachBatch``, expiry
  kept in a by-deadline index in the state;
* **antkv-tws** -- :class:`antkv.spark.TransformWithState` running the ``StatefulProcessor``
  (``EventTime``, a value state and a timer per key) under ``foreachBatch``;
* **spark-apply-changelog** / **spark-apply** -- ``applyInPandasWithState`` with an event-time
  timeout, on the RocksDB provider with changelog checkpointing on / off;
* **spark-tws-changelog** / **spark-tws** -- ``transformWithStateInPandas`` with the same
  processor, on the RocksDB provider with changelog checkpointing on / off;
* **floor** -- the Spark work of antkv-pipeline's batch and nothing else: ``foreachBatch``
  routing the rows by key group, sorting them and handing each partition's Arrow batches to a
  Python function that keeps no state and writes no output, then collecting one row per
  partition.  Its latency is the least any Python state store run this way can take per
  batch on this machine; the report gives the throughput multiple of each Spark engine it
  stands for.

Spark's queries write to the ``memory`` sink; antkv's publish their output files with the
state.  Every batch file is given to each query in turn (the first query rotating by batch),
each query processing it before the next starts, so all see the same machine load.  After the
last batch, two more files expire every key (``soak_workload``), and the bench checks that
every engine closed the same keys with the same aggregates and values (a difference is an
error: a bench of wrong answers measures nothing).

Recorded per batch and engine: the latency (the ``triggerExecution`` time of the micro-batches
the file caused -- Spark's event-time queries add one without data when the watermark moves --
and the wall time of ``processAllAvailable``); its split (Spark's ``durationMs`` and state
commit time; antkv's load, process and commit along its slowest task, and publish, as
``antkv state-report`` splits them); bytes the batch added to the checkpoint and state
location and the objects there (state and, for antkv, its published output files apart;
Hadoop's ``.crc`` side files are not counted); antkv's local disk (its cache: working copies
and downloaded snapshot files); the RSS of the JVM and of the Python workers (shared by every
engine: a snapshot after each engine's batch); antkv's working copies reused as they were, caught
up (by the changelogs of the versions they lacked) and rebuilt, and snapshots committed.  The report gives per engine p50, p95 and max latency, the least-squares
slope of latency per 100 batches, and the throughput over the whole run; ``--plots`` draws them.
Single runs on a shared machine: expect noise.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import soak_workload as workload  # noqa: E402
from bench.bench_spark_baseline import ROCKSDB_PROVIDER, checkpoint_files, floor_batch, start_session  # noqa: E402
from bench.bench_spark_processor import new_progress  # noqa: E402
from bench.measure import dir_bytes  # noqa: E402
from bench.soak_report import compare_outputs, engine_outputs, plots, report  # noqa: E402

ENGINES = ("antkv-pipeline", "antkv-tws", "spark-apply-changelog", "spark-tws-changelog", "spark-apply", "spark-tws",
           "floor")
CHANGELOG_CONF = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
PROVIDER_CONF = "spark.sql.streaming.stateStore.providerClass"
PARTITIONS_CONF = "spark.sql.shuffle.partitions"
SPARK_SPLIT = ("addBatch", "queryPlanning", "walCommit", "commitOffsets", "latestOffset", "getBatch")
FULL = {"batches": 100, "rows": 2000, "keys": 20_000, "ttl_batches": 5}
QUICK = {"batches": 4, "rows": 200, "keys": 400, "ttl_batches": 1}


class Engine:
    """One engine's streaming query and where its files are."""

    def __init__(self, name: str, work: str, output_retention: int | None = None, memory_bytes: int | None = None):
        self.name = name
        self.output_retention = output_retention  # antkv: batches of published output kept
        self.memory_bytes = memory_bytes  # antkv: StoreOptions.memory_bytes (None: its default)
        self.emitted: list[tuple] = []  # antkv: the rows of every published output, read as they come
        self.outputs_read = 0  # antkv: the newest version whose output is in ``emitted``
        self.inputs = os.path.join(work, f"input-{name}")
        self.checkpoint = os.path.join(work, f"checkpoint-{name}")
        self.state = os.path.join(work, f"state-{name}")  # antkv's location
        self.cache = os.path.join(work, f"cache-{name}")  # antkv's local cache
        self.metrics = os.path.join(work, f"metrics-{name}.jsonl")
        self.table = f"soak_{name.replace('-', '_')}_{uuid.uuid4().hex[:8]}"  # Spark's memory sink
        self.operator = "soak"
        self.query = None
        self.runner = None  # antkv's StatefulPipeline or TransformWithState
        self.watermarks: list[int] = []  # antkv-pipeline: the watermark of each batch id
        self.last_progress = -1
        os.makedirs(self.inputs)

    @property
    def antkv(self) -> bool:
        return self.name.startswith("antkv")

    def start(self, spark, stream: workload.SoakStream, partitions: int) -> None:
        frame = spark.readStream.schema(workload.INPUT_SCHEMA).option("maxFilesPerTrigger", 1).parquet(self.inputs)
        ttl = stream.ttl_ms
        if self.antkv:
            writer = frame.writeStream.foreachBatch(self._antkv_batch(partitions, ttl))
        elif self.name == "floor":
            writer = frame.writeStream.foreachBatch(floor_batch(partitions))
        else:
            from pyspark.sql.streaming.state import GroupStateTimeout

            grouped = frame.withWatermark("ts", "0 seconds").groupBy("key")
            if self.name.startswith("spark-apply"):
                out = grouped.applyInPandasWithState(workload.apply_function(ttl), workload.OUTPUT_SCHEMA,
                                                     workload.STATE_SCHEMA, "append",
                                                     GroupStateTimeout.EventTimeTimeout)
            else:
                processor = workload.with_ttl(workload.processor_class(), ttl)()
                out = grouped.transformWithStateInPandas(processor, workload.OUTPUT_SCHEMA, "Append", "EventTime")
            writer = out.writeStream.format("memory").queryName(self.table).outputMode("append")
        self.query = writer.option("checkpointLocation", self.checkpoint).start()

    def _antkv_batch(self, partitions: int, ttl: int):
        from antkv.spark import StatefulPipeline, StoreOptions, TransformWithState

        budget = {} if self.memory_bytes is None else {"memory_bytes": self.memory_bytes}
        options = StoreOptions(cache_dir=self.cache, **budget)
        location = "file://" + self.state
        if self.name == "antkv-pipeline":
            func = workload.PipelineFunction(ttl)
            self.runner = StatefulPipeline(location, self.operator, "key", func, workload.OUTPUT_SCHEMA,
                                           partitions=partitions, options=options, metrics_path=self.metrics,
                                           output_retention=self.output_retention)

            def on_batch(df, batch_id):
                func.watermark_ms = self.watermarks[int(batch_id)]
                self.runner.run(df, int(batch_id))
            return on_batch
        processor = workload.with_ttl(workload.processor_class(), ttl)()
        self.runner = TransformWithState(location, self.operator, "key", processor, workload.OUTPUT_SCHEMA,
                                         time_mode="EventTime", event_time_column="ts", partitions=partitions,
                                         options=options, metrics_path=self.metrics,
                                         output_retention=self.output_retention)
        return self.runner.foreach_batch()

    def feed(self, source: str, name: str) -> dict:
        """Give the query file ``name`` and wait until it is processed; the batch's figures."""
        before = _objects(self)
        shutil.copyfile(os.path.join(source, name), os.path.join(self.inputs, "." + name))
        os.rename(os.path.join(self.inputs, "." + name), os.path.join(self.inputs, name))
        t0 = time.perf_counter()
        self.query.processAllAvailable()
        wall = time.perf_counter() - t0
        progresses, self.last_progress = new_progress(self.query, self.last_progress)
        after = _objects(self)
        ops = [op for p in progresses for op in (p.get("stateOperators") or [])]
        row = {
            "latency_s": sum(p["durationMs"].get("triggerExecution", 0) for p in progresses) / 1000,
            "wall_s": round(wall, 3),
            "micro_batches": len(progresses),
            "rows": sum(p["numInputRows"] for p in progresses),
            "spark_ms": {k: sum(p["durationMs"].get(k, 0) for p in progresses) for k in SPARK_SPLIT},
            "bytes_added": sum(s for p, s in after.items() if p not in before),
            "objects": len(after),
            "bytes": sum(after.values()),
            "output_objects": sum(1 for p in after if "/_output" in p),
            "log_objects": sum(1 for p in after if _stream_log(p)),
        }
        if ops:
            row["spark_ms"]["stateCommit"] = sum(op.get("commitTimeMs", 0) for op in ops)
            row["state_rows"] = ops[-1].get("numRowsTotal")
        if self.antkv:
            row["local_disk"] = dir_bytes(self.cache)
        return row

    def read_new_output(self, spark) -> None:
        """Read the output of the versions published since the last call (untimed: a downstream
        consumer's work, done before ``output_retention`` deletes it)."""
        from antkv.spark import Location, output_versions
        from antkv.spark.runtime.output import output_dataframe, published_output

        loc = Location("file://" + self.state)
        for version in output_versions(loc, self.operator):
            if version > self.outputs_read:
                record = published_output(loc, self.operator, version)
                frame = output_dataframe(spark, loc, record.files, workload.OUTPUT_SCHEMA)
                self.emitted += [tuple(r) for r in frame.collect()]
                self.outputs_read = version


def _stream_log(path: str) -> bool:
    """Whether ``path`` is one of Spark's own query logs (offsets, commits, sources, metadata)."""
    return any(f"/{d}/" in path for d in ("offsets", "commits", "sources")) or path.endswith("/metadata")


def _objects(engine: Engine) -> dict[str, int]:
    """The engine's files in its checkpoint and, for antkv, its location (no ``.crc`` files)."""
    files = checkpoint_files(engine.checkpoint)
    if engine.antkv:
        files.update(checkpoint_files(engine.state))
    return {p: s for p, s in files.items() if not p.endswith(".crc")}


# --------------------------------------------------------------------------- processes


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), ()):
            out.append(child)
            todo.append(child)
    return out


def _rss_and_cmd(pid: int) -> tuple[int, str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        with open(f"/proc/{pid}/status") as f:
            rss = next((int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:")), 0)
        return rss, cmd
    except OSError:
        return 0, ""


def process_memory() -> dict:
    """RSS of this driver's JVM and of its Python workers (``/proc``; Linux)."""
    jvm, workers = 0, []
    for pid in _descendants(os.getpid()):
        rss, cmd = _rss_and_cmd(pid)
        if "java" in cmd.split(" ", 1)[0]:
            jvm += rss
        elif "pyspark.daemon" in cmd or "pyspark.worker" in cmd:
            workers.append(rss)
    return {"jvm_rss": jvm, "workers_rss": sum(workers), "max_worker_rss": max(workers, default=0),
            "workers": len(workers)}


def _spark_local_dir(spark) -> str | None:
    return spark.sparkContext.getConf().get("spark.local.dir", None)


# --------------------------------------------------------------------------- the run


def _antkv_batches(engine: Engine) -> dict[int, dict]:
    """The pipeline's metrics per batch: the time split of ``antkv state-report`` and the
    working copies."""
    from antkv.spark.tools.batch_report import fate_of, read_batches

    raw: dict[int, dict] = {}
    with open(engine.metrics, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                doc = json.loads(line)
                raw[int(doc["batch_id"])] = doc
    out = {}
    for row in read_batches(engine.metrics):
        parts = raw[row["batch"]]["partition_metrics"]
        out[row["batch"]] = {
            "antkv_s": {k: round(row[k], 4) for k in ("seconds", "load", "process", "commit", "publish", "spark")},
            "bytes_uploaded": row["bytes_uploaded"], "keys": row["keys"],
            "reused": sum(fate_of(p) == "reused" for p in parts),
            "reopened": sum(fate_of(p) == "reopened" for p in parts),
            "caught_up": sum(fate_of(p) == "caught_up" for p in parts),
            "rebuilt": sum(fate_of(p) == "rebuilt" for p in parts),
            "snapshots": sum(p["snapshot"] for p in parts),
            "downloads": sum(p["cache_downloads"] for p in parts),
        }
    return out


def run(spark, args, work: str) -> dict:
    """Run the stream through every engine of ``args.engines``; the results (see ``report``)."""
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(workload)  # the workers need not find the bench package
    stream = workload.SoakStream(seed=args.seed, batches=args.batches, rows=args.rows, keys=args.keys,
                                 ttl_batches=args.ttl_batches)
    memory = None if args.memory_mib is None else args.memory_mib * (1 << 20)
    engines = [Engine(name, work, args.output_retention, memory) for name in args.engines]
    source = os.path.join(work, "source")
    os.makedirs(source)
    conf = spark.conf
    saved = {k: conf.get(k, None) for k in (PROVIDER_CONF, PARTITIONS_CONF, CHANGELOG_CONF)}
    try:
        # a query keeps the SQL settings it started with: each Spark engine starts with its own
        conf.set(PROVIDER_CONF, ROCKSDB_PROVIDER)
        conf.set(PARTITIONS_CONF, str(args.partitions))
        for engine in engines:
            conf.set(CHANGELOG_CONF, "true" if engine.name.endswith("-changelog") else "false")
            engine.start(spark, stream, args.partitions)
    finally:
        for key, value in saved.items():
            if value is None:
                conf.unset(key)
            else:
                conf.set(key, value)
    watermarks = [0] + [max(stream.event_ms_of_file(i) for i in range(b)) for b in range(1, args.batches + 3)]
    for engine in engines:
        engine.watermarks = watermarks
    local_dir = _spark_local_dir(spark)
    results = {"config": {k: getattr(args, k) for k in ("batches", "rows", "keys", "ttl_batches", "partitions", "seed",
                                                        "output_retention", "memory_mib")},
               "engines": [e.name for e in engines], "cores": os.cpu_count(), "per_batch": []}
    started = time.perf_counter()
    try:
        for index in range(args.batches + 2):  # the batches, then the two files that expire everything
            name = stream.write_file(source, index)
            first = index % len(engines)
            row = {"batch": index, "first": engines[first].name, "flush": index >= args.batches}
            for engine in engines[first:] + engines[:first]:
                row[engine.name] = engine.feed(source, name)
                row[engine.name].update(process_memory())
                if engine.antkv:
                    engine.read_new_output(spark)
            if local_dir:
                row["spark_local_disk"] = dir_bytes(local_dir)
            results["per_batch"].append(row)
            if not row["flush"]:
                print(f"  batch {index}: " + ", ".join(f"{e.name} {row[e.name]['latency_s']:.2f} s"
                                                      for e in engines), file=sys.stderr)
        results["run_s"] = round(time.perf_counter() - started, 1)
        for engine in engines:
            if engine.antkv:
                for batch, figures in _antkv_batches(engine).items():
                    results["per_batch"][batch][engine.name].update(figures)
        results["outputs"] = compare_outputs({e.name: engine_outputs(spark, e) for e in engines
                                              if e.name != "floor"})
    finally:
        for engine in engines:
            if engine.query is not None:
                engine.query.stop()
    return results


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--batches", type=int, default=None, help=f"default {FULL['batches']} ({QUICK['batches']} with --quick)")
    p.add_argument("--rows", type=int, default=None, help=f"rows per batch, default {FULL['rows']}")
    p.add_argument("--keys", type=int, default=None, help=f"the key space once grown, default {FULL['keys']}")
    p.add_argument("--ttl-batches", type=int, default=None,
                   help=f"a key expires this many batches after its last row, default {FULL['ttl_batches']}")
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--output-retention", type=int, default=10,
                   help="antkv: batches of published output kept (the bench reads each as it is published)")
    p.add_argument("--memory-mib", type=int, default=None,
                   help="antkv's StoreOptions.memory_bytes per Python worker, in MiB (default: its default, 1 GiB)")
    p.add_argument("--engines", nargs="+", default=list(ENGINES), choices=ENGINES)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--quick", action="store_true", help="a few tiny batches: a smoke test")
    p.add_argument("--dir", default=None, help="where the inputs and state go (a temp dir)")
    p.add_argument("--json", default=None, help="also write the full results here")
    p.add_argument("--plots", default=None, help="write PNG plots into this directory")
    p.add_argument("--keep", action="store_true", help="keep the work directory")
    args = p.parse_args(argv)
    for key, value in (QUICK if args.quick else FULL).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if min(args.batches, args.rows, args.keys, args.ttl_batches, args.partitions) < 1:
        p.error("--batches, --rows, --keys, --ttl-batches and --partitions must be positive")
    args.engines = list(dict.fromkeys(args.engines))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    work = tempfile.mkdtemp(prefix="antkv-soak-bench-", dir=args.dir)
    spark = start_session(args.partitions, os.path.join(work, "spark-local"))
    try:
        results = run(spark, args, work)
    finally:
        spark.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(report(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    if args.plots:
        for path in plots(results, args.plots):
            print(f"wrote {path}", file=sys.stderr)
    if not results["outputs"]["equal"]:
        raise SystemExit("the engines' outputs differ: " + results["outputs"]["difference"])


if __name__ == "__main__":
    main()
