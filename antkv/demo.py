"""``make demo``: the library at work on a generated data set.

Loads 200,000 keys (mixed small values and large ones that go to the value log), overwrites a
quarter of them, range-deletes one key group, reopens, checks every key against an in-memory
model, verifies every checksum, and prints ``db.stats()``.
"""

from __future__ import annotations

import os
import random
import shutil
import sys
import tempfile
import time

import antkv

N = 200_000
GROUPS = 16


def key(i: int) -> bytes:
    return (i % GROUPS).to_bytes(2, "big") + i.to_bytes(8, "big")


def value(i: int, gen: int) -> bytes:
    if i % 50 == 0:
        return (b"%d:%d:" % (i, gen)) * 700  # ~8 KiB: separated into the value log
    return b"%d:%d:" % (i, gen) + b"v" * 80


def main() -> int:
    root = tempfile.mkdtemp(prefix="antkv-demo-")
    path = os.path.join(root, "db")
    rng = random.Random(42)
    model: dict[bytes, bytes] = {}
    try:
        t0 = time.perf_counter()
        with antkv.open(path, write_buffer_size=8 << 20) as db:
            batch = antkv.WriteBatch()
            for i in range(N):
                k, v = key(i), value(i, 0)
                batch.put(k, v)
                model[k] = v
                if len(batch) == 1000:
                    db.write(batch)
                    batch = antkv.WriteBatch()
            db.write(batch)
            t1 = time.perf_counter()
            print(f"loaded {N:,} keys in {t1 - t0:.1f}s ({N / (t1 - t0):,.0f} keys/s)")
            for i in rng.sample(range(N), N // 4):
                k, v = key(i), value(i, 1)
                db.put(k, v)
                model[k] = v
            print(f"overwrote {N // 4:,} keys")
            group = 7
            db.delete_range(group.to_bytes(2, "big"), (group + 1).to_bytes(2, "big"))
            for k in [k for k in model if k[:2] == group.to_bytes(2, "big")]:
                del model[k]
            print(f"range-deleted key group {group} with one delete_range")
            db.flush()
        with antkv.open(path) as db:
            t2 = time.perf_counter()
            got = dict(db.items())
            assert got == model, "scan after reopen differs from the model"
            for k in rng.sample(sorted(model), 2000):
                assert db.get(k) == model[k]
            print(f"reopened; {len(got):,} keys match the model (scan {time.perf_counter() - t2:.1f}s)")
            db.compact_range()
            report = db.verify()
            print(f"verify: {report}")
            print(db.property("antkv.stats"))
        print("demo OK")
        return 0
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
