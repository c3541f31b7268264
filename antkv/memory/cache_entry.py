"""A block cache handle, and the shards' counters.

A handle is a pinned cache entry, and the entry itself (as in RocksDB): ``insert`` and a hit of
``lookup`` return it, ``release`` gives it back.  A caller reads its ``key``, ``value`` and
``charge`` (and ``refs``, the outstanding handles).  Each policy stores its entries its own
way (:class:`antkv.memory.lru.LRUHandle`, :class:`antkv.memory.clock.ClockHandle`); both are
:class:`Handle`\\ s.
"""

from __future__ import annotations


class Handle:
    """What every policy's handle is an instance of (it adds no field)."""

    __slots__ = ()


def counter_value(counter) -> int:
    """How many times ``counter`` (an ``itertools.count()``) was advanced.

    Shards count hits and misses with ``itertools.count().__next__``: one C call, atomic under
    the GIL, so a hit that takes no lock is still counted exactly.  ``count`` offers no reader
    but its ``repr``, ``count(N)``.
    """
    return int(repr(counter)[6:-1])
