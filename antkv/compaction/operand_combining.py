"""Merge operands in flush and compaction: consecutive operands of a key combine into one.

:func:`combine_operands` runs in front of :func:`~antkv.compaction.stream.compaction_stream`
when the database has a merge operator.  For each key (versions newest first) and each snapshot
stripe, a run of MERGE operands that no range tombstone of their stripe covers becomes ONE
entry at the newest operand's sequence number:

* a VALUE when the run ends on a *base* in the same stripe -- a VALUE, a DELETION, an expired
  EXPIRING entry, a version covered by a range tombstone of the stripe -- or, on the bottommost
  level, on the end of the key's versions: the full merge (``None`` for anything but a VALUE).
  The stream then drops the base as shadowed;
* otherwise a MERGE holding the partial merge of the run (one operand stays as it is): the run
  ended on a stripe boundary (a snapshot must still see the older state), on a VALUE_POINTER
  or on a live EXPIRING entry.  Those bases stay below the combined operand: merging onto a
  pointer would read the value log in a compaction, and merging onto an expiring value would
  lose the moment it expires (a read then starts from nothing).

A run whose result would not fit one table block (:func:`~antkv.sst.format.max_entry_size`;
each operand alone fits, the write path checks that) is not combined: its operands stay as
they are, and reads combine them.  Operands that add up to more than a block can hold are
therefore stored, and a flush or compaction never fails on them.

Operands never combine across a snapshot, so every snapshot reads what it read before.  The
stream keeps the entry below a kept MERGE in the same stripe (a MERGE does not shadow).
"""

from __future__ import annotations

from bisect import bisect_left
from itertools import groupby
from operator import itemgetter
from typing import Iterator

from ..base.dbformat import DELETION, EXPIRING, MERGE, VALUE
from ..base.expiry import expiry_of
from ..base.merge_operator import full_merge, partial_merge
from ..memtable.rangedel import FragmentedRangeTombstones
from ..sst.format import max_entry_size

_KEY = itemgetter(0)


def combine_operands(
    merged: Iterator[tuple], snapshots: list[int], frags: FragmentedRangeTombstones, bottommost: bool, now: int, op
) -> Iterator[tuple]:
    """``merged`` entry tuples ``(key, -seq, kind, value)`` with each key's runs of operands
    combined (see the module docstring)."""
    for key, group in groupby(merged, _KEY):
        first = next(group)
        rest = list(group)
        if first[2] != MERGE and not rest:
            yield first
            continue
        entries = [first] + rest
        if not any(e[2] == MERGE for e in entries):
            yield from entries
            continue
        yield from _combine_key(key, entries, snapshots, frags, bottommost, now, op)


def _combine_key(key: bytes, entries: list, snapshots: list[int], frags, bottommost: bool, now: int, op):
    fi = frags.fragment_index(key) if frags else -1
    tombs = frags.seqs[fi] if fi >= 0 else ()

    def stripe(seq: int) -> int:
        return bisect_left(snapshots, seq) if snapshots else 0

    def covered(seq: int, s: int) -> bool:
        return any(t > seq and stripe(t) == s for t in tombs)

    n = len(entries)
    i = 0
    while i < n:
        e = entries[i]
        seq = -e[1]
        s = stripe(seq)
        if e[2] != MERGE or covered(seq, s):
            yield e  # a covered operand: the stream drops it and all older in its stripe
            i += 1
            continue
        operands = [e[3]]
        j = i + 1
        while j < n and entries[j][2] == MERGE and stripe(-entries[j][1]) == s and not covered(-entries[j][1], s):
            operands.append(entries[j][3])
            j += 1
        full, base = False, None
        if j == n:
            full = bottommost  # nothing older anywhere: the merge starts from nothing
        else:
            nxt = entries[j]
            nseq = -nxt[1]
            if stripe(nseq) == s:
                kind = nxt[2]
                if covered(nseq, s) or kind == DELETION or (kind == EXPIRING and expiry_of(nxt[3]) <= now):
                    full = True
                elif kind == VALUE:
                    full, base = True, nxt[3]
        operands.reverse()  # oldest first
        if full:
            kind, value = VALUE, full_merge(op, key, base, operands)
        else:
            kind, value = MERGE, partial_merge(op, key, operands)
        if len(key) + len(value) > max_entry_size():
            yield from entries[i:j]  # no table block could hold the result: the operands stay apart
        else:
            yield key, e[1], kind, value
        i = j
