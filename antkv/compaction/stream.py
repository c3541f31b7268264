"""What survives a flush or a compaction: the compaction stream (the output writer is
:mod:`antkv.compaction.outputs`).

:func:`compaction_stream` walks merged input entries (internal order) and keeps exactly what
some reader can still see.  Sequence numbers are grouped into *snapshot stripes*: stripe ``i``
holds the seqs ``s`` with ``snapshots[i-1] < s <= snapshots[i]`` (the last stripe is everything
newer than the newest snapshot).  For each user key:

* only the newest version in each stripe is kept -- older ones in the same stripe are invisible
  to every reader (*shadowed*) -- but a MERGE operand shadows nothing: the version below it
  stays (with a merge operator, :mod:`antkv.compaction.operand_combining` first combines operands);
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

from ..base.dbformat import DELETION, EXPIRING, MERGE, VALUE_POINTER
from ..base.expiry import HEAD_SIZE, expiry_of, pointer_in
from ..memtable.rangedel import EMPTY, FragmentedRangeTombstones, fragment, truncate
from ..vlog.pointer import decode_pointer
from .operand_combining import combine_operands


def compaction_stream(
    merged: Iterator[tuple],
    snapshots: list[int],
    frags: FragmentedRangeTombstones,
    bottommost: bool,
    garbage: dict[int, int],
    relocate: Callable[[bytes, bytes], bytes | None] | None = None,
    stats: dict | None = None,
    now: int = 0,
    merge_operator=None,
) -> Iterator[tuple[bytes, int, int, bytes]]:
    """Yield ``(key, seq, kind, value)`` of the entries to keep, in internal order.  An
    EXPIRING entry whose expiry is ``<= now`` (ms; 0: nothing expires) becomes a DELETION;
    ``merge_operator`` combines MERGE operands (:func:`~antkv.compaction.operand_combining.combine_operands`)."""
    if merge_operator is not None:
        merged = combine_operands(merged, snapshots, frags, bottommost, now, merge_operator)
    cur_key = None
    last_stripe = -1
    starts, ends, fseqs = frags.starts, frags.ends, frags.seqs
    nfrag = len(starts)
    fi = 0
    nsnap = len(snapshots)
    dropped = 0
    for key, nseq, kind, value in merged:
        seq = -nseq
        if kind == EXPIRING and expiry_of(value) <= now:
            p = pointer_in(kind, value)
            if p is not None:
                fnum, _off, size = decode_pointer(p)
                garbage[fnum] = garbage.get(fnum, 0) + size
            kind, value = DELETION, b""
        stripe = bisect_left(snapshots, seq) if nsnap else 0
        if key != cur_key:
            cur_key = key
            last_stripe = -1
            if nfrag:
                while fi < nfrag and ends[fi] <= key:
                    fi += 1
        drop = stripe == last_stripe
        if not drop:
            # a kept MERGE operand leaves the stripe open: the version below it is kept too
            last_stripe = stripe if kind != MERGE else -1
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
            p = pointer_in(kind, value) if kind >= VALUE_POINTER else None
            if p is not None:
                fnum, _off, size = decode_pointer(p)
                garbage[fnum] = garbage.get(fnum, 0) + size
            continue
        if kind >= VALUE_POINTER and relocate is not None:
            p = pointer_in(kind, value)
            new = relocate(key, p) if p is not None else None
            if new is not None:
                fnum, _off, size = decode_pointer(p)
                garbage[fnum] = garbage.get(fnum, 0) + size
                value = new if kind == VALUE_POINTER else value[:HEAD_SIZE] + new
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
