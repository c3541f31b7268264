"""Flush: an immutable memtable becomes one L0 table.

The memtable's entries go through the same :func:`~antkv.compaction_stream.compaction_stream`
as a compaction (shadowed versions no snapshot can see are dropped, and dropped value pointers
are counted as value-log garbage), never as bottommost: deletions must survive to hide older
versions in lower levels.  Its range tombstones go to the table's range-tombstone block.

Before the table is made durable, the active value-log file is synced: a table must never
point at value-log bytes a power loss could take away.
"""

from __future__ import annotations

from .compaction_stream import TableOutputs, compaction_stream, output_tombstones
from .memtable import MemTable
from .version_edit import FileMetaData


def write_level0_table(db, mem: MemTable, snapshots: list[int]) -> tuple[FileMetaData | None, dict[int, int]]:
    """Write ``mem`` as one table; ``(metadata or None if nothing survived, vlog garbage)``."""
    if db._vlog is not None:
        db._vlog.sync()
    garbage: dict[int, int] = {}
    tombstones = output_tombstones(list(mem.range_dels), snapshots, bottommost=False)
    outputs = TableOutputs(db, target_size=1 << 62, tombstones=tombstones, stats_key="flush_bytes_written")
    try:
        for key, seq, kind, value in compaction_stream(
            mem.iter_forward(None), snapshots, mem.fragments(), False, garbage
        ):
            outputs.add(key, seq, kind, value)
        metas = outputs.finish()
    except BaseException:
        outputs.abandon()
        raise
    db._fs.sync_dir(db.path)
    db._stats["flushes"] += 1
    return (metas[0] if metas else None), garbage
