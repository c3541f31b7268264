"""PNG plots of a run (matplotlib, Agg backend, small files):

* ``throughput.png`` -- MiB/s by value size, one panel per workload, one line per engine
  (ops/s where a workload moves no values: the deletes, readmissing, YCSB C);
* ``amplification.png`` -- write amplification of fillrandom and overwrite, space
  amplification after overwrite (after compaction + GC where the engine has it);
* ``latency.png`` -- p50 and p99 of fillrandom and readrandom per engine and value size.
"""

from __future__ import annotations

import os

from .report import NO_WRITE_AMP, aggregate

DPI = 60


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_small(fig, path: str) -> str:
    """Save at a low DPI, then re-encode with a 64-colour palette: a 3-5x smaller file for
    line and bar charts, which is what keeps the copies in docs/img small."""
    fig.savefig(path, dpi=DPI)
    try:
        from PIL import Image  # matplotlib depends on Pillow
    except ImportError:
        return path
    with Image.open(path) as im:
        small = im.convert("RGB").quantize(colors=64)
    small.save(path, optimize=True)
    return path


def _engines(meta: dict) -> list[str]:
    return [e for e in meta["engines"] if e not in meta["unavailable"]]


def _label(vs: int) -> str:
    return f"{vs // 1024}K" if vs >= 1024 else f"{vs}B"


def throughput(out: str, meta: dict, aggs: dict) -> str:
    plt = pyplot()
    wls = meta["workloads"]
    cols = min(4, len(wls))
    rows = (len(wls) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.5 * rows), squeeze=False)
    sizes = meta["value_sizes"]
    for i, wl in enumerate(wls):
        ax = axes[i // cols][i % cols]
        # deletes move no values, readmissing and read-only YCSB count none: ops/s instead
        moved = any(a.get("mib_s", (0,))[0] > 0 for k, a in aggs.items() if k[0] == wl)
        metric = "ops_s" if wl in NO_WRITE_AMP or not moved else "mib_s"
        for e in _engines(meta):
            pts = [(j, aggs[(wl, vs, e)][metric][0]) for j, vs in enumerate(sizes)
                   if (wl, vs, e) in aggs and metric in aggs[(wl, vs, e)]
                   and aggs[(wl, vs, e)][metric][0] > 0]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=e,
                        linewidth=2.2 if e.startswith("antkv") else 1.2)
        ax.set_title(wl + (" (ops/s)" if metric == "ops_s" else ""), fontsize=9)
        ax.set_yscale("log")
        ax.set_xticks(range(len(sizes)), [_label(v) for v in sizes], fontsize=7)
        ax.tick_params(labelsize=7)
        ax.grid(True, alpha=0.3)
    for j in range(len(wls), rows * cols):
        axes[j // cols][j % cols].axis("off")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(6, len(labels) or 1), fontsize=7)
    fig.suptitle("throughput, MiB/s of user data (log) by value size", fontsize=10)
    fig.tight_layout(rect=(0, 0.06, 1, 0.96))
    path = os.path.join(out, "throughput.png")
    save_small(fig, path)
    plt.close(fig)
    return path


def _bars(ax, meta, aggs, wl, metric, title):
    engines = _engines(meta)
    sizes = meta["value_sizes"]
    width = 0.8 / max(1, len(engines))
    for k, e in enumerate(engines):
        xs, ys = [], []
        for j, vs in enumerate(sizes):
            a = aggs.get((wl, vs, e))
            m = metric if a and metric in a else ("space_amp" if metric == "space_amp_gc" else None)
            if a and m and m in a:
                xs.append(j + k * width)
                ys.append(a[m][0])
        ax.bar(xs, ys, width, label=e)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(sizes))], [_label(v) for v in sizes])
    ax.set_title(title, fontsize=9)
    ax.axhline(1.0, color="black", linewidth=0.6)
    ax.tick_params(labelsize=7)
    ax.grid(True, axis="y", alpha=0.3)


def amplification(out: str, meta: dict, aggs: dict) -> str | None:
    panels = [(wl, m, t) for wl, m, t in (
        ("fillrandom", "write_amp", "write amp, fillrandom"),
        ("overwrite", "write_amp", "write amp, overwrite"),
        ("overwrite", "space_amp_gc", "space amp after overwrite + GC"),
        ("fillrandom", "space_amp", "space amp after fillrandom"),
    ) if wl in meta["workloads"]]
    if not panels:
        return None
    plt = pyplot()
    fig, axes = plt.subplots(1, len(panels), figsize=(3.4 * len(panels), 2.8), squeeze=False)
    for ax, (wl, m, t) in zip(axes[0], panels):
        _bars(ax, meta, aggs, wl, m, t)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(6, len(labels) or 1), fontsize=7)
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    path = os.path.join(out, "amplification.png")
    save_small(fig, path)
    plt.close(fig)
    return path


def latency(out: str, meta: dict, aggs: dict) -> str | None:
    wls = [w for w in ("fillrandom", "readrandom") if w in meta["workloads"]]
    if not wls:
        return None
    plt = pyplot()
    fig, axes = plt.subplots(1, 2 * len(wls), figsize=(3.2 * 2 * len(wls), 2.8), squeeze=False)
    i = 0
    for wl in wls:
        for m in ("p50_us", "p99_us"):
            ax = axes[0][i]
            _bars(ax, meta, aggs, wl, m, f"{wl} {m[:3]}, µs (log)")
            ax.set_yscale("log")
            i += 1
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(6, len(labels) or 1), fontsize=7)
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    path = os.path.join(out, "latency.png")
    save_small(fig, path)
    plt.close(fig)
    return path


def write(out: str, meta: dict, results: list[dict]) -> list[str]:
    aggs = aggregate(results)
    made = [throughput(out, meta, aggs), amplification(out, meta, aggs), latency(out, meta, aggs)]
    return [p for p in made if p]
