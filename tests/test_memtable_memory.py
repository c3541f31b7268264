"""The memtable's memory estimate is what the write buffer manager budgets with: it must track
the real allocation (measured with tracemalloc), not just the payload bytes."""

from __future__ import annotations

import random
import tracemalloc

from antkv.memtable.memtable import MemTable


def _measure(build) -> tuple[int, int]:
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        m = build()
        with m.lock:
            m._settle()
        used = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    return m.memory, used


def test_estimate_tracks_real_memory_for_new_keys_and_versions():
    rng = random.Random(3)
    for value_size, distinct in ((100, 20_000), (10, 20_000), (1000, 5_000), (100, 500)):

        def build():
            m = MemTable()
            for i in range(20_000):
                # fresh objects, as the put path receives them, owned by the memtable alone
                k = b"key-%08d" % rng.randrange(distinct)
                m.add(i + 1, 1, k, bytes(rng.randrange(256) for _ in range(4)) * (value_size // 4))
            return m

        estimate, used = _measure(build)
        assert 0.8 * used <= estimate <= 1.25 * used, (value_size, distinct, estimate, used)
