"""The write buffer manager: one memtable-memory budget shared by many databases.

Concept (RocksDB's ``WriteBufferManager``, as Flink uses it)
------------------------------------------------------------
Every database that shares a manager reports the memory of its memtables to it:

* ``reserve_mem(n)`` -- n bytes of new memtable memory (in chunks, e.g. per arena block or every
  few KiB of writes, not per put);
* ``schedule_free_mem(n)`` -- a memtable of n bytes became immutable: it no longer counts as
  *mutable* but still counts in ``memory_usage`` until flushed;
* ``free_mem(n)`` -- an immutable memtable of n bytes was flushed and dropped; wakes stalled
  writers.

So ``memory_usage`` is all memtable memory (mutable + immutable) and
``mutable_memory_usage`` the mutable part.  Memtables must report an honest estimate (keys,
values and per-entry overhead), not just payload bytes.

Flush rule (``should_flush``, RocksDB's exactly)::

    mutable > 7/8 * buffer_size
    or (total >= buffer_size and mutable >= buffer_size / 2)

``buffer_size == 0`` disables the budget: never a flush, never a stall (the cache charge below
still works, as in RocksDB).

Protocol between the databases and the manager
----------------------------------------------
1. A database joins with ``token = wbm.register(flush_callback, oldest_fn)`` and leaves with
   ``wbm.unregister(token)`` (idempotent) when it closes.  Closing without flushing, it first
   calls ``schedule_free_mem(m)`` for the m bytes it reserved for its mutable memtable, then
   ``free_mem`` for everything it still holds (as RocksDB's ``AllocTracker::FreeMem`` does).
2. ``oldest_fn()`` returns how old the data in that database's *mutable* memtable is, as a number
   comparable ACROSS databases (smaller = older), e.g. ``time.monotonic_ns()`` taken when the
   memtable received its first entry; None when the mutable memtable is empty.
3. A writer calls ``reserve_mem`` then ``maybe_trigger_flush()``.  That is one comparison when no
   flush is needed.  Otherwise the manager asks the database holding the OLDEST mutable data
   (which need not be the caller's) to flush: it calls that database's ``flush_callback()``,
   which must switch the mutable memtable to immutable (calling ``schedule_free_mem``) and
   schedule its flush (which later calls ``free_mem``).  One trigger runs at a time; a writer
   that finds another trigger in progress returns at once (the next write re-checks).  The
   callback runs on the writer's thread with no manager lock held, and may be the caller's own
   database: call ``maybe_trigger_flush`` without holding a lock the callback needs (or make
   that lock re-entrant).  A ``DBClosedError`` from another database's ``oldest_fn`` or
   callback (it is closing concurrently) is not the writer's problem: that database is skipped.
4. With ``allow_stall``, the writer then calls ``maybe_stall()``, which blocks while
   ``memory_usage >= buffer_size`` until ``free_mem`` brings it below.  While it waits it asks
   for another flush every ``STALL_RECHECK_SECONDS`` (the first one may have freed too little),
   so a stall ends as long as some database holds mutable memory it can flush.  ``close()``
   and ``unregister()`` also wake stalled writers: after ``close()`` nobody stalls, and a writer
   that passed its own ``token`` stops waiting when that token is unregistered.
5. Without ``allow_stall``, the writer calls ``hold_budget()``: the budget still holds within
   one reservation unit.  It waits while ``memory_usage > buffer_size + unit`` and part of
   that memory is immutable (a flush in flight will give it back): a writer never outruns the
   flushes by more than the unit plus the chunk it reported last.  It never waits for memory
   that only a flush it would have to trigger could free (all of it mutable), and gives up
   after ``patience`` seconds without any ``free_mem``, and then waits no more until memory is
   freed (a database whose flush failed must not hang the others' writers).  Counted in
   ``budget_holds``.

Charging the block cache
------------------------
With ``cache``, the memory is also charged to the cache as *dummy entries* (RocksDB's
``CacheReservationManager``): pinned handles of a fixed unit -- 256 KiB when ``buffer_size`` <
64 MiB, 1 MiB otherwise -- with no value, inserted with LOW priority as RocksDB does (they are
pinned, so their priority never matters for eviction).  The reservation grows at once to
``ceil(memory_usage / unit)`` units, so cache usage + memtables stay within the cache capacity
(block entries are evicted to make room) and the reservation exceeds the real memory by less
than one unit.  It shrinks lazily: only when ``memory_usage`` falls below 3/4 of the
reservation, and then down to ``ceil(memory_usage / unit)`` units -- memtables come and go,
and cache inserts are not free.  If a strict cache refuses a dummy (``MemoryLimitError``), the
reservation stays short (counted in ``cache_reservation_failures``) and is retried on the next
``reserve_mem``.  Dummy keys are ``(cache.new_id(), -n)``: negative offsets never collide with
table blocks.

Invariants (checked by ``_check``): ``0 <= mutable_memory_usage <= memory_usage``;
``dummy_entries_in_cache_usage == unit * number of dummy handles``; the reservation covers
``memory_usage`` unless a strict cache refused a dummy.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from ..errors import DBClosedError, InvalidArgumentError, MemoryLimitError
from .cache import Cache

MiB = 1024 * 1024
SMALL_DUMMY_ENTRY = 256 * 1024
LARGE_DUMMY_ENTRY = 1 * MiB
LARGE_BUFFER = 64 * MiB
"""Buffers of at least 64 MiB reserve cache space in 1 MiB units, smaller ones in 256 KiB."""


def _check_size(name: str, v: Any) -> None:
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"{name} must be an int, not {type(v).__name__}")
    if v < 0:
        raise InvalidArgumentError(f"{name} must be >= 0, got {v}")


class WriteBufferManager:
    """Counts memtable memory of the databases sharing it (see the module docstring)."""

    def __init__(self, buffer_size: int, cache: Cache | None = None, allow_stall: bool = False):
        _check_size("buffer_size", buffer_size)
        if cache is not None and not isinstance(cache, Cache):
            raise TypeError(f"cache must be an antkv.Cache or None, not {type(cache).__name__}")
        if not isinstance(allow_stall, bool):
            raise TypeError("allow_stall must be a bool")
        self._buffer_size = buffer_size
        self._mutable_limit = buffer_size * 7 // 8
        self._half = buffer_size // 2  # size_t division in RocksDB
        self._allow_stall = allow_stall
        self._cache = cache
        self._unit = LARGE_DUMMY_ENTRY if buffer_size >= LARGE_BUFFER else SMALL_DUMMY_ENTRY
        self._cache_id = cache.new_id() if cache is not None else 0
        self._lock = threading.Lock()
        self._stall_cv = threading.Condition(self._lock)
        self._trigger_lock = threading.Lock()
        self._used = 0  # memory_usage
        self._active = 0  # mutable_memory_usage
        self._dummies: list = []  # pinned cache handles, one per unit reserved
        self._next_dummy = 0
        self._cache_failures = 0
        self._stall_count = 0
        self._holds = 0  # hold_budget() calls that waited
        self._frees = 0  # free_mem() calls: hold_budget's measure of progress
        self._stuck_at = -1  # _frees when a hold_budget() last gave up: no waiting until it moves
        self._stalled = 0  # writers blocked right now
        self._flushes_triggered = 0
        self._members: dict[int, tuple[Callable[[], Any], Callable[[], Any]]] = {}
        self._next_token = 0
        self._closed = False

    # ----------------------------------------------------------------- figures
    @property
    def buffer_size(self) -> int:
        return self._buffer_size

    @property
    def enabled(self) -> bool:
        """False when ``buffer_size == 0``: no flush trigger, no stall."""
        return self._buffer_size > 0

    @property
    def cost_to_cache(self) -> bool:
        return self._cache is not None

    @property
    def cache(self) -> Cache | None:
        return self._cache

    @property
    def allow_stall(self) -> bool:
        return self._allow_stall

    @property
    def memory_usage(self) -> int:
        """All memtable memory reported: mutable and immutable."""
        return self._used

    @property
    def mutable_memory_usage(self) -> int:
        return self._active

    @property
    def dummy_entries_in_cache_usage(self) -> int:
        """Bytes reserved in the cache by dummy entries (0 without a cache)."""
        return len(self._dummies) * self._unit

    @property
    def dummy_entry_size(self) -> int:
        """The reservation unit: 256 KiB or 1 MiB."""
        return self._unit

    @property
    def stall_count(self) -> int:
        """How many times a writer was stalled."""
        return self._stall_count

    @property
    def closed(self) -> bool:
        return self._closed

    def stats(self) -> dict:
        with self._lock:
            return {
                "buffer_size": self._buffer_size,
                "memory_usage": self._used,
                "mutable_memory_usage": self._active,
                "dummy_entries_in_cache_usage": len(self._dummies) * self._unit,
                "dummy_entry_size": self._unit,
                "cache_reservation_failures": self._cache_failures,
                "stall_count": self._stall_count,
                "budget_holds": self._holds,
                "stalled_writers": self._stalled,
                "flushes_triggered": self._flushes_triggered,
                "databases": len(self._members),
            }

    # ----------------------------------------------------------------- accounting
    def reserve_mem(self, n: int) -> None:
        """``n`` bytes of new mutable memtable memory."""
        if type(n) is not int or n < 0:
            _check_size("n", n)
        with self._lock:
            self._used += n
            self._active += n
            if self._cache is not None and not self._closed:
                self._grow_reservation()

    def schedule_free_mem(self, n: int) -> None:
        """``n`` bytes of memtable became immutable (still counted until ``free_mem``)."""
        if type(n) is not int or n < 0:
            _check_size("n", n)
        with self._lock:
            if n > self._active:
                raise InvalidArgumentError(
                    f"schedule_free_mem({n}) exceeds the mutable memory {self._active}")
            self._active -= n

    def free_mem(self, n: int) -> None:
        """``n`` bytes of immutable memtable were released; wakes stalled writers."""
        if type(n) is not int or n < 0:
            _check_size("n", n)
        with self._lock:
            if n > self._used - self._active:
                raise InvalidArgumentError(
                    f"free_mem({n}) exceeds the immutable memory {self._used - self._active}: "
                    "memory of a mutable memtable must first be moved out of the mutable count "
                    "with schedule_free_mem() (e.g. when a database closes without flushing)")
            self._used -= n
            self._frees += 1
            if self._cache is not None:
                self._shrink_reservation()
            if self._stalled:  # stalled writers and hold_budget() waiters re-check their limit
                self._stall_cv.notify_all()

    def _grow_reservation(self) -> None:
        unit, cache, dummies = self._unit, self._cache, self._dummies
        while len(dummies) * unit < self._used:
            self._next_dummy += 1
            try:
                h = cache.insert((self._cache_id, -self._next_dummy), None, unit, "low")
            except MemoryLimitError:
                self._cache_failures += 1
                return
            dummies.append(h)

    def _shrink_reservation(self) -> None:
        unit, dummies = self._unit, self._dummies
        reserved = len(dummies) * unit
        if self._used >= reserved * 3 // 4:
            return
        while dummies and (len(dummies) - 1) * unit >= self._used:
            self._cache.release(dummies.pop(), erase_if_last_ref=True)

    # ----------------------------------------------------------------- flush and stall
    def should_flush(self) -> bool:
        """RocksDB's rule: mutable > 7/8 of the budget, or all >= budget and mutable >= half."""
        if not self._buffer_size:
            return False
        active = self._active
        if active > self._mutable_limit:
            return True
        return self._used >= self._buffer_size and active >= self._half

    def register(self, flush_callback: Callable[[], Any], oldest_fn: Callable[[], Any]) -> int:
        """Join a database; returns the token for ``unregister`` and ``maybe_stall``."""
        if not callable(flush_callback) or not callable(oldest_fn):
            raise TypeError("register() takes two callables: flush_callback, oldest_fn")
        with self._lock:
            self._next_token += 1
            self._members[self._next_token] = (flush_callback, oldest_fn)
            return self._next_token

    def unregister(self, token: int) -> None:
        """Leave (idempotent); wakes stalled writers so they re-check."""
        with self._lock:
            self._members.pop(token, None)
            self._stall_cv.notify_all()

    def maybe_trigger_flush(self) -> int | None:
        """If ``should_flush()``, ask the database with the oldest mutable data to flush.

        Returns the token of the database asked, or None (no flush needed, no database with
        mutable data, or another thread is triggering right now).
        """
        if not self._buffer_size or not self.should_flush():
            return None
        if not self._trigger_lock.acquire(blocking=False):
            return None
        try:
            if not self.should_flush():
                return None
            with self._lock:
                members = list(self._members.items())
            best = None
            for token, (callback, oldest_fn) in members:
                try:
                    age = oldest_fn()
                except DBClosedError:  # closing concurrently: it is about to unregister
                    continue
                if age is not None and (best is None or age < best[0]):
                    best = (age, token, callback)
            if best is None:
                return None
            with self._lock:
                self._flushes_triggered += 1
            try:
                best[2]()
            except DBClosedError:  # another database closed under us: its memory goes anyway
                return None
            return best[1]
        finally:
            self._trigger_lock.release()

    def should_stall(self) -> bool:
        return self._allow_stall and self._buffer_size > 0 and not self._closed and \
            self._used >= self._buffer_size

    STALL_RECHECK_SECONDS = 0.05
    """A stalled writer re-asks for a flush this often while memory stays over the budget."""

    def maybe_stall(self, token: int | None = None) -> bool:
        """With ``allow_stall``, block while memory_usage >= buffer_size; True if it waited.

        Ends when ``free_mem`` brings the memory below the budget, on ``close()``, or when
        ``token`` (if given) is unregistered.
        """
        if not self.should_stall():
            return False
        with self._lock:
            if not self._waiting(token):
                return False
            self._stall_count += 1
            self._stalled += 1
        try:
            while True:
                with self._lock:
                    if not self._waiting(token):
                        return True
                    self._stall_cv.wait(self.STALL_RECHECK_SECONDS)
                    if not self._waiting(token):
                        return True
                # Still over budget: the flush asked for may not free enough (or a database
                # was closing when asked).  Ask again; only flushes bring memory down.
                self.maybe_trigger_flush()
        finally:
            with self._lock:
                self._stalled -= 1

    def hold_budget(self, token: int | None = None, patience: float = 5.0) -> bool:
        """Without ``allow_stall``: wait while ``memory_usage > buffer_size + unit`` and some
        of it is immutable; True if it waited (protocol step 5).  Ends on ``close()``, when
        ``token`` (if given) is unregistered, or after ``patience`` seconds with no
        ``free_mem`` (after which nobody waits until a ``free_mem``)."""
        if not self._buffer_size or self._used <= self._buffer_size + self._unit:
            return False
        with self._lock:
            if not self._holding(token) or self._frees == self._stuck_at:
                return False
            self._holds += 1
            self._stalled += 1
            try:
                frees = self._frees
                while self._holding(token):
                    if not self._stall_cv.wait(patience) and self._frees == frees:
                        # nothing was freed for `patience` seconds: stop waiting, and let no
                        # writer wait again until some memory is freed
                        self._stuck_at = frees
                        break
                    frees = self._frees
            finally:
                self._stalled -= 1
            return True

    def _holding(self, token: int | None) -> bool:
        return (not self._closed and self._used > self._buffer_size + self._unit
                and self._used > self._active and (token is None or token in self._members))

    def _waiting(self, token: int | None) -> bool:
        return (not self._closed and self._used >= self._buffer_size
                and (token is None or token in self._members))

    def close(self) -> None:
        """Release the cache reservation and wake every stalled writer; no stall afterwards."""
        with self._lock:
            self._closed = True
            while self._dummies:
                self._cache.release(self._dummies.pop(), erase_if_last_ref=True)
            self._stall_cv.notify_all()

    def __repr__(self) -> str:
        return (f"WriteBufferManager(buffer_size={self._buffer_size}, memory_usage={self._used}, "
                f"mutable={self._active}, cost_to_cache={self.cost_to_cache})")

    def _check(self) -> None:
        with self._lock:
            assert 0 <= self._active <= self._used
            if self._cache is None or self._closed:
                assert not self._dummies
                return
            for h in self._dummies:
                assert h.refs == 1 and h.in_cache and h.charge == self._unit and h.value is None
            reserved = len(self._dummies) * self._unit
            assert reserved >= self._used or self._cache_failures, "reservation covers the memory"


def shared_memory(
    total_bytes: int, write_buffer_ratio: float = 0.5, high_pri_pool_ratio: float = 0.1
) -> tuple[Cache, WriteBufferManager]:
    """A cache and a write buffer manager charged to it, sized from one budget as Flink does.

    cache capacity = (3 - r) * total / 3; write buffers = 2 * total * r / 3 (r =
    ``write_buffer_ratio``).  Memtables may grow to about 1.5x the manager's budget before the
    flush rule bites, which is why the budget is 2/3 of ``r * total``; their memory is charged
    to the cache, so the cache's capacity bounds blocks + memtables.  The cache is not strict
    (as in Flink, FLINK-15532).  Ratios must be in (0, 1) and sum to less than 1.
    """
    _check_size("total_bytes", total_bytes)
    if total_bytes == 0:
        raise InvalidArgumentError("total_bytes must be > 0")
    for name, r in (("write_buffer_ratio", write_buffer_ratio),
                    ("high_pri_pool_ratio", high_pri_pool_ratio)):
        if isinstance(r, bool) or not isinstance(r, (int, float)):
            raise TypeError(f"{name} must be a number, not {type(r).__name__}")
        if not 0.0 < r < 1.0:
            raise InvalidArgumentError(f"{name} must be in (0, 1), got {r!r}")
    if write_buffer_ratio + high_pri_pool_ratio >= 1.0:
        raise InvalidArgumentError(
            "write_buffer_ratio + high_pri_pool_ratio must be < 1 "
            f"(got {write_buffer_ratio} + {high_pri_pool_ratio})")
    cache_capacity = int((3 - write_buffer_ratio) * total_bytes / 3)
    wbm_capacity = int(2 * total_bytes * write_buffer_ratio / 3)
    cache = Cache(cache_capacity, -1, False, float(high_pri_pool_ratio))
    return cache, WriteBufferManager(wbm_capacity, cache)
