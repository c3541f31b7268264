"""Visibility with merge operands: what a reader sees of a key whose versions include MERGE
entries (``db.merge``; :mod:`antkv.base.merge_operator`).

A reader at ``read_seq`` takes a key's visible versions newest first and collects MERGE
operands down to the first version that is not one -- the *base*:

* a VALUE or VALUE_POINTER (resolved from the value log), or a live EXPIRING entry: its value;
* a DELETION, an expired EXPIRING entry, a version covered by a visible range tombstone newer
  than it, or no version at all: ``None``.

The key then reads as ``full_merge(base, operands oldest first)``: a merge onto a deleted,
range-deleted or expired key starts from nothing.  A key with no operand on top reads exactly as
:func:`antkv.read.iterators.visible_forward` shows it.  A database with a merge operator scans
through these functions on the per-entry path; its batched scans (:mod:`antkv.read.runs`, which
see only a key's newest version) hand over to them at the first operand.
"""

from __future__ import annotations

from itertools import chain
from typing import Callable, Iterator

from ..base.dbformat import DELETION, EXPIRING, MERGE, VALUE, VALUE_POINTER
from ..base.expiry import live_inner
from ..base.merge_operator import full_merge
from ..memtable.rangedel import FragmentedRangeTombstones


def show_key(
    key: bytes, versions: list[tuple], tomb: int, now: int, op, resolve: Callable[[bytes], bytes]
) -> tuple[int, bytes] | None:
    """``(kind, value)`` a reader sees of ``key`` (kind VALUE or an unresolved VALUE_POINTER),
    or None when it is hidden.  ``versions`` are the key's visible ``(neg_seq, kind, value)``,
    newest first, ending at the base or earlier; ``tomb`` the newest visible range tombstone
    covering the key (0: none)."""
    operands = []
    base = None
    for nseq, kind, value in versions:
        if tomb > -nseq:
            break
        if kind == MERGE:
            operands.append(value)
            continue
        if kind == EXPIRING:
            live = live_inner(value, now)
            if live is None:
                break
            kind, value = live
        if kind == DELETION:
            break
        if not operands:
            return kind, value
        base = resolve(value) if kind == VALUE_POINTER else value
        break
    if not operands:
        return None
    operands.reverse()
    return VALUE, full_merge(op, key, base, operands)


def merging_forward(
    merged: Iterator[tuple],
    read_seq: int,
    frags: FragmentedRangeTombstones | None,
    upper: bytes | None,
    now: int,
    op,
    resolve: Callable[[bytes], bytes],
) -> Iterator[tuple[bytes, int, bytes]]:
    """:func:`antkv.read.iterators.visible_forward` with merge operands applied.  A key whose
    newest visible version is not an operand is decided by that version alone, with no list."""
    neg_read = -read_seq
    cur = None
    versions: list | None = None  # the current key's versions while collecting operands
    for key, nseq, kind, value in merged:
        if upper is not None and key >= upper:
            break
        if nseq < neg_read:
            continue
        if key == cur:
            if versions is not None and versions[-1][1] == MERGE:
                versions.append((nseq, kind, value))
            continue
        if versions is not None:
            shown = show_key(cur, versions, frags.max_covering_seq(cur, read_seq) if frags else 0, now, op, resolve)
            if shown is not None:
                yield cur, shown[0], shown[1]
            versions = None
        cur = key
        if kind == MERGE:
            versions = [(nseq, kind, value)]
            continue
        if kind == DELETION or (frags and frags.max_covering_seq(key, read_seq) > -nseq):
            continue
        if kind == EXPIRING:
            live = live_inner(value, now)
            if live is None:
                continue
            kind, value = live
        yield key, kind, value
    if versions is not None:
        shown = show_key(cur, versions, frags.max_covering_seq(cur, read_seq) if frags else 0, now, op, resolve)
        if shown is not None:
            yield cur, shown[0], shown[1]


def merging_backward(
    merged: Iterator[tuple],
    read_seq: int,
    frags: FragmentedRangeTombstones | None,
    lower: bytes | None,
    now: int,
    op,
    resolve: Callable[[bytes], bytes],
) -> Iterator[tuple[bytes, int, bytes]]:
    """:func:`antkv.read.iterators.visible_backward` with merge operands applied.  A key's
    versions arrive oldest first: only the newest non-operand version and the operands above
    it are kept."""
    neg_read = -read_seq
    cur = None
    base = None  # the current key's newest visible version that is not an operand
    operands: list | None = None  # the operand versions above ``base``, oldest first
    for e in chain(merged, _END):
        key = e[0]
        if key is not None:
            if lower is not None and key < lower:
                key = None
            elif e[1] < neg_read:
                continue
        if key == cur and key is not None:
            if e[2] == MERGE:
                if operands is None:
                    operands = [e[1:]]
                else:
                    operands.append(e[1:])
            else:
                base, operands = e, None
            continue
        if cur is not None:
            if operands is not None:
                operands.reverse()
                if base is not None:
                    operands.append(base[1:])
                tomb = frags.max_covering_seq(cur, read_seq) if frags else 0
                shown = show_key(cur, operands, tomb, now, op, resolve)
                if shown is not None:
                    yield cur, shown[0], shown[1]
            elif base is not None:
                _, nseq, kind, value = base
                if kind != DELETION and not (frags and frags.max_covering_seq(cur, read_seq) > -nseq):
                    if kind == EXPIRING:
                        live = live_inner(value, now)
                        if live is not None:
                            yield cur, live[0], live[1]
                    else:
                        yield cur, kind, value
        if key is None:
            return
        cur = key
        if e[2] == MERGE:
            base, operands = None, [e[1:]]
        else:
            base, operands = e, None


_END = ((None, 0, DELETION, b""),)
