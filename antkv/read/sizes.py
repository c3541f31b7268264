"""Approximate sizes of key ranges, from the tables' indexes (RocksDB's ``GetApproximateSizes``).

For each table overlapping ``[begin, end)`` the data blocks that may hold keys of the range are
found from the index (by bisection: the block holding ``begin`` through the one holding ``end``,
both counted whole); that fraction of the table's bytes, *and of the value-log bytes its entries
point to*, is counted.
Memtables are not counted.  The result is an estimate: block-granular, and value sizes are
assumed even across a table.  Nothing is read but indexes (which a table keeps in memory).
"""

from __future__ import annotations

from bisect import bisect_left


def approximate_size(version, open_table, begin: bytes | None, end: bytes | None) -> int:
    """Estimated bytes on disk (tables and the value-log records they point to) of the keys in
    ``[begin, end)`` (None: unbounded) in ``version``; ``open_table(meta)`` gives a reader."""
    if begin is not None and end is not None and begin >= end:
        return 0
    total = 0.0
    for _level, f in version.all_files():
        if end is not None and f.smallest >= end:
            continue
        if begin is not None and (f.largest < begin or (f.largest_exclusive and f.largest <= begin)):
            continue
        keys, _neg_seqs, offsets, sizes = (f.reader or open_table(f)).index()
        if not keys:
            continue
        data_end = offsets[-1] + sizes[-1]

        # the blocks that may hold keys in the range: from the block holding ``begin`` through
        # the one holding ``end`` (partly covered blocks count whole: block granularity)
        first = 0 if begin is None else offsets[min(bisect_left(keys, begin), len(keys) - 1)]
        i = len(keys) - 1 if end is None else min(bisect_left(keys, end), len(keys) - 1)
        covered = offsets[i] + sizes[i] - first
        if covered > 0 and data_end > 0:
            total += covered / data_end * (f.size + sum(f.blob_refs.values()))
    return int(total)
