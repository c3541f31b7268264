"""A pipeline's batches over time, as a table and a picture (``antkv state-report`` prints
and draws it; ``make demo`` ends by drawing its own).

The figures are the ``BatchMetrics`` a :class:`antkv.spark.StatefulPipeline` appends, one JSON
line per batch, to its ``metrics_path`` (docs/spark-reference.md, *Output and metrics*).  That file is local to the
driver, not part of the checkpoint location; ``antkv state-report`` finds it with ``--metrics
FILE``, or as :data:`METRICS_FILE` in the location's operator directory, in the location, or
beside the location (where ``make demo`` writes it).

The ``copies`` column gives, in partition order, what became of each partition's working copy
when its task opened it: ``R`` reused (this Python worker held it), ``O`` reopened (a copy
parked on the machine by another worker), ``C`` caught up (a copy of an older version brought
forward by changelogs), ``B`` rebuilt from the checkpoint location, ``N`` new (an empty state).

Where a batch's time went is read along its slowest task, the one that held the batch up:
its ``load``, ``process`` and ``commit``; then the driver's ``publish``; ``spark`` is the rest
of the batch's wall time (scheduling, shuffle, collecting the commit messages).  A batch run
again (``replayed``) counts once, its last run.

The picture needs matplotlib (in the ``bench`` extra); without it ``--no-png`` prints the table
alone.
"""

from __future__ import annotations

import json

from antkv import errors
from antkv.spark.store.opening import CAUGHT_UP, NEW, REBUILT, REOPENED, REUSED

METRICS_FILE = "metrics.jsonl"
TIME_PARTS = ("load", "process", "commit", "publish", "spark")
# each partition's copy in the ``copies`` column, in partition order
FATE_LETTERS = {REUSED: "R", REOPENED: "O", CAUGHT_UP: "C", REBUILT: "B", NEW: "N"}


def read_batches(path: str) -> list[dict]:
    """One row per batch id (the last run of a replayed one), in batch order, with the time
    split of the module docstring."""
    by_batch: dict[int, dict] = {}
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                m = json.loads(line)
                by_batch[int(m["batch_id"])] = _row(m)
            except (ValueError, KeyError, TypeError) as e:
                raise errors.CorruptionError(f"line {n} is not a batch's metrics ({type(e).__name__}: {e})", path) from None
    if not by_batch:
        raise errors.InvalidArgumentError(f"{path} holds no batch: the pipeline has not run a batch yet")
    return [by_batch[b] for b in sorted(by_batch)]


def _row(m: dict) -> dict:
    parts = m.get("partition_metrics") or []
    slowest = max(parts, key=lambda p: p["load_s"] + p["process_s"] + p["commit_s"], default=None)
    load, process, commit = (0.0, 0.0, 0.0) if slowest is None else (
        slowest["load_s"], slowest["process_s"], slowest["commit_s"])
    publish = float(m["publish_s"])
    return {
        "batch": int(m["batch_id"]), "version": int(m["version"]), "partitions": int(m["partitions"]),
        "previous_partitions": int(m["previous_partitions"]), "rows": int(m["rows"]), "keys": int(m["keys"]),
        "seconds": float(m["seconds"]), "load": load, "process": process, "commit": commit, "publish": publish,
        "spark": max(0.0, float(m["seconds"]) - load - process - commit - publish),
        "bytes_uploaded": int(m["bytes_uploaded"]), "bytes_reused": int(m["bytes_reused"]),
        "cache_hit_ratio": float(m["cache_hit_ratio"]), "replayed": bool(m["replayed"]),
        "rescaled": int(m["previous_partitions"]) != int(m["partitions"]),
        "copies": "".join(FATE_LETTERS[fate_of(p)] for p in sorted(parts, key=lambda p: p["partition"])),
    }


def fate_of(partition_metrics: dict) -> str:
    """What became of a partition's copy when its task opened it (``copy_fate``; for metrics
    written before it was recorded, what ``reused_working_copy`` and ``caught_up_working_copy`` say)."""
    fate = partition_metrics.get("copy_fate")
    if fate in FATE_LETTERS:
        return fate
    if partition_metrics.get("caught_up_working_copy"):
        return CAUGHT_UP
    return REUSED if partition_metrics.get("reused_working_copy") else REBUILT


def table_lines(rows: list[dict]) -> list[str]:
    """The table ``state-report`` prints: one line per batch."""
    unit, scale = _byte_unit(max(max(r["bytes_uploaded"], r["bytes_reused"]) for r in rows))
    width = max(6, max(len(r["copies"]) for r in rows))
    head = (f"{'batch':>5} {'version':>7} {'parts':>5} {'rows':>9} {'keys':>9} {'seconds':>8} "
            + " ".join(f"{t:>7}" for t in TIME_PARTS) + f" {'up ' + unit:>8} {'reused ' + unit:>9} {'cache hit':>9}"
            + f"  {'copies':<{width}}  note")
    lines = [head]
    for r in rows:
        note = []
        if r["rescaled"]:
            note.append(f"rescaled {r['previous_partitions']} -> {r['partitions']}")
        if r["replayed"]:
            note.append("replayed")
        lines.append(
            f"{r['batch']:>5} {r['version']:>7} {r['partitions']:>5} {r['rows']:>9} {r['keys']:>9} {r['seconds']:>8.2f} "
            + " ".join(f"{r[t]:>7.2f}" for t in TIME_PARTS)
            + f" {r['bytes_uploaded'] / scale:>8.2f} {r['bytes_reused'] / scale:>9.2f} {r['cache_hit_ratio']:>9.2f}"
            + f"  {r['copies'] or '-':<{width}}  " + ", ".join(note))
    return lines


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise errors.InvalidArgumentError(
            "state-report draws its picture with matplotlib, which is not installed: "
            "pip install matplotlib (or antkv[bench]), or pass --no-png for the table alone") from None
    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt

    return plt


def _byte_unit(largest: int) -> tuple[str, float]:
    """The unit that shows ``largest`` bytes as a readable number."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if largest >= scale:
            return unit, scale
    return "bytes", 1.0


def draw(rows: list[dict], operator: str, png: str) -> None:
    """Write the picture of ``rows`` to ``png``: time split, rows and keys, bytes, cache hit
    ratio and partitions per batch; every rescale is a dashed line across all panels."""
    plt = _pyplot()
    from matplotlib.ticker import MaxNLocator

    batches = [r["batch"] for r in rows]
    fig, axes = plt.subplots(5, 1, figsize=(10, 14), sharex=True, constrained_layout=True)
    fig.suptitle(f"antkv state of operator {operator!r}: {len(rows)} batches", fontsize=14)
    time_ax, keys_ax, bytes_ax, cache_ax, parts_ax = axes

    bottom = [0.0] * len(rows)
    for part in TIME_PARTS:
        values = [r[part] for r in rows]
        time_ax.bar(batches, values, bottom=bottom, label=part)
        bottom = [b + v for b, v in zip(bottom, values)]
    time_ax.set_ylabel("seconds")
    time_ax.set_title("where each batch's time went (its slowest task, then the driver)")
    time_ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")

    keys_ax.plot(batches, [r["keys"] for r in rows], marker="o", color="tab:blue", label="state keys")
    keys_ax.set_ylabel("state keys", color="tab:blue")
    rows_ax = keys_ax.twinx()
    rows_ax.bar(batches, [r["rows"] for r in rows], alpha=0.3, color="tab:gray", label="input rows")
    rows_ax.set_ylabel("input rows", color="tab:gray")
    keys_ax.set_zorder(rows_ax.get_zorder() + 1)  # the line over the bars
    keys_ax.patch.set_visible(False)
    keys_ax.set_title("keys in the state after each batch, and the batch's input rows")

    width = 0.4
    unit, scale = _byte_unit(max(max(r["bytes_uploaded"], r["bytes_reused"]) for r in rows))
    width = max(6, max(len(r["copies"]) for r in rows))
    bytes_ax.bar([b - width / 2 for b in batches], [r["bytes_uploaded"] / scale for r in rows], width, label="uploaded")
    bytes_ax.bar([b + width / 2 for b in batches], [r["bytes_reused"] / scale for r in rows], width, label="reused")
    bytes_ax.set_ylabel(unit)
    bytes_ax.set_title("bytes each version uploaded, and bytes it named that were already in the location")
    bytes_ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")

    cache_ax.plot(batches, [r["cache_hit_ratio"] for r in rows], marker="o", color="tab:green")
    cache_ax.set_ylim(-0.05, 1.05)
    cache_ax.set_ylabel("hit ratio")
    cache_ax.set_title("state loads served by the executors' local cache or open working copies")

    parts_ax.step(batches, [r["partitions"] for r in rows], where="mid", marker="o", color="tab:purple")
    parts_ax.set_ylabel("partitions")
    parts_ax.set_ylim(0, max(r["partitions"] for r in rows) + 1)
    parts_ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    parts_ax.set_title("partitions per batch")
    parts_ax.set_xlabel("batch id")
    parts_ax.set_xticks(batches)

    for r in rows:
        if r["rescaled"]:
            for ax in axes:
                ax.axvline(r["batch"] - 0.5, color="black", linestyle="--", linewidth=1)
            parts_ax.annotate(f"rescaled {r['previous_partitions']} -> {r['partitions']}", (r["batch"] - 0.45, 0.3),
                              fontsize="small")
    fig.savefig(png, dpi=90)
    plt.close(fig)
