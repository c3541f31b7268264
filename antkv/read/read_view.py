"""Consistent read views: the *super version* and a reader's view of it.

A :class:`SuperVersion` pins what a reader needs: the mutable memtable, the immutable
memtables (newest first) and the table :class:`~antkv.manifest.version_set.Version`.  It is never
mutated; the DB publishes a new one when any of the three changes.  While a super version is
alive (a running get, an open iterator, a checkpoint in progress) none of its files are deleted
(the DB tracks live super versions in a ``WeakSet``).

A :class:`ReadView` is a super version plus a read sequence number; iterators and scans run
on one.  Sources are ordered newest first: memtable, immutable memtables, L0 tables (newest
first), then one source per sorted level.  A key in an older source is always older than any
range tombstone of a newer source, which is what lets :func:`antkv.read.iterators.skip_covered_forward`
jump over covered spans and :func:`antkv.read.point_get.table_get_covered` stop at the first covering tombstone.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from time import perf_counter
from itertools import chain
from typing import Iterator

from ..base.dbformat import MAX_SEQUENCE, MERGE, VALUE_POINTER
from ..base.expiry import now_ms
from ..errors import DBClosedError
from ..memtable.rangedel import EMPTY, FragmentedRangeTombstones, fragment
from .iterators import (
    LevelSource,
    live_triples,
    merge_backward,
    merge_forward,
    skip_covered_backward,
    skip_covered_forward,
    visible_backward,
    visible_forward,
)
from .merge_visibility import merging_backward, merging_forward
from .runs import (
    entry_runs,
    entry_runs_backward,
    gather_runs,
    gather_runs_backward,
    merge_runs,
    merge_runs_backward,
    shaped,
    shaped_backward,
    visible_runs,
    visible_runs_backward,
)


class SuperVersion:
    __slots__ = ("mem", "imms", "version", "memtables", "_frag_cache", "__weakref__")

    def __init__(self, mem, imms: tuple, version):
        self.mem = mem
        self.imms = imms
        self.version = version
        self.memtables = (mem,) + imms
        self._frag_cache = None  # (num_range_deletes, lo, hi, all fragments, per-source newer)

    # --- range tombstones for iterators ---

    def _source_tombstones(self, open_table) -> list[list[tuple[bytes, bytes, int]]]:
        out = [list(m.range_dels) for m in self.memtables]
        levels = self.version.levels
        for f in levels[0]:
            r = f.reader or open_table(f)
            out.append(list(r.range_tombstones))
        for level in range(1, len(levels)):
            if levels[level]:
                ts = []
                for f in levels[level]:
                    r = f.reader or open_table(f)
                    ts.extend(r.range_tombstones)
                out.append(ts)
        return out

    def fragments(self, open_table, read_seq: int):
        """``(all, newer)``: fragments of every tombstone visible at ``read_seq``, and per source
        the fragments of the tombstones of strictly newer sources (None where there are none)."""
        # The view is the same for every read_seq in [lo, hi) (lo: newest tombstone seq at or
        # below read_seq, hi: oldest above it), so the cache is keyed by that range: a write
        # between two iterators must not re-fragment thousands of tombstones.
        n = self.mem.num_range_deletes
        cached = self._frag_cache
        if cached is not None and cached[0] == n and cached[1] <= read_seq < cached[2]:
            return cached[3], cached[4]
        per_source = self._source_tombstones(open_table)
        lo, hi = 0, MAX_SEQUENCE + 1
        if not any(per_source):
            result = (EMPTY, None)
        else:
            newer: list[FragmentedRangeTombstones | None] = []
            acc: list[tuple[bytes, bytes, int]] = []
            for ts in per_source:
                newer.append(fragment(acc) if acc else None)
                for t in ts:
                    s = t[2]
                    if s <= read_seq:
                        acc.append(t)
                        if s > lo:
                            lo = s
                    elif s < hi:
                        hi = s
            result = (fragment(acc), newer)
        self._frag_cache = (n, lo, hi, result[0], result[1])
        return result


class ReadView:
    """A super version seen at one read sequence number."""

    __slots__ = ("db", "sv", "read_seq", "now", "merge_op", "_makers", "_frags", "_plain_makers", "pin")

    def __init__(self, db, sv: SuperVersion, read_seq: int, pin=None):
        self.pin = pin  # a ReadPin (antkv.read.snapshot) that keeps read_seq's versions, or None
        self.db = db
        self.sv = sv
        self.read_seq = read_seq
        self.now = now_ms(db.options.clock)  # EXPIRING entries expired by now read as deleted
        self.merge_op = db.options.merge_operator  # set: scans apply merge operands (merging.py)
        self._makers = None  # see _forward_makers
        self._frags = None  # see fragments
        self._plain_makers = None  # see plain_forward: () when the view is not plain

    def check_open(self) -> None:
        if self.db._closed:
            raise DBClosedError(f"database {self.db.path} is closed")

    def resolve(self, pointer: bytes) -> bytes:
        return self.db._vlog_reader.get(pointer)

    def merged_value(self, key: bytes):
        """What this view shows of ``key`` with its merge operands applied (a point read that
        found a MERGE entry ends here), or None."""
        for _key, kind, value in self.scan_forward(key, key + b"\0", False):
            return self.resolve(value) if kind == VALUE_POINTER else value
        return None

    # --- sources ---

    def fragments(self) -> tuple:
        """``(all, newer)`` of :meth:`SuperVersion.fragments` at this view's read sequence, kept
        with the view: a tombstone written after the view was made is newer than its read
        sequence, so the answer never changes (a cursor asks at every seek)."""
        frags = self._frags
        if frags is None:
            frags = self._frags = self.sv.fragments(self.db._open_table, self.read_seq)
        return frags

    def _forward_makers(self) -> list[tuple]:
        """``(j, make, largest)`` per source that can hold entries, newest first: ``j`` its
        place among all sources (as in :meth:`SuperVersion.fragments`), ``make(start)`` its
        forward iterator from ``start``, ``largest`` an L0 table's largest key (None for the
        others: a seek past it skips the table).  Built once per view, which a cursor seeks
        again and again; a memtable empty now gets only entries newer than this view."""
        makers = self._makers
        if makers is None:
            sv = self.sv
            open_table = self.db._open_table
            makers = [(j, m.iter_forward, None) for j, m in enumerate(sv.memtables) if not m.is_empty()]
            j = len(sv.memtables)
            levels = sv.version.levels
            for f in levels[0]:
                makers.append((j, (f.reader or open_table(f)).iter_forward, f.largest))
                j += 1
            for level in range(1, len(levels)):
                if levels[level]:
                    makers.append((j, LevelSource(open_table, levels[level]).forward, None))
                    j += 1
            self._makers = makers
        return makers

    def _forward_sources(self, start: bytes | None, newer) -> list[Iterator]:
        srcs: list[Iterator] = []
        for j, make, largest in self._makers or self._forward_makers():
            if start is not None and largest is not None and largest < start:
                continue
            src = make(start)
            if newer is not None and j < len(newer) and newer[j] is not None:
                src = skip_covered_forward(src, make, newer[j])
            srcs.append(src)
        return srcs

    def _backward_sources(self, start: bytes | None, newer) -> list[Iterator]:
        db, sv = self.db, self.sv
        open_table = db._open_table
        makers = []
        for m in sv.memtables:
            makers.append(m.iter_backward if not m.is_empty() else None)
        levels = sv.version.levels
        for f in levels[0]:
            makers.append((f.reader or open_table(f)).iter_backward if (start is None or f.smallest <= start) else None)
        for level in range(1, len(levels)):
            if levels[level]:
                makers.append(LevelSource(open_table, levels[level]).backward)
        srcs = []
        for j, make in enumerate(makers):
            if make is None:
                continue
            src = make(start)
            if newer is not None and j < len(newer) and newer[j] is not None:
                src = skip_covered_backward(src, _before(make), newer[j])
            srcs.append(src)
        return srcs

    def _forward_runs(self, start: bytes | None) -> list[Iterator]:
        """The sources of :meth:`_forward_sources` as runs (:mod:`antkv.read.runs`), for views with
        no range tombstone; entries newer than the read are already dropped."""
        db, sv = self.db, self.sv
        neg_read = -self.read_seq
        open_table = db._open_table
        srcs = [entry_runs(m.iter_forward(start), neg_read) for m in sv.memtables if not m.is_empty()]
        levels = sv.version.levels
        for f in levels[0]:
            if start is None or f.largest >= start:
                srcs.append(gather_runs((f.reader or open_table(f)).blocks_forward(start), neg_read))
        for level in range(1, len(levels)):
            if levels[level]:
                srcs.append(gather_runs(LevelSource(open_table, levels[level]).blocks_forward(start), neg_read))
        return srcs

    def _backward_runs(self, start: bytes | None, exclusive: bool) -> list[Iterator]:
        """:meth:`_forward_runs` for a reverse scan from ``start`` down (keys < ``start`` when
        ``exclusive``); runs of ever lower keys (:func:`antkv.read.runs.merge_runs_backward`)."""
        db, sv = self.db, self.sv
        neg_read = -self.read_seq
        open_table = db._open_table
        srcs = []
        for m in sv.memtables:
            if not m.is_empty():
                entries = m.iter_backward(start)
                if exclusive and start is not None:
                    entries = _below(entries, start)
                srcs.append(entry_runs_backward(entries, neg_read))
        levels = sv.version.levels
        for f in levels[0]:
            if start is None or f.smallest < start or (not exclusive and f.smallest == start):
                blocks = (f.reader or open_table(f)).blocks_backward(start, exclusive)
                srcs.append(gather_runs_backward(blocks, neg_read))
        for level in range(1, len(levels)):
            if levels[level]:
                blocks = LevelSource(open_table, levels[level]).blocks_backward(start, exclusive)
                srcs.append(gather_runs_backward(blocks, neg_read))
        return srcs

    def _visible_runs(self, start: bytes | None, upper: bytes | None) -> Iterator:
        """:func:`antkv.read.runs.visible_runs` of this view (REQUIRES: no range tombstone in view).
        It does not pin the super version: the caller keeps the view alive."""
        return visible_runs(merge_runs(self._forward_runs(start)), upper)

    # --- scans: (key, kind, value) with pointers unresolved ---

    def plain_forward(self, start: bytes | None) -> Iterator | None:
        """The merged entry tuples ``(key, -seq, kind, value)`` of every source from ``start``
        on, versions newer than the read included, when this view needs no more than
        :func:`~antkv.read.iterators.visible_forward`'s first-of-key rule to read them (no
        range tombstone in view, no merge operator); else None.  The cursor applies that
        rule itself, inline in its ``next`` (:class:`~antkv.read.iterators.DBIterator`)."""
        makers = self._plain_makers
        if makers is None:  # decided once: the view's tombstones and merge operator never change
            frags, _ = self.fragments()
            makers = self._plain_makers = () if frags or self.merge_op is not None else self._forward_makers()
        if not makers:
            return None
        # _forward_sources without tombstones, inline (a seek's path)
        if len(makers) == 1:
            _, make, largest = makers[0]
            return make(start) if start is None or largest is None or largest >= start else iter(())
        srcs = []
        for _, make, largest in makers:
            if start is None or largest is None or largest >= start:
                srcs.append(make(start))
        if len(srcs) == 1:
            return srcs[0]
        return merge_forward(srcs) if srcs else iter(())

    def scan_forward(self, start: bytes | None, upper: bytes | None, exclusive: bool) -> Iterator:
        """The per-entry forward scan (the cursor's: a seek followed by a few ``next`` costs less
        here than setting up the batched merge of :meth:`items`)."""
        frags, newer = self._frags or self.fragments()
        srcs = self._forward_sources(start, newer)
        merged = srcs[0] if len(srcs) == 1 else merge_forward(srcs)
        if self.merge_op is not None:
            gen = merging_forward(merged, self.read_seq, frags, upper, self.now, self.merge_op, self.resolve)
        else:
            gen = visible_forward(merged, self.read_seq, frags, upper, now=self.now)
        if exclusive and start is not None:
            return _drop_key(gen, start)
        return gen

    def scan_backward(self, start: bytes | None, lower: bytes | None, exclusive: bool) -> Iterator:
        frags, newer = self.fragments()
        merged = merge_backward(self._backward_sources(start, newer))
        if self.merge_op is not None:
            gen = merging_backward(merged, self.read_seq, frags, lower, self.now, self.merge_op, self.resolve)
        else:
            gen = visible_backward(merged, self.read_seq, frags, lower, now=self.now)
        if exclusive and start is not None:
            return _drop_key(gen, start)
        return gen

    def _emit_rest(self, rest: Iterator, mode: str, bound: bytes | None, reverse: bool) -> Iterator:
        """The output of the batched scan's hand-over: ``rest`` triples (see
        :func:`antkv.read.runs.shaped`), with EXPIRING entries unwrapped and, from the first
        merge operand on, the per-entry scan from that key to ``bound``."""
        rest = live_triples(rest, self.now)
        if self.merge_op is not None:
            if reverse:
                rest = _until_operand(rest, lambda key: self.scan_backward(key, bound, False))
            else:
                rest = _until_operand(rest, lambda key: self.scan_forward(key, bound, False))
        return _emit(self, rest, mode)

    def items(self, lo: bytes | None, hi: bytes | None, reverse: bool, mode: str) -> Iterator:
        """``db.items()``/``keys()``/``values()`` over ``[lo, hi)`` in ``mode``.  Scans with no
        range tombstone in view take the batched paths (:mod:`antkv.read.runs`), handing over to
        the per-entry path at the first merge operand; the
        ``on_pointer`` closure holds ``self``, which pins the super version while the returned
        iterator lives."""
        if lo is not None and hi is not None and lo >= hi:
            return iter(())
        frags, _ = self.fragments()
        merges = self.merge_op is not None
        if reverse:
            if not frags:
                merged = merge_runs_backward(self._backward_runs(hi, True))
                visible = visible_runs_backward(merged, lo)
                return shaped_backward(visible, mode, lambda rest: self._emit_rest(rest, mode, lo, True), merges)
            gen = self.scan_backward(hi, lo, True) if hi is not None else self.scan_backward(None, lo, False)
        else:
            if not frags:
                return shaped(self._visible_runs(lo, hi), mode, lambda rest: self._emit_rest(rest, mode, hi, False),
                              merges)
            gen = self.scan_forward(lo, hi, False)
        return _emit(self, gen, mode)


def _until_operand(triples: Iterator, restart) -> Iterator:
    """``triples`` up to the first MERGE one; from its key on, ``restart(key)``'s (the batched
    runs show only a key's newest version, an operand needs the ones below it)."""
    for t in triples:
        if t[1] == MERGE:
            yield from restart(t[0])
            return
        yield t


def _drop_key(gen: Iterator, key: bytes) -> Iterator:
    """``gen`` without its first entry if that is ``key``'s (an exclusive start).  Reads the
    first entry at once; the rest is ``gen`` itself, with no frame of its own per entry."""
    first = next(gen, None)
    if first is None:
        return iter(())
    if first[0] == key:
        return gen
    return chain((first,), gen)


def _below(entries: Iterator, key: bytes) -> Iterator:
    """Backward ``entries`` without the leading ones of ``key`` (an exclusive reverse start)."""
    for e in entries:
        if e[0] != key:
            yield e
            break
    yield from entries


def _before(make):
    """Adapt a backward-source maker so that ``reopen(start)`` yields only keys < ``start``."""

    def reopen(start: bytes) -> Iterator:
        gen = make(start)
        for e in gen:
            if e[0] < start:
                yield e
                yield from gen
                return

    return reopen


def prefetch_threads(options) -> int:
    """How many threads resolve a scan's value pointers in parallel (the prefetch pool's size)."""
    return max(1, min(options.blob_readahead, 16))


def _emit(view: ReadView, gen: Iterator, mode: str) -> Iterator:
    """Turn ``(key, kind, value)`` into the caller's shape, resolving value pointers (with
    ``blob_readahead`` pointers prefetched in parallel)."""
    db = view.db
    ahead = db.options.blob_readahead if db._vlog_reader is not None else 0
    if mode == "keys":
        for key, _, _ in gen:
            yield key
        return
    resolve = view.resolve
    if ahead <= 1:
        for key, kind, value in gen:
            if kind == VALUE_POINTER:
                value = resolve(value)
            yield (key, value) if mode == "items" else value
        return
    # Values are resolved inline while reads are fast (the value log is in the page cache: a
    # thread hand-off costs more than the read).  Once SLOW_READS_IN_A_ROW reads in a row took
    # longer than SLOW_READ_SECONDS -- the disk is being read -- the rest of the scan prefetches
    # chunks of ``ahead`` entries whose pointers are resolved in parallel threads.
    items = mode == "items"
    clock = perf_counter
    slow = 0
    for e in gen:
        key, kind, value = e
        if kind == VALUE_POINTER:
            t0 = clock()
            value = resolve(value)
            if clock() - t0 > SLOW_READ_SECONDS:
                slow += 1
                if slow >= SLOW_READS_IN_A_ROW:
                    yield (key, value) if items else value
                    break
            else:
                slow = 0
        yield (key, value) if items else value
    else:
        return
    pool = db._prefetch_pool()
    threads = prefetch_threads(db.options)
    chunk: list = []
    npointers = 0
    for e in gen:
        chunk.append(e)
        if e[1] == VALUE_POINTER:
            npointers += 1
        if len(chunk) >= ahead:
            yield from _resolve_chunk(chunk, npointers, resolve, pool, threads, mode)
            chunk = []
            npointers = 0
    if chunk:
        yield from _resolve_chunk(chunk, npointers, resolve, pool, threads, mode)


SLOW_READ_SECONDS = 100e-6  # a value-log read slower than this came from the device, not the page cache
SLOW_READS_IN_A_ROW = 3


def _resolve_chunk(chunk: list, npointers: int, resolve, pool: ThreadPoolExecutor, threads: int, mode: str):
    if npointers > 1:
        # one task per worker, each resolving a slice of the chunk's pointers: a task per value
        # spent more on the pool's hand-offs than a cached read costs
        idx = [i for i, e in enumerate(chunk) if e[1] == VALUE_POINTER]
        workers = max(1, min(threads, len(idx) // 2))
        parts = [idx[w::workers] for w in range(workers)]
        try:
            futures = [pool.submit(_resolve_many, resolve, [chunk[i][2] for i in part]) for part in parts]
        except RuntimeError as e:  # the pool refuses work only once close() has shut it down
            raise DBClosedError("the database was closed during the scan") from e
        values: dict[int, bytes] = {}
        for part, fut in zip(parts, futures):
            values.update(zip(part, fut.result()))
        for i, (key, kind, value) in enumerate(chunk):
            if kind == VALUE_POINTER:
                value = values[i]
            yield (key, value) if mode == "items" else value
    else:
        for key, kind, value in chunk:
            if kind == VALUE_POINTER:
                value = resolve(value)
            yield (key, value) if mode == "items" else value


def _resolve_many(resolve, pointers: list[bytes]) -> list[bytes]:
    return [resolve(p) for p in pointers]
