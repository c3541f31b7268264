"""YCSB core workloads A-F as seeded operation streams.

=====  ==========================================  ============
mix    operations                                  distribution
=====  ==========================================  ============
A      50% read, 50% update                         zipfian
B      95% read, 5% update                          zipfian
C      100% read                                    zipfian
D      95% read, 5% insert                          latest
E      95% scan (1..100 entries), 5% insert         zipfian
F      50% read, 50% read-modify-write              zipfian
=====  ==========================================  ============

The zipfian generator is YCSB's (Gray et al., "Quickly generating billion-record synthetic
databases", theta 0.99), "scrambled" by hashing the rank so popular keys are spread over the key
space rather than clustered at its start.  "latest" draws a zipfian rank back from the newest
inserted key.  Inserts use fresh keys past the filled key space.
"""

from __future__ import annotations

import random

THETA = 0.99
_MIX = {
    "a": (("read", 0.5), ("update", 0.5)),
    "b": (("read", 0.95), ("update", 0.05)),
    "c": (("read", 1.0),),
    "d": (("read", 0.95), ("insert", 0.05)),
    "e": (("scan", 0.95), ("insert", 0.05)),
    "f": (("read", 0.5), ("rmw", 0.5)),
}
MAX_SCAN = 100


class Zipfian:
    """Ranks in ``[0, n)``, rank 0 the most popular, with YCSB's constants."""

    def __init__(self, n: int, rng: random.Random, theta: float = THETA) -> None:
        self.n = n
        self.rng = rng
        self.theta = theta
        self.zetan = sum(i ** -theta for i in range(1, n + 1))
        zeta2 = 1.0 + 0.5 ** theta
        self.alpha = 1.0 / (1.0 - theta)
        self.eta = (1.0 - (2.0 / n) ** (1.0 - theta)) / (1.0 - zeta2 / self.zetan) if n > 1 else 0
        self.half_pow = 1.0 + 0.5 ** theta

    def next(self) -> int:
        u = self.rng.random()
        uz = u * self.zetan
        if uz < 1.0:
            return 0
        if uz < self.half_pow:
            return 1
        return min(self.n - 1, int(self.n * (self.eta * u - self.eta + 1.0) ** self.alpha))


def _scramble(rank: int, n: int) -> int:
    return ((rank * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019) & 0xFFFFFFFFFFFFFFFF) % n


def ycsb_ops(letter: str, loaded: list[int], num: int, count: int, seed: int):
    """``count`` operations ``(op, key, scan_length)`` of workload ``letter`` over the key
    indices ``loaded`` (new keys start at ``num``); returns ``(ops, keys_inserted)``."""
    from .workloads import key

    mix = _MIX[letter]
    rng = random.Random(seed * 7919 + ord(letter))
    universe = list(loaded)  # in insertion order: the newest key is last
    if not universe:
        return [], 0
    zipf = Zipfian(len(universe), rng)
    next_new = num
    ops = []
    cumulative = []
    acc = 0.0
    for name, share in mix:
        acc += share
        cumulative.append((acc, name))
    latest = letter == "d"
    for _ in range(count):
        u = rng.random()
        op = next(name for bound, name in cumulative if u < bound or bound >= 1.0)
        if op == "insert":
            universe.append(next_new)
            ops.append(("insert", key(next_new), 0))
            next_new += 1
            continue
        rank = zipf.next()
        if latest:
            idx = universe[max(0, len(universe) - 1 - rank)]
        else:
            idx = universe[_scramble(rank, len(universe))]
        scan = rng.randint(1, MAX_SCAN) if op == "scan" else 0
        ops.append((op, key(idx), scan))
    return ops, next_new - num
