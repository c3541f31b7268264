"""``python -m bench``: run the db_bench-style comparison and write the report and plots.

    python -m bench --quick                      # a few minutes: 1 KiB and 16 KiB values
    python -m bench                              # the full run (hours): 100 B .. 64 KiB
    python -m bench --engines antkv rocksdb --workloads fillrandom readrandom --num 1000000
    python -m bench --profile readrandom         # antkv under cProfile, top 25 functions

The parent process only orchestrates: every measurement runs in a fresh child
(:mod:`bench.runner`).  Engines alternate A B A B within every workload of every run, and each
figure in the report is the median over ``--runs`` runs with its spread.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import time

from . import install, measure
from .engines import DISTRIBUTIONS, ENGINES, probe
from .runner import MARKER
from .workloads import WORKLOADS

KiB = 1024
MiB = 1024 * KiB
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

ALL_ENGINES = list(ENGINES)
QUICK_WORKLOADS = ["fillrandom", "overwrite", "readrandom", "seekrandom",
                   "readseq", "deleterange", "deleteseq", "ycsb_a"]
PROFILES = {
    "quick": dict(num=20_000, data_mb=16, value_sizes=[1 * KiB, 16 * KiB], runs=3,
                  workloads=QUICK_WORKLOADS, max_seconds=1.5, physical_mb=64, timeout=120.0),
    "full": dict(num=1_000_000, data_mb=1024, value_sizes=[100, 1 * KiB, 16 * KiB, 64 * KiB],
                 runs=3, workloads=list(WORKLOADS), max_seconds=120.0, physical_mb=1024,
                 timeout=1800.0),
}


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="the few-minute profile")
    p.add_argument("--engines", nargs="+", metavar="E", help=f"from: {' '.join(ENGINES)}")
    p.add_argument("--workloads", nargs="+", metavar="W", help=f"from: {' '.join(WORKLOADS)}")
    p.add_argument("--value-sizes", nargs="+", type=int, metavar="BYTES")
    p.add_argument("--num", type=int, help="keys per fill (capped by --data-mb per value size)")
    p.add_argument("--data-mb", type=int, help="cap of user data per fill, MiB")
    p.add_argument("--reads", type=int, help="ops of read workloads (default: keys loaded)")
    p.add_argument("--runs", type=int, help="runs per figure (the median is reported)")
    p.add_argument("--max-seconds", type=float,
                   help="stop a workload's loop after this long (reported as truncated)")
    p.add_argument("--timeout", type=float, help="kill a child after this long")
    p.add_argument("--physical-mb", type=int, help="MiB written to measure the disk")
    p.add_argument("--out", help="results folder (default bench/results/<timestamp>)")
    p.add_argument("--seed", type=int, default=301)
    p.add_argument("--no-install", action="store_true", help="do not pip-install missing peers")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--profile", metavar="WORKLOAD",
                   help="run WORKLOAD once for antkv (or --engines) under a profiler, print top 25")
    p.add_argument("--profiler", choices=["cprofile", "pyinstrument"], default="cprofile")
    p.add_argument("--antkv-option", action="append", default=[], metavar="KEY=VALUE",
                   help="an antkv Options override for antkv and antkv-tuned (repeatable; the "
                        "value is parsed as JSON, else taken as a string); --profile adds "
                        "max_background_jobs=0 so flushes and compactions run in the profiled "
                        "thread")
    a = p.parse_args(argv)
    prof = PROFILES["quick" if a.quick else "full"]
    for name, value in prof.items():
        if getattr(a, name, None) is None:
            setattr(a, name, value)
    if a.engines is None:
        a.engines = ["antkv"] if a.profile else ALL_ENGINES
    a.antkv_options = {}
    for item in a.antkv_option:
        k, sep, v = item.partition("=")
        if not sep:
            p.error(f"--antkv-option wants KEY=VALUE, got {item!r}")
        try:
            a.antkv_options[k] = json.loads(v)
        except ValueError:
            a.antkv_options[k] = v
    if a.profile:
        a.workloads = [a.profile]
        a.runs = 1
        # cProfile sees only the thread it runs in: do flushes and compactions there too.
        a.antkv_options.setdefault("max_background_jobs", 0)
    for e in a.engines:
        if e not in ENGINES:
            p.error(f"unknown engine {e!r}; known: {', '.join(ENGINES)}")
    for w in a.workloads:
        if w not in WORKLOADS:
            p.error(f"unknown workload {w!r}; known: {', '.join(WORKLOADS)}")
    return a


def keys_for(args, value_size: int) -> int:
    return max(100, min(args.num, args.data_mb * MiB // (16 + value_size)))


def run_child(spec: dict, timeout: float) -> dict:
    """Run one measurement in a fresh interpreter; never raises."""
    env = dict(os.environ, PYTHONHASHSEED="0")
    try:
        proc = subprocess.run([sys.executable, "-m", "bench.runner", json.dumps(spec)], cwd=ROOT,
                              env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"timed out after {timeout:.0f}s"}
    for line in proc.stdout.splitlines():
        if line.startswith(MARKER):
            return json.loads(line[len(MARKER):])
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
    return {"ok": False, "error": f"child exited {proc.returncode}: {' | '.join(tail)}"}


def _fmt(res: dict) -> str:
    if not res.get("ok"):
        return "ERROR " + res.get("error", "?")[:150]
    s = f"{res['ops_s']:>12,.0f} ops/s {res['mib_s']:8.1f} MiB/s p99 {res['p99_us']:8.1f} us"
    if res.get("write_amp") is not None:
        s += f" wamp {res['write_amp']:.2f}"
    if res.get("truncated"):
        s += f" (truncated at {res['ops']} ops)"
    if res.get("wrong"):
        s += f" WRONG: {res['wrong']}"
    return s


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = os.path.abspath(args.out or os.path.join(ROOT, "bench", "results", stamp))
    data = os.path.join(out, "data")
    os.makedirs(data, exist_ok=True)
    command = "python -m bench " + " ".join(sys.argv[1:] if argv is None else argv)

    install_failed = {}
    if not args.no_install:
        install_failed = install.ensure([DISTRIBUTIONS[e] for e in args.engines])
    unavailable = {}
    for e in args.engines:
        why = probe(e)
        if why is not None:
            dist = DISTRIBUTIONS[e]
            unavailable[e] = (install_failed[dist] + "; " if dist in install_failed else "") + why
            print(f"bench: {e} unavailable: {unavailable[e]}", file=sys.stderr)
    engines = [e for e in args.engines if e not in unavailable]

    meta = {"command": command, "started": stamp, "engines": args.engines, "runs": args.runs,
            "value_sizes": args.value_sizes, "workloads": args.workloads, "num": args.num,
            "data_mb": args.data_mb, "max_seconds": args.max_seconds, "unavailable": unavailable,
            "antkv_options": args.antkv_options,
            "keys": {str(vs): keys_for(args, vs) for vs in args.value_sizes},
            "python": sys.version.split()[0], "cpus": os.cpu_count(), "physical": []}
    results: list[dict] = []
    t_start = time.time()

    def save() -> None:
        with open(os.path.join(out, "results.json"), "w") as f:
            json.dump({"meta": meta, "results": results}, f, indent=1)

    for run in range(args.runs):
        if not args.profile:
            phys = measure.physical_limit(data, args.physical_mb * MiB, args.value_sizes)
            meta["physical"].append(phys)
            print(f"[run {run + 1}/{args.runs}] disk: {phys['seq_write_nofsync_mib_s']:.0f} MiB/s "
                  f"buffered, {phys['seq_write_fsync_mib_s']:.0f} MiB/s with fsync", flush=True)
        for vs in args.value_sizes:
            n = keys_for(args, vs)
            needs_base = any(WORKLOADS[w][2] != "fill" for w in args.workloads)
            order = list(args.workloads)
            if needs_base and "fillrandom" not in order:
                order.insert(0, "fillrandom")
            elif needs_base:  # the base must exist before the workloads that use it
                order.remove("fillrandom")
                order.insert(0, "fillrandom")
            for wl in order:
                for e in engines:
                    base = os.path.join(data, f"{e}-{vs}-r{run}-base")
                    kind = WORKLOADS[wl][2]
                    path = base if wl == "fillrandom" else os.path.join(data, f"{e}-{vs}-r{run}-{wl}")
                    spec = {"engine": e, "workload": wl, "value_size": vs, "num": n,
                            "path": path, "base": base, "reads": args.reads, "seed": args.seed,
                            "max_seconds": args.max_seconds, "antkv_options": args.antkv_options}
                    profiled = args.profile == wl
                    if profiled:
                        spec["profile"] = args.profiler
                    res = run_child(spec, args.timeout)
                    if kind == "fill" and wl != "fillrandom":
                        shutil.rmtree(path, ignore_errors=True)
                    res.update(engine=e, workload=wl, value_size=vs, run=run, keys=n,
                               measured=wl in args.workloads)
                    profile_text = res.pop("profile", "")
                    results.append(res)
                    save()
                    print(f"[run {run + 1}/{args.runs}] {vs:>6} B {wl:<18} {e:<12} {_fmt(res)}",
                          flush=True)
                    if profiled and profile_text:
                        fname = os.path.join(out, f"profile-{wl}-{e}-{vs}.txt")
                        with open(fname, "w") as f:
                            f.write(profile_text)
                        print(profile_text)
                        print(f"bench: profile saved to {fname}")
            for e in engines:
                shutil.rmtree(os.path.join(data, f"{e}-{vs}-r{run}-base"), ignore_errors=True)
                try:
                    os.unlink(os.path.join(data, f"{e}-{vs}-r{run}-base.bench-meta.json"))
                except FileNotFoundError:
                    pass
    meta["elapsed_s"] = time.time() - t_start
    save()
    shutil.rmtree(data, ignore_errors=True)
    if args.profile:
        return 0

    from . import report

    text = report.write(out, meta, results)
    if not args.no_plots:
        from . import plots

        for png in plots.write(out, meta, results):
            print(f"bench: wrote {png}")
    print(text)
    print(f"bench: report in {os.path.join(out, 'report.md')} ({meta['elapsed_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
