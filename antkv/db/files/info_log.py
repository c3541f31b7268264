"""The database's info ``LOG``: what the engine did, with sizes and durations, for an operator.

One line per event -- open and recovery, flushes, compactions, value-log GC, write stalls,
files moved aside, background errors, close -- as ``2026-01-31T12:00:00.123456Z EVENT details``.
Among them ``new-file NNNNNN``, written before the database creates any file of number NNNNNN:
the evidence that a file it cannot account for later is its own (:func:`numbers_handed_out`,
:mod:`antkv.db.files.unaccounted`).  For that evidence to last as long as a WAL's name does, the LOG is
synced before the names of new WALs are made durable (:meth:`InfoLog.sync`) and before it is
rotated.
The log is opened by a read-write open (a read-only open writes nothing, so it has none).  When
``LOG`` reaches :data:`MAX_LOG_FILE_SIZE` it is rotated: ``LOG.old.1`` .. ``LOG.old.N`` shift
up (the oldest beyond :data:`KEEP_LOG_FILE_NUM` is deleted -- it is the database's own, and
kept only for reading), and a new ``LOG`` starts; a successful read-write open rotates too, as
RocksDB does (a refused open leaves every LOG as it was), unless ``LOG`` is not an antkv info log
(another program's): then nothing is written to it.  A failure to write it is ignored after one
warning, so the LOG can never fail a write.
"""

from __future__ import annotations

import datetime
import errno
import re
import logging
import threading

from ...errors import IOError as AntIOError
from ...base.filenames import INFO_LOG, INFO_LOG_OLD_PREFIX, info_log_name, old_info_log_name

MAX_LOG_FILE_SIZE = 1 << 20  # RocksDB's max_log_file_size is 0 (no limit); a bound suits a library
KEEP_LOG_FILE_NUM = 5
NEW_FILE = "new-file"  # the event naming a file number handed out

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
        self._pending: list[bytes] | None = []  # lines before start(): the open may still be refused

    def start(self) -> None:
        """The open succeeded: rotate, then write the lines the open logged so far."""
        with self._lock:
            pending, self._pending = self._pending, None
            if pending is None:
                return
            self._rotate_locked()
            if self._file is not None:
                try:
                    self._file.append(b"".join(pending))
                except Exception as e:  # noqa: BLE001 - the LOG never fails the database
                    self._give_up(e)

    def _rotate_locked(self) -> None:
        fs, db = self._fs, self._dbname
        try:
            if self._file is not None:
                self._file.sync()  # what it says of new files lasts (module docstring)
                self._file.close()
                self._file = None
            cur = info_log_name(db)
            if fs.exists(cur) and not _is_info_log(fs, cur):
                self._give_up(ValueError(f"{cur} is not an antkv info log; it is left as it is"))
                return
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
            data = line.encode("utf-8", "backslashreplace")
            if self._pending is not None:
                self._pending.append(data)
                return
            if self._file is None:
                return
            try:
                if self._file.size and self._file.size + len(data) > self._max_size:
                    self._rotate_locked()
                    if self._file is None:
                        return
                self._file.append(data)
            except Exception as e:  # noqa: BLE001 - the LOG never fails the database
                self._give_up(e)

    def sync(self) -> None:
        """Make every line written so far durable (a failure is ignored, as for writes)."""
        with self._lock:
            if self._file is None:
                return
            try:
                self._file.sync()
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


def _is_info_log(fs, path: str) -> bool:
    """Whether ``path`` is empty or starts with a line this module writes."""
    try:
        f = fs.open_random(path)
        try:
            head = f.read(0, 64)
        finally:
            f.close()
    except Exception:  # noqa: BLE001 - unreadable: not ours to rotate
        return False
    return not head or _STAMP.match(head) is not None


_STAMP = re.compile(rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z ")


def numbers_handed_out(fs, dbname: str) -> set[int]:
    """Every file number the ``new-file`` lines of ``dbname``'s LOG files name."""
    numbers: set[int] = set()
    marker = f" {NEW_FILE} ".encode()
    for name in fs.listdir(dbname):
        if name != INFO_LOG and not name.startswith(INFO_LOG_OLD_PREFIX):
            continue
        try:
            data = fs.read_all(f"{dbname}/{name}")
        except AntIOError as e:
            # a LOG gone meanwhile or one we may not read is no evidence; a failing read is an
            # error: evidence missing by accident could merge another database's WAL in
            if e.errno in (errno.ENOENT, errno.EACCES, errno.EPERM):
                continue
            raise
        for line in data.split(b"\n"):
            head, found, rest = line.partition(marker)
            if found and rest.isdigit() and _STAMP.match(head + b" "):
                numbers.add(int(rest))
    return numbers
