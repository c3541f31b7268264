"""Flush: an immutable memtable becomes one L0 table.

The job itself (:func:`antkv.compaction.jobs.execute_flush`) runs in the calling thread or in a worker
process: the memtable's entries go through the same stream as a compaction (shadowed versions
no snapshot can see are dropped, dropped value pointers counted as value-log garbage), and its
range tombstones go to the table's range-tombstone block.  Deletions survive to hide older
versions in lower levels -- unless there are none: the database holds no table and no older
memtable waits, so the flush is *bottommost* and drops deletions (and range tombstones) no
snapshot needs, as a bottommost compaction does.  A state's first flush, a rebuilt copy's, a
bulk load's: their tombstones would hide nothing.  With no live snapshot and no range
tombstone (the common case) only each key's newest version is written, taken straight from
the memtable as columns.

Before the job starts, the active value-log file is synced: a table must never point at
value-log bytes a power loss could take away.
"""

from __future__ import annotations

from ..base.dbformat import CHECK_INVARIANTS
from ..manifest.version_edit import FileMetaData
from ..memtable.memtable import MemTable


def write_level0_table(
    jobs, vlog, mem: MemTable, snapshots: list[int], counters: dict, bottommost: bool = False
) -> tuple[FileMetaData | None, dict[int, int]]:
    """Write ``mem`` as one table through the job runner ``jobs``, after syncing ``vlog`` (the
    active value-log writer, or None); ``(metadata or None if nothing survived, vlog garbage)``.
    ``bottommost``: nothing older than ``mem`` exists (the module docstring).  The job's
    statistics are added to ``counters``."""
    if CHECK_INVARIANTS:
        mem._check()
    if vlog is not None:
        vlog.sync()
    result = jobs.flush(mem, snapshots, bottommost)
    result.add_stats_to(counters)
    return (result.tables[0] if result.tables else None), result.garbage
