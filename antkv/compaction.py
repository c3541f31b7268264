"""Leveled compaction: choosing what to compact, and doing it.

Picking (:func:`pick_compaction`), in priority order:

1. tables marked for value-log GC: a sealed value-log file whose garbage ratio reached
   ``blob_gc_threshold`` marks every table pointing into it (reverse map from the version);
2. the level with the highest score >= 1: L0 scores ``files / level0_file_num_compaction_trigger``,
   level ``n >= 1`` scores ``bytes / (max_bytes_for_level_base * multiplier^(n-1))``.

An L0 compaction takes every L0 table (so L1 always holds older data than L0) plus the L1 tables
they overlap.  A level-``n`` compaction takes one table (round-robin by key) plus the tables of
``n+1`` it overlaps.  A single table with nothing to merge below moves down without being
rewritten (a *trivial move*).  The output level's last level (nothing older below in the key
range) is *bottommost*: deletions and old range tombstones die there.

Input tables wholly covered by a range tombstone from a newer input table, with no snapshot
between them, are dropped without being read (their pointers count as garbage in full).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .jobs import CompactionJob
from .read_view import table_fragments
from .version_edit import FileMetaData, VersionEdit


@dataclass
class Compaction:
    level: int
    output_level: int
    inputs: list[tuple[int, FileMetaData]]  # (level, table)
    reason: str
    gc_files: set[int] = field(default_factory=set)  # value-log files whose live values move


def level_target(opts, level: int) -> float:
    return opts.max_bytes_for_level_base * (opts.max_bytes_for_level_multiplier ** (level - 1))


def level_scores(db, version) -> list[tuple[float, int]]:
    opts = db.options
    scores = []
    n = len(version.levels)
    scores.append((len(version.levels[0]) / opts.level0_file_num_compaction_trigger, 0))
    for level in range(1, n - 1):
        scores.append((version.level_bytes(level) / level_target(opts, level), level))
    scores.sort(reverse=True)
    return scores


def gc_candidate_files(db) -> set[int]:
    """Sealed value-log files whose garbage ratio reached the threshold."""
    vs = db._versions
    active = db._vlog.file_number if db._vlog is not None else None
    thr = db.options.blob_gc_threshold
    return {
        n
        for n, st in vs.vlogs.items()
        if st.sealed and n != active and st.total > 0 and st.garbage < st.total and st.garbage / st.total >= thr
    }


def gc_compaction(db, version, gc: set[int]) -> Compaction | None:
    """The compaction of the first table pointing into a value-log file being collected
    (through the version's reverse map), or None when no table points into them."""
    for vnum in sorted(gc):
        tables = version.tables_by_vlog.get(vnum)
        if tables:
            level, f = min(tables, key=lambda lt: lt[0])
            return _expand(db, version, level, [f], "gc", gc)
    return None


def pick_compaction(db) -> Compaction | None:
    """REQUIRES db._mutex.  The most urgent compaction, or None."""
    version = db._versions.current
    gc = gc_candidate_files(db)
    if gc:
        c = gc_compaction(db, version, gc)
        if c is not None:
            return c
    best = level_scores(db, version)
    if not best or best[0][0] < 1.0:
        return None
    _, level = best[0]
    if level == 0:
        return _expand(db, version, 0, list(version.levels[0]), "score", set())
    files = version.levels[level]
    cursor = db._compact_cursor.get(level, b"")
    pick = next((f for f in files if f.smallest >= cursor), files[0])
    db._compact_cursor[level] = pick.largest + b"\x00"
    return _expand(db, version, level, [pick], "score", set())


def _expand(db, version, level: int, files: list[FileMetaData], reason: str, gc: set[int]) -> Compaction:
    last = len(version.levels) - 1
    if level == 0:
        files = list(version.levels[0])  # L0 goes down whole, so L1 stays older than all of L0
    output_level = min(level + 1, last) if not (reason == "gc" and level == last) else last
    if level == last:
        output_level = last
    inputs = [(level, f) for f in files]
    if output_level != level:
        lo = min(f.smallest for f in files)
        hi = max(f.largest for f in files)
        inputs += [(output_level, f) for f in version.overlapping(output_level, lo, hi)]
    return Compaction(level, output_level, inputs, reason, gc)


def manual_compactions(db, version, lo: bytes | None, hi: bytes | None, level: int) -> Compaction | None:
    """The compaction moving ``[lo, hi]`` of ``level`` one level down (or in place at the
    bottom), or None when the level holds nothing there."""
    files = version.overlapping(level, lo, hi)
    if not files:
        return None
    if level == 0:
        files = list(version.levels[0])  # L0 goes down whole: keeps L1 older than L0
    last_data = max((i for i, fs in enumerate(version.levels) if fs), default=0)
    out = level if level >= max(last_data, 1) else level + 1
    if out == level:
        # the bottom level is rewritten in place only where that can drop something: tables
        # holding deletions or range tombstones (RocksDB skips the bottommost level by default)
        marked = [i for i, f in enumerate(files) if _has_deletions(db, f)]
        if not marked:
            return None
        # a contiguous run: the output spans its inputs' whole range, so a table left out from
        # the middle would overlap it (found by the differential fuzzer)
        files = files[marked[0] : marked[-1] + 1]
    inputs = [(level, f) for f in files]
    if out != level:
        flo = min(f.smallest for f in files)
        fhi = max(f.largest for f in files)
        inputs += [(out, f) for f in version.overlapping(out, flo, fhi)]
    return Compaction(level, out, inputs, "manual")


def _has_deletions(db, f: FileMetaData) -> bool:
    props = (f.reader or db._open_table(f)).properties
    return props.num_deletions > 0 or props.num_range_deletions > 0


def is_bottommost(version, c: Compaction) -> bool:
    lo = min(f.smallest for _, f in c.inputs)
    hi = max(f.largest for _, f in c.inputs)
    return all(not version.overlapping(lvl, lo, hi) for lvl in range(c.output_level + 1, len(version.levels)))


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
            frags = table_fragments(readers[g.number])
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
    from bisect import bisect_left

    return bisect_left(snapshots, a) == bisect_left(snapshots, b)


def _gc_relocator(db, gc_files: set[int]):
    """``(relocate, writer)``: moves live values out of ``gc_files`` into a new value-log file."""
    if not gc_files:
        return None, None
    from .vlog.pointer import decode_pointer
    from .vlog.writer import ValueLogWriter

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
