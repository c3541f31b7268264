"""The database's info ``LOG``: what the engine did, with sizes and durations, for an operator.

One line per event -- open and recovery, flushes, compactions, value-log GC, write stalls,
files moved aside, background errors, close -- as ``2026-01-31T12:00:00.123456Z EVENT details``.
The log is opened by a read-write open (a read-only open writes nothing, so it has none).  When
``LOG`` reaches :data:`MAX_LOG_FILE_SIZE` it is rotated: ``LOG.old.1`` .. ``LOG.old.N`` shift
up (the oldest beyond :data:`KEEP_LOG_FILE_NUM` is deleted -- it is the database's own, and
kept only for reading), and a new ``LOG`` starts; an open rotates too, as RocksDB does.  Writes
are not synced (the LOG is a diagnostic, never needed for recovery); a failure to write it is
ignored after one warning, so the LOG can never fail a write.
"""

from __future__ import annotations

import datetime
import logging
import threading

from .base.filenames import info_log_name, old_info_log_name

MAX_LOG_FILE_SIZE = 1 << 20  # RocksDB's max_log_file_size is 0 (no limit); a bound suits a library
KEEP_LOG_FILE_NUM = 5

log = logging.getLogger("antkv")


class InfoLog:
    """Appends event lines to ``DB/LOG``; thread-safe."""

    def __init__(self, fs, dbname: str, max_size: int = MAX_LOG_FILE_SIZE, keep: int = KEEP_LOG_FILE_NUM):
        self._fs = fs
        self._dbname = dbname
        self._max_size = max_size
        self._keep = keep
        self._lock = threading.Lock()
        self._file = None
        self._failed = False
        with self._lock:
            self._rotate_locked()

    def _rotate_locked(self) -> None:
        fs, db = self._fs, self._dbname
        try:
            if self._file is not None:
                self._file.close()
                self._file = None
            cur = info_log_name(db)
            if fs.exists(cur):
                oldest = old_info_log_name(db, self._keep)
                if fs.exists(oldest):
                    fs.remove(oldest)
                for n in range(self._keep - 1, 0, -1):
                    if fs.exists(old_info_log_name(db, n)):
                        fs.rename(old_info_log_name(db, n), old_info_log_name(db, n + 1))
                fs.rename(cur, old_info_log_name(db, 1))
            self._file = fs.create(cur)
        except Exception as e:  # noqa: BLE001 - the LOG never fails the database
            self._give_up(e)

    def _give_up(self, e: Exception) -> None:
        if not self._failed:
            log.warning("%s: the info LOG cannot be written (%s); continuing without it", self._dbname, e)
        self._failed = True
        self._file = None

    def event(self, what: str, details: str = "") -> None:
        """Append one line ``TIME WHAT details``."""
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        line = f"{stamp} {what} {details}".rstrip() + "\n"
        with self._lock:
            if self._file is None:
                return
            data = line.encode("utf-8", "backslashreplace")
            try:
                if self._file.size and self._file.size + len(data) > self._max_size:
                    self._rotate_locked()
                    if self._file is None:
                        return
                self._file.append(data)
            except Exception as e:  # noqa: BLE001 - the LOG never fails the database
                self._give_up(e)

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                try:
                    self._file.close()
                except Exception:  # noqa: BLE001 - nothing more to lose
                    pass
                self._file = None
