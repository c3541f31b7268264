"""The floor of a point read in pure Python: the least any Python engine does to read a key
from antkv's tables, against which ``bench_small`` sets antkv's own gets.

:class:`FloorReader` reads the tables of a closed antkv database (no memtable, no range
tombstone, no snapshot, no value log: the 100 B database ``bench_small`` builds) and keeps only
what a point read cannot do without:

* per table, newest first (L0's tables, then the one table of each sorted level whose key range
  may hold the key, found by a bisect over the level's largest keys): the bloom probe on the
  key's hash computed once, the index bisect;
* the block cache: an ``OrderedDict`` charged ``block bytes + 470`` per block (antkv's charge),
  a hit moved to the newest end, a miss inserted with the oldest blocks evicted until it fits;
* a miss: one ``os.pread`` of the block and its trailer, the checksum and trailer checked
  (:func:`antkv.sst.format.check_block`), the block's columns found
  (:func:`antkv.sst.block.searchable_block`);
* the search: ``bytes.find`` on the fixed-width key column, the sequence number read.

It has no lock, no counters, no handles, no pinning, no error paths and no concurrent readers,
so it is not an engine: it is the cost no engine written in Python gets under.  The index and
filters are kept outside the cache, as RocksDB keeps them by default.
"""

from __future__ import annotations

import os
from bisect import bisect_left
from collections import OrderedDict

import antkv
from antkv.base.filenames import table_file_name
from antkv.fs import default_file_system
from antkv.sst.block import searchable_block
from antkv.sst.bloom import key_probe, may_contain_probe
from antkv.sst.format import BLOCK_TRAILER_SIZE, check_block
from antkv.sst.reader import TableReader

_BLOCK_OVERHEAD = 470  # what antkv charges a cached block beyond its bytes


def table_layout(db) -> dict:
    """The tables of open antkv database ``db`` as :class:`FloorReader` reads them, in a form
    that crosses a pipe as JSON: L0's table numbers newest first, and for each sorted level its
    table numbers and their largest keys (hex)."""
    version = db._sv.version
    return {
        "l0": [f.number for f in version.levels[0]],  # newest first, as the version lists L0
        "levels": [([f.number for f in files], [k.hex() for k in largest]) for _level, files, largest in version.sorted_levels],
    }


class FloorReader:
    """Point reads of the tables of the antkv database at ``path`` through a block cache of
    ``cache_bytes``; see the module docstring.  ``layout`` (:func:`table_layout`) names the
    tables when another process holds the database open; without it the database is opened
    (and closed) to find them."""

    def __init__(self, path: str, cache_bytes: int, layout: dict | None = None) -> None:
        if layout is None:  # the database is closed: read its tables' layout from it
            db = antkv.open(path)
            try:
                layout = table_layout(db)
            finally:
                db.close()
        l0 = layout["l0"]
        levels = [(numbers, [bytes.fromhex(k) for k in largest]) for numbers, largest in layout["levels"]]
        fs = default_file_system()
        self._readers = []

        def table(number: int) -> tuple:
            name = table_file_name(path, number)
            r = TableReader.open(fs, name, number)
            self._readers.append(r)
            keys, _negs, offsets, sizes = r.index()
            return r.filter, keys, offsets, sizes, os.open(name, os.O_RDONLY), number

        self.tables = [table(n) for n in l0]
        self.levels = [([table(n) for n in numbers], largest) for numbers, largest in levels]
        self.cache: OrderedDict = OrderedDict()
        self.capacity = cache_bytes
        self.usage = 0
        self.read_seq = 2**56 - 1  # the largest sequence number: every version is visible

    def get(self, key: bytes):
        probe = key_probe(key)
        tables = self.tables
        if self.levels:  # the sorted levels' candidates after L0's tables
            tables = list(tables)
            for files, largest in self.levels:
                i = bisect_left(largest, key)
                if i < len(files):
                    tables.append(files[i])
        cache = self.cache
        for filt, keys, offsets, sizes, fd, number in tables:
            if not may_contain_probe(filt, probe):
                continue
            i = bisect_left(keys, key)
            if i == len(keys):
                continue
            offset = offsets[i]
            ckey = (number, offset)
            block = cache.get(ckey)
            if block is not None:
                cache.move_to_end(ckey)
            else:
                size = sizes[i]
                buf, size = check_block(os.pread(fd, size + BLOCK_TRAILER_SIZE, offset), offset, size, True, "")
                block = searchable_block(buf, size, "", offset)
                cache[ckey] = block
                self.usage += size + _BLOCK_OVERHEAD
                while self.usage > self.capacity:
                    _, old = cache.popitem(last=False)
                    self.usage -= old[1] + _BLOCK_OVERHEAD
            buf, _size, width, n, seqs_off, qw, _kinds_off, ends, g, _r = block
            pos = buf.find(key, 0, n * width)
            while pos > 0 and pos % width:
                pos = buf.find(key, pos - pos % width + width, n * width)
            if pos < 0:
                continue
            j = pos // width
            at = seqs_off + j * qw
            if int.from_bytes(buf[at : at + qw], "little") > self.read_seq:
                raise SystemExit("the floor reads newest versions only")  # an engine reads older ones
            v = g + n + j
            return buf[ends[v - 1] : ends[v]]
        return None

    def close(self) -> None:
        for t in self.tables + [t for files, _ in self.levels for t in files]:
            os.close(t[4])
        for r in self._readers:
            r.close()
