"""Read-only views beside a live writer: two processes, no failure allowed.

A writer process puts, deletes and range-deletes keys (values small and large, so the value log
fills), flushes, compacts and collects the value log, with background threads, while this
process keeps opening the same directory read-only (scanning it all, checking every value,
running ``verify``) and running the ``antkv verify`` and ``antkv scan`` commands.  The writer
itself also opens read-only views of its own directory and scans them slowly while its
background jobs delete the files they started from.

Every value the writer writes is ``KEY=N;`` repeated, so a reader can tell a well-formed value
from a wrong one without knowing the writer's state.  A failure is any exception of a read-only
open, scan or verify, a malformed value, or a non-zero exit of a command.

    python -m fuzz.beside_writer --seconds 300                 # every option set in turn
    python -m fuzz.beside_writer --seconds 30 --option-set gc  # one set

It prints one line per option set (opens, scans, commands, the writer's own views, failures) and
exits 1 when anything failed, printing the first failures.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from contextlib import redirect_stderr

KiB = 1024

OPTION_SETS: dict[str, dict] = {
    "small-buffers": {"write_buffer_size": 64 * KiB, "min_blob_size": 256, "blob_file_size": 64 * KiB,
                      "blob_gc_threshold": 0.2, "level0_file_num_compaction_trigger": 2,
                      "target_file_size_base": 32 * KiB, "max_bytes_for_level_base": 128 * KiB},
    "gc": {"write_buffer_size": 32 * KiB, "min_blob_size": 64, "blob_file_size": 16 * KiB,
           "blob_gc_threshold": 0.05, "level0_file_num_compaction_trigger": 1},
    "large-buffers": {"write_buffer_size": 8 * 1024 * KiB, "min_blob_size": 1024},
    "no-blobs": {"write_buffer_size": 64 * KiB, "enable_blob_files": False,
                 "level0_file_num_compaction_trigger": 2, "target_file_size_base": 16 * KiB},
    "inline-jobs": {"write_buffer_size": 64 * KiB, "min_blob_size": 128, "max_background_jobs": 0,
                    "blob_file_size": 32 * KiB, "blob_gc_threshold": 0.1},
    "tiny-manifest": {"write_buffer_size": 32 * KiB, "min_blob_size": 128, "max_manifest_file_size": 2 * KiB,
                      "level0_file_num_compaction_trigger": 2},
}

KEYS = 3000


def make_value(key: bytes, n: int, size: int) -> bytes:
    unit = b"%s=%d;" % (key, n)
    return unit * max(1, size // len(unit))


def check_value(key: bytes, value: bytes) -> str | None:
    """None when ``value`` is one the writer can have written for ``key``, else what is wrong."""
    head, sep, rest = value.partition(b";")
    k, eq, n = head.rpartition(b"=")
    if not sep or not eq or k != key or not n.isdigit():
        return f"value of {key!r} is malformed: {value[:60]!r}"
    if value != (head + b";") * (len(value) // (len(head) + 1)):
        return f"value of {key!r} is not {head + b';'!r} repeated ({len(value)} bytes)"
    return None


def scan_and_check(db, slow=None) -> int:
    """Scan everything, checking each value; ``slow`` is called every 100 pairs.  Returns the
    number of pairs; raises AssertionError on a bad value."""
    n = 0
    for key, value in db.items():
        problem = check_value(key, value)
        if problem:
            raise AssertionError(problem)
        n += 1
        if slow is not None and n % 100 == 0:
            slow()
    return n


# --------------------------------------------------------------------------- the writer


def writer_main(path: str, options: dict, seconds: float, seed: int) -> int:
    """The writer process: writes until ``seconds`` pass, opening read-only views of its own
    directory now and then; prints one JSON line of counts."""
    import antkv

    rng = random.Random(seed)
    own_views = own_failures = 0
    messages: list[str] = []
    with antkv.open(path, create_if_missing=True, **options) as db:
        print("ready", flush=True)
        end = time.monotonic() + seconds
        i = 0

        def write_some(count: int) -> None:
            nonlocal i
            for _ in range(count):
                i += 1
                key = b"k%05d" % rng.randrange(KEYS)
                r = rng.random()
                if r < 0.08:
                    db.delete(key)
                elif r < 0.09:
                    lo = rng.randrange(KEYS)
                    db.delete_range(b"k%05d" % lo, b"k%05d" % (lo + rng.randrange(1, 40)))
                else:
                    db.put(key, make_value(key, i, rng.choice((8, 100, 700, 3000))))
                if i % 1500 == 0:
                    db.flush()
                if i % 4000 == 0:
                    db.compact_range()
                if i % 3000 == 0:
                    db.gc_value_log()

        while time.monotonic() < end:
            write_some(200)
            if rng.random() < 0.15:
                own_views += 1
                try:
                    with antkv.open(path, read_only=True) as ro:
                        scan_and_check(ro, slow=lambda: write_some(60))
                except Exception as e:  # noqa: BLE001 - counted and reported
                    own_failures += 1
                    messages.append(f"writer's own read-only view: {type(e).__name__}: {e}")
    print(json.dumps({"writes": i, "own_views": own_views, "own_failures": own_failures, "messages": messages[:5]}),
          flush=True)
    return 0


# --------------------------------------------------------------------------- the readers


def run_set(name: str, options: dict, seconds: float, workdir: str, seed: int) -> dict:
    """One writer for ``seconds`` with option set ``options``; read-only work beside it.
    Returns the counts and up to five failure messages."""
    import antkv
    from antkv.tools.cli import main as cli_main

    path = os.path.join(workdir, f"db-{name}-{seed}")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [_root(), os.environ.get("PYTHONPATH")])))
    writer = subprocess.Popen(
        [sys.executable, "-m", "fuzz.beside_writer", "--writer", path, "--options", json.dumps(options),
         "--seconds", str(seconds), "--seed", str(seed)],
        stdout=subprocess.PIPE, env=env,
    )
    counts = {"opens": 0, "pairs": 0, "verifies": 0, "commands": 0, "failures": 0}
    messages: list[str] = []
    rng = random.Random(seed)

    def fail(what: str) -> None:
        counts["failures"] += 1
        if len(messages) < 5:
            messages.append(what)

    try:
        if writer.stdout.readline().strip() != b"ready":
            raise RuntimeError("the writer process did not start")
        while writer.poll() is None:
            r = rng.random()
            if r < 0.6:
                counts["opens"] += 1
                try:
                    with antkv.open(path, read_only=True) as ro:
                        counts["pairs"] += scan_and_check(ro, slow=lambda: time.sleep(0.001))
                        if rng.random() < 0.3:
                            ro.verify()
                            counts["verifies"] += 1
                except Exception as e:  # noqa: BLE001 - counted and reported
                    fail(f"read-only open/scan/verify: {type(e).__name__}: {e}")
            else:
                command = "verify" if r < 0.8 else "scan"
                counts["commands"] += 1
                err = io.StringIO()
                out = io.BytesIO()
                with redirect_stderr(err):
                    code = _run_command(cli_main, [command, "--no-progress", path] if command == "verify"
                                        else [command, path], out)
                if code != 0:
                    fail(f"antkv {command} exited {code}: {err.getvalue().strip()[:400]}")
        tail = writer.stdout.read().decode()
        if writer.wait() != 0:
            fail(f"the writer exited {writer.returncode}")
        report = json.loads(tail.strip().splitlines()[-1])
        counts["writes"] = report["writes"]
        counts["own_views"] = report["own_views"]
        counts["failures"] += report["own_failures"]
        messages.extend(report["messages"][: 5 - len(messages)])
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait()
    return {"set": name, **counts, "messages": messages}


def _run_command(cli_main, argv: list[str], out: io.BytesIO) -> int:
    """``antkv ARGV`` in this process, its standard output captured."""
    saved = sys.stdout
    sys.stdout = io.TextIOWrapper(out)
    try:
        return cli_main(argv)
    finally:
        sys.stdout.flush()
        sys.stdout.detach()
        sys.stdout = saved


def _root() -> str:
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(seconds_per_set: float, sets: list[str], workdir: str | None = None, seed: int = 0) -> list[dict]:
    out = []
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        for k, name in enumerate(sets):
            out.append(run_set(name, OPTION_SETS[name], seconds_per_set, tmp, seed + k))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fuzz.beside_writer", description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="in all, shared by the option sets")
    ap.add_argument("--option-set", default=None, help="one of " + ", ".join(OPTION_SETS))
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--writer", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--options", default="{}", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    seed = a.seed if a.seed is not None else int(time.time()) % 1_000_000
    if a.writer is not None:
        return writer_main(a.writer, json.loads(a.options), a.seconds, seed)
    sets = [a.option_set] if a.option_set else list(OPTION_SETS)
    print(f"beside_writer: seed {seed}, {a.seconds:g} s over {len(sets)} option sets", flush=True)
    failed = 0
    for r in run(a.seconds / len(sets), sets, a.workdir, seed):
        print(f"  {r['set']}: {r['writes']} writes, {r['opens']} read-only opens ({r['pairs']} pairs checked, "
              f"{r['verifies']} verifies), {r['commands']} commands, {r['own_views']} views of the writer's own: "
              f"{r['failures']} failures", flush=True)
        for m in r["messages"]:
            print(f"    {m}", flush=True)
        failed += r["failures"]
    print(f"beside_writer: {'FAILED' if failed else 'ok'}: {failed} failures "
          f"(reproduce: python -m fuzz.beside_writer --seed {seed} --seconds {a.seconds:g})", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
