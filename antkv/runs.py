"""Batched forward scans: sources merged a *run* of entries at a time, with C loops only.

The general scan (:mod:`antkv.iterators`) moves one entry at a time through ``heapq.merge`` and
a visibility generator: several Python frames per entry.  When no range tombstone is in view
(the common case) a forward scan instead works on *runs*: parallel sequences
``(keys, neg_seqs, kinds, values)`` of consecutive entries of one source, in internal order
(a decoded block is one; a table source joins blocks into runs of up to about
:data:`RUN_TARGET` entries so that the per-run work is spread over many entries).

Merging (:func:`merge_runs`).  Every source keeps a current run and a position in it.  Let
``bound`` be the smallest *last* entry of the sources' current runs.  Every entry <= ``bound``
of every source is then in a current run (sources are sorted), and every entry not yet taken
is > the entries taken, so the entries <= ``bound`` form the next merged run: each source's
part is cut with ``bisect`` and the parts are merged by one ``sorted`` (timsort finds the
sorted parts and merges them in C).  The source that owned ``bound`` moves to its next run.

Visibility (:func:`visible_runs`), the rules of :func:`antkv.iterators.visible_forward` without
range tombstones: entries newer than ``read_seq`` are dropped from each source's runs before
the merge (only where a run holds any); then the first entry of each user key in the merged
order is its newest visible version, which shows the key unless it is a DELETION.  That is a
selection mask computed by ``map`` over the keys and the previous keys (the last key of the
previous run carries over, so versions of one key split over two runs are decided once) and
the kinds (DELETION == 0 is the only falsy kind).  Consumers apply the mask with
``itertools.compress``.

Invariant (relied on by the merge): two entries of different sources never compare equal on
``(key, neg_seq)``, except duplicates of one version (see :mod:`antkv.memtable`), which the
first-of-key mask removes.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from itertools import chain, compress, islice, repeat
from operator import and_, ge, ne
from typing import Iterator

from .dbformat import DELETION, VALUE, VALUE_POINTER

RUN_TARGET = 256
"""Entries a source gathers into one run once a scan is long (whole blocks, so a table's runs
may be a block longer); runs start small (see :func:`gather_runs`)."""

Run = tuple  # (keys, neg_seqs, kinds, values): parallel sequences, internal order, non-empty


def gather_runs(blocks: Iterator[Run], neg_read: int) -> Iterator[Run]:
    """Runs joined from decoded ``blocks``, without the entries newer than ``-neg_read``.

    The first two runs are one block each, then each run joins twice as many blocks as the one
    before, up to about RUN_TARGET entries: a short scan (a seek and a few ``next``) decodes
    no more blocks than the per-entry path would, a long one spreads the per-run work over
    many entries.  Never mutates a block (blocks are shared via the cache): joining copies.
    """
    nblocks = 1  # blocks in the next run
    ramp = 0  # runs yielded so far, while ramping up
    keys = negs = kinds = values = None
    joined = 0
    for bk, bn, bt, bv in blocks:
        if min(bn) < neg_read:  # some entries are newer than the read: drop them
            keep = list(map(ge, bn, repeat(neg_read)))
            bk, bn, bt, bv = (list(compress(col, keep)) for col in (bk, bn, bt, bv))
            if not bk:
                continue
        if keys is None:
            if nblocks == 1 or len(bk) >= RUN_TARGET:
                yield bk, bn, bt, bv
                ramp += 1
                if ramp >= 2:
                    nblocks = 2
                continue
            keys, negs, kinds, values = list(bk), list(bn), list(bt), list(bv)
            joined = 1
        else:
            keys += bk
            negs += bn
            kinds += bt
            values += bv
            joined += 1
        if joined >= nblocks or len(keys) >= RUN_TARGET:
            yield keys, negs, kinds, values
            if len(keys) < RUN_TARGET:
                nblocks = 2 * joined
            keys = None
    if keys is not None:
        yield keys, negs, kinds, values


def entry_runs(entries: Iterator[tuple], neg_read: int) -> Iterator[Run]:
    """Runs from an iterator of entry tuples (a memtable source): 16 entries, then twice as
    many each time up to RUN_TARGET."""
    n = 16
    while True:
        chunk = list(islice(entries, n))
        if not chunk:
            return
        n = min(RUN_TARGET, 2 * n)
        if min(e[1] for e in chunk) < neg_read:
            chunk = [e for e in chunk if e[1] >= neg_read]
            if not chunk:
                continue
        yield tuple(zip(*chunk))


def _cut(keys, negs, lo: int, bkey: bytes, bneg: int) -> int:
    """The end of the entries <= ``(bkey, bneg)`` in ``keys[lo:]``/``negs[lo:]``."""
    j = bisect_right(keys, bkey, lo)
    if j > lo and keys[j - 1] == bkey:
        j = bisect_right(negs, bneg, bisect_left(keys, bkey, lo, j), j)
    return j


def merge_runs(sources: list[Iterator[Run]]) -> Iterator[Run]:
    """The runs of all ``sources`` merged into runs in internal order (see the module docstring).

    ``sources`` are ordered newest first.  A merged run is ``(keys, negs, kinds, values)``, or
    ``(keys, None, None, values)`` when every entry in it is a VALUE of a distinct key (the
    common case, merged by sorting the keys alone; see :func:`_merge_plain`).
    """
    heads = []  # [keys, negs, kinds, values, position, source, plain], newest source first
    for src in sources:
        run = next(src, None)
        if run is not None:
            heads.append([*run, 0, src, _is_plain(run[2])])
    while len(heads) > 1:
        owner = heads[0]
        bkey, bneg = owner[0][-1], owner[1][-1]
        for h in heads:
            k = h[0][-1]
            if k < bkey or (k == bkey and h[1][-1] < bneg):
                owner, bkey, bneg = h, k, h[1][-1]
        parts = []
        for h in heads:
            keys, p = h[0], h[4]
            j = len(keys) if h is owner else _cut(keys, h[1], p, bkey, bneg)
            if j > p:
                parts.append((h, p, j))
                h[4] = j
        if len(parts) == 1:
            h, p, j = parts[0]
            if p == 0 and j == len(h[0]):
                yield h[0], h[1], h[2], h[3]
            else:
                yield h[0][p:j], h[1][p:j], h[2][p:j], h[3][p:j]
        else:
            yield _merge_plain(parts) or _merge_general(parts)
        run = next(owner[5], None)
        if run is None:
            heads.remove(owner)
        else:
            owner[:4] = run
            owner[4] = 0
            owner[6] = _is_plain(run[2])
    if heads:
        h = heads[0]
        p = h[4]
        yield (h[0], h[1], h[2], h[3]) if p == 0 else (h[0][p:], h[1][p:], h[2][p:], h[3][p:])
        yield from h[5]


def _is_plain(kinds) -> bool:
    """True if a run holds only VALUE entries (no DELETION, no VALUE_POINTER)."""
    return DELETION not in kinds and VALUE_POINTER not in kinds


def _merge_plain(parts: list) -> Run | None:
    """The merged run of ``parts`` (``(head, start, end)`` slices of sorted runs) if their runs
    hold only VALUE entries and the parts hold distinct keys, as ``(keys, None, None, values)``;
    else None.

    Sorting the keys alone (bytes comparisons in C) is cheaper than sorting entry tuples; the
    values follow through a dict, whose size also tells whether any key was repeated.
    """
    keys: list = []
    values: list = []
    for h, p, j in parts:
        if not h[6]:
            return None
        keys += h[0][p:j]
        values += h[3][p:j]
    by_key = dict(zip(keys, values))
    if len(by_key) != len(keys):
        return None
    keys.sort()
    return keys, None, None, list(map(by_key.__getitem__, keys))


def _merge_general(parts: list) -> Run:
    """The merged run of ``parts`` by sorting entry tuples."""
    merged = sorted(chain.from_iterable(zip(h[0][p:j], h[1][p:j], h[2][p:j], h[3][p:j]) for h, p, j in parts))
    return tuple(zip(*merged))


def visible_runs(merged: Iterator[Run], upper: bytes | None) -> Iterator[tuple]:
    """``(keys, kinds, values, mask)`` per merged run: ``mask[i]`` is truthy iff entry ``i`` is
    the newest version of a key that the scan shows; ``mask`` None means every entry is shown
    and ``kinds`` None that every entry is a VALUE.  Stops before ``upper``.

    REQUIRES: the runs hold no entry newer than the read (see :func:`gather_runs`).
    """
    last = None
    for keys, _negs, kinds, values in merged:
        done = upper is not None and keys[-1] >= upper
        if done:
            j = bisect_left(keys, upper)
            if not j:
                return
            keys, values = keys[:j], values[:j]
            if kinds is not None:
                kinds = kinds[:j]
        if kinds is None:
            if keys[0] == last:  # older versions of the previous run's last key
                keys, values = keys[1:], values[1:]
            if keys:
                yield keys, None, values, None
        else:
            yield keys, kinds, values, list(map(and_, map(ne, keys, chain((last,), keys)), kinds))
        if done:
            return
        last = keys[-1] if keys else last


def triples(visible: Iterator[tuple]) -> Iterator:
    """``(key, kind, value)`` of every shown entry, as iterators chained in C."""
    return chain.from_iterable(map(_triples, visible))


def _triples(run: tuple) -> Iterator:
    keys, kinds, values, mask = run
    if kinds is None:
        return zip(keys, repeat(VALUE), values)
    return compress(zip(keys, kinds, values), mask)


def shaped(visible: Iterator[tuple], mode: str, on_pointer) -> Iterator:
    """The scan's output in ``mode`` ("items", "keys" or "values") with no Python frame per
    entry.  At the first run holding a value pointer it hands over: ``on_pointer(rest)`` gets
    the ``(key, kind, value)`` triples from that run on and yields the rest of the output."""

    def batches():
        for run in visible:
            keys, kinds, values, mask = run
            if mode != "keys" and kinds is not None and VALUE_POINTER in kinds:
                yield on_pointer(chain(_triples(run), triples(visible)))
                return
            if mode == "items":
                out = zip(keys, values)
            elif mode == "keys":
                out = keys
            else:
                out = values
            yield out if mask is None else compress(out, mask)

    return chain.from_iterable(batches())
