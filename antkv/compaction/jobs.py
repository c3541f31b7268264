"""Flush and compaction jobs: self-contained work that runs in any process.

A job names what it reads (a memtable's contents, or input tables), the snapshots alive when it
was picked, and how its outputs are cut; executing it writes and syncs the output tables (through
an :class:`~antkv.compaction.outputs.OutputEnv`) and returns a :class:`JobResult`: their metadata,
the value-log garbage found (bytes of value records no output points to any more, per value-log
file) and statistics counters.  Nothing here touches the database object: the DB runs a job in
its own process or hands it to a worker process (:mod:`antkv.compaction.worker`), so that flush and
compaction run on another core than the writers (CPython runs one thread at a time).

Two ways through a job:

* the *general* path merges the inputs entry by entry through
  :func:`~antkv.compaction.stream.compaction_stream` (snapshot stripes, range tombstones,
  value-log relocation);
* the *columnar* path, taken when no snapshot is alive, no input holds a range tombstone and no
  value moves: then only each key's newest version can be seen by anyone, so the inputs are
  decoded block by block into columns, concatenated, ordered by one stable sort in C (each
  key's newest version first, the rest dropped), and written with ``TableBuilder.add_sorted``;
  deletions are dropped when the output is bottommost.  It yields exactly the entries the general path would.
"""

from __future__ import annotations

import marshal
from dataclasses import dataclass, field
from itertools import compress, islice, repeat
from operator import eq, itemgetter, ne, neg

from ..base.dbformat import DELETION, EXPIRING, MERGE, VALUE_POINTER
from ..base.merge_operator import missing_operator
from ..base.expiry import expiry_of, pointer_in
from ..manifest.version_edit import FileMetaData
from ..memtable.memtable import MemTable
from ..memtable.rangedel import fragment
from ..read.iterators import merge_forward
from ..vlog.pointer import decode_pointer
from .outputs import OutputEnv, TableOutputs
from .stream import compaction_stream, output_tombstones

_SECOND = itemgetter(1)  # the kind of a (seq, kind, value) row


@dataclass
class JobResult:
    tables: list[FileMetaData]
    garbage: dict[int, int] = field(default_factory=dict)
    stats: dict[str, int] = field(default_factory=dict)

    def add_stats_to(self, counters: dict) -> None:
        """Add this job's statistics counters to ``counters`` (the database's)."""
        for name, n in self.stats.items():
            counters[name] = counters.get(name, 0) + n


# ---------------------------------------------------------------------------------- flush


def memtable_payload(mem: MemTable) -> bytes:
    """An immutable memtable's contents as bytes for a worker (``marshal``: C speed)."""
    return marshal.dumps((mem.versions, mem.older, mem.range_dels))


def memtable_from_payload(payload: bytes) -> MemTable:
    return MemTable.from_contents(*marshal.loads(payload))


def execute_flush(mem: MemTable, snapshots: list[int], env: OutputEnv, merge_operator=None,
                  bottommost: bool = False) -> JobResult:
    """Write immutable ``mem`` as (at most) one L0 table; ``merge_operator`` (the database's)
    combines merge operands.  ``bottommost``: nothing older than ``mem`` exists anywhere (no
    table, no older memtable), so deletions no snapshot needs are dropped, as at a bottommost
    compaction; otherwise they stay, to hide older versions below."""
    garbage: dict[int, int] = {}
    tombstones = output_tombstones(list(mem.range_dels), snapshots, bottommost)
    outputs = TableOutputs(env, target_size=1 << 62, tombstones=tombstones, stats_key="flush_bytes_written")
    try:
        if not snapshots and not mem.range_dels and merge_operator is None:
            outputs.add_rows(*_newest_versions(mem, garbage, bottommost))
        else:
            outputs.add_all(compaction_stream(mem.iter_forward(None), snapshots, mem.fragments(), bottommost, garbage,
                                              merge_operator=merge_operator))
        tables = outputs.finish()
    except BaseException:
        outputs.abandon()
        raise
    env.fs.sync_dir(env.path)  # always, even with no table: it also makes the WALs' names durable
    env.stats["flushes"] = env.stats.get("flushes", 0) + 1
    return JobResult(tables, garbage, env.stats)


def _newest_versions(mem: MemTable, garbage: dict[int, int], drop_deletions: bool = False) -> tuple[list, list]:
    """Every key's newest version as ``(keys, rows)`` in key order (rows are the memtable's own
    ``(seq, kind, value)`` tuples), without the deletions when ``drop_deletions``; the value
    pointers of older versions are counted as garbage.  REQUIRES: no live snapshot, no range
    tombstone, and an immutable ``mem``."""
    versions = mem.versions
    if drop_deletions:
        keys = sorted(k for k, row in versions.items() if row[1] != DELETION)
    else:
        keys = sorted(versions)  # one C sort; the memtable's own SortedList is not needed here
    for lst in mem.older.values():
        for _seq, kind, value in lst:
            if kind >= VALUE_POINTER:
                p = pointer_in(kind, value)
                if p is not None:
                    _add_garbage(garbage, p)
    return keys, list(map(versions.__getitem__, keys))


def _add_garbage(garbage: dict[int, int], pointer: bytes) -> None:
    fnum, _off, size = decode_pointer(pointer)
    garbage[fnum] = garbage.get(fnum, 0) + size


# ----------------------------------------------------------------------------- compaction


@dataclass
class CompactionJob:
    """``inputs`` are ``(level, table)`` pairs whose ``reader`` field is ignored.  A
    *subcompaction* covers only the user keys in ``[lo, hi)`` (None = unbounded); it is always
    columnar, and its caller computes the garbage over all subcompactions
    (:func:`columnar_garbage`): one part of an input cannot tell what the others kept."""

    inputs: list[tuple[int, FileMetaData]]
    output_level: int
    snapshots: list[int]
    bottommost: bool
    target_size: int
    lo: bytes | None = None
    hi: bytes | None = None
    now: int = 0  # ms: EXPIRING entries with expiry <= now become deletions (0: none do)
    merge_operator: object = None  # the database's: combines merge operands (merging.py)

    @property
    def is_subcompaction(self) -> bool:
        return self.lo is not None or self.hi is not None


def columnar_eligible(job: CompactionJob, readers, relocate=None) -> bool:
    """Whether the columnar path applies: no snapshot, no range tombstone, no relocation, no
    merge operator (operands need the versions below them)."""
    return (
        not job.snapshots and relocate is None and job.merge_operator is None
        and not any(r.range_tombstones for r in readers)
    )


def split_points(readers, parts: int) -> list[bytes]:
    """Up to ``parts - 1`` user keys cutting the inputs' data blocks into parts of about the
    same number of blocks (from the index blocks: nothing is read)."""
    keys = sorted(k for r in readers for k in r.index()[0])
    n = len(keys)
    cuts = []
    for i in range(1, parts):
        k = keys[n * i // parts] if n else None
        if k is not None and (not cuts or k > cuts[-1]) and k > keys[0]:
            cuts.append(k)
    return cuts


def execute_compaction(
    job: CompactionJob, env: OutputEnv, open_reader, relocate=None, allow_columnar: bool = True
) -> JobResult:
    """Merge the inputs into new tables; ``open_reader(meta)`` gives an input's TableReader and
    ``relocate`` (value-log GC, in the DB's process only) rewrites pointers it moves.
    ``allow_columnar=False`` forces the general path (tests compare the two)."""
    garbage: dict[int, int] = {}
    stats = env.stats
    readers = [(lvl, f, open_reader(f)) for lvl, f in job.inputs]
    tombstones = [t for _, _, r in readers for t in r.range_tombstones]
    out_frags = output_tombstones(tombstones, job.snapshots, job.bottommost)
    outputs = TableOutputs(env, job.target_size, out_frags, "compaction_bytes_written")
    try:
        columnar = allow_columnar and columnar_eligible(job, [r for _, _, r in readers], relocate)
        if job.is_subcompaction and not columnar:
            raise ValueError("a subcompaction must be columnar")
        if columnar:
            _columnar_merge(job, readers, outputs)
        else:
            sources = [r.iter_forward(None) for _, _, r in readers]
            merged = merge_forward(sources) if sources else iter(())
            outputs.add_all(
                compaction_stream(merged, job.snapshots, fragment(tombstones), job.bottommost, garbage, relocate,
                                  now=job.now, merge_operator=job.merge_operator)
            )
        tables = outputs.finish()
    except BaseException:
        outputs.abandon()
        raise
    if columnar and not job.is_subcompaction:
        garbage = columnar_garbage(job.inputs, tables)
    env.fs.sync_dir(env.path)
    return JobResult(tables, garbage, stats)


def columnar_garbage(inputs: list[tuple[int, FileMetaData]], tables: list[FileMetaData]) -> dict[int, int]:
    """Value-log garbage of a columnar compaction: every input pointer that no output holds
    was dropped, so its bytes are garbage (per value-log file)."""
    refs: dict[int, int] = {}
    for _, f in inputs:
        for vnum, nbytes in f.blob_refs.items():
            refs[vnum] = refs.get(vnum, 0) + nbytes
    for t in tables:
        for vnum, nbytes in t.blob_refs.items():
            refs[vnum] = refs.get(vnum, 0) - nbytes
    return {vnum: nbytes for vnum, nbytes in refs.items() if nbytes}


def _columnar_merge(job: CompactionJob, readers, outputs: TableOutputs) -> None:
    """The columnar path (see the module docstring).

    The inputs' columns are concatenated newest input first -- a lower level holds newer data
    than a higher one, and of two L0 tables the one with the larger largest seq is newer --
    and sorted by user key alone with a stable sort, as a permutation (``sorted(range(n),
    key=...)`` compares only the keys, in C, and merges the inputs' ascending runs).  A key's
    versions then stand together newest first: within an input they are in internal order
    (newest first), and the newest input comes first.  The first of each run of equal keys is
    the one kept."""
    all_keys: list = []
    all_rows: list = []
    deletions = expiring = False
    for _lvl, f, reader in sorted(readers, key=lambda t: (t[0], -t[1].largest_seq)):
        keys, negs, kinds, values = reader.columns(job.lo, job.hi)
        if MERGE in kinds:  # keeping only the newest version would lose the operands below
            raise missing_operator(f"table {f.number:06d}.sst")
        all_keys += keys
        all_rows += zip(map(neg, negs), kinds, values)
        deletions = deletions or DELETION in kinds
        expiring = expiring or EXPIRING in kinds
    order = sorted(range(len(all_keys)), key=all_keys.__getitem__)
    keys = list(map(all_keys.__getitem__, order))
    rows = list(map(all_rows.__getitem__, order))
    del all_keys, all_rows, order
    if any(map(eq, keys, islice(keys, 1, None))):  # older versions of a key: drop them
        live = [True]
        live += map(ne, islice(keys, 1, None), keys)
        keys, rows = list(compress(keys, live)), list(compress(rows, live))
    if expiring and job.now:  # expired entries become deletions (their pointers: garbage, by refs)
        now = job.now
        rows = [(r[0], DELETION, b"") if r[1] == EXPIRING and expiry_of(r[2]) <= now else r for r in rows]
        deletions = True
    if job.bottommost and deletions:
        live = list(map(ne, map(_SECOND, rows), repeat(DELETION)))
        keys, rows = list(compress(keys, live)), list(compress(rows, live))
    outputs.add_rows(keys, rows)
