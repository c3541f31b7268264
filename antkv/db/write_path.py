"""How a database reports its memtable memory to a shared write buffer manager.

:class:`WriteBufferAccounting` is part of :class:`~antkv.db.DB` (whose ``__init__`` declares the
fields it uses: ``_wbm``, ``_wbm_token``, ``_wbm_reserved``, ``_wbm_pending``,
``_wbm_mutable_since``).  The protocol is the manager's (``memory/write_buffer_manager.py``):

* the write path adds each write's memtable growth to ``_wbm_pending`` and reports it in chunks
  of :data:`WBM_REPORT_BYTES` (``reserve_mem``), asking the manager whether a flush is due and,
  past the budget, waiting for flushes with the write lock released;
* a memtable switch reports what was still pending and moves the memtable's memory out of the
  mutable count (``schedule_free_mem``); the flush gives it back (``free_mem``);
* the manager asks this database to flush through :meth:`_wbm_flush_callback`, choosing the one
  whose mutable memtable took its first write earliest (:meth:`_wbm_oldest`).
"""

from __future__ import annotations

import time

WBM_REPORT_BYTES = 64 * 1024  # memtable growth reported to a write buffer manager at once


class WriteBufferAccounting:
    """Part of :class:`~antkv.db.DB`: the database's side of the write buffer manager."""

    def _wbm_account(self, added: int) -> None:
        if self._wbm_mutable_since is None:
            self._wbm_mutable_since = time.monotonic_ns()  # the memtable's first write
        self._wbm_pending += added
        if self._wbm_pending >= WBM_REPORT_BYTES:
            n, self._wbm_pending = self._wbm_pending, 0
            self._wbm_reserved += n
            self._wbm.reserve_mem(n)
            self._wbm.maybe_trigger_flush()
            if self._must_make_room:
                self._make_room()
            wbm = self._wbm
            if wbm.allow_stall or wbm.enabled and wbm.memory_usage > wbm.buffer_size + wbm.dummy_entry_size:
                # wait for flushes with the write lock released (their memtable switches
                # need it); without allow_stall only past the budget plus one unit
                self._write_lock.release()
                try:
                    wbm.maybe_stall() if wbm.allow_stall else wbm.hold_budget(self._wbm_token)
                finally:
                    self._write_lock.acquire()

    def _wbm_pending_flush_account(self, old) -> None:
        n, self._wbm_pending = self._wbm_pending, 0
        self._wbm_mutable_since = None
        if n:
            self._wbm_reserved += n
            self._wbm.reserve_mem(n)
        self._wbm.schedule_free_mem(old.memory)

    def _wbm_flush_callback(self) -> None:
        """The write buffer manager asks this database to flush its mutable memtable."""
        self._flush_requested = True
        self._must_make_room = True
        if self._write_lock.acquire(blocking=False):
            try:
                if not self._closed and self._bg_error is None:
                    self._make_room()
            finally:
                self._write_lock.release()

    def _wbm_oldest(self) -> int | None:
        """When the mutable memtable took its first write (None: it is empty).  Stamped at the
        first write, not when the memtable was created: an idle database's memtable is not old."""
        return None if self._mem.is_empty() else self._wbm_mutable_since
