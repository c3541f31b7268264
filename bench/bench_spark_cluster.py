"""Where a pipeline's partitions run on a standalone cluster, and what each move costs.

Usage::

    .venv/bin/python bench/bench_spark_cluster.py [--keys 40000] [--batches 6] [--partitions 4]
        [--value-size 1024] [--dir /tmp]

Starts a master and two workers on 127.0.0.1 (``tests/spark_cluster.py``: one core each, each
with its own antkv cache directory, as two machines), then runs the pipeline bench's workload
(``bench_spark_state.count_and_latest``: every key once per batch, incompressible values) as
batch jobs from this process.  Per batch and partition it reports the executor the task ran on,
what became of the working copy (``R`` reused, ``O`` reopened, ``C`` caught up, ``B`` rebuilt,
``N`` new), and the bytes the load read from the location; then the batches' totals.  A
partition that stays on its machine should read nothing; one that moved reads what the other
machine lacks.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from bench.bench_spark_baseline import write_batch_file  # noqa: E402
from bench.bench_spark_state import count_and_latest  # noqa: E402


def noting_the_executor(state, rows):
    """The bench's state function, reporting the task's working directory (its executor)."""
    state.reports["cwd"] = os.getcwd()
    yield from count_and_latest(state, rows)


def executor_of(cwd: str, root: str) -> str:
    rel = os.path.relpath(cwd, root).split(os.sep)
    return rel[0] if rel and rel[0].startswith("worker") else "?"


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--keys", type=int, default=40_000)
    p.add_argument("--batches", type=int, default=6)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--value-size", type=int, default=1024)
    p.add_argument("--dir", default=None)
    args = p.parse_args(argv)

    from pyspark.sql import SparkSession
    from spark_cluster import start_cluster

    from antkv.spark import StatefulPipeline
    from antkv.spark.tools.batch_report import FATE_LETTERS

    work = tempfile.mkdtemp(prefix="antkv-bench-cluster-", dir=args.dir)
    cluster = start_cluster(os.path.join(work, "cluster"))
    rows_out = []
    try:
        os.environ["PYSPARK_PYTHON"] = sys.executable
        spark = (SparkSession.builder.master(cluster.master_url).appName("antkv-bench-cluster")
                 .config("spark.sql.shuffle.partitions", str(args.partitions))
                 .config("spark.executor.memory", "1g").config("spark.driver.host", "127.0.0.1")
                 .config("spark.ui.showConsoleProgress", "false")
                 .config("spark.driver.bindAddress", "127.0.0.1").config("spark.ui.enabled", "false")
                 .config("spark.executorEnv.PYTHONPATH", ROOT).config("spark.pyspark.python", sys.executable)
                 .getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        input_dir = os.path.join(work, "input")
        os.makedirs(input_dir)
        pipe = StatefulPipeline("file://" + os.path.join(work, "state"), "bench", ["key"], noting_the_executor,
                                "key string, count long", partitions=args.partitions, query_id="cluster")
        print("| batch | time s | per partition: executor, copy, MB read | MB read | copies moved |")
        print("|---:|---:|:---|---:|---:|")
        where = {}
        for batch in range(args.batches):
            write_batch_file(input_dir, batch, args.keys, args.value_size)
            t0 = time.perf_counter()
            m = pipe.run(spark.read.parquet(os.path.join(input_dir, f"batch-{batch:05d}.parquet")), batch).metrics
            wall = time.perf_counter() - t0
            parts = sorted(m.partition_metrics, key=lambda q: q.partition)
            cells, moved = [], 0
            for q in parts:
                ex = executor_of(q.reports["cwd"], cluster.root)
                moved += batch > 0 and where.get(q.partition) not in (None, ex)
                where[q.partition] = ex
                cells.append(f"{ex[-1]}{FATE_LETTERS[q.copy_fate]} {q.bytes_downloaded / 1e6:.1f}")
            read = sum(q.bytes_downloaded for q in parts)
            rows_out.append((batch, wall, read, moved))
            print(f"| {batch} | {wall:.1f} | {' / '.join(cells)} | {read / 1e6:.1f} | {moved} |", flush=True)
        spark.stop()
    finally:
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)
    later = rows_out[1:]
    print(f"\nafter the first batch: {sum(r[3] for r in later)} of {len(later) * args.partitions} tasks changed "
          f"machine; {sum(r[2] for r in later) / 1e6:.1f} MB read from the location in all "
          f"(the state is about {args.keys * (args.value_size + 40) / 1e6:.0f} MB)")


if __name__ == "__main__":
    main()
