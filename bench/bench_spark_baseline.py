"""Spark's own stateful Python path, measured: the yardstick for antkv's Spark pipelines.

Usage::

    .venv/bin/python bench/bench_spark_baseline.py                      # a few minutes
    .venv/bin/python bench/bench_spark_baseline.py --keys 100000 --batches 4   # the full size
        [--value-size 1024] [--partitions 4] [--workloads apply tws] [--dir /tmp] [--json out.json]
    .venv/bin/python bench/bench_spark_baseline.py --workloads apply --keys 1000000 --touched 0.01 \
        --value-size 100 --partitions 1 --batches 6    # bench_spark_remote.py's workload, on Spark

Two streaming queries over a file source (one new Parquet file per micro-batch,
``maxFilesPerTrigger=1``), each on a local Spark (``local[2]``) with Spark's RocksDB state store
provider (``RocksDBStateStoreProvider``) and ``--partitions`` state partitions, writing to the
``noop`` sink:

* **apply** -- ``groupBy(key).applyInPandasWithState``: every batch holds every one of
  ``--keys`` keys once (with ``--touched``, every batch after the first holds that fraction of
  them, at random), with a ``--value-size`` value of random (incompressible) bytes that
  differs per key and per batch; the state of a key is its count and its latest value.
  Reported per batch: rows/s (input rows over the batch's ``triggerExecution`` time), the state
  commit time (``stateOperators[0].commitTimeMs``), the bytes of the files the batch added to
  the checkpoint directory, and the checkpoint's total size.  Then the driver is restarted (a
  new process, a new JVM) and one more batch runs: **restore** is reported as that batch's
  time, its time from ``start()`` to done, the difference with the median batch before it, and
  the state stores' own load time (``rocksdbLoadLatencyMs``, summed over partitions).
* **tws** -- ``groupBy(key).transformWithStateInPandas`` with a session-window
  ``StatefulProcessor`` (event time, a value state per key, a timer at the session's end that
  is moved on every event and emits the session when the watermark passes it).  Every batch
  holds every key once, one minute of event time later than the batch before (the sessions
  stay open, so every row costs a state read, a state write, a timer delete and a timer
  registration).  Reported per batch: rows/s and commit time.

Each phase runs in a fresh process, so nothing (JVM, state store caches) carries over between
the phases but the checkpoint directory.  Single runs on a shared machine: expect noise.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.measure import peak_rss_mib  # noqa: E402

MARKER = "BENCH-SPARK-RESULT "
ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
SESSION_GAP_MS = 5 * 60 * 1000
MINUTE_MS = 60 * 1000


# --------------------------------------------------------------------------- input


def write_batch_file(input_dir: str, batch: int, keys: int, value_size: int, touched: float = 1.0) -> None:
    """One Parquet file: every key once (with ``touched`` < 1, after batch 0: that fraction of
    the keys, chosen at random), a random value per key, an event time per batch.

    Written under a hidden name and renamed, so the file source never sees half a file."""
    import random

    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    chosen = range(keys)
    if touched < 1.0 and batch > 0:
        chosen = sorted(random.Random(batch).sample(range(keys), max(1, int(keys * touched))))
    keys, names = len(chosen), pa.array([f"user-{i:08d}" for i in chosen])
    data = os.urandom(keys * value_size)
    offsets = np.arange(keys + 1, dtype=np.int64) * value_size
    values = pa.Array.from_buffers(pa.large_binary(), keys, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    event_ms = 1_700_000_000_000 + batch * MINUTE_MS
    ts = pa.array(np.full(keys, event_ms * 1000, dtype=np.int64), pa.timestamp("us"))
    table = pa.table({"key": names, "value": values, "ts": ts})
    tmp = os.path.join(input_dir, f".batch-{batch:05d}.parquet")
    pq.write_table(table, tmp, compression="none", use_dictionary=False)
    os.rename(tmp, os.path.join(input_dir, f"batch-{batch:05d}.parquet"))


def checkpoint_files(path: str) -> dict[str, int]:
    sizes = {}
    for dirpath, _, filenames in os.walk(path):
        for name in filenames:
            full = os.path.join(dirpath, name)
            try:
                sizes[full] = os.path.getsize(full)
            except FileNotFoundError:  # removed by Spark's maintenance meanwhile
                pass
    return sizes


# --------------------------------------------------------------------------- the queries


def apply_count_and_latest(key, frames, state):
    """applyInPandasWithState: state = (count, latest value) per key; emits (key, count)."""
    import pandas as pd

    count = state.get[0] if state.exists else 0
    latest = None
    for frame in frames:
        count += len(frame)
        latest = frame["value"].iloc[-1]
    state.update((count, latest))
    yield pd.DataFrame({"key": [key[0]], "count": [count]})


def _session_window_base():
    """What both session-window processors do with their state (defined lazily: pyspark is
    imported in the child; a class made in a function travels to the workers by value)."""
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    class SessionWindowBase(StatefulProcessor):
        def init(self, handle):
            self.handle = handle
            self.session = handle.getValueState("session", "start long, last long, events long")

        def advance(self, chunks_of_times) -> list:
            """Move the key's session over its event times (ms; lists, each handled in time
            order) and its timer to the session's end; the sessions this closed, as
            ``(start, end, events)``."""
            start = last = None
            events = 0
            if self.session.exists():
                start, last, events = self.session.get()
            old_timer = None if last is None else last + SESSION_GAP_MS
            closed = []
            for times in chunks_of_times:
                for t in sorted(times):
                    if last is not None and t - last > SESSION_GAP_MS:
                        closed.append((start, last, events))
                        start, events = None, 0
                    start = t if start is None else start
                    last, events = t if last is None else max(t, last), events + 1
            if old_timer is not None and old_timer != last + SESSION_GAP_MS:
                self.handle.deleteTimer(old_timer)
            self.session.update((start, last, events))
            self.handle.registerTimer(last + SESSION_GAP_MS)
            return closed

        def expire(self) -> tuple:
            """The key's session, ``(start, end, events)``, ended by its timer."""
            start, last, events = self.session.get()
            self.session.clear()
            return start, last, events

        def close(self):
            pass

    return SessionWindowBase


def session_processor_class():
    """A session-window StatefulProcessor for ``transformWithStateInPandas``."""
    import pandas as pd

    class SessionWindow(_session_window_base()):
        def handleInputRows(self, key, rows, timerValues):
            closed = self.advance(frame["ts"].to_numpy().astype("datetime64[ms]").astype("int64").tolist()
                                  for frame in rows)
            if closed:
                yield pd.DataFrame([(key[0], *c) for c in closed], columns=["key", "start", "end", "events"])

        def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
            start, end, events = self.expire()
            yield pd.DataFrame({"key": [key[0]], "start": [start], "end": [end], "events": [events]})

    return SessionWindow


def session_row_processor_class():
    """:func:`session_processor_class` written for the row-based ``transformWithState``: the
    same sessions, read from ``Row``s and yielded as ``Row``s."""
    from pyspark.sql import Row

    class SessionWindowRows(_session_window_base()):
        def handleInputRows(self, key, rows, timerValues):
            closed = self.advance([[int(row.ts.timestamp() * 1000) for row in rows]])
            for start, end, events in closed:
                yield Row(key=key[0], start=start, end=end, events=events)

        def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
            start, end, events = self.expire()
            yield Row(key=key[0], start=start, end=end, events=events)

    return SessionWindowRows


def floor_batch(partitions: int):
    """A ``foreachBatch`` function doing the Spark work of a ``StatefulPipeline`` batch and nothing
    else: the pipeline's plan (route by key group, sort, one Arrow stream per partition, one
    collected row per partition) around a task that only reads its rows.  Its batch time is the
    least any Python state store run this way can take on the machine."""
    from antkv.spark.runtime.pipeline import KEY_GROUP_COLUMN
    from antkv.spark.runtime.routing import route
    from antkv.spark.store.keygroups import DEFAULT_KEY_GROUPS

    def task(frames):
        import pandas as pd

        rows = sum(len(f) for f in frames)
        yield pd.DataFrame({"rows": [rows]})

    def on_batch(df, batch_id):
        routed = route(df, ["key"], partitions, DEFAULT_KEY_GROUPS, KEY_GROUP_COLUMN)
        routed.sortWithinPartitions(KEY_GROUP_COLUMN, "key").mapInPandas(task, "rows long").collect()
    return on_batch


def start_session(partitions: int, local_dir: str, worker_reuse: bool = True):
    """A ``local[2]`` session; ``worker_reuse=False`` runs every Python task in a new worker
    (what a query meets when its batches are a minute apart: Spark stops idle workers)."""
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.python.worker.reuse", "true" if worker_reuse else "false")
        .appName("antkv-spark-baseline")
        .config("spark.sql.shuffle.partitions", str(partitions))
        .config("spark.default.parallelism", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "3g")
        .config("spark.local.dir", local_dir)
        .config("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def build_query(spark, workload: str, input_dir: str, checkpoint: str):
    from pyspark.sql.streaming.state import GroupStateTimeout

    schema = "key string, value binary, ts timestamp"
    stream = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(input_dir)
    if workload == "apply":
        out = stream.groupBy("key").applyInPandasWithState(
            apply_count_and_latest, "key string, count long", "count long, value binary",
            "update", GroupStateTimeout.NoTimeout)
    else:
        out = stream.withWatermark("ts", "0 seconds").select("key", "ts").groupBy("key") \
            .transformWithStateInPandas(
                session_processor_class()(), "key string, start long, end long, events long",
                "Update", "EventTime")
    return out.writeStream.format("noop").outputMode("update") \
        .option("checkpointLocation", checkpoint).queryName(f"baseline-{workload}").start()


def run_phase(args) -> dict:
    """Run ``args.batches`` batches from ``args.first_batch`` in this process; a JSON report."""
    work = args.workdir
    input_dir = os.path.join(work, f"input-{args.workload}")
    checkpoint = os.path.join(work, f"checkpoint-{args.workload}")
    os.makedirs(input_dir, exist_ok=True)
    t_session = time.perf_counter()
    spark = start_session(args.partitions, os.path.join(work, "spark-local"))
    session_s = time.perf_counter() - t_session
    changelog = spark.conf.get(
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "false")
    t_start = time.perf_counter()
    query = build_query(spark, args.workload, input_dir, checkpoint)
    batches = []
    last_batch_id = -1
    try:
        for batch in range(args.first_batch, args.first_batch + args.batches):
            before = checkpoint_files(checkpoint)
            write_batch_file(input_dir, batch, args.keys, args.value_size, args.touched)
            t0 = time.perf_counter()
            query.processAllAvailable()
            wall = time.perf_counter() - t0
            after = checkpoint_files(checkpoint)
            # A file can take more than one micro-batch (event time adds a no-data batch that
            # moves the watermark): sum the progress of every micro-batch since the last file.
            # A restarted query may report its first micro-batch twice: keep the last report.
            by_id = {pr["batchId"]: pr for pr in query.recentProgress if pr["batchId"] > last_batch_id}
            progresses = [by_id[i] for i in sorted(by_id)]
            last_batch_id = progresses[-1]["batchId"]
            ops = [(pr.get("stateOperators") or [{}])[0] for pr in progresses]
            trigger_ms = sum(pr["durationMs"].get("triggerExecution", 0) for pr in progresses)
            rows = sum(pr["numInputRows"] for pr in progresses)
            batches.append({
                "batch": batch,
                "micro_batches": [pr["batchId"] for pr in progresses],
                "rows": rows,
                "trigger_ms": trigger_ms,
                "add_batch_ms": sum(pr["durationMs"].get("addBatch", 0) for pr in progresses),
                "wall_s": round(wall, 3),
                "since_start_s": round(time.perf_counter() - t_start, 3),
                "rows_per_s": round(rows / (trigger_ms / 1000), 1) if trigger_ms else None,
                "commit_ms": sum(op.get("commitTimeMs", 0) for op in ops),
                "state_rows": ops[-1].get("numRowsTotal"),
                "state_rows_updated": sum(op.get("numRowsUpdated", 0) for op in ops),
                "state_memory_bytes": ops[-1].get("memoryUsedBytes"),
                "checkpoint_new_bytes": sum(s for p, s in after.items() if p not in before),
                "checkpoint_total_bytes": sum(after.values()),
                "load_ms": sum(op.get("customMetrics", {}).get("rocksdbLoadLatencyMs", 0) for op in ops),
                "loaded_from_checkpoint": sum(
                    op.get("customMetrics", {}).get("rocksdbNumLoadedFromDfs", 0) for op in ops),
                "custom": [op.get("customMetrics", {}) for op in ops],
            })
            print(f"  {args.workload} batch {batch}: {rows} rows in {trigger_ms} ms "
                  f"({batches[-1]['rows_per_s']} rows/s), commit {batches[-1]['commit_ms']} ms, "
                  f"+{batches[-1]['checkpoint_new_bytes']:,} checkpoint bytes", file=sys.stderr)
    finally:
        query.stop()
        spark.stop()
    return {"session_start_s": round(session_s, 3), "changelog_checkpointing": changelog,
            "batches": batches, "driver_peak_rss_mib": round(peak_rss_mib(), 1)}


# --------------------------------------------------------------------------- driver


def child(workload: str, first: int, count: int, args, workdir: str) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--phase", "--workload", workload,
           "--first-batch", str(first), "--batches", str(count), "--keys", str(args.keys),
           "--value-size", str(args.value_size), "--partitions", str(args.partitions), "--touched", str(args.touched),
           "--workdir", workdir]
    return run_child(cmd, workload, MARKER)


def run_child(cmd: list[str], phase: str, marker: str) -> dict:
    """Run a phase in a fresh process; its result is the JSON after ``marker`` on stdout."""
    done = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"{phase} phase failed with exit code {done.returncode}")
    for line in done.stdout.splitlines():
        if line.startswith(marker):
            return json.loads(line[len(marker):])
    raise SystemExit(f"{phase} phase printed no result")


def summarise(name: str, batches: list[dict], restart: dict | None) -> list[str]:
    lines = [f"## {name}", "",
             "| batch | rows | time ms | rows/s | commit ms | state load ms | checkpoint +bytes "
             "| checkpoint total |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for b in batches + ([restart] if restart else []):
        label = f"{b['batch']}" + (" (after restart)" if b is restart else "")
        lines.append(f"| {label} | {b['rows']:,} | {b['trigger_ms']:,} | {b['rows_per_s']:,.0f} | "
                     f"{b['commit_ms']} | {b['load_ms']} | {b['checkpoint_new_bytes']:,} | "
                     f"{b['checkpoint_total_bytes']:,} |")
    steady = [b["rows_per_s"] for b in batches[1:]] or [b["rows_per_s"] for b in batches]
    lines.append("")
    lines.append(f"median rows/s over the update batches: {statistics.median(steady):,.0f}")
    if restart:
        median_ms = statistics.median(b["trigger_ms"] for b in batches[1:] or batches)
        lines.append(f"restore: first batch after restart {restart['trigger_ms']:,} ms "
                     f"(start() to done {restart['since_start_s']:.1f} s) vs median batch "
                     f"{median_ms:,.0f} ms: {restart['trigger_ms'] - median_ms:+,.0f} ms; the state "
                     f"stores' own load time (rocksdbLoadLatencyMs, summed over "
                     f"{restart['loaded_from_checkpoint']} partitions loaded from the checkpoint): "
                     f"{restart['load_ms']:,} ms")
    return lines + [""]


def parser() -> argparse.ArgumentParser:
    """The command line of this bench, and of each phase it runs in a child process."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--keys", type=int, default=10_000)
    p.add_argument("--value-size", type=int, default=1024)
    p.add_argument("--batches", type=int, default=3)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--touched", type=float, default=1.0,
                   help="after the first batch, the fraction of the keys each batch holds (random)")
    p.add_argument("--workloads", nargs="+", default=["apply", "tws"], choices=["apply", "tws"])
    p.add_argument("--dir", default=None, help="where the input and checkpoints go (a temp dir)")
    p.add_argument("--json", default=None, help="also write the full results here")
    p.add_argument("--keep", action="store_true", help="keep the work directory")
    p.add_argument("--phase", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--workload", help=argparse.SUPPRESS)
    p.add_argument("--first-batch", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--workdir", help=argparse.SUPPRESS)
    return p


def main(argv=None) -> None:
    p = parser()
    args = p.parse_args(argv)
    if args.phase:
        print(MARKER + json.dumps(run_phase(args)), flush=True)
        return
    if args.keys < 1 or args.batches < 1 or args.value_size < 0 or args.partitions < 1 or not 0 < args.touched <= 1:
        p.error("--keys, --batches and --partitions must be positive, --value-size not negative, "
                "--touched in (0, 1]")
    workdir = tempfile.mkdtemp(prefix="antkv-spark-baseline-", dir=args.dir)
    results = {"keys": args.keys, "value_size": args.value_size, "batches": args.batches,
               "partitions": args.partitions, "cores": os.cpu_count(), "workloads": {}}
    report = [f"# Spark baseline: {args.keys:,} keys, {args.value_size} B values, "
              f"{args.batches} batches, {args.partitions} state partitions, local[2]", ""]
    try:
        for workload in args.workloads:
            print(f"{workload}: {args.batches} batches in a first driver", file=sys.stderr)
            first = child(workload, 0, args.batches, args, workdir)
            restart = None
            if workload == "apply":
                print(f"{workload}: one batch in a restarted driver", file=sys.stderr)
                restart = child(workload, args.batches, 1, args, workdir)["batches"][0]
            results["workloads"][workload] = {"first": first, "restart": restart}
            name = ("applyInPandasWithState, RocksDB provider" if workload == "apply"
                    else "transformWithStateInPandas session window, RocksDB provider")
            report += summarise(name + f" (changelog checkpointing: {first['changelog_checkpointing']})",
                                first["batches"], restart)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    print("\n".join(report))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
