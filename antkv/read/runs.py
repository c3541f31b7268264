"""Batched scans: sources merged a *run* of entries at a time, with C loops only.

The general scan (:mod:`antkv.read.iterators`) moves one entry at a time through ``heapq.merge`` and
a visibility generator: several Python frames per entry.  When no range tombstone is in view
(the common case) ``items()``/``keys()``/``values()`` instead work on *runs*: parallel sequences
``(keys, neg_seqs, kinds, values)`` of consecutive entries of one source, in internal order
(a decoded block is one; a table source joins blocks into runs of up to about
:data:`RUN_TARGET` entries so that the per-run work is spread over many entries).

Merging (:func:`merge_runs`).  Every source keeps a current run and a position in it.  Let
``bound`` be the smallest *last* entry of the sources' current runs.  Every entry <= ``bound``
of every source is then in a current run (sources are sorted), and every entry not yet taken
is > the entries taken, so the entries <= ``bound`` form the next merged run: each source's
part is cut with ``bisect``, and the parts are merged to each key's newest version through
dicts and one sort of the keys alone, in C loops (:func:`_merge_newest`).  The source that
owned ``bound`` moves to its next run.

Visibility (:func:`visible_runs`), the rules of :func:`antkv.read.iterators.visible_forward` without
range tombstones: entries newer than ``read_seq`` are dropped from each source's runs before
the merge (only where a run holds any); then the first entry of each user key in the merged
order is its newest visible version, which shows the key unless it is a DELETION.  That is a
selection mask computed by ``map`` over the keys and the previous keys (the last key of the
previous run carries over, so versions of one key split over two runs are decided once) and
the kinds (DELETION == 0 is the only falsy kind).  Consumers apply the mask with
``itertools.compress``.

Reverse scans (:func:`merge_runs_backward`) use the same ascending runs, taken from the top;
see the comment above it.

Invariants (relied on by the merge): two entries of different sources never compare equal on
``(key, neg_seq)``, except duplicates of one version (see :mod:`antkv.memtable.memtable`), which the
first-of-key mask removes; and of two sources holding versions of one key, the newer source
holds the newer versions (the LSM's order, which point reads rely on too: they stop at the
first source holding the key).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from itertools import chain, compress, islice, repeat
from operator import and_, ge, ne
from typing import Iterator

from ..base.dbformat import DELETION, EXPIRING, MERGE, VALUE, VALUE_POINTER

RUN_TARGET = 1024
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


def entry_runs(entries: Iterator[tuple], neg_read: int, backward: bool = False) -> Iterator[Run]:
    """Runs from an iterator of entry tuples (a memtable source): 16 entries, then twice as
    many each time up to RUN_TARGET.  ``backward``: the entries come in reverse internal order
    and each run is turned ascending (runs of ever lower keys)."""
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
        if backward:
            chunk.reverse()
        yield tuple(zip(*chunk))


def _cut(keys, negs, lo: int, bkey: bytes, bneg: int) -> int:
    """The end of the entries <= ``(bkey, bneg)`` in ``keys[lo:]``/``negs[lo:]``."""
    j = bisect_right(keys, bkey, lo)
    if j > lo and keys[j - 1] == bkey:
        j = bisect_right(negs, bneg, bisect_left(keys, bkey, lo, j), j)
    return j


def merge_runs(sources: list[Iterator[Run]]) -> Iterator[Run]:
    """The runs of all ``sources`` merged into runs in internal order (see the module docstring).

    ``sources`` are ordered newest first.  A merged run is one source's run (or a slice of
    it) as it is, or the newest versions of several sources' parts (:func:`_merge_newest`):
    ``(keys, None, kinds, values)``, with ``kinds`` None when every entry is a VALUE.  Either
    way the first entry of each key in a run is the newest version of the key among the
    entries merged so far, which is all :func:`visible_runs` reads.
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
        yield _batch(parts)
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


def _batch(parts: list) -> Run:
    """The merged run of ``parts`` (``(head, start, end)`` slices of sorted runs, at least one,
    newest source first): a lone part as it is (not copied when it is a whole run), several
    merged to each key's newest version (:func:`_merge_newest`)."""
    if len(parts) == 1:
        h, p, j = parts[0]
        if p == 0 and j == len(h[0]):
            return h[0], h[1], h[2], h[3]
        return h[0][p:j], h[1][p:j], h[2][p:j], h[3][p:j]
    return _merge_newest(parts)


def _is_plain(kinds) -> bool:
    """True if a run holds only VALUE entries (no DELETION, no VALUE_POINTER).

    ``count`` finds each VALUE by identity (small ints are shared), a cheaper C loop than the
    full comparisons of two ``not in`` scans."""
    return kinds.count(VALUE) == len(kinds)


def _merge_newest(parts: list) -> Run:
    """The merged run of ``parts`` (``(head, start, end)`` slices of sorted runs, newest source
    first) holding only each key's newest version, as ``(keys, None, kinds, values)``, or
    ``(keys, None, None, values)`` when every part is all VALUEs.

    That is all the merge's consumers look at (the first entry of each key: see
    :func:`visible_runs`), and it needs no comparison of entries: the parts are laid into dicts
    oldest source first, each part reversed (a source holds a key's versions newest first), so
    the version stored last, which wins, is the newest; then the keys alone are sorted (bytes
    comparisons in C).  A key the merge meets again in the next batch (its older versions
    beyond this batch's cut) is removed there by the first-of-key rule."""
    values_of: dict = {}
    kinds_of: dict | None = None if all(h[6] for h, _p, _j in parts) else {}
    for h, p, j in reversed(parts):
        keys = h[0][p:j]
        values_of.update(zip(reversed(keys), reversed(h[3][p:j])))
        if kinds_of is not None:
            kinds_of.update(zip(reversed(keys), reversed(h[2][p:j])))
    keys = list(values_of)
    keys.sort()
    values = list(map(values_of.__getitem__, keys))
    if kinds_of is None:
        return keys, None, None, values
    return keys, None, list(map(kinds_of.__getitem__, keys)), values


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


def shaped(visible: Iterator[tuple], mode: str, on_pointer, merges: bool = False) -> Iterator:
    """The scan's output in ``mode`` ("items", "keys" or "values") with no Python frame per
    entry.  At the first run holding a value pointer (or an EXPIRING entry, or with ``merges``
    a MERGE operand) it hands over: ``on_pointer(rest)`` gets the ``(key, kind, value)``
    triples from that run on and yields the rest of the output.  (A key whose newest version
    is an operand always has a value, so "keys" needs no hand-over for one.)"""

    def batches():
        for run in visible:
            keys, kinds, values, mask = run
            if kinds is not None and (
                mode != "keys" and (VALUE_POINTER in kinds or merges and MERGE in kinds) or EXPIRING in kinds
            ):
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


# --- backward (reverse) scans ---
#
# A reverse scan uses the same runs, still sorted ascending, but walks each source from its end:
# a source yields runs of ever lower keys, and each head is consumed from the top of its run.
# Let ``bkey`` be the largest *first* key among the current runs of the sources that have more
# runs.  Every entry with a key > ``bkey`` is then in a current run, and so is every version of
# such a key: the next batch takes, from every head, the entries with keys > ``bkey``.  Batches
# therefore hold whole keys (all versions), are merged and masked exactly like forward ones
# (first entry of each key), and are emitted reversed.  The source that owned ``bkey`` reads its
# next run, in front of the entries it has left (all of key ``bkey``).


def gather_runs_backward(blocks: Iterator[Run], neg_read: int) -> Iterator[Run]:
    """:func:`gather_runs` for ``blocks`` that come in descending order (each block ascending):
    runs of ever lower keys, each ascending, ramping up the same way."""
    nblocks = 1
    ramp = 0
    pending: list = []  # blocks of the run being joined, highest first
    count = 0
    for block in blocks:
        bk, bn, bt, bv = block
        if min(bn) < neg_read:
            keep = list(map(ge, bn, repeat(neg_read)))
            bk, bn, bt, bv = block = tuple(list(compress(col, keep)) for col in block)
            if not bk:
                continue
        if nblocks == 1 and not pending:
            yield block
            ramp += 1
            if ramp >= 2:
                nblocks = 2
            continue
        pending.append(block)
        count += len(bk)
        if len(pending) >= nblocks or count >= RUN_TARGET:
            yield _join_descending(pending)
            if count < RUN_TARGET:
                nblocks = 2 * len(pending)
            pending = []
            count = 0
    if pending:
        yield _join_descending(pending)


def _join_descending(blocks: list) -> Run:
    """One ascending run from ``blocks`` given highest first."""
    if len(blocks) == 1:
        return blocks[0]
    blocks = blocks[::-1]
    return tuple(list(chain.from_iterable(b[c] for b in blocks)) for c in range(4))


def entry_runs_backward(entries: Iterator[tuple], neg_read: int) -> Iterator[Run]:
    """Ascending runs of ever lower keys from entry tuples in reverse internal order (a
    memtable's backward iterator)."""
    return entry_runs(entries, neg_read, backward=True)


def merge_runs_backward(sources: list[Iterator[Run]]) -> Iterator[Run]:
    """Merged ascending batches of whole keys, in descending batch order (see above).  Batches
    have the shapes :func:`merge_runs` yields."""
    heads = []  # [keys, negs, kinds, values, end, source, plain, exhausted]; [0, end) unread
    for src in sources:
        run = next(src, None)
        if run is not None:
            heads.append([*run, len(run[0]), src, _is_plain(run[2]), False])
    while heads:
        owner = None
        bkey = b""
        for h in heads:
            if not h[7] and (owner is None or h[0][0] > bkey):
                owner, bkey = h, h[0][0]
        parts = []
        for h in heads:
            e = h[4]
            j = 0 if owner is None else bisect_right(h[0], bkey, 0, e)
            if j < e:
                parts.append((h, j, e))
                h[4] = j
        if parts:
            yield _batch(parts)
        if owner is None:
            return
        run = next(owner[5], None)
        if run is None:
            owner[7] = True
        else:
            # the owner's entries of key bkey (at least its first) are still unread: they
            # follow the lower run
            e = owner[4]
            owner[:4] = [[*run[c], *owner[c][:e]] for c in range(4)]
            owner[4] = len(owner[0])
            owner[6] = _is_plain(owner[2])
        heads = [h for h in heads if h[4] or not h[7]]


def visible_runs_backward(merged: Iterator[Run], lower: bytes | None) -> Iterator[tuple]:
    """:func:`visible_runs` for :func:`merge_runs_backward`: ``(keys, kinds, values, mask)``
    per batch (ascending; the caller emits them reversed), stopping below ``lower``."""
    for keys, _negs, kinds, values in merged:
        done = lower is not None and keys[0] < lower
        if done:
            j = bisect_left(keys, lower)
            if j == len(keys):
                return
            keys, values = keys[j:], values[j:]
            if kinds is not None:
                kinds = kinds[j:]
        if kinds is None:
            yield keys, None, values, None
        else:
            yield keys, kinds, values, list(map(and_, map(ne, keys, chain((None,), keys)), kinds))
        if done:
            return


def _reversed_triples(run: tuple) -> Iterator:
    keys, kinds, values, mask = run
    if kinds is None:
        return zip(reversed(keys), repeat(VALUE), reversed(values))
    return compress(zip(reversed(keys), reversed(kinds), reversed(values)), reversed(mask))


def shaped_backward(visible: Iterator[tuple], mode: str, on_pointer, merges: bool = False) -> Iterator:
    """:func:`shaped` for :func:`visible_runs_backward`: each batch emitted in descending order."""

    def batches():
        for run in visible:
            keys, kinds, values, mask = run
            if kinds is not None and (
                mode != "keys" and (VALUE_POINTER in kinds or merges and MERGE in kinds) or EXPIRING in kinds
            ):
                yield on_pointer(chain(_reversed_triples(run), chain.from_iterable(map(_reversed_triples, visible))))
                return
            if mode == "items":
                out = zip(reversed(keys), reversed(values))
            elif mode == "keys":
                out = reversed(keys)
            else:
                out = reversed(values)
            yield out if mask is None else compress(out, reversed(mask))

    return chain.from_iterable(batches())
