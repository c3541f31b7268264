"""The Markdown report: medians over runs with their spread, antkv/RocksDB ratios, the
physical limit, and every engine that could not run with the reason.

Spread is written ``±x%``: half the range (max - min) of the runs, relative to the median.
A ``†`` marks a figure where some run stopped at ``--max-seconds`` (fewer ops than asked); a
``⚠`` one where the engine answered wrongly (a loaded key not found, a scan short of entries, a
deleted key still there: ``bench.workloads.CHECKS``) -- such a figure measures a broken engine.
"""

from __future__ import annotations

import os

from .measure import MiB, median

METRICS = ("ops_s", "mib_s", "p50_us", "p99_us", "write_amp", "space_amp", "space_amp_gc",
           "disk_write_bytes", "rss_mib", "ops")
ANTKV = ("antkv", "antkv-tuned")
ROCKS = ("rocksdb", "rocksdb-blob")
NO_WRITE_AMP = ("deleterange", "deleteseq")  # user bytes are keys only: report bytes, not a ratio


def aggregate(results: list[dict]) -> dict:
    """``{(workload, value_size, engine): {"runs": n, "errors": [...], metric: (median, spread)}}``."""
    groups: dict = {}
    for r in results:
        if not r.get("measured", True):
            continue
        g = groups.setdefault((r["workload"], r["value_size"], r["engine"]),
                              {"ok": [], "errors": []})
        (g["ok"] if r.get("ok") else g["errors"]).append(r)
    out = {}
    for k, g in groups.items():
        agg = {"runs": len(g["ok"]), "errors": [e.get("error", "?") for e in g["errors"]],
               "truncated": any(r.get("truncated") for r in g["ok"]),
               "wrong": [r["wrong"] for r in g["ok"] if r.get("wrong")],
               "native": all(r.get("extra", {}).get("native", True) for r in g["ok"])}
        for m in METRICS:
            vals = [r[m] for r in g["ok"] if r.get(m) is not None]
            if vals:
                med = median(vals)
                spread = (max(vals) - min(vals)) / 2 / med if med else 0.0
                agg[m] = (med, spread)
        out[k] = agg
    return out


def _num(v: float) -> str:
    if v >= 100:
        return f"{v:,.0f}"
    if v >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def _cell(agg: dict | None, metric: str, spread: bool = True) -> str:
    if agg is None:
        return "–"
    if metric not in agg:
        if agg["errors"]:
            return "error" if not agg["errors"][0].startswith("not supported") else "n/a"
        return "–"
    med, sp = agg[metric]
    s = _num(med)
    if spread and agg["runs"] > 1:
        s += f" ±{sp * 100:.0f}%"
    if agg["truncated"] and metric in ("ops_s", "mib_s"):
        s += "†"
    if agg["wrong"] and metric == "ops_s":
        s += " ⚠"
    return s


def ratio(aggs: dict, wl: str, vs: int, a: str, b: str) -> float | None:
    x, y = aggs.get((wl, vs, a)), aggs.get((wl, vs, b))
    if not x or not y or "ops_s" not in x or "ops_s" not in y or not y["ops_s"][0]:
        return None
    return x["ops_s"][0] / y["ops_s"][0]


def furthest_behind(aggs: dict, meta: dict, count: int = 5) -> list[tuple[float, str, int]]:
    """The (ratio, workload, value size) where antkv is slowest relative to RocksDB."""
    rows = []
    for wl in meta["workloads"]:
        for vs in meta["value_sizes"]:
            r = ratio(aggs, wl, vs, "antkv", "rocksdb")
            if r is not None:
                rows.append((r, wl, vs))
    return sorted(rows)[:count]


def _size(vs: int) -> str:
    return f"{vs // 1024} KiB" if vs >= 1024 and vs % 1024 == 0 else f"{vs} B"


def render(meta: dict, results: list[dict]) -> str:
    aggs = aggregate(results)
    engines = [e for e in meta["engines"] if e not in meta["unavailable"]]
    L = [f"# antkv benchmark — {meta['started']}", "",
         f"Command: `{meta['command']}`  ",
         f"Python {meta['python']}, {meta['cpus']} CPUs; {meta['runs']} run(s) per figure, engines "
         f"alternating A B A B; median ±half-range; † = a run hit --max-seconds "
         f"({meta['max_seconds']} s). Keys per fill: "
         + ", ".join(f"{_size(int(vs))}: {n:,}" for vs, n in meta["keys"].items())
         + f" (--num {meta['num']:,}, --data-mb {meta['data_mb']})."
         + (f" antkv options: `{meta['antkv_options']}`." if meta.get("antkv_options") else ""),
         ""]
    for vs in meta["value_sizes"]:
        L += [f"## Throughput, ops/s — {_size(vs)} values", "",
              "| workload | " + " | ".join(engines) + " | antkv/rocksdb | antkv/rocksdb-blob |",
              "|---" * (len(engines) + 3) + "|"]
        for wl in meta["workloads"]:
            cells = [_cell(aggs.get((wl, vs, e)), "ops_s") for e in engines]
            rs = [ratio(aggs, wl, vs, "antkv", b) for b in ROCKS]
            L.append(f"| {wl} | " + " | ".join(cells) + " | "
                     + " | ".join(f"{r:.2f}x" if r is not None else "–" for r in rs) + " |")
        L.append("")
    L += ["## Details (medians)", "",
          "| workload | value | engine | ops/s | MiB/s | p50 µs | p99 µs | write amp | "
          "disk MiB written | space amp | space amp after GC | peak RSS MiB |",
          "|---" * 12 + "|"]
    for wl in meta["workloads"]:
        for vs in meta["value_sizes"]:
            for e in engines:
                a = aggs.get((wl, vs, e))
                if a is None:
                    continue
                if "ops_s" not in a:
                    L.append(f"| {wl} | {_size(vs)} | {e} | {_cell(a, 'ops_s')} |"
                             + " |" * 8)
                    continue
                wamp = "–" if wl in NO_WRITE_AMP else _cell(a, "write_amp", False)
                written = _num(a["disk_write_bytes"][0] / MiB) if "disk_write_bytes" in a else "–"
                name = e if a["native"] else e + " (emulated)"
                L.append(f"| {wl} | {_size(vs)} | {name} | {_cell(a, 'ops_s')} | "
                         f"{_cell(a, 'mib_s', False)} | {_cell(a, 'p50_us', False)} | "
                         f"{_cell(a, 'p99_us', False)} | {wamp} | {written} | "
                         f"{_cell(a, 'space_amp', False)} | {_cell(a, 'space_amp_gc', False)} | "
                         f"{_cell(a, 'rss_mib', False)} |")
    L.append("")
    if "fillrandom" in meta["workloads"] and "overwrite" in meta["workloads"]:
        L += ["## Write and space amplification", "",
              "Write amp: bytes the process wrote (`/proc/self/io`) / user bytes. Space amp: "
              "bytes on disk / live user bytes, after the writes and after compact() + GC.", "",
              "| value | engine | fillrandom write amp | overwrite write amp | "
              "space amp after overwrite | after compact + GC | peak RSS MiB (overwrite) |",
              "|---|---|---|---|---|---|---|"]
        for vs in meta["value_sizes"]:
            for e in engines:
                f, o = aggs.get(("fillrandom", vs, e)), aggs.get(("overwrite", vs, e))
                L.append(f"| {_size(vs)} | {e} | {_cell(f, 'write_amp', False)} | "
                         f"{_cell(o, 'write_amp', False)} | {_cell(o, 'space_amp', False)} | "
                         f"{_cell(o, 'space_amp_gc', False)}{' ⚠' if o and o['wrong'] else ''} | "
                         f"{_cell(o, 'rss_mib', False)} |")
        L.append("")
    if "deleterange" in meta["workloads"] and "deleteseq" in meta["workloads"]:
        L += ["## Deleting 10% of the keys: one delete_range vs one delete per key", "",
              "Time includes the flush that makes the deletes durable in tables; bytes are what "
              "the process wrote (`/proc/self/io`).", "",
              "| value | engine | delete_range ms | MiB written | delete one by one ms | "
              "MiB written |", "|---|---|---|---|---|---|"]
        for vs in meta["value_sizes"]:
            for e in engines:
                cells = []
                for wl in ("deleterange", "deleteseq"):
                    a = aggs.get((wl, vs, e))
                    if a and "ops_s" in a and a["ops_s"][0]:
                        cells += [_num(a["ops"][0] / a["ops_s"][0] * 1000),
                                  _num(a["disk_write_bytes"][0] / MiB)]
                    else:
                        cells += ["–", "–"]
                native = aggs.get(("deleterange", vs, e), {}).get("native", True)
                L.append(f"| {_size(vs)} | {e}{'' if native else ' (emulated)'} | "
                         + " | ".join(cells) + " |")
        L.append("")
    behind = furthest_behind(aggs, meta)
    if behind:
        L += ["## Where antkv is furthest behind RocksDB", "",
              "| workload | value | antkv/rocksdb ops/s |", "|---|---|---|"]
        L += [f"| {wl} | {_size(vs)} | {r:.3f}x |" for r, wl, vs in behind]
        L += ["", "Profile one with `python -m bench --profile WORKLOAD --value-sizes N`.", ""]
    if meta.get("physical"):
        ph = meta["physical"]
        L += ["## The physical limit (same run)", "",
              f"Sequential write, 1 MiB `os.write` calls: "
              f"{median([p['seq_write_nofsync_mib_s'] for p in ph]):,.0f} MiB/s into the page cache, "
              f"{median([p['seq_write_fsync_mib_s'] for p in ph]):,.0f} MiB/s including the final "
              f"fsync.", "",
              "| value | pure-Python append loop MiB/s | best fill MiB/s antkv | rocksdb | "
              "rocksdb-blob |", "|---|---|---|---|---|"]
        for vs in meta["value_sizes"]:
            app = median([p["python_append_mib_s"][str(vs)] for p in ph])
            best = []
            for e in ("antkv", "rocksdb", "rocksdb-blob"):
                vals = [aggs[(w, vs, e)]["mib_s"][0] for w in ("fillseq", "fillrandom")
                        if (w, vs, e) in aggs and "mib_s" in aggs[(w, vs, e)]]
                best.append(f"{max(vals):,.1f}" if vals else "–")
            L.append(f"| {_size(vs)} | {app:,.1f} | " + " | ".join(best) + " |")
        L.append("")
    if meta["unavailable"]:
        L += ["## Engines that could not run", ""]
        L += [f"- **{e}**: {why}" for e, why in meta["unavailable"].items()]
        L.append("")
    wrong = [(k, a["wrong"]) for k, a in sorted(aggs.items()) if a["wrong"]]
    if wrong:
        L += ["## ⚠ Wrong answers (these figures measure a broken engine)", ""]
        L += [f"- {wl} {_size(vs)} {e}: {len(w)} of {aggs[(wl, vs, e)]['runs']} run(s): {w[0]}"
              for (wl, vs, e), w in wrong]
        L.append("")
    errs = [(k, a["errors"][0]) for k, a in sorted(aggs.items()) if a["errors"]]
    if errs:
        L += ["## Failed or unsupported measurements", ""]
        L += [f"- {wl} {_size(vs)} {e}: {err}" for (wl, vs, e), err in errs]
        L.append("")
    L += ["Method: `docs/performance.md`. Raw figures of every run: `results.json`.", ""]
    return "\n".join(L)


def write(out: str, meta: dict, results: list[dict]) -> str:
    text = render(meta, results)
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write(text)
    return text
