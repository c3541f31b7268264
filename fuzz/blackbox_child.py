"""The workload process of the blackbox kill test: ``python -m fuzz.blackbox_child DIR SEED``.

Opens the database ``DIR/db`` on the real file system (background flush and compaction on,
small buffers so they happen often) and writes random puts, deletes and write batches, some
with ``sync=True``, plus an occasional flush, compaction or value-log GC, until it is killed
(or ``--seconds`` pass).  It prints ``ready`` once the database is open.

Its expected-state log ``DIR/expected-SEED.log`` is written with unbuffered ``os.write``
calls, so every line reaches the OS before the next step (a SIGKILL keeps all of them):

    pending <key hex> <value hex or ->[ <key hex> <value hex or ->...]   before a write
    acked                                                                after it returned

``-`` is a deletion; a line with several pairs is one atomic write batch.  After a kill, a
key must hold the value of its last acknowledged write, or -- if the last ``pending`` line
has no ``acked`` -- the batch in flight, applied whole or not at all.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time

import antkv

CHILD_OPTIONS = dict(
    write_buffer_size=8 * 1024,
    block_size=256,
    target_file_size_base=8 * 1024,
    max_bytes_for_level_base=32 * 1024,
    level0_file_num_compaction_trigger=2,
    min_blob_size=64,
    blob_file_size=16 * 1024,
    blob_gc_threshold=0.3,
    max_manifest_file_size=4 * 1024,
    max_background_jobs=2,
)

KEYS = [b"key%03d" % i for i in range(64)] + [b""]


def encode_pairs(pairs: list[tuple[bytes, bytes | None]]) -> str:
    return " ".join(f"{k.hex()} {'-' if v is None else v.hex()}" for k, v in pairs)


def decode_pairs(fields: list[str]) -> list[tuple[bytes, bytes | None]]:
    return [(bytes.fromhex(fields[i]), None if fields[i + 1] == "-" else bytes.fromhex(fields[i + 1]))
            for i in range(0, len(fields), 2)]


def _value(rng: random.Random, n: int) -> bytes:
    size = rng.choice([0, 1, 10, 40, 63, 64, 100, 300, 2000])
    return (b"%d:" % n + rng.randbytes(size))[: max(size, 1)] if size else b""


def run(directory: str, seed: int, seconds: float) -> None:
    rng = random.Random(seed)
    log_fd = os.open(os.path.join(directory, f"expected-{seed}.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    db = antkv.open(os.path.join(directory, "db"), **CHILD_OPTIONS)
    print("ready", flush=True)
    deadline = time.monotonic() + seconds
    n = 0
    while time.monotonic() < deadline:
        n += 1
        r = rng.random()
        if r < 0.01:
            db.flush(wait=rng.random() < 0.5)
            continue
        if r < 0.015:
            db.compact_range()
            continue
        if r < 0.02:
            db.gc_value_log()
            continue
        sync = rng.random() < 0.2
        if r < 0.85:
            pairs = [(rng.choice(KEYS), None if rng.random() < 0.15 else _value(rng, n))]
        else:
            pairs = [(rng.choice(KEYS), None if rng.random() < 0.3 else _value(rng, n)) for _ in range(rng.randint(2, 5))]
        os.write(log_fd, f"pending {encode_pairs(pairs)}\n".encode())
        if len(pairs) == 1:
            k, v = pairs[0]
            if v is None:
                db.delete(k, sync=sync)
            else:
                db.put(k, v, sync=sync)
        else:
            with db.write_batch(sync=sync) as b:
                for k, v in pairs:
                    if v is None:
                        b.delete(k)
                    else:
                        b.put(k, v)
        os.write(log_fd, b"acked\n")
    db.close()
    os.close(log_fd)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fuzz.blackbox_child", description=__doc__.split("\n")[0])
    ap.add_argument("directory")
    ap.add_argument("seed", type=int)
    ap.add_argument("--seconds", type=float, default=60.0, help="stop (and close) after this long")
    args = ap.parse_args(argv)
    run(args.directory, args.seed, args.seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
