"""Approximate sizes of key ranges, from the tables' indexes (RocksDB's ``GetApproximateSizes``).

For each table overlapping ``[begin, end)`` the part of its data blocks the range covers is
found from the index (the offset of the first block that may hold a key, by bisection); that
fraction of the table's bytes, *and of the value-log bytes its entries point to*, is counted.
Memtables are not counted.  The result is an estimate: block-granular, and value sizes are
assumed even across a table.  Nothing is read but indexes (which a table keeps in memory).
"""

from __future__ import annotations

from bisect import bisect_left


def approximate_size(version, open_table, begin: bytes | None, end: bytes | None) -> int:
    """Estimated bytes on disk (tables and the value-log records they point to) of the keys in
    ``[begin, end)`` (None: unbounded) in ``version``; ``open_table(meta)`` gives a reader."""
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

        def offset_of(key: bytes | None, default: int) -> int:
            if key is None:
                return default
            i = bisect_left(keys, key)
            return offsets[i] if i < len(keys) else data_end

        covered = offset_of(end, data_end) - offset_of(begin, 0)
        if covered > 0 and data_end > 0:
            total += covered / data_end * (f.size + sum(f.blob_refs.values()))
    return int(total)
