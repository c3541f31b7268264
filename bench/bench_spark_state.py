"""The same stateful workload on antkv pipelines and on Spark's own state store, same run.

Usage::

    .venv/bin/python bench/bench_spark_state.py                  # 20,000 keys: a few minutes
    .venv/bin/python bench/bench_spark_state.py --keys 100000    # the full size
        [--batches 3] [--value-size 1024] [--partitions 4] [--rescale-keys 10000] [--dir /tmp]

The workload (``bench_spark_baseline.write_batch_file``): every batch holds every one of
``--keys`` keys once with a ``--value-size`` value of random bytes (incompressible, different
per key and batch); the state of a key is its count and its latest value; each batch emits
``(key, count)`` per key.  Both sides are streaming queries over the same kind of Parquet file
source (one file per micro-batch) on ``local[2]`` with ``--partitions`` state partitions:

* **Spark**: ``applyInPandasWithState`` with the RocksDB state store provider
  (``bench_spark_baseline.py``, run as is);
* **antkv**: :class:`antkv.spark.StatefulPipeline` under ``foreachBatch``, the state function
  written column-wise (``PartitionState.grouped``: one sort per partition, then one state read
  and one write per key).

Reported per batch: rows/s (input rows over the micro-batch's ``triggerExecution``, the same
figure for both), commit time (Spark: ``commitTimeMs`` of the state operator, summed over
partitions; antkv: the stores' commit time summed over partitions), bytes the batch added to
the checkpoint directory; then one batch in a restarted driver (a new process and JVM):
**restore**, that batch's time.  Then the **floor**: the pipeline's Spark work (routing,
sorting, the Arrow stream to Python, one collected row per partition) around a task that only
reads its rows, on the same input: no Python state store run this way can beat its batch time,
so its multiple of Spark bounds antkv's; the floor's own first batch after a restart bounds
antkv's restore the same way.  Between the two, the **dict floor**
(``bench/pipeline_floor.py``): the same plan and antkv's own runner and views around the same
function, with each partition's state in a dict kept in the Python worker: its batch time less
the floor's is what the runner and the function cost, antkv's less its own what the state
engine costs (``--only antkv,dictfloor`` runs antkv's phases and this one alone, for quick
A/B runs).  Last, the time to write antkv's median checkpoint bytes of a batch once (one file
per partition, each fsynced: ``pipeline_floor.write_floor_ms``), added to the dict floor's
batch: what a store that persists every batch can reach at most.  With ``--churn``, antkv's batches run again with Python worker
reuse off (every task in a new worker, as when batches are a minute apart), and the report
compares antkv's own work per batch (load, function and commit, summed over partitions) and
the whole batches with the warm run.  antkv's tables give each partition's copy per batch
(``R`` reused, ``O`` reopened, ``C`` caught up, ``B`` rebuilt, ``N`` new; ``S``: a snapshot).  Finally **rescale** (antkv only; Spark cannot change a
query's state partitions): a batch job loads ``--rescale-keys`` and 10x as many keys on 2
partitions, then a batch of 1,000 rows on 3 partitions rescales; reported: the slowest
partition's state open time (base open + clip + bring-in) for both sizes.  Each phase runs in
a fresh process.  Single runs on a shared 2-core machine: expect noise.
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

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.bench_spark_baseline import (  # noqa: E402
    checkpoint_files,
    floor_batch,
    run_child,
    start_session,
    write_batch_file,
)
from bench.bench_spark_baseline import child as spark_child  # noqa: E402
from bench.measure import peak_rss_mib  # noqa: E402
from bench import pipeline_floor  # noqa: E402
from antkv.spark.tools.batch_report import FATE_LETTERS  # noqa: E402

MARKER = "BENCH-ANTKV-RESULT "


def count_and_latest(state, rows):
    """Per key: count += rows, latest = the last row's value; emits (key, count)."""
    import pandas as pd

    st = state.value_state("count_latest", 1)
    g = state.grouped(rows)
    values = g.frame["value"].tolist()
    counts = []
    for key_group, key, start, end in zip(g.key_groups.tolist(), g.keys, g.starts.tolist(), g.ends.tolist()):
        state.set_current_key(key_group, key)
        old = st.get()
        n = (old[0] if old else 0) + end - start
        st.update((n, values[end - 1]))
        counts.append(n)
    yield pd.DataFrame({"key": [k[0] for k in g.keys], "count": counts})


def _pipeline(work: str, partitions: int, metrics: str | None = None, park: bool = True):
    from antkv.spark import StatefulPipeline, StoreOptions

    return StatefulPipeline("file://" + os.path.join(work, "antkv-state"), "bench", ["key"], count_and_latest,
                            "key string, count long", partitions=partitions, query_id="bench",
                            options=StoreOptions(cache_dir=os.path.join(work, "antkv-cache"), park_copies=park),
                            metrics_path=metrics)


def _stream_batches(args, name: str, make_on_batch):
    """A streaming query over one new input file per batch, ``foreachBatch(make_on_batch())``
    (made once the session runs), for ``args.batches`` batches from ``args.first_batch`` in this
    process; yields each batch's figures (rows, ``triggerExecution`` time, rows/s) as it ends."""
    work = args.workdir
    input_dir = os.path.join(work, f"input-{name}")
    os.makedirs(input_dir, exist_ok=True)
    spark = start_session(args.partitions, os.path.join(work, "spark-local"), worker_reuse=args.worker_reuse == "on")
    stream = spark.readStream.schema("key string, value binary, ts timestamp") \
        .option("maxFilesPerTrigger", 1).parquet(input_dir)
    query = stream.writeStream.foreachBatch(make_on_batch()) \
        .option("checkpointLocation", os.path.join(work, f"checkpoint-{name}")).start()
    last = -1
    try:
        for batch in range(args.first_batch, args.first_batch + args.batches):
            write_batch_file(input_dir, batch, args.keys, args.value_size)
            query.processAllAvailable()
            progress = [p for p in query.recentProgress if p["batchId"] > last]
            last = progress[-1]["batchId"]
            trigger_ms = sum(p["durationMs"].get("triggerExecution", 0) for p in progress)
            rows = sum(p["numInputRows"] for p in progress)
            yield {"batch": batch, "rows": rows, "trigger_ms": trigger_ms,
                   "rows_per_s": round(rows / (trigger_ms / 1000), 1) if trigger_ms else None}
    finally:
        query.stop()
        spark.stop()


def antkv_phase(args) -> dict:
    """``args.batches`` batches from ``args.first_batch`` of a ``StatefulPipeline`` under
    ``foreachBatch``, with the state's figures of each batch."""
    state_dir = os.path.join(args.workdir, "antkv-state")
    pipe = None

    def make_on_batch():  # a pipeline parses its schema, which needs the session
        nonlocal pipe
        pipe = _pipeline(args.workdir, args.partitions, park=args.park == "on")
        return pipe.foreach_batch()

    batches = []
    before = checkpoint_files(state_dir)
    for b in _stream_batches(args, "antkv", make_on_batch):
        after = checkpoint_files(state_dir)
        m = pipe.history[-1]
        parts = sorted(m.partition_metrics, key=lambda p: p.partition)
        b.update({
            "own_ms": round(1000 * sum(p.load_s + p.process_s + p.commit_s for p in parts)),
            "copies": "".join(FATE_LETTERS[p.copy_fate] for p in parts),
            "snapshots": sum(p.snapshot for p in parts),
            "commit_ms": round(1000 * sum(p.commit_s for p in m.partition_metrics)),
            "load_ms": round(1000 * sum(p.load_s for p in m.partition_metrics)),
            "process_ms": round(1000 * sum(p.process_s for p in m.partition_metrics)),
            "checkpoint_new_bytes": sum(s for p, s in after.items() if p not in before),
            "checkpoint_total_bytes": sum(after.values()),
            "bytes_uploaded": m.bytes_uploaded, "bytes_reused": m.bytes_reused,
            "keys": m.keys, "cache_hit_ratio": m.cache_hit_ratio,
            "write_amplification": max(p.write_amplification for p in m.partition_metrics),
        })
        batches.append(b)
        before = after
        print(f"  antkv batch {b['batch']}: {b['rows']} rows in {b['trigger_ms']} ms ({b['rows_per_s']} rows/s), "
              f"load {b['load_ms']} ms, commit {b['commit_ms']} ms, copies {b['copies']}, "
              f"+{b['checkpoint_new_bytes']:,} checkpoint bytes", file=sys.stderr)
    return {"batches": batches, "driver_peak_rss_mib": round(peak_rss_mib(), 1)}


def floor_phase(args) -> dict:
    """The pipeline's Spark work without its state (``floor_batch``) on the same input: the
    batch time no Python state store run this way can beat on this machine."""
    batches = []
    for b in _stream_batches(args, "floor", lambda: floor_batch(args.partitions)):
        batches.append(b)
        print(f"  floor batch {b['batch']}: {b['rows']} rows in {b['trigger_ms']} ms", file=sys.stderr)
    return {"batches": batches}


def dictfloor_phase(args) -> dict:
    """``count_and_latest`` through antkv's pipeline runner with its state in a dict
    (``pipeline_floor.floor_batch``) on the same input: the batch time with every cost of
    antkv's but its state engine's."""
    location = "file://" + os.path.join(args.workdir, "dictfloor-output")
    batches, made = [], []

    def make_on_batch():
        made.append(pipeline_floor.floor_batch(count_and_latest, "key string, count long", args.partitions, location))
        return made[-1]

    for b in _stream_batches(args, "dictfloor", make_on_batch):
        # after the batch, outside its time: the share of keys whose state the worker kept
        # (every key is in every batch: a kept key counts batch + 1)
        b["state_kept"] = pipeline_floor.share_counting(location, made[0].reports[-1], b["batch"] + 1)
        b["process_ms"] = round(1000 * sum(r["process_s"] for r in made[0].reports[-1]))
        batches.append(b)
        print(f"  dict floor batch {b['batch']}: {b['rows']} rows in {b['trigger_ms']} ms, "
              f"function and output {b['process_ms']} ms, state kept for {b['state_kept']:.0%} of the keys", file=sys.stderr)
    return {"batches": batches}


def rescale_phase(args) -> dict:
    """Load ``args.keys`` keys on 2 partitions (a batch job), then rescale to 3 with a small batch."""
    work = args.workdir
    input_dir = os.path.join(work, "input-rescale")
    os.makedirs(input_dir, exist_ok=True)
    spark = start_session(args.partitions, os.path.join(work, "spark-local"))
    try:
        write_batch_file(input_dir, 0, args.keys, args.value_size)
        _pipeline(work, 2).run(spark.read.parquet(os.path.join(input_dir, "batch-00000.parquet")))
        small = spark.read.parquet(os.path.join(input_dir, "batch-00000.parquet")).limit(1000)
        t0 = time.perf_counter()
        m = _pipeline(work, 3).run(small).metrics
        wall = time.perf_counter() - t0
    finally:
        spark.stop()
    return {"keys": args.keys, "batch_s": round(wall, 3),
            "open_s": [round(p.load_s, 3) for p in m.partition_metrics],
            "commit_s": [round(p.commit_s, 3) for p in m.partition_metrics],
            "bytes_uploaded": m.bytes_uploaded, "bytes_reused": m.bytes_reused}


def child(phase: str, args, workdir: str, **over) -> dict:
    opts = {"first_batch": 0, "batches": args.batches, "keys": args.keys, "worker_reuse": args.worker_reuse, **over}
    cmd = [sys.executable, os.path.abspath(__file__), "--phase", phase, "--workdir", workdir,
           "--first-batch", str(opts["first_batch"]), "--batches", str(opts["batches"]),
           "--keys", str(opts["keys"]), "--value-size", str(args.value_size),
           "--partitions", str(args.partitions), "--worker-reuse", opts["worker_reuse"], "--park", args.park]
    return run_child(cmd, phase, MARKER)


def table(name: str, batches: list[dict], restart: dict) -> list[str]:
    own = "own_ms" in batches[0]
    lines = [f"## {name}", "", "| batch | rows | time ms | rows/s | commit ms | checkpoint +bytes |"
             + (" load ms | own work ms | copies |" if own else ""),
             "|---:|---:|---:|---:|---:|---:|" + ("---:|---:|:---|" if own else "")]
    for b in batches + [restart]:
        label = f"{b['batch']}" + (" (after restart)" if b is restart else "")
        lines.append(f"| {label} | {b['rows']:,} | {b['trigger_ms']:,} | {b['rows_per_s']:,.0f} | "
                     f"{b['commit_ms']:,} | {b['checkpoint_new_bytes']:,} |"
                     + (f" {b['load_ms']:,} | {b['own_ms']:,} | {b['copies']}{' S' * bool(b['snapshots'])} |"
                        if own else ""))
    return lines + [""]


def floor_table(floors: dict[str, list[dict]]) -> list[str]:
    """Each floor's batches side by side: time and rows/s."""
    names = list(floors)
    lines = ["## Floors: the pipeline's Spark work, a task keeping no state (floor); with antkv's runner, "
             "function and output, state in a dict (dict floor)", "",
             "| batch | rows |" + "".join(f" {n} ms | {n} rows/s |" for n in names),
             "|---:|---:|" + "---:|---:|" * len(names)]
    for row in zip(*floors.values()):
        lines.append(f"| {row[0]['batch']} | {row[0]['rows']:,} |"
                     + "".join(f" {b['trigger_ms']:,} | {b['rows_per_s']:,.0f} |" for b in row))
    return lines + [""]


def dictfloor_lines(ant: list[dict], dictfloor: list[dict], floor: list[dict] | None = None) -> list[str]:
    """The dict floor's steady rows/s, its share of the stateless floor, and antkv's share of
    it; then the tasks' own work of both (medians after the first batch)."""
    a, d = steady(ant), steady(dictfloor)
    line = f"dict floor (antkv's runner, function and output, state in a dict): {d:,.0f} rows/s"
    if floor is not None:
        line += f", {d / steady(floor):.0%} of the floor"
    line += f"; antkv ({a:,.0f} rows/s) runs at {a / d:.0%} of it"
    kept = [b["state_kept"] for b in dictfloor[1:]]
    if kept:  # a partition whose task moved to another worker started empty there (same cost)
        spread = f"{min(kept):.0%}" + (f"-{max(kept):.0%}" if max(kept) != min(kept) else "")
        line += f"; the dict floor's workers kept the state of {spread} of the keys"

    def later(batches, figure):
        return statistics.median(b[figure] for b in batches[1:] or batches)

    return [line, f"the tasks' function and output, summed over partitions, medians after the first batch: "
                  f"dict floor {later(dictfloor, 'process_ms'):,.0f} ms, antkv {later(ant, 'process_ms'):,.0f} ms "
                  f"(and antkv's load {later(ant, 'load_ms'):,.0f} ms, commit {later(ant, 'commit_ms'):,.0f} ms)"]


def churn_lines(warm: list[dict], churn: list[dict]) -> list[str]:
    """antkv's own work per batch (load, function and commit, summed over partitions) and whole
    batches, in new workers against warm ones, after the first batch."""
    own_w = statistics.median(b["own_ms"] for b in warm[1:] or warm)
    own_c = statistics.median(b["own_ms"] for b in churn[1:] or churn)
    whole_w = statistics.median(b["trigger_ms"] for b in warm[1:] or warm)
    whole_c = statistics.median(b["trigger_ms"] for b in churn[1:] or churn)
    return [f"new workers against warm ones, medians after the first batch: antkv's own work "
            f"{own_c:,.0f} ms against {own_w:,.0f} ms ({own_c / own_w:.2f}x); whole batches "
            f"{whole_c:,.0f} ms against {whole_w:,.0f} ms ({whole_c / whole_w:.2f}x)", ""]


def restart_ratio(batches: list[dict], restart: dict) -> float:
    """The first batch after a restart against the median steady batch (after the first)."""
    return restart["trigger_ms"] / statistics.median(b["trigger_ms"] for b in batches[1:] or batches)


def steady(batches: list[dict]) -> float:
    return statistics.median(b["rows_per_s"] for b in (batches[1:] or batches))


def spark_phase_args(args) -> argparse.Namespace:
    """What ``bench_spark_baseline.child`` needs to run Spark's side of this workload: every key
    every batch, as antkv's batches."""
    return argparse.Namespace(keys=args.keys, value_size=args.value_size, partitions=args.partitions, touched=1.0)


PHASES = {"antkv": antkv_phase, "floor": floor_phase, "dictfloor": dictfloor_phase, "rescale": rescale_phase}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--keys", type=int, default=20_000)
    p.add_argument("--value-size", type=int, default=1024)
    p.add_argument("--batches", type=int, default=3)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--rescale-keys", type=int, default=5_000)
    p.add_argument("--dir", default=None)
    p.add_argument("--worker-reuse", choices=("on", "off"), default="on",
                   help="off: every Python task in a new worker (Spark's idle-worker timeout, without the wait)")
    p.add_argument("--churn", action="store_true",
                   help="also run antkv's batches with worker reuse off, and compare its own work per batch")
    p.add_argument("--park", choices=("on", "off"), default="on", help="StoreOptions.park_copies of antkv's stores")
    p.add_argument("--only", choices=("antkv", "antkv,dictfloor"), default=None,
                   help="antkv: run antkv's phases alone (no Spark, floors, rescale); antkv,dictfloor: antkv's "
                        "phases and the dict floor's (bench/pipeline_floor.py), and antkv's share of the latter")
    p.add_argument("--json", default=None)
    p.add_argument("--phase", choices=sorted(PHASES), help=argparse.SUPPRESS)
    p.add_argument("--workdir", help=argparse.SUPPRESS)
    p.add_argument("--first-batch", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.phase:
        result = PHASES[args.phase](args)
        print(MARKER + json.dumps(result), flush=True)
        return
    if min(args.keys, args.batches, args.partitions, args.rescale_keys) < 1 or args.value_size < 0:
        p.error("sizes must be positive")
    workdir = tempfile.mkdtemp(prefix="antkv-bench-state-", dir=args.dir)
    results = {"keys": args.keys, "value_size": args.value_size, "batches": args.batches,
               "partitions": args.partitions, "cores": os.cpu_count()}
    try:
        print(f"antkv: {args.batches} batches, then one in a restarted driver", file=sys.stderr)
        ant_phase = child("antkv", args, workdir)
        ant = ant_phase["batches"]
        ant_restart = child("antkv", args, workdir, first_batch=args.batches, batches=1)["batches"][0]
        churn = churn_restart = None
        if args.churn:
            print(f"antkv, every task in a new Python worker: {args.batches} batches, then a restart", file=sys.stderr)
            churn_dir = os.path.join(workdir, "churn")
            os.makedirs(churn_dir)
            churn = child("antkv", args, churn_dir, worker_reuse="off")["batches"]
            churn_restart = child("antkv", args, churn_dir, worker_reuse="off", first_batch=args.batches,
                                  batches=1)["batches"][0]
        if args.only is not None:
            report = table("antkv StatefulPipeline (foreachBatch)", ant, ant_restart)
            if churn:
                report += table("antkv, every task in a new Python worker", churn, churn_restart)
                report += churn_lines(ant, churn)
            if args.only == "antkv,dictfloor":
                print(f"dict floor (antkv's runner with state in a dict): {args.batches} batches", file=sys.stderr)
                dictfloor = child("dictfloor", args, workdir)["batches"]
                report += floor_table({"dict floor": dictfloor})
                report += dictfloor_lines(ant, dictfloor)
            print("\n".join(report))
            return
        print(f"Spark applyInPandasWithState (RocksDB): {args.batches} batches, then a restart", file=sys.stderr)
        spark_args = spark_phase_args(args)
        spark_phase = spark_child("apply", 0, args.batches, spark_args, workdir)
        spark = spark_phase["batches"]
        spark_restart = spark_child("apply", args.batches, 1, spark_args, workdir)["batches"][0]
        print(f"floor (the pipeline's Spark work without state): {args.batches} batches", file=sys.stderr)
        floor = child("floor", args, workdir)["batches"]
        floor_restart = child("floor", args, workdir, first_batch=args.batches, batches=1)["batches"][0]
        print(f"dict floor (antkv's runner with state in a dict): {args.batches} batches", file=sys.stderr)
        dictfloor = child("dictfloor", args, workdir)["batches"]
        checkpoint_bytes = int(statistics.median(b["checkpoint_new_bytes"] for b in ant[1:] or ant))
        write_ms = pipeline_floor.write_floor_ms(workdir, checkpoint_bytes, args.partitions)
        rescale = []
        for keys in (args.rescale_keys, 10 * args.rescale_keys):
            print(f"antkv rescale 2 -> 3 at {keys:,} keys", file=sys.stderr)
            rescale.append(child("rescale", args, os.path.join(workdir, f"rescale-{keys}"), keys=keys))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    rss = {"antkv": ant_phase["driver_peak_rss_mib"], "spark": spark_phase["driver_peak_rss_mib"]}
    results.update(antkv=ant, antkv_restart=ant_restart, spark=spark, spark_restart=spark_restart, floor=floor,
                   floor_restart=floor_restart, dictfloor=dictfloor, write_floor_ms=write_ms,
                   rescale=rescale,
                   driver_peak_rss_mib=rss)
    report = [f"# antkv vs Spark state store: {args.keys:,} keys, {args.value_size} B values, every key "
              f"updated every batch, {args.partitions} state partitions, local[2]", ""]
    report += table("antkv StatefulPipeline (foreachBatch)", ant, ant_restart)
    if churn:
        report += table("antkv, every task in a new Python worker", churn, churn_restart)
        report += churn_lines(ant, churn)
        results.update(antkv_new_workers=churn, antkv_new_workers_restart=churn_restart)
    report += table("Spark applyInPandasWithState, RocksDB provider", spark, spark_restart)
    report += floor_table({"floor": floor, "dict floor": dictfloor})
    a, s = steady(ant), steady(spark)
    f = steady(floor)
    report.append(f"median rows/s after the first batch: antkv {a:,.0f}, Spark {s:,.0f}: {a / s:.1f}x")
    report.append(f"floor (the pipeline's Spark work, a task keeping no state): {f:,.0f} rows/s, {f / s:.1f}x Spark; "
                  f"antkv runs at {a / f:.0%} of it")
    report += dictfloor_lines(ant, dictfloor, floor)
    rows = statistics.median(b["rows"] for b in dictfloor[1:] or dictfloor)
    persisted = rows / (rows / steady(dictfloor) + write_ms / 1000)
    report.append(f"writing one batch's checkpoint bytes once ({checkpoint_bytes / 1e6:.1f} MB in {args.partitions} "
                  f"files, each written and fsynced, best of 3): {write_ms:,.0f} ms; the dict floor's batch plus that: "
                  f"{persisted:,.0f} rows/s, {persisted / f:.0%} of the floor (the most a store that persists "
                  f"every batch reaches here)")
    report.append(f"driver's Python process, peak RSS over the {args.batches} batches: antkv {rss['antkv']:,.0f} MiB, "
                  f"Spark {rss['spark']:,.0f} MiB")
    report.append(f"restore (first batch in a restarted driver): antkv {ant_restart['trigger_ms']:,} ms, "
                  f"Spark {spark_restart['trigger_ms']:,} ms, the floor {floor_restart['trigger_ms']:,} ms; "
                  f"against each one's steady batch: antkv {restart_ratio(ant, ant_restart):.2f}x, "
                  f"Spark {restart_ratio(spark, spark_restart):.2f}x, the floor {restart_ratio(floor, floor_restart):.2f}x")
    for r in rescale:
        report.append(f"rescale 2 -> 3 at {r['keys']:,} keys: slowest partition's state open "
                      f"{max(r['open_s']):.3f} s (per partition {r['open_s']}), commits {r['commit_s']} s, "
                      f"whole batch {r['batch_s']:.1f} s")
    print("\n".join(report))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
