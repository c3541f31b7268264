"""``make demo``: a streaming click pipeline on antkv state, rescaled mid-stream, checked against
plain Spark.

    python -m antkv.spark.tools.demo [--users 3000] [--events 6000] [--batches 4] [--workdir DIR]

1. Click events (user, ts, page, a payload of random bytes different for every event) are
   written as Parquet files, one file per micro-batch.
2. A streaming query (file source, one file per trigger, ``foreachBatch``) runs the stateful
   function :func:`click_state` on antkv state with 2 partitions: per user a value state (the
   number of clicks), a list state (the user's most recent events, payloads included: the
   large per-key value) and a map state (clicks per page).  Each batch's output (per user in
   the batch: the running click count and the batch's last timestamp) is written by the tasks
   as Parquet files next to the state and published with it, exactly once; the driver sees only
   commit messages and metrics.  Progress and metrics are printed per batch.
3. The query stops; more files arrive; the query restarts from its checkpoint with 3
   partitions: the first batch rescales the state (antkv.spark.store.rescale), then more batches run.
4. The verdict: the final state (read from the published version) and every published output
   row (every batch's output read back as Spark DataFrames, compared in Spark) must equal the
   same computation done by plain Spark over all the events (group-bys and window functions).
   Exit status 0 only when both are equal.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import dataclass

import antkv

from antkv.spark.tools.batch_report import METRICS_FILE, draw, read_batches, table_lines
from antkv.spark.tools.state_reader import read_state
from antkv.spark.runtime.output import output_versions, read_output
from antkv.spark.runtime.pipeline import StatefulPipeline

RECENT = 16  # events kept per user in the list state
PAGES = 24
OPERATOR = "clicks"
OUTPUT_SCHEMA = "user string, clicks long, last_ts long"
EVENT_SCHEMA = "user string, ts long, page string, payload binary, seq int"


def click_state(state, rows):
    """The demo's state function: see the module docstring.  Runs once per partition and
    batch with all the partition's rows."""
    import pandas as pd

    clicks = state.value_state("clicks", 1)
    recent = state.list_state("recent", 2)
    pages = state.map_state("pages", 3)
    users, counts, last = [], [], []
    for key, group in state.groups(rows.sort_values("ts", kind="stable")):
        n = (clicks.get() or (0,))[0] + len(group)
        clicks.update((n,))
        new = list(zip(group["ts"].tolist(), group["page"].tolist(), group["payload"].tolist()))
        recent.put((list(recent.get()) + new)[-RECENT:])
        for page, c in group["page"].value_counts(sort=False).items():
            before = pages.getValue((page,))
            pages.updateValue((page,), ((before[0] if before else 0) + int(c),))
        users.append(key[0])
        counts.append(n)
        last.append(int(group["ts"].iloc[-1]))
    yield pd.DataFrame({"user": users, "clicks": counts, "last_ts": last})


def write_event_files(directory: str, first_file: int, files: int, users: int, events: int,
                      payload_bytes: int, seed: int = 7) -> None:
    """Files ``first_file .. first_file + files - 1`` of ``events`` clicks each; timestamps
    increase across files, so processing files in order processes events in time order."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    os.makedirs(directory, exist_ok=True)
    for f in range(first_file, first_file + files):
        rng = np.random.default_rng([seed, f])
        user_ids = rng.integers(0, users, events)
        blob = rng.bytes(events * payload_bytes)
        table = pa.table({
            "user": [f"u{u:06d}" for u in user_ids],
            "ts": np.arange(f * events, (f + 1) * events, dtype=np.int64),
            "page": [f"/p/{p}" for p in rng.integers(0, PAGES, events)],
            "payload": [blob[i * payload_bytes:(i + 1) * payload_bytes] for i in range(events)],
            "seq": np.full(events, f, dtype=np.int32),
        })
        path = os.path.join(directory, f"events-{f:05d}.parquet")
        pq.write_table(table, path + ".tmp")
        os.replace(path + ".tmp", path)
        stamp = 1_700_000_000 + f  # the file source orders files by modification time
        os.utime(path, (stamp, stamp))


def expected_with_spark(spark, events_dir: str):
    """The same computation in plain Spark: (state dict as read_state gives it, output rows)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    ev = spark.read.schema(EVENT_SCHEMA).parquet(events_dir)
    state: dict = {"clicks": {}, "recent": {}, "pages": {}}
    for r in ev.groupBy("user").count().collect():
        state["clicks"][(r["user"],)] = (r["count"],)
    newest = Window.partitionBy("user").orderBy(F.col("ts").desc())
    recent = (ev.withColumn("rank", F.row_number().over(newest)).where(F.col("rank") <= RECENT)
              .groupBy("user").agg(F.sort_array(F.collect_list(F.struct("ts", "page", "payload"))).alias("events")))
    for r in recent.collect():
        state["recent"][(r["user"],)] = [(e["ts"], e["page"], bytes(e["payload"])) for e in r["events"]]
    for r in ev.groupBy("user", "page").count().collect():
        state["pages"].setdefault((r["user"],), {})[(r["page"],)] = (r["count"],)
    rows = sorted((r["user"], r["clicks"], r["last_ts"]) for r in expected_output(spark, events_dir).collect())
    return state, rows


def expected_output(spark, events_dir: str):
    """Plain Spark's output rows (user, clicks, last_ts) of every batch, as a DataFrame."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    ev = spark.read.schema(EVENT_SCHEMA).parquet(events_dir)
    per_batch = ev.groupBy("user", "seq").agg(F.count("*").alias("n"), F.max("ts").alias("last_ts"))
    running = Window.partitionBy("user").orderBy("seq").rowsBetween(Window.unboundedPreceding, 0)
    return per_batch.select("user", F.sum("n").over(running).alias("clicks"), "last_ts")


def published_output(spark, workdir: str):
    """Every batch's published output, in batch order, as one DataFrame with a ``batch_id``."""
    from pyspark.sql import functions as F

    frames = [read_output(spark, state_uri(workdir), OPERATOR, v - 1).withColumn("batch_id", F.lit(v - 1))
              for v in output_versions(state_uri(workdir), OPERATOR)]
    out = spark.createDataFrame([], OUTPUT_SCHEMA + ", batch_id int")
    for frame in frames:
        out = out.unionByName(frame)
    return out, len(frames)


@dataclass
class Verdict:
    state_equal: bool
    output_equal: bool
    users: int
    output_rows: int
    batches: int
    detail: str

    @property
    def ok(self) -> bool:
        return self.state_equal and self.output_equal

    def __str__(self) -> str:
        word = "PASS" if self.ok else "FAIL"
        return (f"VERDICT: {word} -- state of {self.users} users (clicks, recent events, pages) "
                f"{'equals' if self.state_equal else 'DIFFERS from'} plain Spark's; "
                f"{self.output_rows} output rows over {self.batches} batches "
                f"{'equal' if self.output_equal else 'DIFFER from'} plain Spark's{self.detail}")


def _diff(name, got: dict, want: dict) -> str:
    missing = [k for k in want if k not in got]
    extra = [k for k in got if k not in want]
    wrong = [k for k in want if k in got and got[k] != want[k]]
    if not (missing or extra or wrong):
        return ""
    return f"\n  {name}: {len(missing)} missing, {len(extra)} unexpected, {len(wrong)} different (e.g. {(missing + extra + wrong)[:3]})"


def verify(spark, workdir: str) -> Verdict:
    """Compare the pipeline's final state and output in ``workdir`` with plain Spark's."""
    events_dir = os.path.join(workdir, "events")
    want_state, want_rows = expected_with_spark(spark, events_dir)
    got_state = read_state(state_uri(workdir), OPERATOR)
    got_state = {name: got_state.get(name, {}) for name in want_state}
    out, batches = published_output(spark, workdir)
    got = out.select("user", "clicks", "last_ts")
    want = expected_output(spark, events_dir)
    missing, extra, output_rows = want.exceptAll(got).count(), got.exceptAll(want).count(), got.count()
    detail = "".join(_diff(n, got_state[n], want_state[n]) for n in want_state)
    if missing or extra:
        detail += f"\n  output: {output_rows} rows, {missing} of plain Spark's missing, {extra} unexpected"
    state_equal = all(got_state[n] == want_state[n] for n in want_state)
    output_equal = not missing and not extra and output_rows == len(want_rows)
    return Verdict(state_equal, output_equal, len(want_state["clicks"]), output_rows, batches, detail)


def state_uri(workdir: str) -> str:
    return "file://" + os.path.abspath(os.path.join(workdir, "state"))


def run_phase(spark, workdir: str, partitions: int, key_groups: int, report=print) -> None:
    """Run the streaming query over every event file not yet processed, then stop it."""
    pipe = StatefulPipeline(state_uri(workdir), OPERATOR, ["user"], click_state, OUTPUT_SCHEMA,
                            partitions=partitions, key_groups=key_groups, query_id="demo-clicks",
                            metrics_path=os.path.join(workdir, METRICS_FILE))
    run = pipe.foreach_batch()

    def on_batch(df, batch_id):
        run(df, batch_id)
        m = pipe.history[-1]
        rescale = "" if m.previous_partitions == m.partitions else f", rescaled {m.previous_partitions} -> {m.partitions}"
        report(f"  batch {m.batch_id}: {m.rows} events, {m.keys} state keys, {m.partitions} partitions{rescale}, "
               f"{m.seconds:.1f} s ({m.rows / m.seconds:,.0f} rows/s), uploaded {m.bytes_uploaded / 1e6:.2f} MB, "
               f"reused {m.bytes_reused / 1e6:.2f} MB, load max {max(p.load_s for p in m.partition_metrics):.2f} s, "
               f"commit max {max(p.commit_s for p in m.partition_metrics):.2f} s, cache hit ratio {m.cache_hit_ratio:.2f}")

    query = (spark.readStream.schema(EVENT_SCHEMA).option("maxFilesPerTrigger", 1)
             .parquet(os.path.join(workdir, "events"))
             .writeStream.foreachBatch(on_batch)
             .option("checkpointLocation", os.path.join(workdir, "spark-checkpoint"))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(f"the streaming query failed: {query.exception()}")


def run_demo(spark, workdir: str, users: int, events: int, batches: int, payload_bytes: int,
             partitions=(2, 3), key_groups: int = 4096, report=print) -> Verdict:
    events_dir = os.path.join(workdir, "events")
    report(f"phase 1: {batches} micro-batches of {events} click events ({users} users, "
           f"{payload_bytes}-byte payloads) on {partitions[0]} partitions")
    write_event_files(events_dir, 0, batches, users, events, payload_bytes)
    run_phase(spark, workdir, partitions[0], key_groups, report)
    report(f"phase 2: the query restarts from its checkpoint on {partitions[1]} partitions; "
           f"{batches} more micro-batches")
    write_event_files(events_dir, batches, batches, users, events, payload_bytes)
    run_phase(spark, workdir, partitions[1], key_groups, report)
    report("checking the final state and every output row against plain Spark ...")
    return verify(spark, workdir)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--users", type=int, default=3000)
    ap.add_argument("--events", type=int, default=6000, help="click events per micro-batch")
    ap.add_argument("--batches", type=int, default=4, help="micro-batches before and after the restart")
    ap.add_argument("--payload-bytes", type=int, default=128)
    ap.add_argument("--workdir", default=None, help="default: a new directory under the system temp dir")
    args = ap.parse_args(argv)
    workdir = args.workdir or tempfile.mkdtemp(prefix="antkv-demo-")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    started = time.perf_counter()
    spark = (SparkSession.builder.master("local[*]").appName("antkv-demo")
             .config("spark.sql.shuffle.partitions", "4").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.execution.arrow.pyspark.enabled", "true").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    try:
        verdict = run_demo(spark, workdir, args.users, args.events, args.batches, args.payload_bytes)
    finally:
        spark.stop()
    print(verdict)
    batches = read_batches(os.path.join(workdir, METRICS_FILE))
    print("\nthe pipeline's batches (seconds along each batch's slowest task, then publish; spark: the rest):")
    for line in table_lines(batches):
        print("  " + line)
    picture = os.path.join(workdir, f"{OPERATOR}-report.png")
    try:
        draw(batches, OPERATOR, picture)
    except antkv.InvalidArgumentError as e:  # matplotlib missing: the table above is the report
        picture = f"not drawn ({e})"
    print(f"\npicture of the batches: {picture}")
    state = os.path.join(workdir, "state")
    print(f"checkpoint (antkv state): {state_uri(workdir)}")
    print(f"  inspect it: .venv/bin/antkv state-info {state}")
    print(f"              .venv/bin/antkv state-show {state} {OPERATOR} --limit 5")
    print(f"              .venv/bin/antkv state-report {state} {OPERATOR}   (this table and picture again)")
    print(f"Spark's streaming checkpoint: {os.path.join(workdir, 'spark-checkpoint')}")
    print(f"metrics (one JSON line per batch): {os.path.join(workdir, METRICS_FILE)}")
    print(f"output (Parquet files published with the state; one JSON record per batch lists them): "
          f"{os.path.join(workdir, 'state', OPERATOR, '_output_log')}")
    print(f"total {time.perf_counter() - started:.0f} s")
    return 0 if verdict.ok else 1


if __name__ == "__main__":
    sys.exit(main())
