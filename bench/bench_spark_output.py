"""The driver's Python memory over one pipeline batch with a large output.

Usage::

    .venv/bin/python bench/bench_spark_output.py [--rows 5000000] [--partitions 2]

One batch of ``--rows`` input rows (``--rows / 10`` keys) through a :class:`StatefulPipeline`
that emits one output row per input row; the driver's resident set size is sampled every 50 ms
while the batch runs.  Reported: the driver's RSS before the batch, its peak during it, the
output rows (counted by Spark from the published files) and the batch's time.  Single runs on a
shared machine: expect noise.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def every_row(state, rows):
    """Per key: a running count; emits (key, count) for every input row."""
    import numpy as np
    import pandas as pd

    count = state.value_state("count", 1)
    g = state.grouped(rows)
    totals = np.empty(len(g.frame), dtype=np.int64)
    for key_group, key, start, end in zip(g.key_groups.tolist(), g.keys, g.starts.tolist(), g.ends.tolist()):
        state.set_current_key(key_group, key)
        n = (count.get() or (0,))[0]
        totals[start:end] = np.arange(n + 1, n + 1 + end - start)
        count.update((n + end - start,))
    yield pd.DataFrame({"key": g.frame["key"].to_numpy(), "count": totals})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=5_000_000)
    ap.add_argument("--partitions", type=int, default=2)
    args = ap.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from antkv.spark import StatefulPipeline

    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", str(args.partitions)).getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    work = tempfile.mkdtemp(prefix="antkv-output-bench-")
    df = spark.range(args.rows).select(F.concat(F.lit("k"), (F.col("id") % max(1, args.rows // 10)).cast("string"))
                                       .alias("key"))
    pipe = StatefulPipeline(f"file://{work}/state", "out", "key", every_row, "key string, count long",
                            partitions=args.partitions)
    before = _rss_mb()
    peak = [before]
    done = threading.Event()

    def sample():
        while not done.wait(0.05):
            peak[0] = max(peak[0], _rss_mb())
    threading.Thread(target=sample, daemon=True).start()
    t0 = time.perf_counter()
    result = pipe.run(df)
    seconds = time.perf_counter() - t0
    done.set()
    peak[0] = max(peak[0], _rss_mb())
    rows = result.output.count()
    print(f"output rows {rows:,} (metrics {result.metrics.output_rows:,}) in {seconds:.1f} s; "
          f"driver RSS before {before:.0f} MB, peak during the batch {peak[0]:.0f} MB "
          f"(+{peak[0] - before:.0f} MB)")
    spark.stop()
    return 0 if rows == args.rows else 1


if __name__ == "__main__":
    sys.exit(main())
