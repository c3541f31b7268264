"""Command line of the differential fuzzer.

    python -m fuzz --seconds 3600                  # long run: streams until time is up,
                                                   # rotating named and random option sets
    python -m fuzz --seed 7 --option-set blob-100 --oracle blob --ops 812   # one stream
    python -m fuzz --replay fuzz-failures/seed7-blob-100-blob.json          # a replay file

Without ``--seconds`` exactly one stream runs (seed 0 unless given).  With ``--seconds``
stream k uses seed ``S + k`` (S = ``--seed``, else drawn from the clock and printed) and
option set ``--option-set`` or the rotation of ``options_sets.rotation(k)``; the RocksDB
variant alternates plain / blob unless ``--oracle`` fixes it.  The first divergence is
reported with a reproducer, shrunk and written to ``--out-dir``; the exit status is then 1.
``--subject rocksdb-blob`` (or ``rocksdb-plain``) runs RocksDB against RocksDB, which
checks the fuzzer itself.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter

from . import options_sets, replay
from .runner import Config, fuzz_one, report, run_stream, side_factory


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fuzz", description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=None, help="run streams for this long")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--option-set", default=None,
                    help="a named set (" + ", ".join(options_sets.NAMED) + ") or random-N")
    ap.add_argument("--oracle", choices=("plain", "blob", "auto"), default="auto")
    ap.add_argument("--subject", choices=("antkv", "rocksdb-plain", "rocksdb-blob"),
                    default="antkv")
    ap.add_argument("--ops", type=int, default=2000, help="operations per stream")
    ap.add_argument("--replay", default=None, help="run a replay file")
    ap.add_argument("--shrink-seconds", type=float, default=300.0)
    ap.add_argument("--out-dir", default="fuzz-failures")
    ap.add_argument("--workdir", default=None, help="where the databases live (default: tmp)")
    ap.add_argument("--keep-going", action="store_true",
                    help="after a divergence, go on with the next stream (exit 1 at the end)")
    ap.add_argument("--skip-ops", default="",
                    help="comma-separated operation names to leave out on both sides, to look "
                         "past a known bug (e.g. reopen); counted in the summary")
    a = ap.parse_args(argv)

    if a.replay:
        return run_replay(a.replay, a.workdir)

    if a.option_set is not None:
        options_sets.overrides(a.option_set)  # fail early on an unknown name

    a.skip_ops = tuple(x for x in a.skip_ops.split(",") if x)
    if a.seconds is None:
        seed = a.seed if a.seed is not None else 0
        cfg = _config(a, seed, 0)
        r = fuzz_one(cfg, workdir=a.workdir, shrink_seconds=a.shrink_seconds,
                     out_dir=a.out_dir)
        _summary(1, r.ops_run, r.seconds, r.skipped, Counter({cfg.option_set: 1}))
        return 1 if r.divergence else 0

    base = a.seed if a.seed is not None else int(time.time()) % 1_000_000
    print(f"fuzz: base seed {base}, {a.seconds:g} s, {a.ops} ops per stream", flush=True)
    deadline = time.monotonic() + a.seconds
    streams = total_ops = 0
    skipped: Counter = Counter()
    sets: Counter = Counter()
    started = time.monotonic()
    failures: list[str] = []
    k = 0
    while time.monotonic() < deadline:
        cfg = _config(a, base + k, k)
        r = fuzz_one(cfg, workdir=a.workdir, deadline=deadline,
                     shrink_seconds=a.shrink_seconds, out_dir=a.out_dir)
        streams += 1
        total_ops += r.ops_run
        skipped.update(r.skipped)
        sets[cfg.option_set] += 1
        k += 1
        if r.divergence:
            failures.append(cfg.reproduce_command(r.divergence.index + 1
                                                  if r.divergence.index < cfg.ops else r.ops_run))
            if a.keep_going:
                continue
            break
        print(f"  stream {k - 1}: seed {cfg.seed} {cfg.option_set} vs rocksdb-{cfg.oracle}: "
              f"{r.ops_run} ops in {r.seconds:.1f} s, same answers", flush=True)
    _summary(streams, total_ops, time.monotonic() - started, skipped, sets)
    if failures:
        print(f"{len(failures)} diverging stream(s):")
        for f in failures:
            print("  " + f)
        return 1
    return 0


def _config(a, seed: int, k: int) -> Config:
    option_set = a.option_set if a.option_set is not None else options_sets.rotation(k)
    oracle = a.oracle if a.oracle != "auto" else ("blob" if seed % 2 else "plain")
    if a.subject == "rocksdb-" + oracle:  # RocksDB against RocksDB: always the other one
        oracle = "plain" if oracle == "blob" else "blob"
    return Config(seed=seed, option_set=option_set, oracle=oracle, subject=a.subject, ops=a.ops,
                  skip_ops=a.skip_ops)


def run_replay(path: str, workdir: str | None) -> int:
    ops, meta = replay.read(path)
    cfg = Config(seed=meta["seed"], option_set=meta["option_set"], oracle=meta["oracle"],
                 subject=meta.get("subject", "antkv"), ops=len(ops),
                 skip_ops=tuple(meta.get("skip_ops", ())))
    print(f"replay {path}: {len(ops)} ops; recorded: {meta.get('note', '')}")
    r = run_stream(ops, side_factory(cfg.subject, cfg.option_set),
                   side_factory("rocksdb-" + cfg.oracle, cfg.option_set), workdir=workdir,
                   skip_ops=cfg.skip_ops)
    if r.divergence is None:
        print("replay: same answers (fixed?)")
        return 0
    report(cfg, r.divergence, len(ops), r.ops_run,
           reproduce=f"{sys.executable} -m fuzz --replay {path}")
    for i, op in enumerate(ops):
        print(f"    #{i}: {_short_op(op)}")
    return 1


def _short_op(op) -> str:
    s = repr(op)
    return s if len(s) < 200 else s[:200] + "..."


def _summary(streams, ops, seconds, skipped, sets) -> None:
    rate = ops / seconds if seconds > 0 else 0.0
    print(f"fuzz summary: {streams} streams, {ops} operations in {seconds:.1f} s "
          f"({rate:.0f} ops/s); option sets: {dict(sets)}")
    if skipped:
        print(f"  skipped on both sides (merges where the option set has no merge operator, a feature not in antkv yet, or --skip-ops): {dict(skipped)}")


if __name__ == "__main__":
    sys.exit(main())
