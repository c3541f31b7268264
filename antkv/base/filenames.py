"""The names of the files in a database directory, each defined here once.

::

    NNNNNN.log          a WAL (write-ahead log)
    NNNNNN.sst          a table
    NNNNNN.vlog         a value-log file
    MANIFEST-NNNNNN     a MANIFEST (log of version edits)
    CURRENT             one line, "MANIFEST-NNNNNN\\n": the live MANIFEST
    CURRENT.tmp         CURRENT while it is being replaced (write, sync, rename)
    LOCK                held (flock) by the process that has the database open
    OPTIONS             the options of the last read-write open (checksummed JSON)
    STATS               cumulative statistics of the database's life (checksummed JSON)
    LOG, LOG.old.N      the info log (flushes, compactions, GC, stalls, recovery), rotated
    lost/               files the database could not account for, moved aside (never deleted)

    T.vlog              outside a database: the value-log file that travels with the external
                        table T (``antkv.SstFileWriter``), e.g. ``out.sst`` -> ``out.sst.vlog``

``NNNNNN`` is a file number, at least six digits; one counter (the version set's next file
number) numbers WALs, tables, value-log files and MANIFESTs alike.  A name this module does not
parse is not the database's, and the database never deletes it.
"""

from __future__ import annotations

import os

CURRENT = "CURRENT"
CURRENT_TMP = "CURRENT.tmp"
LOCK = "LOCK"
MANIFEST_PREFIX = "MANIFEST-"
LOST = "lost"
OPTIONS = "OPTIONS"
STATS = "STATS"
INFO_LOG = "LOG"
INFO_LOG_OLD_PREFIX = "LOG.old."

# the kinds parse_file_name returns
WAL = "log"
TABLE = "sst"
VLOG = "vlog"
MANIFEST = "manifest"
_SUFFIXES = (WAL, TABLE, VLOG)


def table_file_name(dbname: str, number: int) -> str:
    return os.path.join(dbname, f"{number:06d}.{TABLE}")


def wal_file_name(dbname: str, number: int) -> str:
    return os.path.join(dbname, f"{number:06d}.{WAL}")


def vlog_file_name(dbname: str, number: int) -> str:
    """The path of value-log file ``number`` in database directory ``dbname``."""
    return os.path.join(dbname, f"{number:06d}.{VLOG}")


def manifest_name(number: int) -> str:
    """The name (no directory) of MANIFEST ``number``, as ``CURRENT`` holds it."""
    return f"{MANIFEST_PREFIX}{number:06d}"


def manifest_file_name(dbname: str, number: int) -> str:
    return os.path.join(dbname, manifest_name(number))


def current_file_name(dbname: str) -> str:
    return os.path.join(dbname, CURRENT)


def lock_file_name(dbname: str) -> str:
    return os.path.join(dbname, LOCK)


def external_vlog_path(table_path: str) -> str:
    """The value-log file written beside external table ``table_path`` (its large values)."""
    return table_path + "." + VLOG


def options_file_name(dbname: str) -> str:
    return os.path.join(dbname, OPTIONS)


def stats_file_name(dbname: str) -> str:
    return os.path.join(dbname, STATS)


def info_log_name(dbname: str) -> str:
    return os.path.join(dbname, INFO_LOG)


def old_info_log_name(dbname: str, n: int) -> str:
    """The ``n``-th most recent rotated info log (1 = the newest)."""
    return os.path.join(dbname, f"{INFO_LOG_OLD_PREFIX}{n}")


def lost_dir_name(dbname: str) -> str:
    """The directory files are moved to when the database cannot account for them."""
    return os.path.join(dbname, LOST)


def parse_file_name(name: str) -> tuple[str, int] | None:
    """``(kind, number)`` of a numbered file's name (no directory): kind is :data:`WAL`,
    :data:`TABLE`, :data:`VLOG` or :data:`MANIFEST`; None for any other name."""
    if name.startswith(MANIFEST_PREFIX):
        num = name[len(MANIFEST_PREFIX) :]
        return (MANIFEST, int(num)) if num.isdigit() and num.isascii() else None
    stem, dot, ext = name.partition(".")
    if dot and stem.isdigit() and stem.isascii() and ext in _SUFFIXES:
        return ext, int(stem)
    return None


def parse_vlog_file_name(path: str) -> int | None:
    """The file number of a value-log file's name or path (``.../000123.vlog``), else None."""
    parsed = parse_file_name(os.path.basename(path))
    return parsed[1] if parsed is not None and parsed[0] == VLOG else None
