"""The soak bench's answers checked across engines, its table and its plots.

:func:`engine_outputs` reads what an engine emitted over the whole stream (Spark's memory
sink; antkv's published output, read batch by batch as it was published); :func:`compare_outputs`
compares them as multisets of rows.  Object counts leave out the streaming query's own logs
(offsets, commits, sources), which Spark keeps for ``minBatchesToRetain`` batches whatever the
state store; the table gives them apart.
:func:`summary` reduces each engine's measured batches to p50, p95 and max latency, the least-squares slope of latency per 100 batches, the
throughput (input rows over the summed latencies), storage over the steady batches (the largest
object count, location bytes and local disk of their first half against those of their second
half: equal when flat, wherever a compaction's sawtooth falls) and the largest RSS.  The
first batch (the query's start: planning, Python workers, imports; paid by whichever engine the
rotation puts first) is reported apart, and the two flush files at the end are not measured.
"""

from __future__ import annotations

import os
from collections import Counter

from antkv.spark.store.store_options import StoreOptions
from bench.measure import median, percentile
from bench.plots import pyplot, save_small
from bench.soak_workload import GROWTH

MiB = 1 << 20


def engine_outputs(spark, engine) -> list[tuple]:
    """Every row ``engine`` emitted over the stream (antkv's read batch by batch as published)."""
    if engine.antkv:
        return list(engine.emitted)
    return [tuple(r) for r in spark.table(engine.table).collect()]


def compare_outputs(outputs: dict[str, list[tuple]]) -> dict:
    """The engines' output rows (name -> rows, the first the reference) compared as multisets."""
    rows = {name: Counter(r) for name, r in outputs.items()}
    reference = next(iter(rows))
    differences = []
    for name, got in rows.items():
        missing, extra = rows[reference] - got, got - rows[reference]
        if missing or extra:
            sample = next(iter(missing or extra))
            differences.append(f"{name} lacks {sum(missing.values())} and adds {sum(extra.values())} rows of "
                               f"{reference}'s (e.g. {'lacks' if missing else 'adds'} {sample})")
    reasons = Counter()
    for row, n in rows[reference].items():
        reasons[row[-1]] += n
    return {"equal": not differences, "difference": "; ".join(differences),
            "rows": {name: sum(c.values()) for name, c in rows.items()}, "closed": dict(reasons)}


def slope_per_100(values: list[float]) -> float:
    """The least-squares slope of ``values`` over their index, per 100 steps."""
    n = len(values)
    if n < 2:
        return 0.0
    mean_x, mean_y = (n - 1) / 2, sum(values) / n
    sxx = sum((i - mean_x) ** 2 for i in range(n))
    return 100 * sum((i - mean_x) * (v - mean_y) for i, v in enumerate(values)) / sxx


def measured(results: dict) -> list[dict]:
    """The batches the figures are over: not the first, when there are others, nor the flush."""
    batches = [b for b in results["per_batch"] if not b["flush"]]
    return batches[1:] or batches


def steady(results: dict) -> list[dict]:
    """The measured batches once the state is at its steady size: after the key space stopped
    growing (``soak_workload.GROWTH``) and a key's expiry time more (all of them, if none is)."""
    c = results["config"]
    start = int(c["batches"] * GROWTH) + c["ttl_batches"]
    batches = measured(results)
    return [b for b in batches if b["batch"] >= start] or batches


def halves_max(values: list[float]) -> tuple[float, float]:
    """The largest of the first and of the second half of ``values``: flat when equal, however
    a sawtooth (compaction, snapshots, garbage collection) falls across the halves."""
    half = max(1, len(values) // 2)
    return max(values[:half]), max(values[half:] or values[:half])


def _state_objects(figures: dict) -> int:
    """The objects of a batch's checkpoint and location that are not the streaming query's own
    logs (Spark keeps those for ``minBatchesToRetain`` batches, whatever the state store)."""
    return figures["objects"] - figures["log_objects"]


def summary(results: dict) -> dict:
    """Per engine: the figures of the table (module docstring)."""
    batches = measured(results)
    out = {}
    for name in results["engines"]:
        rows = [b[name] for b in batches]
        lat = [r["latency_s"] for r in rows]
        s = sorted(lat)
        still = [b[name] for b in steady(results)]
        figures = {
            "first_s": results["per_batch"][0][name]["latency_s"], "p50_s": median(lat), "p95_s": percentile(s, 95), "max_s": s[-1], "slope_s_per_100": slope_per_100(lat),
            "rows_per_s": sum(r["rows"] for r in rows) / sum(lat) if sum(lat) else 0.0,
            "wall_rows_per_s": sum(r["rows"] for r in rows) / sum(r["wall_s"] for r in rows),
            "mib_added": sum(r["bytes_added"] for r in rows) / MiB,
            "objects_halves": halves_max([_state_objects(r) for r in still]),
            "output_objects_end": rows[-1]["output_objects"], "log_objects_end": rows[-1]["log_objects"],
            "mib_halves": tuple(v / MiB for v in halves_max([r["bytes"] for r in still])),
            "max_worker_rss_mib": max(r["max_worker_rss"] for r in rows) / MiB,
            "max_jvm_rss_mib": max(r["jvm_rss"] for r in rows) / MiB,
        }
        if "local_disk" in rows[0]:
            figures["disk_halves_mib"] = tuple(v / MiB for v in halves_max([r["local_disk"] for r in still]))
        if "reused" in rows[0]:
            figures.update({k: sum(r.get(k, 0) for r in rows)
                            for k in ("reused", "reopened", "caught_up", "rebuilt", "snapshots")})
            figures["rebuilt_most"] = max(r.get("rebuilt", 0) for r in rows)  # in one batch
        out[name] = figures
    return out


def report(results: dict) -> str:
    c = results["config"]
    n = c["batches"]
    s = summary(results)
    batches, still = measured(results), steady(results)
    lines = [f"# Soak: {n} batches of {c['rows']:,} rows, {c['keys']:,} keys once grown, expiry after "
             f"{c['ttl_batches']} idle batches, {c['partitions']} state partitions, local[2], {results['cores']} cores, "
             f"seed {c['seed']}; run {results.get('run_s', 0):,.0f} s", "",
             f"latency over batches {batches[0]['batch']}-{batches[-1]['batch']} (the first batch apart); objects, MiB "
             f"and local disk over the steady batches {still[0]['batch']}-{still[-1]['batch']}: the largest in their "
             "first half -> in their second half", "",
             "| engine | first s | p50 s | p95 s | max s | slope s/100 batches | rows/s | objects (output; query log, at the end) "
             "| MiB | MiB added | local disk MiB | copies reused / reopened / caught up / rebuilt (most in one batch) "
             "| snapshots |",
             "|---|---:|---:|---:|---:|---:|---:|---|---|---:|---|---|---:|"]
    for name, f in s.items():
        disk = "{:.1f} -> {:.1f}".format(*f["disk_halves_mib"]) if "disk_halves_mib" in f else "-"
        objects, mib = "{} -> {}".format(*f["objects_halves"]), "{:.1f} -> {:.1f}".format(*f["mib_halves"])
        copies = (f"{f['reused']} / {f['reopened']} / {f['caught_up']} / {f['rebuilt']} ({f['rebuilt_most']}) "
                  f"| {f['snapshots']}"
                  if "reused" in f else "- | -")
        lines.append(f"| {name} | {f['first_s']:.2f} | {f['p50_s']:.2f} | {f['p95_s']:.2f} | {f['max_s']:.2f} | {f['slope_s_per_100']:+.2f} "
                     f"| {f['rows_per_s']:,.0f} | {objects} ({f['output_objects_end']}; {f['log_objects_end']}) "
                     f"| {mib} | {f['mib_added']:.1f} | {disk} | {copies} |")
    lines.append("")
    rss = max(f["max_worker_rss_mib"] for f in s.values())
    jvm = max(f["max_jvm_rss_mib"] for f in s.values())
    budget = c.get("memory_mib") or StoreOptions().memory_bytes // MiB
    lines.append(f"largest Python worker RSS {rss:,.0f} MiB (antkv's memory budget per worker {budget:,} MiB), "
                 f"JVM RSS {jvm:,.0f} MiB (shared by every engine)")
    antkv = [e for e in s if e.startswith("antkv")]
    spark = [e for e in s if e.startswith("spark")]
    for a in antkv:
        for b in spark:
            lines.append(f"{a} / {b}: throughput {s[a]['rows_per_s'] / s[b]['rows_per_s']:.1f}x, "
                         f"p95 {s[a]['p95_s']:.2f} s against {s[b]['p95_s']:.2f} s")
    if "floor" in s:
        floor = s["floor"]
        lines.append(f"floor (Spark's own work of a pipeline batch): p50 {floor['p50_s']:.2f} s, "
                     f"{floor['rows_per_s']:,.0f} rows/s")
        for b in spark:
            lines.append(f"floor / {b}: throughput {floor['rows_per_s'] / s[b]['rows_per_s']:.1f}x "
                         f"(the most any Python state store run under foreachBatch could reach here)")
    out = results["outputs"]
    lines.append(f"outputs {'equal' if out['equal'] else 'DIFFER: ' + out['difference']}: "
                 f"{out['rows']} rows, closed {out['closed']}")
    return "\n".join(lines)


def plots(results: dict, directory: str) -> list[str]:
    """``soak-latency.png`` (latency per batch, one line per engine) and ``soak-storage.png``
    (bytes added, objects, antkv's local disk and the processes' RSS per batch)."""
    plt = pyplot()
    os.makedirs(directory, exist_ok=True)
    batches = [b for b in results["per_batch"] if not b["flush"]]
    xs = [b["batch"] for b in batches]
    engines = results["engines"]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for name in engines:
        ax.plot(xs, [b[name]["latency_s"] for b in batches], marker=".", label=name)
    ax.set_xlabel("batch")
    ax.set_ylabel("latency, s (triggerExecution)")
    ax.set_title("batch latency over the run")
    ax.legend(fontsize="small")
    paths = [save_small(fig, os.path.join(directory, "soak-latency.png"))]
    plt.close(fig)

    fig, axes = plt.subplots(4, 1, figsize=(9, 12), sharex=True)
    for name in engines:
        axes[0].plot(xs, [b[name]["bytes_added"] / MiB for b in batches], marker=".", label=name)
        axes[1].plot(xs, [_state_objects(b[name]) for b in batches], label=name)
        if "local_disk" in batches[0][name]:
            axes[2].plot(xs, [b[name]["local_disk"] / MiB for b in batches], label=name)
    if "spark_local_disk" in batches[0]:
        axes[2].plot(xs, [b["spark_local_disk"] / MiB for b in batches], label="spark.local.dir (every Spark engine)")
    first = engines[0]
    axes[3].plot(xs, [b[first]["max_worker_rss"] / MiB for b in batches], label="largest Python worker")
    axes[3].plot(xs, [b[first]["workers_rss"] / MiB for b in batches], label="all Python workers")
    axes[3].plot(xs, [b[first]["jvm_rss"] / MiB for b in batches], label="JVM")
    for ax, title, unit in zip(axes, ("bytes each batch added to the checkpoint (and antkv's location)",
                                      "objects in the checkpoint (and antkv's location), the query's own logs apart",
                                      "local disk: antkv's cache (working copies, snapshot files), Spark's local dir",
                                      "resident memory after each batch"), ("MiB", "objects", "MiB", "MiB")):
        ax.set_title(title, fontsize="medium")
        ax.set_ylabel(unit)
        ax.legend(fontsize="x-small")
    axes[-1].set_xlabel("batch")
    fig.tight_layout()
    paths.append(save_small(fig, os.path.join(directory, "soak-storage.png")))
    plt.close(fig)
    return paths
