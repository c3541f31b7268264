"""What survives a flush or a compaction: the compaction stream and the table output writer.

:func:`compaction_stream` walks merged input entries (internal order) and keeps exactly what
some reader can still see.  Sequence numbers are grouped into *snapshot stripes*: stripe ``i``
holds the seqs ``s`` with ``snapshots[i-1] < s <= snapshots[i]`` (the last stripe is everything
newer than the newest snapshot).  For each user key:

* only the newest version in each stripe is kept -- older ones in the same stripe are invisible
  to every reader (*shadowed*);
* a kept version is dropped when a range tombstone newer than it, *in the same stripe*, covers
  it (a tombstone in a newer stripe still lets an older snapshot see the version);
* on the bottommost level (no older data below the output) a DELETION in stripe 0 is dropped
  with every older version of its key.

Every dropped VALUE_POINTER adds its record size to the garbage of its value-log file; every
kept one counts as a reference of the output table.  Value-log GC plugs in as ``relocate``:
pointers into files being collected are rewritten to a new value-log file.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Callable, Iterator

from .dbformat import DELETION, VALUE_POINTER
from .rangedel import EMPTY, FragmentedRangeTombstones, fragment, truncate
from .version_edit import FileMetaData
from .vlog.pointer import decode_pointer


def compaction_stream(
    merged: Iterator[tuple],
    snapshots: list[int],
    frags: FragmentedRangeTombstones,
    bottommost: bool,
    garbage: dict[int, int],
    relocate: Callable[[bytes, bytes], bytes | None] | None = None,
    stats: dict | None = None,
) -> Iterator[tuple[bytes, int, int, bytes]]:
    """Yield ``(key, seq, kind, value)`` of the entries to keep, in internal order."""
    cur_key = None
    last_stripe = -1
    starts, ends, fseqs = frags.starts, frags.ends, frags.seqs
    nfrag = len(starts)
    fi = 0
    nsnap = len(snapshots)
    dropped = 0
    for key, nseq, kind, value in merged:
        seq = -nseq
        stripe = bisect_left(snapshots, seq) if nsnap else 0
        if key != cur_key:
            cur_key = key
            last_stripe = -1
            if nfrag:
                while fi < nfrag and ends[fi] <= key:
                    fi += 1
        drop = stripe == last_stripe
        if not drop:
            last_stripe = stripe
            if nfrag and fi < nfrag and starts[fi] <= key:
                for t in fseqs[fi]:
                    if t <= seq:
                        break
                    if (bisect_left(snapshots, t) if nsnap else 0) == stripe:
                        drop = True
                        break
            if not drop and kind == DELETION and bottommost and stripe == 0:
                drop = True
        if drop:
            dropped += 1
            if kind == VALUE_POINTER:
                fnum, _off, size = decode_pointer(value)
                garbage[fnum] = garbage.get(fnum, 0) + size
            continue
        if kind == VALUE_POINTER and relocate is not None:
            new = relocate(key, value)
            if new is not None:
                fnum, _off, size = decode_pointer(value)
                garbage[fnum] = garbage.get(fnum, 0) + size
                value = new
        yield key, seq, kind, value
    if stats is not None:
        stats["entries_dropped"] = stats.get("entries_dropped", 0) + dropped


def output_tombstones(
    tombstones: list[tuple[bytes, bytes, int]], snapshots: list[int], bottommost: bool
) -> FragmentedRangeTombstones:
    """The range tombstones an output must keep: newest per stripe; none of stripe 0 at the
    bottom (everything they could cover below is gone)."""
    frags = fragment(tombstones, snapshots)
    if not bottommost or not frags:
        return frags
    first = snapshots[0] if snapshots else None
    kept = [
        (b, e, s)
        for b, e, s in frags.tombstones()
        if first is not None and s > first
    ]
    return fragment(kept, snapshots) if kept else EMPTY


class TableOutputs:
    """Writes compaction output tables, split by target size at user-key boundaries, with the
    range tombstones truncated to each table's key range."""

    def __init__(self, db, target_size: int, tombstones: FragmentedRangeTombstones, stats_key: str):
        self.db = db
        self.target_size = target_size
        self.tombstones = tombstones
        self.stats_key = stats_key
        self.outputs: list[FileMetaData] = []
        self._builder = None
        self._file = None
        self._number = 0
        self._lower: bytes | None = None  # tombstone lower bound of the open table
        self._last_key: bytes | None = None
        self._refs: dict[int, int] = {}

    def _open(self) -> None:
        from .sst.builder import TableBuilder
        from .version_set import table_file_name

        db = self.db
        with db._mutex:
            self._number = db._versions.new_file_number()
        self._file = db._fs.create(table_file_name(db.path, self._number))
        o = db.options
        self._builder = TableBuilder(
            self._file,
            file_number=self._number,
            block_size=o.block_size,
            bloom_bits_per_key=o.bloom_bits_per_key,
            compression=o.compression,
        )
        self._refs = {}

    def add(self, key: bytes, seq: int, kind: int, value: bytes) -> None:
        self.add_all(((key, seq, kind, value),))

    def add_all(self, entries) -> None:
        """Add entries in internal order, cutting a new table at a user-key boundary once the
        current one reached the target size (its written bytes; the open block is not counted,
        so a table overshoots by at most one block)."""
        target = self.target_size
        b = self._builder
        add = b.add if b is not None else None
        size_of = self._file if b is not None else None
        last = self._last_key
        refs = self._refs
        for key, seq, kind, value in entries:
            if add is None:
                self._open()
                b, add, size_of, refs = self._builder, self._builder.add, self._file, self._refs
            elif key != last and size_of.size >= target:
                self._close(upper=key)
                self._lower = key
                self._open()
                b, add, size_of, refs = self._builder, self._builder.add, self._file, self._refs
            add(key, seq, kind, value)
            last = key
            if kind == VALUE_POINTER:
                fnum, _off, size = decode_pointer(value)
                refs[fnum] = refs.get(fnum, 0) + size
        self._last_key = last

    def add_columns(self, keys: list, seqs: list, kinds: list, values: list) -> None:
        """Add one sorted run of distinct keys as columns (a flush's fast path: the builder
        cuts blocks without a Python call per entry).  REQUIRES: nothing added yet and no size
        limit (one output table)."""
        assert self._builder is None and self.target_size >= 1 << 62
        if not keys:
            return
        self._open()
        self._builder.add_sorted(keys, seqs, kinds, values)
        if VALUE_POINTER in kinds:
            refs = self._refs
            for kind, value in zip(kinds, values):
                if kind == VALUE_POINTER:
                    fnum, _off, size = decode_pointer(value)
                    refs[fnum] = refs.get(fnum, 0) + size
        self._last_key = keys[-1]

    def _close(self, upper: bytes | None) -> None:
        for b, e, s in truncate(self.tombstones, self._lower, upper):
            self._builder.add_range_tombstone(b, e, s)
        props = self._builder.finish(blob_refs=dict(self._refs))
        self._file.sync()
        self._file.close()
        self.db._stats[self.stats_key] += props.file_size
        if props.num_entries == 0 and props.num_range_deletions == 0:
            self.db._fs.remove(self._file.path)
        else:
            self.outputs.append(
                FileMetaData(
                    number=self._number,
                    size=props.file_size,
                    smallest=props.smallest_key,
                    largest=props.largest_key,
                    largest_exclusive=props.largest_is_exclusive,
                    smallest_seq=props.smallest_seq,
                    largest_seq=props.largest_seq,
                    num_entries=props.num_entries,
                    blob_refs=dict(props.blob_refs),
                )
            )
        self._builder = None
        self._file = None

    def finish(self) -> list[FileMetaData]:
        if self._builder is None and self.tombstones and not self.outputs:
            self._open()  # no point entries: a table of range tombstones only
        if self._builder is not None:
            self._close(upper=None)
        return self.outputs

    def abandon(self) -> None:
        """Remove every file written so far (after a failure; errors here are secondary)."""
        from .version_set import table_file_name

        paths = [table_file_name(self.db.path, m.number) for m in self.outputs]
        if self._builder is not None:
            self._builder.abandon()
            self._file.close()
            paths.append(self._file.path)
            self._builder = None
        self.outputs = []
        for path in paths:
            if self.db._fs.exists(path):
                self.db._fs.remove(path)
