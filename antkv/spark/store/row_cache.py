"""A working copy's row cache: the newest values of keys its state stores read or wrote.

A stateful operator reads and rewrites the same keys batch after batch; the working copy
stays open in the executor between batches (:mod:`antkv.spark.store.state_store`), and so does its row
cache.  A point read it answers costs a dict lookup instead of an engine read (bloom filter,
index, block search), as RocksDB's ``row_cache`` does for a database's point reads.

Invariant: for every key in :attr:`RowCache.rows`, ``rows[key]`` is the key's value in the
working copy's state -- the database plus the store's buffered writes -- or None when the
key is absent; and for every prefix in :attr:`RowCache.complete` (the first
:data:`PREFIX_LEN` bytes of keys, a key group), ``rows`` holds every live key with that prefix,
so a key of it that ``rows`` lacks is absent.  A prefix becomes complete when the store reads
it whole into the cache (``StateStore.warm``); it stops being complete as soon as an entry of
it is evicted or cannot be cached.  It holds because every change to that state passes through the store, which
updates the cache in the same call (a write stores the new value, a delete and a range
deletion drop the keys, an ingest clears the cache), and because a copy's cache starts empty
when the copy is built.

A copy built from a manifest starts with the records of the manifest's changelogs (the keys
written most recently, which a stateful operator tends to read next), so a working copy
rebuilt in another process -- Spark gives a partition's next task to whichever Python worker
is free -- does not start cold; when those changelogs are dense (they rewrote much of the
state) and the state fits half the budget, the snapshot is read whole into the cache first,
before the changelogs, so every prefix is held whole (``WorkingCopy.load``); a manifest without
a snapshot is all changelogs, so its prefixes are held whole from the start.  An empty base's
prefixes are all empty: warming them reads nothing and holds them whole.

**Memory.**  Each entry is charged its key and value bytes plus :data:`ENTRY_OVERHEAD` (the
dict slot and the two bytes objects' headers, measured with ``tracemalloc`` in
``tests/test_spark_row_cache.py``).  Every cache of a process draws from one
:class:`RowBudget` (``StoreOptions.row_cache_bytes``), which charges what it lends to the
process's block cache as pinned dummy entries, as the write buffer manager charges memtables:
the row caches, the memtables and the table blocks of every store in the process stay within
the one ``StoreOptions.memory_bytes`` figure (a quarter of it by default).  A cache takes
budget in :data:`CHUNK` steps; when the budget is spent, idle caches give chunks to a cache in
use that holds less than its fair share of the budget (:class:`RowBudget`).  Then a key the
cache does not hold is admitted one time in :data:`ADMIT_EVERY`, by evicting the cache's oldest
entries (insertion order; an overwrite keeps its place), and otherwise not cached; a key it
holds is always updated.  A stateful batch reads and writes its keys in the same order every
batch: with eviction alone, a state larger than the cache would evict each entry just before
its next read and never hit, where refusing most newcomers keeps most of what the cache holds
hitting, and a key read often still gets in soon.  An entry larger than what the cache can
free is simply not cached.

**Decoded values.**  Beside the bytes, the cache keeps the decoded form of the values the
state layer read or wrote as Python objects (``StateStore.get_decoded`` / ``put_decoded``), in
:attr:`RowCache.decoded`, so that a value read again -- in this batch or the next, which
meets the value the previous one wrote -- is not decoded again.  Invariant: every key of
``decoded`` is in ``rows`` with a bytes value, and ``decoded[key] == codec.decode(rows[key])``,
value and types, for the one :attr:`RowCache.codec` of the entries (a store whose reads use
another codec empties them first).  It holds because every method that changes or drops
``rows[key]`` drops ``decoded[key]`` first.  A decoded entry is charged what its objects
hold, estimated from its length when it is short and measured when it is long
(:mod:`~antkv.spark.store.decoded_charge`).
"""

from __future__ import annotations

import threading
from itertools import compress, islice, repeat
from operator import is_, is_not

import antkv
from antkv.spark.store.decoded_charge import decoded_charge, decoded_charges, recharge

ENTRY_OVERHEAD = 112  # bytes per cached entry beyond its key and value (dict slot, two bytes headers)
CHUNK = 256 * 1024  # budget taken from (and given back to) the process's RowBudget at a time
ADMIT_EVERY = 16  # a full cache admits one key it does not hold of this many (the others are not cached)
PREFIX_LEN = 2  # the prefixes the cache may hold whole: key groups
PLANNED_ENTRY_BYTES = 256  # what an entry is assumed to cost when planning to read key groups whole
_FILL_CHUNK = 4096  # entries RowCache.fill caches at a time
_SMALL = 256  # a cache this small is searched for a range deletion's keys; a larger one is cleared
MISSING = object()  # what RowCache.rows.get returns for a key the cache does not hold


class RowBudget:
    """The bytes every row cache of a process may hold together, charged to ``cache``.

    Invariant: ``lent`` is the sum of the chunks the caches hold, ``lent <= limit``, and the
    block cache holds ``lent / CHUNK`` pinned dummy entries for it (fewer only if a strict
    cache refused one: that chunk is then not lent).  When the budget is spent, the caches of
    working copies no store is using (idle copies kept for reuse, often of versions another
    process has moved past) give chunks back, least recently active first, to a cache in use
    that holds less than its fair share (``_reclaim``)."""

    def __init__(self, limit: int, cache: antkv.Cache | None):
        self.limit = limit
        self.lent = 0
        self._cache = cache
        self._id = cache.new_id() if cache is not None else 0
        self._handles: list = []
        self._next = 0
        self._members: dict[int, RowCache] = {}
        self._holders = 0  # members holding at least one chunk
        self._clock = 0  # orders activations, for reclaiming the least recently active first
        self._lock = threading.Lock()

    def join(self, rows: "RowCache") -> None:
        with self._lock:
            self._members[id(rows)] = rows

    def leave(self, rows: "RowCache") -> None:
        with self._lock:
            self._members.pop(id(rows), None)
            self._give_back(rows)

    def set_active(self, rows: "RowCache", active: bool) -> None:
        """A store starts (True) or stops (False) using ``rows``: an active cache is never
        reclaimed."""
        with self._lock:
            rows.active = active
            self._clock += 1
            rows.last_active = self._clock

    def take_chunk(self, rows: "RowCache") -> bool:
        """Lend ``rows`` one more :data:`CHUNK`; False when the budget (after reclaiming idle
        caches) or a strict block cache is full."""
        with self._lock:
            if self.lent + CHUNK > self.limit:
                self._reclaim(rows)
                if self.lent + CHUNK > self.limit:
                    return False
            if self._cache is not None:
                self._next += 1
                try:
                    self._handles.append(self._cache.insert((self._id, -self._next), None, CHUNK, "low"))
                except antkv.MemoryLimitError:
                    return False
            self.lent += CHUNK
            self._holders += not rows.chunks
            rows.chunks += 1
            return True

    def _give_back(self, rows: "RowCache") -> None:
        """REQUIRES the lock.  Empty ``rows`` and take back all its chunks."""
        rows.rows.clear()
        rows.complete.clear()
        rows.decoded.clear()
        rows.used = 0
        while rows.chunks:
            self._return_chunk(rows)

    def _reclaim(self, requester: "RowCache") -> None:
        """REQUIRES the lock.  Free one chunk for ``requester`` from an idle cache, least
        recently active first, if ``requester`` holds less than its fair share: the budget
        divided among the caches holding any of it.  A cache at its share must make room
        among its own entries: working copies used in turn (the partitions one worker
        serves, batch after batch) each keep a share instead of emptying each other."""
        holders = self._holders + (not requester.chunks)
        if requester.chunks >= max(1, self.limit // CHUNK // holders):
            return
        idle = [c for c in self._members.values() if c is not requester and not c.active and c.chunks]
        if idle:
            self._shed_chunk(min(idle, key=lambda c: c.last_active))

    def _shed_chunk(self, rows: "RowCache") -> None:
        """REQUIRES the lock.  Take one chunk back from idle ``rows``, evicting its oldest
        entries until the rest fit."""
        room = (rows.chunks - 1) * CHUNK
        entries = rows.rows
        while rows.used > room and entries:
            rows._evict(next(iter(entries)))
        self._return_chunk(rows)

    def _return_chunk(self, rows: "RowCache") -> None:
        """REQUIRES the lock.  One chunk of ``rows`` back to the budget (what it holds fits
        the rest) and its dummy entry out of the block cache."""
        rows.chunks -= 1
        self._holders -= not rows.chunks
        self.lent -= CHUNK
        if self._handles:
            self._cache.release(self._handles.pop(), erase_if_last_ref=True)


class RowCache:
    """The row cache of one working copy; see the module docstring.  Used by one store at a
    time, between :meth:`activate` and :meth:`deactivate`; while inactive, the budget may
    take its chunks back (under its lock), evicting its entries, to lend them to another cache."""

    __slots__ = ("rows", "complete", "decoded", "codec", "used", "chunks", "active", "last_active", "refused",
                 "_budget")

    def __init__(self, budget: RowBudget):
        self.rows: dict[bytes, bytes | None] = {}
        self.complete: set[bytes] = set()  # prefixes whose every live key is in rows
        self.decoded: dict[bytes, object] = {}  # key -> codec.decode(rows[key]) (module docstring)
        self.codec = None  # the codec of the decoded entries
        self.used = 0  # bytes charged for the entries in rows
        self.chunks = 0  # chunks of budget this cache holds
        self.active = False
        self.last_active = 0
        self.refused = 0  # keys the full cache did not hold and had to refuse or admit (ADMIT_EVERY)
        self._budget = budget
        budget.join(self)

    def activate(self) -> None:
        self._budget.set_active(self, True)

    def deactivate(self) -> None:
        self._budget.set_active(self, False)

    def can_hold_whole(self, entries: int) -> bool:
        """Whether ``entries`` entries, read whole, fit half the budget (at
        :data:`PLANNED_ENTRY_BYTES` each): the test before reading key groups whole."""
        return entries * PLANNED_ENTRY_BYTES <= self._budget.limit // 2

    def fill(self, items) -> int:
        """Cache every ``(key, value)`` of ``items`` (values bytes, keys in order: every entry
        of each prefix it reaches) and hold those prefixes whole; returns the entries cached.

        Equal to marking each prefix whole as it is reached and :meth:`put` ting each entry
        (an eviction un-marks its prefix, for good: a prefix is marked once per fill), done
        :data:`_FILL_CHUNK` entries at a time: a chunk of keys the cache does not hold, whose
        charge fits after taking budget, is stored with one ``dict.update``."""
        complete, rows, take = self.complete, self.rows, self._budget.take_chunk
        marked: set = set()  # prefixes this fill reached (and marked whole)
        n = 0
        it = iter(items)
        while chunk := list(islice(it, _FILL_CHUNK)):
            keys, values = zip(*chunk)
            reached = {k[:PREFIX_LEN] for k in keys} - marked
            complete.update(reached)
            marked |= reached
            n += len(keys)
            if rows.keys().isdisjoint(keys):
                charge = sum(map(len, keys)) + sum(map(len, values)) + ENTRY_OVERHEAD * len(keys)
                while self.used + charge > self.chunks * CHUNK and charge <= self._budget.limit and take(self):
                    pass
                if self.used + charge <= self.chunks * CHUNK:
                    rows.update(chunk)
                    self.used += charge
                    continue
            for key, value in chunk:
                self.put(key, value)
        return n

    def whole_state(self, num_keys: int) -> tuple[list, list] | None:
        """``(keys, values)``: every live key of the state in order and its value, if the cache
        holds them all, else None.  ``num_keys`` is the state's exact key count: the cache's
        live entries are live keys with their values (the invariant), so as many of them as
        there are keys are all of them."""
        rows = self.rows
        absent = list(rows.values()).count(None)
        if len(rows) - absent != num_keys:
            return None
        keys = sorted(rows) if not absent else sorted(k for k, v in rows.items() if v is not None)
        return keys, list(map(rows.__getitem__, keys))

    def lookup(self, key: bytes):
        """``key``'s cached value, None if it is absent, or :data:`MISSING` if the cache does
        not know."""
        value = self.rows.get(key, MISSING)
        if value is MISSING and key[:PREFIX_LEN] in self.complete:
            return None
        return value

    def put(self, key: bytes, value: bytes | None) -> bool:
        """Cache ``key``'s newest value (None: the key is absent); False if it did not fit
        (then the cache no longer holds the key, nor its prefix whole)."""
        rows = self.rows
        old = rows.get(key, MISSING)
        if old is MISSING:
            charge = len(key) + (0 if value is None else len(value)) + ENTRY_OVERHEAD
        else:
            charge = (0 if value is None else len(value)) - (0 if old is None else len(old))
            if self.decoded:
                dropped = self.decoded.pop(key, MISSING)
                if dropped is not MISSING:
                    self.used -= decoded_charge(old, dropped)
        if self.used + charge > self.chunks * CHUNK and not self._make_room(charge, key, old is MISSING):
            self._evict(key)
            return False
        rows[key] = value
        self.used += charge
        return True

    def write_many(self, changes, keep=None, codec=None, olds=None, value_bytes=None) -> None:
        """:meth:`put` every ``(key, value)`` of ``changes`` (pairs, or a dict), :meth:`discard`
        those whose value is None: the store's batched writes, with ``put``'s common case
        (room left) inlined, and for a dict done in bulk when the cache has room for it all.
        Then :meth:`keep_decoded` ``keep`` (a dict ``key -> value``, REQUIRES: ``codec.decode(
        changes[key]) == value``, and ``keep`` lists its keys in ``changes``' order when it
        holds them all), which for a dict that fits is done in the same bulk step.
        ``olds``, for a dict: what :attr:`rows` held for each of its keys, in order (``MISSING``
        where none), if the caller looked them up already; ``value_bytes``, for a dict: the
        bytes of its values (None counting none), if the caller summed them already."""
        rows = self.rows
        if type(changes) is dict:
            if keep and codec is not self.codec:
                self.use_codec(codec)
            if self._write_dict(changes, keep or {}, olds, value_bytes):  # (it dropped the keys' decoded values)
                return
            raws = changes
            changes = changes.items()
        else:
            changes = raws = list(changes)
            if self.decoded:
                self.drop_decoded(key for key, _ in changes)
        used, room = self.used, self.chunks * CHUNK
        for key, value in changes:
            old = rows.get(key, MISSING)
            if value is None:
                if old is not MISSING:
                    del rows[key]
                    used -= len(key) + (0 if old is None else len(old)) + ENTRY_OVERHEAD
                continue
            if old is MISSING:
                charge = len(key) + len(value) + ENTRY_OVERHEAD
            else:
                charge = len(value) - (0 if old is None else len(old))
            if used + charge > room:
                self.used = used
                self.put(key, value)  # makes room or evicts
                used, room = self.used, self.chunks * CHUNK
                continue
            rows[key] = value
            used += charge
        self.used = used
        if keep:
            raws = dict(raws)
            self.keep_decoded(list(keep), list(map(raws.__getitem__, keep)), list(keep.values()), codec)

    def _write_dict(self, changes: dict, keep: dict, olds: list | None = None, value_bytes: int | None = None) -> bool:
        """:meth:`write_many` of a dict in bulk, ``keep``'s decoded values with it (of
        :attr:`codec`), if what it adds fits the budget (taking more of it as :meth:`put`
        would); False if it does not, having changed nothing but dropped the keys' decoded
        values (as :meth:`write_many` does first)."""
        rows, decoded = self.rows, self.decoded
        n = len(changes)
        if olds is None:
            olds = list(map(rows.get, changes, repeat(MISSING, n)))
        values = changes.values()
        every_kept = len(keep) == n  # (then keep lists changes' keys in order, and none is deleted)
        deleted = 0 if every_kept else list(values).count(None)
        missing = olds.count(MISSING)
        held = not missing and None not in olds  # every key held with a value
        # a batch rewriting short values every one of which it held decoded (the steadiest
        # batch: its charge follows from the lengths, and keep replaces the decoded values)
        rewritten = None  # ... the decoded values' change of charge
        old_bytes = sum(map(len, olds)) if held else 0
        if not deleted:
            new_bytes = sum(map(len, values)) if value_bytes is None else value_bytes
        if n and every_kept and held and decoded.keys() >= changes.keys():
            rewritten = recharge(max(max(map(len, olds)), max(map(len, values))), new_bytes - old_bytes)
        if rewritten is not None:
            charge = new_bytes - old_bytes + rewritten
        else:
            if deleted:
                new_bytes = 0
            if decoded:  # the keys' decoded values go first (the module docstring's invariant) --
                # unless keep replaces every one of them below, in place
                dropped = list(map(decoded.get if every_kept else decoded.pop, changes, repeat(MISSING, n)))
                undecoded = dropped.count(MISSING)
                if not undecoded:  # (every key held decoded, so with bytes)
                    self.used -= decoded_charges(olds, dropped, old_bytes)
                elif undecoded < n:
                    was_decoded = list(map(is_not, dropped, repeat(MISSING, n)))
                    self.used -= decoded_charges(list(compress(olds, was_decoded)),
                                                 list(compress(dropped, was_decoded)))
            # the commonest batches charged with sums in C: every key held with a value and
            # rewritten, every key new, every key held with a value and deleted
            if not deleted and held:
                charge = new_bytes - old_bytes
            elif not deleted and missing == n:
                charge = sum(map(len, changes)) + new_bytes + ENTRY_OVERHEAD * n
            elif deleted == n and held:
                charge = -(sum(map(len, changes)) + old_bytes + ENTRY_OVERHEAD * n)
            else:
                charge = 0
                for key, value, old in zip(changes, values, olds):
                    if old is MISSING:
                        if value is not None:
                            charge += len(key) + len(value) + ENTRY_OVERHEAD
                    elif value is None:
                        charge -= len(key) + (0 if old is None else len(old)) + ENTRY_OVERHEAD
                    else:
                        charge += len(value) - (0 if old is None else len(old))
            if keep:
                charge += decoded_charges(list(values) if every_kept else list(map(changes.__getitem__, keep)),
                                          keep.values(), new_bytes if every_kept else None)
        while self.used + charge > self.chunks * CHUNK and charge <= self._budget.limit \
                and self._budget.take_chunk(self):
            pass
        if self.used + charge > self.chunks * CHUNK:
            if every_kept and decoded:  # (as a refusal leaves them: dropped)
                popped = list(map(decoded.pop, changes, repeat(MISSING, n)))
                if rewritten is not None:  # (their charges were not taken back yet)
                    self.used -= decoded_charges(olds, popped, old_bytes)
            return False
        if deleted == n:  # deleted keys are dropped, not cached as absent
            list(map(rows.pop, changes, repeat(None, n)))
        elif deleted:
            for key in [k for k, v in changes.items() if v is None]:
                rows.pop(key, None)
            rows.update({k: v for k, v in changes.items() if v is not None})
        else:
            rows.update(changes)
        decoded.update(keep)
        self.used += charge
        return True

    def discard(self, key: bytes) -> None:
        """Forget ``key``, which is now absent (its prefix stays whole if it was)."""
        old = self.rows.pop(key, MISSING)
        if old is not MISSING:
            self.used -= len(key) + (0 if old is None else len(old)) + ENTRY_OVERHEAD
            if self.decoded:
                dropped = self.decoded.pop(key, MISSING)
                if dropped is not MISSING:
                    self.used -= decoded_charge(old, dropped)

    def drop_decoded(self, keys) -> None:
        """Forget the decoded values of ``keys`` (their bytes stay)."""
        rows, pop = self.rows, self.decoded.pop
        freed = 0
        for key in keys:
            dropped = pop(key, MISSING)
            if dropped is not MISSING:
                freed += decoded_charge(rows[key], dropped)
        self.used -= freed

    def use_codec(self, codec) -> None:
        """Make ``codec`` the one of the decoded values: those of another are dropped."""
        if codec is not self.codec:
            self.drop_decoded(list(self.decoded))
            self.codec = codec

    def keep_one_decoded(self, key: bytes, raw: bytes, value, codec) -> None:
        """:meth:`keep_decoded` of one key (a read's)."""
        if codec is self.codec and self.rows.get(key) is raw:
            charge = decoded_charge(raw, value)
            if self.used + charge <= self.chunks * CHUNK:
                self.decoded[key] = value
                self.used += charge
                return
        self.keep_decoded((key,), (raw,), (value,), codec)

    def keep_decoded(self, keys, raws, values, codec) -> None:
        """Keep ``values[i]`` -- equal to ``codec.decode(raws[i])`` -- as the decoded value of
        ``keys[i]``, when the cache holds ``raws[i]`` as its bytes and has room for it without
        evicting anything."""
        if codec is not self.codec:
            self.use_codec(codec)
        rows, decoded, take = self.rows, self.decoded, self._budget.take_chunk
        used, room = self.used, self.chunks * CHUNK
        if len(keys) > 1 and decoded.keys().isdisjoint(keys) and \
                all(map(is_, map(rows.get, keys), raws)):  # (in C: a warmed key group's, as a whole)
            charge = decoded_charges(raws, values)
            # (taking budget as the loop below would: a cache that just read its key groups
            # holds no room beyond their bytes)
            while used + charge > room and charge <= self._budget.limit and take(self):
                room = self.chunks * CHUNK
            if used + charge <= room:
                decoded.update(zip(keys, values))
                self.used = used + charge
                return
        for key, raw, value in zip(keys, raws, values):
            if rows.get(key) is not raw or key in decoded:
                continue
            charge = decoded_charge(raw, value)
            if used + charge > room:
                self.used = used
                if not take(self):
                    break
                used, room = self.used, self.chunks * CHUNK
                if used + charge > room:
                    continue
            decoded[key] = value
            used += charge
        self.used = used

    def _evict(self, key: bytes) -> None:
        """Forget ``key`` although it may be live: its prefix is no longer held whole."""
        self.discard(key)
        self.complete.discard(key[:PREFIX_LEN])

    def drop_range(self, begin: bytes, end: bytes) -> None:
        """Forget every key in ``[begin, end)`` -- all keys, when there are many: range
        deletions come in runs (one per key group), and each may not cost a pass."""
        if len(self.rows) > _SMALL:
            self.clear()
            return
        for key in [k for k in self.rows if begin <= k < end]:
            self.discard(key)
        self.complete.clear()  # (a range deletion also deletes keys the cache never held)

    def clear(self) -> None:
        self.rows.clear()
        self.complete.clear()
        self.decoded.clear()
        self.used = 0

    def close(self) -> None:
        """Forget everything, give the budget back and leave it."""
        self._budget.leave(self)

    def _make_room(self, charge: int, keep: bytes, new: bool) -> bool:
        """Grow the reservation, else evict the oldest entries (never ``keep``), until
        ``charge`` more bytes fit; False if they cannot, or if ``keep`` is a ``new`` key the
        full cache does not admit (all but one in :data:`ADMIT_EVERY`)."""
        if charge > self._budget.limit:
            return False
        budget = self._budget
        while self.used + charge > self.chunks * CHUNK and budget.take_chunk(self):
            pass
        if self.used + charge <= self.chunks * CHUNK:
            return True
        if new:
            self.refused += 1
            if self.refused % ADMIT_EVERY:
                return False
        rows = self.rows
        while self.used + charge > self.chunks * CHUNK and rows:
            oldest = next(iter(rows))
            if oldest == keep:
                if len(rows) == 1:
                    break
                rows[oldest] = rows.pop(oldest)  # move it to the end: it is being rewritten
                continue
            self._evict(oldest)
        return self.used + charge <= self.chunks * CHUNK
