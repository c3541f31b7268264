"""Range tombstones and their fragmentation into non-overlapping pieces.

A range tombstone ``[begin, end)@seq`` hides every version with a smaller sequence number of
every user key in ``[begin, end)``.  Overlapping tombstones are awkward to search, so readers
use a *fragmented* view, built like the skyline problem: cut the key space at every begin and
end, and give each piece the sequence numbers of every tombstone covering it::

    input:   a-----------e@5        fragments:  [a,c) {5}
                   c-----------g@9              [c,e) {9,5}
                                                [e,g) {9}

Invariants of :class:`FragmentedRangeTombstones` (checked by ``_check()``):

* ``starts[i] < ends[i] <= starts[i+1]`` -- sorted and non-overlapping (gaps allowed);
* ``seqs[i]`` is a non-empty tuple of distinct sequence numbers, descending;
* two adjacent fragments that touch (``ends[i] == starts[i+1]``) never carry the same seqs
  (they would have been merged).

With ``snapshots`` (ascending sequence numbers of live snapshots) only the newest sequence number
of each *snapshot stripe* is kept: older tombstones in the same stripe hide nothing a reader could
still see.  Compaction uses that to drop tombstones no reader needs.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right
from typing import Iterable, Sequence


class FragmentedRangeTombstones:
    __slots__ = ("starts", "ends", "seqs", "max_seq")

    def __init__(self, starts: list[bytes], ends: list[bytes], seqs: list[tuple[int, ...]]):
        self.starts = starts
        self.ends = ends
        self.seqs = seqs
        self.max_seq = max((s[0] for s in seqs), default=0)

    def __len__(self) -> int:
        return len(self.starts)

    def __bool__(self) -> bool:
        return bool(self.starts)

    def max_covering_seq(self, key: bytes, read_seq: int) -> int:
        """Newest sequence number <= ``read_seq`` of a tombstone covering ``key``; 0 if none."""
        i = bisect_right(self.starts, key) - 1
        if i >= 0 and key < self.ends[i]:
            for s in self.seqs[i]:
                if s <= read_seq:
                    return s
        return 0

    def fragment_index(self, key: bytes) -> int:
        """Index of the fragment containing ``key``, or -1."""
        i = bisect_right(self.starts, key) - 1
        if i >= 0 and key < self.ends[i]:
            return i
        return -1

    def first_index_at_or_after(self, key: bytes) -> int:
        """Index of the first fragment whose end is > ``key`` (len(self) if none)."""
        return bisect_right(self.ends, key)

    def tombstones(self) -> list[tuple[bytes, bytes, int]]:
        """Every ``(begin, end, seq)`` piece, sorted by begin then seq descending."""
        out = []
        for b, e, ss in zip(self.starts, self.ends, self.seqs):
            for s in ss:
                out.append((b, e, s))
        return out

    def visible(self, read_seq: int) -> "FragmentedRangeTombstones":
        """The view a reader at ``read_seq`` has: seqs above it removed (merged where equal)."""
        if self.max_seq <= read_seq:
            return self
        return fragment(((b, e, s) for b, e, s in self.tombstones() if s <= read_seq))

    def _check(self) -> None:
        n = len(self.starts)
        assert len(self.ends) == n and len(self.seqs) == n
        for i in range(n):
            assert self.starts[i] < self.ends[i], (i, self.starts[i], self.ends[i])
            ss = self.seqs[i]
            assert ss and all(ss[j] > ss[j + 1] for j in range(len(ss) - 1)), ss
            if i + 1 < n:
                assert self.ends[i] <= self.starts[i + 1]
                if self.ends[i] == self.starts[i + 1]:
                    assert self.seqs[i] != self.seqs[i + 1]

    def __repr__(self) -> str:
        parts = [f"[{b!r},{e!r}){set(s)}" for b, e, s in zip(self.starts, self.ends, self.seqs)]
        return "FragmentedRangeTombstones(" + ", ".join(parts) + ")"


EMPTY = FragmentedRangeTombstones([], [], [])


def _stripe_newest(seqs: list[int], snapshots: Sequence[int]) -> tuple[int, ...]:
    """Keep, per snapshot stripe, only the newest seq.  ``seqs`` descending."""
    kept: list[int] = []
    last_stripe = None
    for s in seqs:
        stripe = bisect_left(snapshots, s)  # snapshots >= s see s; stripe id = first such snapshot
        if stripe != last_stripe:
            kept.append(s)
            last_stripe = stripe
    return tuple(kept)


def fragment(
    tombstones: Iterable[tuple[bytes, bytes, int]], snapshots: Sequence[int] | None = None
) -> FragmentedRangeTombstones:
    """Fragment ``(begin, end, seq)`` tombstones; empty ranges (begin >= end) are ignored."""
    ts = sorted((b, e, s) for b, e, s in tombstones if b < e)
    if not ts:
        return EMPTY
    starts: list[bytes] = []
    ends: list[bytes] = []
    seqs: list[tuple[int, ...]] = []
    active: list[tuple[bytes, int]] = []  # heap of (end, seq) covering the sweep position
    i, n = 0, len(ts)
    pos = ts[0][0]
    while i < n or active:
        if not active:
            pos = ts[i][0]
        while i < n and ts[i][0] == pos:
            heapq.heappush(active, (ts[i][1], ts[i][2]))
            i += 1
        # the piece [pos, nxt) has a constant covering set
        nxt = active[0][0]
        if i < n and ts[i][0] < nxt:
            nxt = ts[i][0]
        cover = sorted({s for _, s in active}, reverse=True)
        piece = _stripe_newest(cover, snapshots) if snapshots is not None else tuple(cover)
        if starts and ends[-1] == pos and seqs[-1] == piece:
            ends[-1] = nxt
        else:
            starts.append(pos)
            ends.append(nxt)
            seqs.append(piece)
        pos = nxt
        while active and active[0][0] <= pos:
            heapq.heappop(active)
    return FragmentedRangeTombstones(starts, ends, seqs)


def truncate(
    frags: FragmentedRangeTombstones, lower: bytes | None, upper: bytes | None
) -> list[tuple[bytes, bytes, int]]:
    """The pieces of ``frags`` clipped to ``[lower, upper)`` (None = unbounded)."""
    out = []
    for b, e, ss in zip(frags.starts, frags.ends, frags.seqs):
        if lower is not None and e <= lower:
            continue
        if upper is not None and b >= upper:
            break
        if lower is not None and b < lower:
            b = lower
        if upper is not None and e > upper:
            e = upper
        if b < e:
            for s in ss:
                out.append((b, e, s))
    return out
