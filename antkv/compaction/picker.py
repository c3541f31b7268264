"""Leveled compaction: choosing what to compact (running it: :mod:`antkv.compaction.run`).

Every function here is pure: it reads the version and the inputs it is given and changes
nothing, so asking whether there is work (the background thread does, before it runs any) is
free of side effects, as Pebble's picker is.

Picking (:func:`pick_compaction`), in priority order:

1. tables marked for value-log GC: a sealed value-log file whose garbage ratio reached
   ``blob_gc_threshold`` marks every table pointing into it (reverse map from the version);
2. the level with the highest score >= 1: L0 scores ``files / level0_file_num_compaction_trigger``,
   level ``n >= 1`` scores ``bytes / (max_bytes_for_level_base * multiplier^(n-1))``.

An L0 compaction takes every L0 table (so L1 always holds older data than L0) plus the L1 tables
they overlap.  A level-``n`` compaction takes one table, round-robin by key, plus the tables of
``n+1`` it overlaps.  The round-robin position of each level (``cursors``) belongs to the
caller: a compaction carries the position after it (:attr:`Compaction.cursor`), and the caller
stores it when, and only when, it runs that compaction.  A single table with nothing to merge
below moves down without being rewritten (a *trivial move*).  The output level's last level
(nothing older below in the key range) is *bottommost*: deletions and old range tombstones die
there.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..manifest.version_edit import FileMetaData


@dataclass
class Compaction:
    level: int
    output_level: int
    inputs: list[tuple[int, FileMetaData]]  # (level, table)
    reason: str
    gc_files: set[int] = field(default_factory=set)  # value-log files whose live values move
    cursor: bytes | None = None  # the level's round-robin position once this one has run


def level_target(opts, level: int) -> float:
    return opts.max_bytes_for_level_base * (opts.max_bytes_for_level_multiplier ** (level - 1))


def level_scores(opts, version) -> list[tuple[float, int]]:
    """``(score, level)`` of every level but the last, highest first."""
    scores = []
    n = len(version.levels)
    scores.append((len(version.levels[0]) / opts.level0_file_num_compaction_trigger, 0))
    for level in range(1, n - 1):
        scores.append((version.level_bytes(level) / level_target(opts, level), level))
    scores.sort(reverse=True)
    return scores


def gc_candidate_files(vlogs, active_vlog: int | None, threshold: float) -> set[int]:
    """Sealed value-log files (``vlogs``: number -> state, as in the version set) whose garbage
    ratio reached ``threshold``; never the active file."""
    return {
        n
        for n, st in vlogs.items()
        if st.sealed and n != active_vlog and st.total > 0 and st.garbage < st.total and st.garbage / st.total >= threshold
    }


def gc_compaction(version, gc: set[int]) -> Compaction | None:
    """The compaction of the first table pointing into a value-log file being collected
    (through the version's reverse map), or None when no table points into them."""
    for vnum in sorted(gc):
        tables = version.tables_by_vlog.get(vnum)
        if tables:
            level, f = min(tables, key=lambda lt: lt[0])
            return _expand(version, level, [f], "gc", gc)
    return None


def pick_compaction(version, opts, vlogs, active_vlog: int | None, cursors: dict[int, bytes]) -> Compaction | None:
    """The most urgent compaction of ``version``, or None.  ``cursors``: each level's
    round-robin position (read, never written)."""
    gc = gc_candidate_files(vlogs, active_vlog, opts.blob_gc_threshold)
    if gc:
        c = gc_compaction(version, gc)
        if c is not None:
            return c
    best = level_scores(opts, version)
    if not best or best[0][0] < 1.0:
        return None
    _, level = best[0]
    if level == 0:
        return _expand(version, 0, list(version.levels[0]), "score", set())
    files = version.levels[level]
    cursor = cursors.get(level, b"")
    pick = next((f for f in files if f.smallest >= cursor), files[0])
    c = _expand(version, level, [pick], "score", set())
    c.cursor = pick.largest + b"\x00"
    return c


def _expand(version, level: int, files: list[FileMetaData], reason: str, gc: set[int]) -> Compaction:
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


def manual_compactions(version, lo: bytes | None, hi: bytes | None, level: int, has_deletions) -> Compaction | None:
    """The compaction moving ``[lo, hi]`` of ``level`` one level down (or in place at the
    bottom), or None when the level holds nothing there.  ``has_deletions(table)``: whether
    a table holds deletions or range tombstones (its properties say)."""
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
        marked = [i for i, f in enumerate(files) if has_deletions(f)]
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


def is_bottommost(version, c: Compaction) -> bool:
    lo = min(f.smallest for _, f in c.inputs)
    hi = max(f.largest for _, f in c.inputs)
    return all(not version.overlapping(lvl, lo, hi) for lvl in range(c.output_level + 1, len(version.levels)))
