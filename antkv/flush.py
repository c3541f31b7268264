"""Flush: an immutable memtable becomes one L0 table.

The memtable's entries go through the same :func:`~antkv.compaction_stream.compaction_stream`
as a compaction (shadowed versions no snapshot can see are dropped, and dropped value pointers
are counted as value-log garbage), never as bottommost: deletions must survive to hide older
versions in lower levels.  Its range tombstones go to the table's range-tombstone block.

With no live snapshot and no range tombstone (the common case) only the newest version of each
key can be seen by anyone, so the flush takes it straight from the memtable's version lists,
skipping the general stream (:func:`_newest_versions`).

Before the table is made durable, the active value-log file is synced: a table must never
point at value-log bytes a power loss could take away.
"""

from __future__ import annotations

from operator import itemgetter

from .compaction_stream import TableOutputs, compaction_stream, output_tombstones
from .dbformat import CHECK_INVARIANTS, VALUE_POINTER
from .memtable import MemTable
from .vlog.pointer import decode_pointer
from .version_edit import FileMetaData


def write_level0_table(db, mem: MemTable, snapshots: list[int]) -> tuple[FileMetaData | None, dict[int, int]]:
    """Write ``mem`` as one table; ``(metadata or None if nothing survived, vlog garbage)``."""
    if CHECK_INVARIANTS:
        mem._check()
    if db._vlog is not None:
        db._vlog.sync()
    garbage: dict[int, int] = {}
    tombstones = output_tombstones(list(mem.range_dels), snapshots, bottommost=False)
    outputs = TableOutputs(db, target_size=1 << 62, tombstones=tombstones, stats_key="flush_bytes_written")
    try:
        if not snapshots and not mem.range_dels:
            outputs.add_columns(*_newest_versions(mem, garbage))
        else:
            outputs.add_all(compaction_stream(mem.iter_forward(None), snapshots, mem.fragments(), False, garbage))
        metas = outputs.finish()
    except BaseException:
        outputs.abandon()
        raise
    db._fs.sync_dir(db.path)
    db._stats["flushes"] += 1
    return (metas[0] if metas else None), garbage


def _newest_versions(mem: MemTable, garbage: dict[int, int]) -> tuple[list, list, list, list]:
    """Columns ``(keys, seqs, kinds, values)`` of every key's newest version, in key order;
    the value pointers of older versions are counted as garbage.  REQUIRES: no live snapshot,
    no range tombstone, and an immutable ``mem``."""
    versions = mem.versions
    keys = sorted(versions)  # one C sort; the memtable's own SortedList is not needed here
    newest = list(map(versions.__getitem__, keys))
    for lst in mem.older.values():
        for _seq, kind, value in lst:
            if kind == VALUE_POINTER:
                fnum, _off, size = decode_pointer(value)
                garbage[fnum] = garbage.get(fnum, 0) + size
    # itemgetter columns: zip(*newest) would pass every tuple as an argument (4x slower)
    return keys, list(map(_SEQ, newest)), list(map(_KIND, newest)), list(map(_VALUE, newest))


_SEQ, _KIND, _VALUE = itemgetter(0), itemgetter(1), itemgetter(2)
