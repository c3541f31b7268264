"""Which bytes of which tables point reads of a set of keys would read: a plan for a prefetch.

:func:`data_blocks` answers, for the tables of one version, the question a batched point read
(RocksDB's ``MultiGet``) asks before it reads anything: for each key, the data block of every
table a point read (:meth:`antkv.db.read_api.ReadAPI.get`) could visit -- the level-0 tables whose range
holds the key (every level-0 table when their ranges all overlap:
``Version.l0_ranges_apart`` false) and at most one table per sorted level, each passed only if
its filter may hold the key -- and the byte range of that block in the table's file (its trailer included).  A
caller that reads tables from slow storage fetches those ranges together, in parallel, before
the reads: each read then finds its block already local.

The plan is a superset of what the reads touch (a read stops at the newest table holding the
key; a filter's false positive names a block no read needs); it reads no data block, only the
tables' index and filter, which an open table holds in memory.
"""

from __future__ import annotations

from bisect import bisect_left

from ..manifest.version_set import find_file
from ..sst.format import BLOCK_TRAILER_SIZE


def data_blocks(version, open_table, keys, ranges=()) -> dict[str, set[tuple[int, int]]]:
    """``{table path: {(offset, length), ...}}``: the data blocks of ``version``'s tables that
    point reads of ``keys`` (bytes) may read, and those holding keys of each ``[begin, end)``
    of ``ranges`` (``end`` None: no end; no filter applies to a range: every table
    overlapping it counts).
    ``open_table(f)`` gives the reader of file ``f`` when ``f.reader`` is not set (the
    database's table cache)."""
    plan: dict[str, set[tuple[int, int]]] = {}
    for begin, end in ranges:
        for f in [f for files in version.levels for f in files
                  if f.largest >= begin and (end is None or f.smallest < end)]:
            r = f.reader or open_table(f)
            ikeys, _negs, offsets, sizes = r.index()
            lo = bisect_left(ikeys, begin)
            hi = len(ikeys) - 1 if end is None else min(bisect_left(ikeys, end), len(ikeys) - 1)
            blocks = plan.setdefault(r.path, set())
            blocks.update((offsets[i], sizes[i] + BLOCK_TRAILER_SIZE) for i in range(lo, hi + 1))
    level0 = version.levels[0]
    apart = version.l0_ranges_apart
    sorted_levels = version.sorted_levels
    for key in keys:
        candidates = [f for f in level0 if not apart or f.smallest <= key <= f.largest]
        for _level, files, largest in sorted_levels:
            f = find_file(files, largest, key)
            if f is not None:
                candidates.append(f)
        for f in candidates:
            r = f.reader or open_table(f)
            if not r.may_contain(key):
                continue
            ikeys, _negs, offsets, sizes = r.index()
            i = bisect_left(ikeys, key)
            if i == len(ikeys):
                continue
            blocks = plan.setdefault(r.path, set())
            blocks.add((offsets[i], sizes[i] + BLOCK_TRAILER_SIZE))
            if ikeys[i] == key and i + 1 < len(ikeys):  # the key's versions may go on in the next block
                blocks.add((offsets[i + 1], sizes[i + 1] + BLOCK_TRAILER_SIZE))
    return plan
