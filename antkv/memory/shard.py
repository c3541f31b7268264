"""What every cache shard does the same way, whatever its policy: inserting an entry.

A policy's shard (:class:`antkv.memory.lru.LRUShard`, :class:`antkv.memory.clock.ClockShard`)
supplies ``evict(charge)``, ``link(e)`` (an unpinned entry into its list) and ``unlink(e)``,
and the fields ``table``, ``usage``, ``capacity``, ``strict``, ``detached_usage``, ``inserts``
and ``rejected``.  Methods REQUIRE the shard's ``lock``.
"""

from __future__ import annotations

from ..errors import MemoryLimitError
from .cache_entry import Handle


class Shard:
    __slots__ = ()

    # a high-priority entry starts referenced under the clock policy (one more turn of its hand)
    referenced_on_insert_if_high = False

    def insert(self, key, value, charge: int, high: bool, pin: bool):
        """Insert; returns the entry, or None if it was not kept (only when ``pin`` is False)."""
        if self.usage + charge > self.capacity:
            self.evict(charge)
            if self.usage + charge > self.capacity and (not pin or self.strict):
                self.rejected += 1
                if pin:
                    raise MemoryLimitError(
                        f"cache shard full: usage {self.usage} + charge {charge} > capacity "
                        f"{self.capacity} and the rest is pinned"
                    )
                return None
        e = self.new_entry(key, value, charge, high)
        if pin:
            e.refs = 1
        else:
            self.link(e)
        return e

    def new_entry(self, key, value, charge: int, high: bool) -> Handle:
        """A new entry for ``key``, in the table and charged (replacing any entry of ``key``:
        an unpinned one leaves the list, a pinned one is detached), not yet in the list."""
        e = Handle(key, value, charge, high, self)
        if high and self.referenced_on_insert_if_high:
            e.hit = True
        table = self.table
        old = table.get(key)
        table[key] = e
        self.usage += charge
        self.inserts += 1
        if old is not None:
            old.in_cache = False
            if old.refs:
                self.detached_usage += old.charge
            else:
                self.unlink(old)
                self.usage -= old.charge
        return e

    def put(self, key, value, charge: int, high: bool) -> bool:
        """Insert an unpinned entry; False (and nothing kept) if it cannot fit."""
        return self.insert(key, value, charge, high, False) is not None
