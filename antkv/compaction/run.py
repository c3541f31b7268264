"""Running a picked compaction (:mod:`antkv.compaction.picker`): a trivial move, or a
:class:`~antkv.compaction.jobs.CompactionJob` run in this process or a worker, plus value-log GC
relocation.

Input tables wholly covered by a range tombstone from a newer input table, with no snapshot
between them, are dropped without being read (their pointers count as garbage in full).
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass

from ..base.expiry import now_ms
from ..manifest.version_edit import FileMetaData, VersionEdit
from .jobs import CompactionJob
from .picker import Compaction, is_bottommost


@dataclass(frozen=True)
class CompactionEnv:
    """What running a compaction needs of its database (built once by the database)."""

    fs: object  # the database's FileSystem
    path: str  # the database directory
    options: object  # Options
    jobs: object  # the JobRunner: where the job runs
    open_table: object  # open_table(f): the reader of table f (the table cache)
    new_file_number: object  # new_file_number(): a fresh file number (for a GC value-log file)
    vlog_reader: object  # the ValueLogReader (GC reads live values through it)
    counters: dict  # the database's statistics counters


def run_compaction(env: CompactionEnv, version, c: Compaction, snapshots: list[int]) -> VersionEdit:
    """Execute ``c``, picked from ``version`` (no lock held); the edit that installs its result."""
    edit = VersionEdit()
    for lvl, f in c.inputs:
        edit.deleted_tables.append((lvl, f.number))
    readers = {f.number: (f.reader or env.open_table(f)) for _, f in c.inputs}
    if (
        len(c.inputs) == 1
        and c.output_level == c.level + 1
        and c.reason == "score"  # an explicit compact_range rewrites (and splits) its tables
        and not readers[c.inputs[0][1].number].range_tombstones
    ):
        f = c.inputs[0][1]
        edit.new_tables.append((c.output_level, f))
        env.counters["trivial_moves"] += 1
        return edit
    garbage: dict[int, int] = {}
    job = CompactionJob(
        inputs=_drop_covered_inputs(env, c, readers, snapshots, garbage),
        output_level=c.output_level,
        snapshots=list(snapshots),
        bottommost=is_bottommost(version, c),
        target_size=env.options.target_file_size_base,
        now=now_ms(env.options.clock),
        merge_operator=env.options.merge_operator,
    )
    relocate, gc_writer = _gc_relocator(env, c.gc_files)
    try:
        result = env.jobs.compact(job, relocate, [readers[f.number] for _, f in job.inputs])
        if gc_writer is not None:
            gc_writer.seal()
            edit.new_vlogs.append(gc_writer.file_number)
            edit.sealed_vlogs.append((gc_writer.file_number, gc_writer.record_bytes))
            env.counters["vlog_bytes_written"] += gc_writer.size
            env.fs.sync_dir(env.path)
    except BaseException:
        if gc_writer is not None:
            gc_writer.close()
        raise
    result.add_stats_to(env.counters)
    env.counters["compaction_bytes_read"] += sum(f.size for _, f in job.inputs)
    for meta in result.tables:
        edit.new_tables.append((c.output_level, meta))
    for vnum, nbytes in result.garbage.items():
        garbage[vnum] = garbage.get(vnum, 0) + nbytes
    edit.vlog_garbage.extend(sorted(garbage.items()))
    env.counters["compactions"] += 1
    return edit


def _drop_covered_inputs(
    env: CompactionEnv, c: Compaction, readers, snapshots, garbage
) -> list[tuple[int, FileMetaData]]:
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
            env.counters["tables_dropped_by_range_tombstones"] += 1
            for vnum, nbytes in f.blob_refs.items():
                garbage[vnum] = garbage.get(vnum, 0) + nbytes
            continue
        kept.append((lvl, f))
    return kept


def _same_stripe(a: int, b: int, snapshots: list[int]) -> bool:
    return bisect_left(snapshots, a) == bisect_left(snapshots, b)


def _gc_relocator(env: CompactionEnv, gc_files: set[int]):
    """``(relocate, writer)``: moves live values out of ``gc_files`` into a new value-log file."""
    if not gc_files:
        return None, None
    from ..vlog.pointer import decode_pointer
    from ..vlog.writer import ValueLogWriter

    number = env.new_file_number()
    writer = ValueLogWriter.create_in(env.fs, env.path, number, compression=env.options.blob_compression)
    reader = env.vlog_reader
    stats = env.counters

    def relocate(key: bytes, pointer: bytes) -> bytes | None:
        fnum, _off, size = decode_pointer(pointer)
        if fnum not in gc_files:
            return None
        value = reader.get_checked(pointer, key)
        stats["gc_bytes_relocated"] += size
        return writer.add(key, value)

    return relocate, writer
