"""The processor bench's task without Spark: antkv's runner with its store against the dict floor,
and where antkv's extra time goes.

Usage::

    .venv/bin/python bench/processor_split.py [--keys 100000] [--partitions 4] [--held 2]
        [--batches 6] [--reopen] [--json out.json]

One process holds ``--held`` of the ``--partitions`` partitions of ``--keys`` keys, as a Python
worker that met them does, and runs batch after batch over them: the processor bench's
session processor (``bench_spark_baseline.session_processor_class``: a value state and an
event-time timer per key, every key once per batch, a minute later each batch) through antkv's
runner (``transform._run_partition``) on the partition's rows, in key-group and key order,
in frames of 10,000 rows as Arrow hands them over.  Twice per batch, alternating:

* **antkv** -- each partition's store opened on the version it committed last (the idle copy
  this process holds; with ``--reopen``, none is held: each batch reopens the copy parked on
  the machine, with a cold row cache, as a new Python worker does), the runner, then the
  commit, which parks the copy (here in the committing thread: a process outside Spark parks
  in line), inside ``task_collections()`` as the runner's Spark task;
* **floor** -- the same runner with the dict floor's handle (``bench/processor_floor.py``):
  the state in plain dicts, nothing encoded, committed or parked.

The figure is the CPU time of the process (every thread) per batch.  antkv's extra over the
floor is split by where it is spent: *settling* the batch's writes (encoding the decoded
values, the engine's write batch, the row cache, and the change set's bookkeeping), the
*commit* other than its settling (the key count, the changelog, the manifest), *parking*
the copy, and the rest -- the state calls themselves, the handle, the runner's warming, and
what a larger heap costs the processor's own code.  The garbage collector's passes beyond the
floor's are given too; they fall inside those parts.  The parts are timed by wrapping those
methods of the real classes for the run (a few microseconds per call, a few calls per
batch).  Batches 0 (every key new) and 1 (the first rewrite) are left out of the medians,
which are the result.  Single runs on a shared machine: expect noise of ±5-10%.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

KEY_GROUPS = 128
CHUNK_ROWS = 10_000  # rows per frame: spark.sql.execution.arrow.maxRecordsPerBatch's default
MINUTE_MS = 60_000
START_MS = 1_700_000_000_000


def _frames(names, groups, owned, batch: int):
    """The partition's rows of ``batch`` as the runner receives them: key group, key, event
    time (a timestamp and its ms), sorted by key group then key, in frames of CHUNK_ROWS."""
    import numpy as np
    import pandas as pd

    from antkv.spark.processor.transform import EVENT_MS_COLUMN
    from antkv.spark.runtime.pipeline import KEY_GROUP_COLUMN

    chosen = np.nonzero((groups >= owned.start) & (groups < owned.stop))[0]
    ms = START_MS + batch * MINUTE_MS
    frame = pd.DataFrame({KEY_GROUP_COLUMN: groups[chosen].astype("int32"), "key": [names[i] for i in chosen],
                          "ts": pd.to_datetime(np.full(len(chosen), ms), unit="ms"),
                          EVENT_MS_COLUMN: np.full(len(chosen), ms)})
    frame = frame.sort_values([KEY_GROUP_COLUMN, "key"]).reset_index(drop=True)
    return [frame.iloc[i:i + CHUNK_ROWS].reset_index(drop=True) for i in range(0, len(frame), CHUNK_ROWS)]


class _Clock:
    """CPU seconds spent in wrapped methods, by part (a part inside another counts in both; a
    call inside a call of the same part -- a settle hook's write that settles -- counts once),
    and in the cyclic garbage collector's passes (``gc``: they run inside whatever allocated,
    so their time is in the other parts too).  :meth:`close` puts every method back."""

    def __init__(self):
        self.spent = Counter()
        self._running = Counter()  # part -> its calls under way
        self._gc_start = 0.0
        self._wrapped: list[tuple[object, str, object]] = []
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._gc_start = time.process_time()
        else:
            self.spent["gc"] += time.process_time() - self._gc_start

    def wrap(self, owner, name: str, part: str) -> None:
        inner = owner.__dict__[name]
        clock = self

        def timed(*args, **kwargs):
            t0 = time.process_time()
            clock._running[part] += 1
            try:
                return inner(*args, **kwargs)
            finally:
                clock._running[part] -= 1
                if not clock._running[part]:
                    clock.spent[part] += time.process_time() - t0
        self._wrapped.append((owner, name, inner))
        setattr(owner, name, timed)

    def take(self) -> dict:
        out, self.spent = dict(self.spent), Counter()
        return out

    def close(self) -> None:
        for owner, name, inner in reversed(self._wrapped):
            setattr(owner, name, inner)
        self._wrapped.clear()
        gc.callbacks.remove(self._on_gc)


def run(args) -> dict:
    import numpy as np
    import xxhash

    from antkv.spark import StoreOptions, open_store
    from antkv.spark.processor.transform import _Batch, _run_partition
    from antkv.spark.runtime.collector import task_collections
    from antkv.spark.store.idle_copies import held as held_copies
    from antkv.spark.store.keygroups import key_group_range
    from antkv.spark.store.state_store import StateStore
    from antkv.spark.store.working_copy import WorkingCopy
    from bench.bench_spark_baseline import session_processor_class
    from bench.processor_floor import DictHandle, PartitionDicts, RunnerPartition

    names = [f"user-{i:08d}" for i in range(args.keys)]
    groups = np.array([xxhash.xxh64_intdigest(n.encode()) % KEY_GROUPS for n in names])
    held = [key_group_range(KEY_GROUPS, args.partitions, p) for p in range(args.held)]
    clock = _Clock()
    clock.wrap(StateStore, "_settle", "settle")
    clock.wrap(StateStore, "commit", "commit")
    clock.wrap(WorkingCopy, "park", "park")
    work = tempfile.mkdtemp(prefix="antkv-processor-split-", dir=args.dir)
    options = StoreOptions(cache_dir=os.path.join(work, "cache"))
    location = f"file://{work}/location"
    manifests = [None] * args.held
    dicts = [PartitionDicts() for _ in held]
    processor = session_processor_class()()
    rows = []
    try:
        for batch in range(args.batches):
            frames = [_frames(names, groups, owned, batch) for owned in held]
            spec = _Batch(processor, ("key",), ("key", "ts"), None, ("key", "start", "end", "events"), "EventTime",
                          int(time.time() * 1000), START_MS + (batch - 1) * MINUTE_MS if batch else -1, True, {},
                          CHUNK_ROWS, None)
            row = {"batch": batch, "keys": sum(len(f) for partition in frames for f in partition)}
            for engine in (("antkv", "floor") if batch % 2 else ("floor", "antkv")):
                clock.take()
                t0 = time.process_time()
                settle_in_commit = 0.0
                for p, owned in enumerate(held):
                    if engine == "floor":
                        state = RunnerPartition(dicts[p], owned)
                        for _ in _run_partition(spec, state, iter(frames[p]), DictHandle):
                            pass
                        continue
                    if args.reopen:
                        held_copies.clear()  # (as a new worker: the parked copy is reopened)
                    with task_collections():  # as the runner's task
                        store = open_store(location, "split", p, batch, manifest=manifests[p], options=options)
                        row.setdefault("copies", []).append(store.copy_fate)
                        for _ in _run_partition(spec, RunnerPartition(store, owned), iter(frames[p])):
                            pass
                        before_commit = clock.spent["settle"]
                        manifests[p] = store.commit().manifest
                        settle_in_commit += clock.spent["settle"] - before_commit
                row[engine] = time.process_time() - t0
                row[f"{engine}_gc"] = clock.spent["gc"]
                if engine == "antkv":
                    row["parts"] = dict(clock.spent, settle_in_commit=settle_in_commit)
            rows.append(row)
            print(f"batch {batch}: antkv {row['antkv']:.3f} s, floor {row['floor']:.3f} s CPU", flush=True)
    finally:
        clock.close()
        held_copies.clear()  # (the idle copies this process holds live in ``work``)
        shutil.rmtree(work, ignore_errors=True)
    return {"config": vars(args), "per_batch": rows}


def split(row: dict) -> dict:
    """antkv's extra CPU over the floor in one batch, by part (seconds; the module docstring)."""
    parts = row["parts"]
    settling, parking = parts.get("settle", 0.0), parts.get("park", 0.0)
    commit = parts.get("commit", 0.0) - parts["settle_in_commit"] - parking
    extra = row["antkv"] - row["floor"]
    return {"settling the writes": settling, "the commit, less its settling": commit, "parking": parking,
            "the calls and the rest": extra - settling - commit - parking}


def report(result: dict) -> str:
    c = result["config"]
    steady = result["per_batch"][2:] or result["per_batch"]
    med = {k: statistics.median(r[k] for r in steady) for k in ("antkv", "floor")}
    parts = {k: statistics.median(split(r)[k] for r in steady) for k in split(steady[0])}
    n = steady[0]["keys"]  # the held partitions' keys (every key once per batch)
    copies = "reopened from the machine every batch" if c.get("reopen") else "held"
    lines = [f"# The processor's task without Spark: {c['keys']:,} keys, {c['held']} of {c['partitions']} partitions "
             f"{copies} ({n:,.0f} keys), {c['batches']} batches; CPU per batch, medians of batches 2-{c['batches'] - 1}", "",
             "| | s per batch | us per key |", "|---|---:|---:|",
             f"| floor (state in dicts) | {med['floor']:.3f} | {1e6 * med['floor'] / n:.1f} |",
             f"| antkv | {med['antkv']:.3f} | {1e6 * med['antkv'] / n:.1f} |"]
    lines += [f"| antkv's extra: {k} | {v:.3f} | {1e6 * v / n:.1f} |" for k, v in parts.items()]
    gc_extra = statistics.median(r["antkv_gc"] - r["floor_gc"] for r in steady)
    lines.append(f"| (of which garbage collection, antkv's beyond the floor's) | {gc_extra:.3f} | {1e6 * gc_extra / n:.1f} |")
    lines += ["", f"antkv {100 * med['floor'] / med['antkv']:.0f}% of the floor's rate"]
    return "\n".join(lines)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--keys", type=int, default=100_000)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--held", type=int, default=2, help="partitions this process holds")
    p.add_argument("--batches", type=int, default=6)
    p.add_argument("--reopen", action="store_true", help="reopen each batch's copies from the machine")
    p.add_argument("--dir", default=None)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    if not 0 < args.held <= args.partitions:
        p.error("--held must be between 1 and --partitions")
    result = run(args)
    print(report(result))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
