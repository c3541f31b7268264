"""The counters of ``db.stats()`` (:func:`new_stats`), and their totals over the database's
life, kept in its ``STATS`` file.

``db.stats()`` counts what this process did; ``db.stats()["lifetime"]`` adds what every earlier
process that had the database open did, so write amplification is the database's, not the
process's (a fresh ``antkv compact`` used to report 0).  The counters are saved at every clean
close (``base/json_file.py`` format) and loaded at open; a process that crashed loses its own
share (the figures are as of the last clean close), and a damaged ``STATS`` file is reported
and restarts the counts from zero -- statistics never block an open.
"""

from __future__ import annotations

import logging

from ...base.filenames import STATS, stats_file_name
from ...base.json_file import read_json_file, write_json_file
from ...errors import CorruptionError

log = logging.getLogger("antkv")

# the counters of db.stats() that add up across processes
COUNTERS = (
    "user_bytes_written",
    "wal_bytes_written",
    "flush_bytes_written",
    "compaction_bytes_written",
    "vlog_bytes_written",
    "manifest_bytes_written",
    "gc_bytes_relocated",
    "flushes",
    "compactions",
    "trivial_moves",
    "vlog_files_deleted",
    "stalls",
    "slowdowns",
)
_DISK = ("wal_bytes_written", "flush_bytes_written", "compaction_bytes_written", "vlog_bytes_written", "manifest_bytes_written")


def new_stats() -> dict:
    """Fresh counters for ``db.stats()`` (each is written by one thread at a time)."""
    return {
        "user_bytes_written": 0,
        "wal_bytes_written": 0,
        "flush_bytes_written": 0,
        "compaction_bytes_written": 0,
        "compaction_bytes_read": 0,
        "vlog_bytes_written": 0,
        "gc_bytes_relocated": 0,
        "manifest_bytes_written": 0,
        "flushes": 0,
        "compactions": 0,
        "trivial_moves": 0,
        "tables_dropped_by_range_tombstones": 0,
        "stalls": 0,
        "slowdowns": 0,
        "vlog_files_deleted": 0,
        "files_removed_at_open": [],
        "recovery_dropped": [],  # what the WAL recovery mode dropped at open (antkv/db/files/wal_replay.py)
        "options_changed": [],  # compatible changes from the OPTIONS file at open (antkv/db/files/options_file.py)
    }


def load(fs, dbname: str) -> dict[str, int]:
    """The counters the ``STATS`` file holds (zeros when there is none or it is damaged)."""
    try:
        body = read_json_file(fs, stats_file_name(dbname), STATS)
    except CorruptionError as e:
        log.warning("%s; the lifetime statistics restart from zero", e)
        body = None
    body = body or {}
    return {k: int(body.get(k, 0)) if isinstance(body.get(k, 0), int) else 0 for k in COUNTERS}


def figures(base: dict[str, int], process: dict) -> dict:
    """The lifetime figures: ``base`` plus this process's counters, and write amplification."""
    out = {k: base.get(k, 0) + int(process.get(k, 0)) for k in COUNTERS}
    user = out["user_bytes_written"]
    out["write_amplification"] = sum(out[k] for k in _DISK) / user if user else 0.0
    return out


def save(fs, dbname: str, lifetime: dict) -> None:
    write_json_file(fs, stats_file_name(dbname), STATS, {k: lifetime[k] for k in COUNTERS})
