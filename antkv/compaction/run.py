"""Running a picked compaction (:mod:`antkv.compaction.picker`): a trivial move, or a
:class:`~antkv.compaction.jobs.CompactionJob` run in this process or a worker, plus value-log GC
relocation.

Input tables wholly covered by a range tombstone from a newer input table, with no snapshot
between them, are dropped without being read (their pointers count as garbage in full).
"""

from __future__ import annotations

from bisect import bisect_left

from ..manifest.version_edit import FileMetaData, VersionEdit
from .jobs import CompactionJob
from .picker import Compaction, is_bottommost


def run_compaction(db, c: Compaction, snapshots: list[int]) -> VersionEdit:
    """Execute ``c`` (no lock held); the edit that installs its result."""
    edit = VersionEdit()
    version = db._versions.current
    for lvl, f in c.inputs:
        edit.deleted_tables.append((lvl, f.number))
    readers = {f.number: (f.reader or db._open_table(f)) for _, f in c.inputs}
    if (
        len(c.inputs) == 1
        and c.output_level == c.level + 1
        and c.reason == "score"  # an explicit compact_range rewrites (and splits) its tables
        and not readers[c.inputs[0][1].number].range_tombstones
    ):
        f = c.inputs[0][1]
        edit.new_tables.append((c.output_level, f))
        db._stats["trivial_moves"] += 1
        return edit
    garbage: dict[int, int] = {}
    job = CompactionJob(
        inputs=_drop_covered_inputs(db, c, readers, snapshots, garbage),
        output_level=c.output_level,
        snapshots=list(snapshots),
        bottommost=is_bottommost(version, c),
        target_size=db.options.target_file_size_base,
    )
    relocate, gc_writer = _gc_relocator(db, c.gc_files)
    try:
        result = db._jobs.compact(job, relocate, [readers[f.number] for _, f in job.inputs])
        if gc_writer is not None:
            gc_writer.seal()
            edit.new_vlogs.append(gc_writer.file_number)
            edit.sealed_vlogs.append((gc_writer.file_number, gc_writer.record_bytes))
            db._stats["vlog_bytes_written"] += gc_writer.size
            db._fs.sync_dir(db.path)
    except BaseException:
        if gc_writer is not None:
            gc_writer.close()
        raise
    result.add_stats_to(db._stats)
    db._stats["compaction_bytes_read"] += sum(f.size for _, f in job.inputs)
    for meta in result.tables:
        edit.new_tables.append((c.output_level, meta))
    for vnum, nbytes in result.garbage.items():
        garbage[vnum] = garbage.get(vnum, 0) + nbytes
    edit.vlog_garbage.extend(sorted(garbage.items()))
    db._stats["compactions"] += 1
    return edit


def _drop_covered_inputs(db, c: Compaction, readers, snapshots, garbage) -> list[tuple[int, FileMetaData]]:
    """Inputs minus tables that a newer input's range tombstone covers entirely with no snapshot
    in between (dropped unread; their value pointers become garbage in full)."""
    kept = []
    for lvl, f in c.inputs:
        covered = False
        for lvl2, g in c.inputs:
            if g is f or g.largest_seq <= f.largest_seq:
                continue
            frags = readers[g.number].fragments()
            if not frags:
                continue
            i = frags.fragment_index(f.smallest)
            if i < 0:
                continue
            # one fragment run must span [f.smallest, f.largest] with seqs newer than all of f
            j = i
            ok = False
            while j < len(frags):
                if not any(s > f.largest_seq and _same_stripe(s, f.smallest_seq, snapshots) for s in frags.seqs[j]):
                    break
                end = frags.ends[j]
                if end > f.largest or (f.largest_exclusive and end >= f.largest):
                    ok = True
                    break
                if j + 1 < len(frags) and frags.starts[j + 1] != end:
                    break
                j += 1
            if ok:
                covered = True
                break
        if covered and not readers[f.number].range_tombstones:
            db._stats["tables_dropped_by_range_tombstones"] += 1
            for vnum, nbytes in f.blob_refs.items():
                garbage[vnum] = garbage.get(vnum, 0) + nbytes
            continue
        kept.append((lvl, f))
    return kept


def _same_stripe(a: int, b: int, snapshots: list[int]) -> bool:
    return bisect_left(snapshots, a) == bisect_left(snapshots, b)


def _gc_relocator(db, gc_files: set[int]):
    """``(relocate, writer)``: moves live values out of ``gc_files`` into a new value-log file."""
    if not gc_files:
        return None, None
    from ..vlog.pointer import decode_pointer
    from ..vlog.writer import ValueLogWriter

    with db._mutex:
        number = db._versions.new_file_number()
    writer = ValueLogWriter.create_in(db._fs, db.path, number, compression=db.options.blob_compression)
    reader = db._vlog_reader
    stats = db._stats

    def relocate(key: bytes, pointer: bytes) -> bytes | None:
        fnum, _off, size = decode_pointer(pointer)
        if fnum not in gc_files:
            return None
        value = reader.get_checked(pointer, key)
        stats["gc_bytes_relocated"] += size
        return writer.add(key, value)

    return relocate, writer
