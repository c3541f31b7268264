"""A Python worker's memory while its partition's input streams through a stateful pipeline.

Usage::

    .venv/bin/python bench/bench_spark_worker_memory.py [--budget-mb 48] [--sizes 1,10] [--value-bytes 100]

One partition, one Python worker (``local[1]``).  The state stores get ``--budget-mb`` of memory
(``StoreOptions.memory_bytes``: write buffers and block cache), the row cache an eighth of it,
and a batch's change set ``--budget-mb`` (``max_changelog_bytes``).
For each multiple ``m`` of ``--sizes``, one batch whose input is ``m`` times that budget (keys of
~12 bytes, values of ``--value-bytes`` incompressible bytes, counted as Arrow bytes) runs through
a state function that keeps each key's running count and last value length, and reports the
worker's resident set size after every chunk.  Printed per size: the input bytes, the chunks,
the worker's RSS at the first chunk and its peak over the batch (``VmHWM`` of the worker
process), and the batch's time.  A worker that held its partition's input would grow with ``m``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

MiB = 1 << 20


def _status_mb(field: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def count_and_measure(state, rows):
    """Per key: a running count and the last value's length; one output row per chunk with the
    worker's RSS after it (the only output: the bench measures the input side)."""
    import pandas as pd

    count = state.value_state("count", 2)
    for key, group in state.groups(rows):
        n = (count.get() or (0, 0))[0]
        count.update((n + len(group), len(group["value"].iloc[-1])))
    yield pd.DataFrame({"rows": [len(rows)], "rss_mb": [_status_mb("VmRSS")], "hwm_mb": [_status_mb("VmHWM")]})


def run_size(spark, work: str, multiple: int, args) -> dict:
    from pyspark.sql import functions as F

    from antkv.spark import StatefulPipeline, StoreOptions

    budget = args.budget_mb * MiB
    row_bytes = 12 + args.value_bytes + 16  # key, value and Arrow's two offsets
    rows = multiple * budget // row_bytes
    keys = max(1, rows // 4)
    df = (spark.range(rows, numPartitions=2)
          .select(F.concat(F.lit("key"), (F.col("id") * 7919 % keys).cast("string")).alias("key"),
                  F.expr(f"substr(base64(concat_ws('', transform(sequence(0, {args.value_bytes // 16}), "
                         f"i -> unhex(sha2(concat(cast(id as string), '/', cast(i as string)), 256))))), "
                         f"1, {args.value_bytes})").alias("value")))
    options = StoreOptions(memory_bytes=budget, row_cache_bytes=budget // 8, max_changelog_bytes=budget,
                           cache_dir=os.path.join(work, f"cache-{multiple}"))
    pipe = StatefulPipeline(f"file://{work}/state-{multiple}", "mem", "key", count_and_measure,
                            "rows long, rss_mb double, hwm_mb double", partitions=1, options=options)
    t0 = time.perf_counter()
    result = pipe.run(df)
    seconds = time.perf_counter() - t0
    chunks = result.output.toPandas()  # one row per chunk: small
    assert int(chunks["rows"].sum()) == rows, (int(chunks["rows"].sum()), rows)
    return {"multiple": multiple, "rows": rows, "input_mb": rows * row_bytes / MiB, "chunks": len(chunks),
            "first_rss_mb": float(chunks["rss_mb"].iloc[0]), "peak_rss_mb": float(chunks["hwm_mb"].max()),
            "seconds": seconds}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget-mb", type=int, default=48)
    ap.add_argument("--sizes", default="1,10", help="input sizes as multiples of the budget")
    ap.add_argument("--value-bytes", type=int, default=100)
    args = ap.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
             .config("spark.python.worker.reuse", "true").config("spark.driver.memory", "2g")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    work = tempfile.mkdtemp(prefix="antkv-worker-memory-")
    print(f"store memory budget {args.budget_mb} MiB (row cache {args.budget_mb / 8:.0f} MiB, "
          f"change set {args.budget_mb} MiB), "
          f"maxRecordsPerBatch {spark.conf.get('spark.sql.execution.arrow.maxRecordsPerBatch')}")
    print(f"{'input':>8} {'rows':>11} {'input MiB':>10} {'chunks':>7} {'RSS first chunk':>16} "
          f"{'peak RSS':>9} {'seconds':>8}")
    for m in (int(s) for s in args.sizes.split(",")):
        r = run_size(spark, work, m, args)
        print(f"{m:>7}x {r['rows']:>11,} {r['input_mb']:>10.0f} {r['chunks']:>7} {r['first_rss_mb']:>13.0f} MB "
              f"{r['peak_rss_mb']:>6.0f} MB {r['seconds']:>8.1f}")
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
