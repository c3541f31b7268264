"""A block cache entry, which is also the handle to it (as in RocksDB).

The fields a caller reads are ``key``, ``value`` and ``charge``.  The rest is the shard's
bookkeeping (:mod:`antkv.memory.lru` and :mod:`antkv.memory.clock` say what each field means
under their policy), touched only under the shard's lock -- except ``hit``, which a lock-free
hit of the clock policy sets (a single store of ``True``; the sweep that clears it holds the
lock, and a lost race only decides whether the entry gets one more turn of the clock).
"""

from __future__ import annotations


class Handle:
    """A cache entry; a handle to it is the entry itself."""

    __slots__ = (
        "key", "value", "charge", "high", "refs", "hit", "in_cache", "in_high_pool", "shard",
        "prev", "next",
    )

    def __init__(self, key, value, charge, high, shard):
        self.key = key
        self.value = value
        self.charge = charge
        self.high = high  # inserted with priority "high"
        self.refs = 0  # outstanding handles; > 0 means pinned
        self.hit = False  # looked up while in the cache (LRU: goes to the high pool; clock: the reference bit)
        self.in_cache = True  # in the shard's hash table
        self.in_high_pool = False  # LRU: in the high part of the list (only if refs == 0)
        self.shard = shard
        self.prev = self.next = None  # the shard's list links; None when not in the list

    def __repr__(self) -> str:
        return f"Handle(key={self.key!r}, charge={self.charge}, refs={self.refs})"


def counter_value(counter) -> int:
    """How many times ``counter`` (an ``itertools.count()``) was advanced.

    Shards count hits and misses with ``itertools.count().__next__``: one C call, atomic under
    the GIL, so a hit that takes no lock is still counted exactly.  ``count`` offers no reader
    but its ``repr``, ``count(N)``.
    """
    return int(repr(counter)[6:-1])
