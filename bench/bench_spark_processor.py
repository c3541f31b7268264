"""A Spark StatefulProcessor on antkv against the same processor on Spark's own state store.

Usage::

    .venv/bin/python bench/bench_spark_processor.py                          # 10,000 keys
    .venv/bin/python bench/bench_spark_processor.py --keys 100000 --batches 6   # the full size
        [--partitions 4] [--order interleave|alternate|streams|streams-reversed] [--api pandas|rows] [--warmup 6]
        [--dir /tmp] [--json out.json]

The session-window ``StatefulProcessor`` of ``bench_spark_baseline.py`` (event time, a value
state per key, a timer at the end of the session moved on every event) runs, unchanged, in two
streaming queries of one local Spark (``local[2]``, ``--partitions`` state partitions), each
over its own copy of the same input (one Parquet file per micro-batch: every key once, one
minute of event time later than the batch before, so every row costs a state read, a state
write, a timer delete and a timer registration):

* **spark** -- ``groupBy(key).transformWithStateInPandas(processor, ..., "EventTime")`` on
  Spark's RocksDB state store provider, to the ``noop`` sink;
* **antkv** -- :class:`antkv.spark.TransformWithState` (the same processor object's class,
  ``time_mode="EventTime"``) under ``foreachBatch``, state in a local checkpoint location;
* **floor** -- antkv's runner with state that costs nothing (:mod:`bench.processor_floor`): the
  same plan, runner and processor under ``foreachBatch``, the state in plain dicts in the
  Python worker, nothing encoded, committed or written.  The report gives antkv's share of it.

With ``--api rows`` the same sessions come from a processor written for Spark 4.1's row-based
API (``Row``s in and out, :func:`bench.bench_spark_baseline.session_row_processor_class`):
Spark runs it with ``groupBy(key).transformWithState``, antkv with ``rows=True``.

Each file is processed by every query before the next is written, so all see the same
machine load.  By default the queries take turns, Spark's first (``--order interleave``: S A F
S A F ...), so each query's batches are one batch of each other apart.  ``--order alternate``
reverses the order every other batch (S F A, A F S, S F A, ...): antkv and Spark then each run
two batches back to back and wait for two of the other's.  Two Spark batches of the full size take over
a minute, and Spark stops the Python workers of a UDF that has not run for a minute (its fixed
idle timeout), so antkv's next batch starts new workers, which reopen the working copies parked
on the machine: that order measures a query whose batches are over a minute apart, not a
steady stream.  The report gives antkv's load time and each partition's copy (``R`` reused,
``O`` reopened, ``C`` caught up, ``B`` rebuilt, ``N`` new) per batch.
``--order streams`` measures steady streams: antkv's batches run back to back, then Spark's,
then the floor's, as queries fed faster than they process (each query then sees the machine on
its own; a batch of antkv's pays for the copies its previous batch parks in the background).
``--order streams-reversed`` runs the same streams the other way round, the floor's first and
antkv's last: a machine whose speed drifts over the run's minutes favours one of the two orders
as much as it hurts the other, so a run of each, taken together, cancels that drift.

Before any of that, ``--warmup`` batches (default 6) of two more queries, antkv's and the
floor's plans (antkv on a location of its own) over their own copies of the input, taking
turns, warm the JVM and are not reported: the JVM's compiled code keeps improving over a
session's first batches (at 100,000 keys its CPU per batch of the floor's plan fell from 9 s to
2.6, 1.9 and 1.4 s over the first four, and to about 0.9 s after twenty), and Spark compiles
the code generated for a plan once per distinct plan, so without it whichever query ran first
paid for the warm-up, and a warm-up of one plan left the other's cold.  What is left of that
drift favours the floor, whose batches run last.

Reported per batch and query: rows/s, the input rows over the micro-batches'
``triggerExecution`` time (summed over the micro-batches the file caused: Spark adds a batch
without data when the watermark moves).  Single runs on a shared machine: expect noise.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.bench_spark_baseline import (  # noqa: E402
    session_processor_class, session_row_processor_class, start_session, write_batch_file)
from antkv.spark.tools.batch_report import FATE_LETTERS, fate_of  # noqa: E402
from bench.processor_floor import floor_batch  # noqa: E402

ENGINES = ("spark", "antkv", "floor")
WARMUPS = ("warm-up-antkv", "warm-up-floor")  # antkv's and the floor's plans over inputs of their own, run
# first and not reported
OUTPUT_SCHEMA = "key string, start long, end long, events long"
INPUT_SCHEMA = "key string, value binary, ts timestamp"


def _queries(spark, work: str, partitions: int, api: str = "pandas"):
    from antkv.spark import TransformWithState

    rows = api == "rows"
    processor = session_row_processor_class if rows else session_processor_class
    queries = {}
    for name in (*ENGINES, *WARMUPS):
        inputs = os.path.join(work, f"input-{name}")
        os.makedirs(inputs)
        stream = spark.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", 1).parquet(inputs)
        checkpoint = os.path.join(work, f"checkpoint-{name}")
        if name == "spark":
            grouped = stream.withWatermark("ts", "0 seconds").select("key", "ts").groupBy("key")
            spark_api = grouped.transformWithState if rows else grouped.transformWithStateInPandas
            out = spark_api(processor()(), OUTPUT_SCHEMA, "Update", "EventTime")
            writer = out.writeStream.format("noop").outputMode("update")
        elif name in ("floor", "warm-up-floor"):
            writer = stream.select("key", "ts").writeStream.foreachBatch(
                floor_batch(processor(), OUTPUT_SCHEMA, partitions, rows, query=name))
        else:
            own = "antkv" if name == "antkv" else "antkv-warm-up"
            runner = TransformWithState(f"file://{work}/{own}-state", "sessions", "key", processor()(),
                                        OUTPUT_SCHEMA, time_mode="EventTime", event_time_column="ts",
                                        partitions=partitions, metrics_path=os.path.join(work, f"{own}-metrics.jsonl"),
                                        rows=rows)
            writer = stream.select("key", "ts").writeStream.foreachBatch(runner.foreach_batch())
        query = writer.option("checkpointLocation", checkpoint).queryName(f"processor-{name}").start()
        queries[name] = (query, inputs)
    return queries


def new_progress(query, after: int) -> tuple[list[dict], int]:
    """The query's progress reports of the micro-batches after batch id ``after``, in order
    (a restarted micro-batch counts once, its last report), and the last batch id."""
    by_id = {p["batchId"]: p for p in query.recentProgress if p["batchId"] > after}
    progresses = [by_id[i] for i in sorted(by_id)]
    return progresses, (progresses[-1]["batchId"] if progresses else after)


def _antkv_breakdown(work: str, batch: int) -> dict:
    """Where antkv's batch went, from the runner's metrics: the driver's whole batch and, summed
    over the partitions, loading, the processor and committing (seconds)."""
    with open(os.path.join(work, "antkv-metrics.jsonl")) as f:
        docs = [json.loads(line) for line in f]
    doc = [d for d in docs if d["batch_id"] == batch][-1]
    parts = doc["partition_metrics"]
    return {"batch_s": round(doc["seconds"], 3),
            "load_s": round(sum(p["load_s"] for p in parts), 3),
            "process_s": round(sum(p["process_s"] for p in parts), 3),
            "commit_s": round(sum(p["commit_s"] for p in parts), 3),
            "reused_working_copies": sum(p["reused_working_copy"] for p in parts),
            "copies": "".join(FATE_LETTERS[fate_of(p)] for p in sorted(parts, key=lambda p: p["partition"])),
            "snapshots": sum(p["snapshot"] for p in parts)}


def _schedule(order: str, batches: int, warmup: int = 0) -> list[tuple[int, str]]:
    """``(batch, engine)`` in the order they run, after ``warmup`` batches of the warm-up queries
    (see the module docstring)."""
    return [(b, name) for b in range(warmup) for name in WARMUPS] + _measured(order, batches)


def _measured(order: str, batches: int) -> list[tuple[int, str]]:
    if order == "streams":
        return [(b, engine) for engine in ("antkv", "spark", "floor") for b in range(batches)]
    if order == "streams-reversed":
        return [(b, engine) for engine in ("floor", "spark", "antkv") for b in range(batches)]
    if order == "interleave":
        return [(b, engine) for b in range(batches) for engine in ENGINES]
    return [(b, engine) for b in range(batches)
            for engine in (("spark", "floor", "antkv") if b % 2 == 0 else ("antkv", "floor", "spark"))]


def run(args) -> dict:
    work = tempfile.mkdtemp(prefix="antkv-processor-bench-", dir=args.dir)
    spark = start_session(args.partitions, os.path.join(work, "spark-local"))
    results = {"keys": args.keys, "batches": args.batches, "partitions": args.partitions,
               "cores": os.cpu_count(), "order": args.order, "api": args.api, "warmup": args.warmup,
               "per_batch": []}
    try:
        queries = _queries(spark, work, args.partitions, args.api)
        last = {name: -1 for name in queries}
        source = os.path.join(work, "source")
        os.makedirs(source)
        rows = [{"batch": batch} for batch in range(args.batches)]
        for batch, engine in _schedule(args.order, args.batches, args.warmup):
            row = {} if engine in WARMUPS else rows[batch]  # (the warm-up's batches are not reported)
            row.setdefault("first", engine)
            name = f"batch-{batch:05d}.parquet"
            if not os.path.exists(os.path.join(source, name)):
                write_batch_file(source, batch, args.keys, 16)
            query, inputs = queries[engine]
            shutil.copyfile(os.path.join(source, name), os.path.join(inputs, "." + name))
            os.rename(os.path.join(inputs, "." + name), os.path.join(inputs, name))
            t0 = time.perf_counter()
            query.processAllAvailable()
            wall = time.perf_counter() - t0
            progresses, last[engine] = new_progress(query, last[engine])
            trigger_ms = sum(p["durationMs"].get("triggerExecution", 0) for p in progresses)
            n = sum(p["numInputRows"] for p in progresses)
            row[engine] = {"rows": n, "micro_batches": len(progresses), "trigger_ms": trigger_ms,
                           "wall_s": round(wall, 3),
                           "rows_per_s": round(n / (trigger_ms / 1000), 1) if trigger_ms else None}
            print(f"  batch {batch} {engine}: {n} rows in {trigger_ms} ms "
                  f"({row[engine]['rows_per_s']} rows/s, {len(progresses)} micro-batches)", file=sys.stderr)
            if engine == "antkv":
                row["antkv"]["breakdown"] = _antkv_breakdown(work, batch)
                print(f"  batch {batch} antkv breakdown: {row['antkv']['breakdown']}", file=sys.stderr)
        results["per_batch"] = rows
        for query, _ in queries.values():
            query.stop()
    finally:
        spark.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return results


def report(results: dict) -> str:
    lines = [f"# Session-window StatefulProcessor: {results['keys']:,} keys, {results['batches']} batches, "
             f"{results['partitions']} state partitions, local[2], {results['cores']} cores, "
             f"order {results['order']}, {results.get('api', 'pandas')} API", "",
             "| batch | first | Spark (RocksDB provider) rows/s | antkv rows/s | floor rows/s | antkv / Spark "
             "| antkv / floor | antkv load s | antkv copies |",
             "|---:|---|---:|---:|---:|---:|---:|---:|:---|"]
    for b in results["per_batch"]:
        s, a, f = b["spark"]["rows_per_s"], b["antkv"]["rows_per_s"], b["floor"]["rows_per_s"]
        br = b["antkv"].get("breakdown", {})
        lines.append(f"| {b['batch']} | {b['first']} | {s:,.0f} | {a:,.0f} | {f:,.0f} | {a / s:.1f}x | {a / f:.0%} | "
                     f"{br.get('load_s', 0):.2f} | {br.get('copies', '-')} |")
    steady = results["per_batch"][1:] or results["per_batch"]
    s = statistics.median(b["spark"]["rows_per_s"] for b in steady)
    a = statistics.median(b["antkv"]["rows_per_s"] for b in steady)
    f = statistics.median(b["floor"]["rows_per_s"] for b in steady)
    lines += ["", f"median over the update batches: Spark {s:,.0f} rows/s, antkv {a:,.0f} rows/s, floor {f:,.0f} "
                  f"rows/s: antkv {a / s:.1f}x Spark, {a / f:.0%} of the floor"]
    return "\n".join(lines)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--keys", type=int, default=10_000)
    p.add_argument("--batches", type=int, default=3)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--order", choices=("interleave", "alternate", "streams", "streams-reversed"), default="interleave",
                   help="interleave: Spark, antkv, the floor every batch; alternate: the order reverses every other batch; "
                        "streams: antkv's batches back to back, then Spark's, then the floor's; "
                        "streams-reversed: the floor's, Spark's, then antkv's")
    p.add_argument("--warmup", type=int, default=6,
                   help="batches of antkv's and the floor's plans run first, unreported, to warm the JVM")
    p.add_argument("--api", choices=("pandas", "rows"), default="pandas",
                   help="the processor written for transformWithStateInPandas, or for the row-based transformWithState")
    p.add_argument("--dir", default=None, help="where the inputs and state go (a temp dir)")
    p.add_argument("--json", default=None, help="also write the full results here")
    p.add_argument("--keep", action="store_true", help="keep the work directory")
    args = p.parse_args(argv)
    if args.keys < 1 or args.batches < 1 or args.partitions < 1 or args.warmup < 0:
        p.error("--keys, --batches and --partitions must be positive, --warmup at least 0")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    results = run(args)
    print(report(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
