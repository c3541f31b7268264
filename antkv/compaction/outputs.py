"""Writing the output tables of a flush or a compaction.

A :class:`TableOutputs` turns a stream of entries (internal order) into one or more tables,
cut at user-key boundaries once a table reaches the target size, with the range tombstones
truncated to each table's key range.  Every table is synced before it is reported; the caller
syncs the directory and logs the tables to the MANIFEST.

It writes through an :class:`OutputEnv` -- the file system, the database directory, the table
options, a source of new file numbers and the statistics counters -- so the same code runs in
the database's process and in a worker process (:mod:`antkv.compaction.worker`), where the file numbers
come from the database over a pipe.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from itertools import accumulate, repeat
from operator import add, itemgetter
from typing import Callable

from ..base.dbformat import VALUE_POINTER
from ..base.expiry import pointer_in
from ..base.filenames import table_file_name
from ..fs.buffered import BufferedWritableFile
from ..manifest.version_edit import FileMetaData
from ..memtable.rangedel import FragmentedRangeTombstones, truncate
from ..vlog.pointer import decode_pointer

# estimated bytes per entry beyond key and value when splitting columns by target size
_ENTRY_OVERHEAD = 8
_THIRD = itemgetter(2)


@dataclass(frozen=True)
class TableOptions:
    """What a table builder needs from the options (picklable: it travels to workers)."""

    block_size: int
    bloom_bits_per_key: int
    compression: str | None
    verify_checksums: bool = True

    @classmethod
    def of(cls, options) -> "TableOptions":
        return cls(options.block_size, options.bloom_bits_per_key, options.compression, options.paranoid_checks)


@dataclass
class OutputEnv:
    """Where outputs go.  ``stats`` counts bytes written under the output's stats key."""

    fs: object
    path: str
    table_options: TableOptions
    new_file_number: Callable[[], int]
    stats: dict


class TableOutputs:
    """Writes output tables, split by target size at user-key boundaries."""

    def __init__(self, env: OutputEnv, target_size: int, tombstones: FragmentedRangeTombstones, stats_key: str):
        self.env = env
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
        from ..sst.builder import TableBuilder

        env = self.env
        self._number = env.new_file_number()
        # one system call per ~256 KiB instead of per block: the table counts only once synced
        self._file = BufferedWritableFile(env.fs.create(table_file_name(env.path, self._number)))
        o = env.table_options
        self._builder = TableBuilder(
            self._file,
            file_number=self._number,
            block_size=o.block_size,
            bloom_bits_per_key=o.bloom_bits_per_key,
            compression=o.compression,
        )
        self._refs = {}

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
            if kind >= VALUE_POINTER:  # a pointer, or an expiring entry that may wrap one
                p = pointer_in(kind, value)
                if p is not None:
                    fnum, _off, size = decode_pointer(p)
                    refs[fnum] = refs.get(fnum, 0) + size
        self._last_key = last

    def add_rows(self, keys: list, rows: list) -> None:
        """Add one sorted run of DISTINCT user keys and their ``(seq, kind, value)`` rows: the
        builder cuts blocks without a Python call per entry, and tables are cut where the
        estimated size (keys, values and ~8 bytes per entry) crosses a multiple of the target
        size.  REQUIRES: nothing added yet."""
        assert self._builder is None and not self.outputs
        n = len(keys)
        if not n:
            return
        cuts = []  # index of the first entry of each table after the first
        if n > 1 and self.target_size < 1 << 62:
            value_lens = map(len, map(_THIRD, rows))
            cum = list(accumulate(map(add, map(add, map(len, keys), value_lens), repeat(_ENTRY_OVERHEAD))))
            step, base, start = self.target_size, 0, 0
            while True:
                j = bisect_left(cum, base + step, start)  # the entry that fills this table
                if j >= n - 1:
                    break
                cuts.append(j + 1)
                base, start = cum[j], j + 1
        start = 0
        for end in cuts + [n]:
            self._open()
            self._builder.add_sorted(keys[start:end], rows[start:end])
            if self._builder.num_value_pointers or self._builder.num_expiring:  # a fresh builder: all are these rows'
                refs = self._refs
                for _seq, kind, value in rows[start:end]:
                    if kind >= VALUE_POINTER:
                        p = pointer_in(kind, value)
                        if p is not None:
                            fnum, _off, size = decode_pointer(p)
                            refs[fnum] = refs.get(fnum, 0) + size
            if end < n:
                self._close(upper=keys[end])
                self._lower = keys[end]
            start = end
        self._last_key = keys[-1]

    def _close(self, upper: bytes | None) -> None:
        for b, e, s in truncate(self.tombstones, self._lower, upper):
            self._builder.add_range_tombstone(b, e, s)
        props = self._builder.finish(blob_refs=dict(self._refs))
        self._file.sync()
        self._file.close()
        stats = self.env.stats
        stats[self.stats_key] = stats.get(self.stats_key, 0) + props.file_size
        if props.num_entries == 0 and props.num_range_deletions == 0:
            self.env.fs.remove(self._file.path)
        else:
            self.outputs.append(FileMetaData.from_properties(self._number, props))
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
        fs, path = self.env.fs, self.env.path
        paths = [table_file_name(path, m.number) for m in self.outputs]
        if self._builder is not None:
            self._builder.abandon()
            self._file.discard()
            paths.append(self._file.path)
            self._builder = None
        self.outputs = []
        for p in paths:
            if fs.exists(p):
                fs.remove(p)
