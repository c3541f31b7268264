"""Every stored version of a key range: what ``db.key_versions()`` (RocksDB's
``GetAllKeyVersions``) and ``antkv idump`` show.

A normal read shows each key's newest visible version; this shows all of them -- older
versions, deletions, range deletions, value pointers, expiring entries, merge operands -- as
:class:`KeyVersion` records in internal order (key ascending, then newest first), each naming
the memtable or table that holds it.  Range deletions appear at their begin key, with
``value`` their (exclusive) end key.  Values are as stored: a value pointer is not resolved.
"""

from __future__ import annotations

import heapq
from typing import Iterable, Iterator, NamedTuple

from ..base.dbformat import DELETION, EXPIRING, MERGE, RANGE_DELETION, VALUE, VALUE_POINTER

# the name of each kind of entry (the kinds are part of the file format: antkv/base/dbformat.py)
KIND_NAMES = {
    VALUE: "PUT", DELETION: "DELETE", RANGE_DELETION: "RANGE_DELETE", VALUE_POINTER: "PUT_BLOB",
    EXPIRING: "PUT_TTL", MERGE: "MERGE",
}


class KeyVersion(NamedTuple):
    key: bytes
    sequence: int
    kind: str  # a KIND_NAMES value
    value: bytes  # as stored: a value pointer for PUT_BLOB, the wrapped entry for PUT_TTL, the end for RANGE_DELETE
    source: str  # "memtable", "immutable memtable N", or "L<level> <number>.sst"


def _points(source: str, entries: Iterable[tuple], hi: bytes | None) -> Iterator[KeyVersion]:
    for key, neg, kind, value in entries:
        if hi is not None and key >= hi:
            return
        yield KeyVersion(key, -neg, KIND_NAMES.get(kind, str(kind)), value, source)


def _ranges(source: str, tombstones: Iterable[tuple], lo, hi) -> list[KeyVersion]:
    out = [KeyVersion(b, seq, "RANGE_DELETE", e, source) for b, e, seq in tombstones
           if (lo is None or e > lo) and (hi is None or b < hi)]
    out.sort(key=_order)
    return out


def _order(v: KeyVersion) -> tuple:
    return v.key, -v.sequence


def table_versions(name: str, reader, lo: bytes | None, hi: bytes | None) -> Iterator[KeyVersion]:
    """Every entry of one table (its ``TableReader``) in ``[lo, hi)``, its range deletions
    overlapping the range included."""
    return heapq.merge(_points(name, reader.iter_forward(lo), hi), _ranges(name, reader.range_tombstones, lo, hi),
                       key=_order)


def key_versions(sv, open_table, lo: bytes | None, hi: bytes | None) -> Iterator[KeyVersion]:
    """Every version the super version ``sv`` holds with a key in ``[lo, hi)``, merged."""
    streams = []
    for i, mem in enumerate(sv.memtables):
        name = "memtable" if i == 0 else f"immutable memtable {i}"
        streams.append(_points(name, mem.iter_forward(lo), hi))
        streams.append(iter(_ranges(name, mem.range_dels, lo, hi)))
    for level, files in enumerate(sv.version.levels):
        for f in files:
            if (lo is None or f.largest >= lo) and (hi is None or f.smallest < hi):
                streams.append(table_versions(f"L{level} {f.number:06d}.sst", f.reader or open_table(f), lo, hi))
    return heapq.merge(*streams, key=_order)
