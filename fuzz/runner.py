"""Running one operation stream on two sides and comparing every answer.

``run_stream(ops, make_subject, make_oracle)`` opens both sides on fresh directories, runs
each operation on the oracle (RocksDB) and then on the subject (antkv), and compares the two
answers with ``==``.  The first difference stops the run and is returned as a
``Divergence``.  After the stream, ``FINAL_CHECK`` compares a full forward and reverse scan,
reopens both databases and compares a full scan again -- so a lost write shows up even when
the stream never read it.

An operation the subject does not support yet (``side.supports(name)`` is false, or the
subject answers ``("unsupported", ...)``; the subject runs each operation first) is skipped
on both sides and counted in ``RunResult.skipped``; the summary prints those counts.

``fuzz_one(cfg)`` is one fuzzing job: generate the stream of ``cfg.seed``, run it, and on a
divergence print the report with a one-line reproducer, shrink the stream
(``fuzz/shrink.py``), and write the shrunk stream to a replay file (``fuzz/replay.py``).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

from . import replay
from .generator import generate
from .oracle import RocksSide
from .shrink import shrink_stream

_ALL = 1 << 62
FINAL_CHECK = (
    ("scan", None, None, None, False, _ALL),
    ("scan", None, None, None, True, _ALL),
    ("reopen",),
    ("scan", None, None, None, False, _ALL),
)


@dataclass
class Divergence:
    index: int  # position in the stream (>= len(ops): in FINAL_CHECK)
    op: tuple
    expected: object  # the oracle's answer
    actual: object  # the subject's answer
    detail: str = ""  # the subject's traceback when it raised


@dataclass
class RunResult:
    divergence: Divergence | None
    ops_run: int
    skipped: Counter = field(default_factory=Counter)
    seconds: float = 0.0


@dataclass
class Config:
    seed: int
    option_set: str = "default"
    oracle: str = "plain"  # RocksDB variant: "plain" or "blob"
    subject: str = "antkv"  # "antkv", or "rocksdb-plain" / "rocksdb-blob" to test the fuzzer
    ops: int = 2000
    skip_ops: tuple = ()  # operation names left out on both sides (triage only; counted)

    def reproduce_command(self, n_ops: int | None = None) -> str:
        cmd = (f"{sys.executable} -m fuzz --seed {self.seed} --option-set {self.option_set} "
               f"--oracle {self.oracle} --ops {n_ops if n_ops is not None else self.ops}")
        if self.subject != "antkv":
            cmd += f" --subject {self.subject}"
        if self.skip_ops:
            cmd += f" --skip-ops {','.join(self.skip_ops)}"
        return cmd


def side_factory(kind: str, option_set: str) -> Callable[[str], object]:
    """A function path -> side for ``kind``: "antkv", "rocksdb-plain" or "rocksdb-blob"."""
    if kind == "antkv":
        from . import options_sets
        from .antkv_side import AntkvSide

        return lambda path: AntkvSide(path, options_sets.build(option_set))
    if kind in ("rocksdb-plain", "rocksdb-blob"):
        variant = kind.split("-", 1)[1]
        return lambda path: RocksSide(path, variant)
    raise ValueError(f"unknown side {kind!r}")


def execute(side, op: tuple) -> tuple[object, str]:
    """``(answer, traceback)`` of ``op`` on ``side``; exceptions become error answers."""
    try:
        return getattr(side, "op_" + op[0])(*op[1:]), ""
    except Exception as e:  # noqa: BLE001 - classify_error decides; unknown ones re-raise
        return side.classify_error(e), traceback.format_exc()


def run_stream(ops: list[tuple], make_subject, make_oracle, *, workdir: str | None = None,
               deadline: float | None = None, final_check: bool = True,
               skip_ops=()) -> RunResult:
    """Run ``ops`` (then ``FINAL_CHECK``) on fresh databases; stop at the first difference.

    Past ``deadline`` the rest of ``ops`` is dropped but the final check still runs.
    ``RunResult.ops_run`` counts the operations of ``ops`` that ran.  Operations named in
    ``skip_ops`` run on neither side (counted in ``skipped`` as ``"<name> (--skip-ops)"``).
    """
    start = time.monotonic()
    root = tempfile.mkdtemp(prefix="antkv-fuzz-", dir=workdir)
    skipped: Counter = Counter()
    oracle = subject = None
    ran = 0
    try:
        oracle = make_oracle(os.path.join(root, "rocksdb"))
        subject = make_subject(os.path.join(root, "subject"))
        steps = list(enumerate(ops))
        if final_check:
            steps += [(len(ops) + j, op) for j, op in enumerate(FINAL_CHECK)]
        for i, op in steps:
            if i < len(ops):
                if deadline is not None and time.monotonic() > deadline:
                    continue  # out of time: skip to the final check
                ran = i + 1
            if op[0] in skip_ops:
                skipped[op[0] + " (--skip-ops)"] += 1
                continue
            if not subject.supports(op[0]):
                skipped[op[0]] += 1
                continue
            actual, tb = execute(subject, op)
            if type(actual) is tuple and actual and actual[0] == "unsupported":
                subject.mark_unsupported(op[0])
                skipped[op[0]] += 1
                continue
            expected, _ = execute(oracle, op)
            if expected != actual:
                return RunResult(Divergence(i, op, expected, actual, tb), ran, skipped,
                                 time.monotonic() - start)
        # Closing is an operation too: antkv's close must not fail.
        sides, oracle, subject = (oracle, subject), None, None
        sides[0].close()
        actual, tb = execute(sides[1], ("close",))
        if actual is not None:
            return RunResult(Divergence(len(steps), ("close",), None, actual, tb), ran, skipped,
                             time.monotonic() - start)
        return RunResult(None, ran, skipped, time.monotonic() - start)
    finally:
        # Only reached with sides still open after a divergence or an error.
        for side in (subject, oracle):
            if side is not None:
                try:
                    side.close()
                except Exception:  # noqa: BLE001 - the run's answer is already decided
                    pass
        shutil.rmtree(root, ignore_errors=True)


# --- reporting ---


def short(x, limit: int = 240) -> str:
    s = repr(x)
    return s if len(s) <= limit else s[:limit] + f"... ({len(s)} chars)"


def explain(expected, actual) -> str:
    """Where two answers first differ, for lists of pairs (scans) and tuples."""
    if isinstance(expected, list) and isinstance(actual, list):
        for j, (a, b) in enumerate(zip(expected, actual)):
            if a != b:
                return f"first difference at item {j}: rocksdb {short(a, 160)} vs subject {short(b, 160)}"
        return f"lengths differ: rocksdb {len(expected)} items, subject {len(actual)} items"
    return ""


def report(cfg: Config, d: Divergence, n_stream: int, n_ran: int, out=sys.stdout,
           reproduce: str | None = None) -> None:
    p = lambda *a: print(*a, file=out)  # noqa: E731
    where = f"op #{d.index}" if d.index < n_stream else f"final check #{d.index - n_stream}"
    p(f"DIVERGENCE seed={cfg.seed} option_set={cfg.option_set} oracle=rocksdb-{cfg.oracle} "
      f"subject={cfg.subject} at {where}")
    p(f"  op:      {short(d.op)}")
    p(f"  rocksdb: {short(d.expected)}")
    p(f"  {cfg.subject}: {short(d.actual)}")
    why = explain(d.expected, d.actual)
    if why:
        p(f"  {why}")
    if d.detail:
        p("  subject traceback:\n    " + d.detail.rstrip().replace("\n", "\n    "))
    if reproduce is None:
        reproduce = cfg.reproduce_command(d.index + 1 if d.index < n_stream else n_ran)
    p(f"  reproduce: {reproduce}")


def fuzz_one(cfg: Config, *, workdir: str | None = None, deadline: float | None = None,
             shrink_seconds: float = 120.0, out_dir: str = "fuzz-failures",
             out=sys.stdout, make_subject=None) -> RunResult:
    """Run the stream of ``cfg``; on a divergence report it, shrink it, write a replay file."""
    ops = generate(cfg.seed, cfg.ops)
    make_subject = make_subject or side_factory(cfg.subject, cfg.option_set)
    make_oracle = side_factory("rocksdb-" + cfg.oracle, cfg.option_set)
    result = run_stream(ops, make_subject, make_oracle, workdir=workdir, deadline=deadline,
                        skip_ops=cfg.skip_ops)
    d = result.divergence
    if d is None:
        return result
    report(cfg, d, len(ops), result.ops_run, out)
    ops = ops[:result.ops_run]
    shrunk, why = shrink_divergence(ops, d, make_subject, make_oracle, workdir, shrink_seconds,
                                    cfg.skip_ops)
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"seed{cfg.seed}-{cfg.option_set}-{cfg.oracle}.json")
    replay.write(path, shrunk, seed=cfg.seed, option_set=cfg.option_set, oracle=cfg.oracle,
                 subject=cfg.subject, skip_ops=list(cfg.skip_ops), note=why)
    print(f"  shrunk {len(ops[:d.index + 1])} -> {len(shrunk)} ops; {why}", file=out)
    print(f"  replay: {sys.executable} -m fuzz --replay {path}", file=out)
    return result


def shrink_divergence(ops, d: Divergence, make_subject, make_oracle, workdir,
                      seconds: float, skip_ops=()) -> tuple[list[tuple], str]:
    """The shrunk stream of a divergence and a one-line note of what the shrunk one shows."""
    target = d.op[0]
    last: list[Divergence] = [d]

    def fails(candidate) -> bool:
        r = run_stream(candidate, make_subject, make_oracle, workdir=workdir, skip_ops=skip_ops)
        if r.divergence is not None and r.divergence.op[0] == target:
            last[0] = r.divergence
            return True
        return False

    head = list(ops[:d.index + 1]) if d.index < len(ops) else list(ops)
    shrunk, stats = shrink_stream(head, fails, seconds)
    fails(shrunk)  # refresh `last` with the divergence of the final stream
    note = (f"{stats.runs} shrink runs{' (budget ran out)' if stats.out_of_time else ''}; "
            f"op {short(last[0].op, 120)}: rocksdb {short(last[0].expected, 120)}, "
            f"subject {short(last[0].actual, 120)}")
    return shrunk, note
