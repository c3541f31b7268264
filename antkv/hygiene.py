"""Which files of a database directory may be deleted at open, and moving the others aside.

The rule: **the database deletes only what it can prove is its own debris**; every other file
it cannot account for is moved to ``lost/`` (:func:`~antkv.base.filenames.lost_dir_name`),
never deleted, and reported.  A numbered file (``parse_file_name``) that the recovered
MANIFEST does not list is *provably* debris when one of these holds:

* **its number was never handed out durably**: it is >= the next file number the recovered
  MANIFEST records.  Every edit that names a file carries a ``next_file_number`` above it, so
  no durable edit ever named this file: it is the output of a flush, compaction, value-log
  rotation or MANIFEST roll that a crash interrupted before its edit was written;
* **the MANIFEST records its deletion** (a compaction's inputs, a value-log file GC emptied):
  the file was being deleted when the process stopped;
* it is a WAL numbered below the MANIFEST's log number (its memtable was flushed), a MANIFEST
  older than the one ``CURRENT`` names (``CURRENT`` moved past it), or ``CURRENT.tmp`` (a
  ``CURRENT`` swap that never finished: ``CURRENT`` is still whole).

Anything else -- e.g. a table numbered below the next file number that the MANIFEST neither
lists nor deleted, a file copied in by hand, a MANIFEST newer than ``CURRENT`` but below the
next file number -- is moved to ``lost/``.  Files whose names the database does not parse are
never touched.

A directory that holds antkv files but no ``CURRENT`` is refused (:func:`check_without_current`)
unless the files hold no data at all (the debris of a database creation that stopped before
``CURRENT`` was written).
"""

from __future__ import annotations

import os

from .base.filenames import CURRENT, CURRENT_TMP, MANIFEST, TABLE, VLOG, WAL, lost_dir_name, parse_file_name
from .errors import CorruptionError
from .vlog.format import FILE_HEADER_SIZE

DELETE = "delete"
MOVE = "move aside"


def _lost_target(fs, dbname: str, name: str) -> str:
    """A free path for ``name`` in ``dbname/lost/`` (created if needed; a numbered suffix
    when the name is taken)."""
    lost = lost_dir_name(dbname)
    if not fs.is_dir(lost):
        fs.mkdirs(lost)
        fs.sync_dir(dbname)
    target = os.path.join(lost, name)
    n = 1
    while fs.exists(target):
        target = os.path.join(lost, f"{name}.{n}")
        n += 1
    return target


def move_aside(fs, dbname: str, name: str) -> str:
    """Move ``dbname/name`` into ``dbname/lost/``; both directories are synced.  Returns the
    new path."""
    target = _lost_target(fs, dbname, name)
    lost = os.path.dirname(target)
    fs.rename(os.path.join(dbname, name), target)
    fs.sync_dir(lost)
    fs.sync_dir(dbname)
    return target


def keep_copy(fs, dbname: str, name: str) -> str:
    """Copy ``dbname/name`` into ``dbname/lost/`` before the database cuts it back; returns the
    copy's path."""
    target = _lost_target(fs, dbname, name)
    fs.copy(os.path.join(dbname, name), target, sync=True)
    fs.sync_dir(os.path.dirname(target))
    return target


def data_files(fs, dbname: str) -> list[str]:
    """The antkv files of ``dbname`` that may hold data: tables, non-empty WALs, value-log
    files with a record, MANIFESTs that list a table."""
    out = []
    for name in sorted(fs.listdir(dbname)):
        parsed = parse_file_name(name)
        if parsed is None:
            continue
        size = fs.size(os.path.join(dbname, name))
        kind = parsed[0]
        if kind == TABLE or (kind == WAL and size > 0) or (kind == VLOG and size > FILE_HEADER_SIZE):
            out.append(name)
        elif kind == MANIFEST and _manifest_lists_tables(fs, os.path.join(dbname, name)):
            out.append(name)
    return out


def _manifest_lists_tables(fs, path: str) -> bool:
    from .manifest.version_edit import VersionEdit
    from .record.log_format import LogReader

    try:
        for offset, payload in LogReader(fs.read_all(path), path):
            if VersionEdit.decode(payload, path, offset).new_tables:
                return True
    except CorruptionError:
        return True  # damaged: it may have listed tables; keep the database refused
    return False


def check_without_current(fs, dbname: str) -> list[str]:
    """``dbname`` has no ``CURRENT``: raise CorruptionError when it holds antkv data; else move
    the data-less debris of an interrupted creation aside and return the moved names."""
    data = data_files(fs, dbname)
    if data:
        shown = ", ".join(data[:8]) + (f" and {len(data) - 8} more" if len(data) > 8 else "")
        raise CorruptionError(
            f"{dbname} holds antkv files ({shown}) but no {CURRENT} file, so nothing says which of them make up "
            f"the database; nothing was changed. Run `antkv repair {dbname}` (antkv.repair) to rebuild the "
            "MANIFEST from the files that verify",
            os.path.join(dbname, CURRENT),
        )
    moved = []
    for name in sorted(fs.listdir(dbname)):
        if parse_file_name(name) is not None or name == CURRENT_TMP:
            move_aside(fs, dbname, name)
            moved.append(name)
    return moved


def sort_unlisted(on_disk: dict, vs, first_unused: int, deleted: set) -> list[tuple[str, str, str]]:
    """``(name, DELETE or MOVE, reason)`` for every numbered file of ``on_disk``
    (``{(kind, number): name}``) that the recovered version set ``vs`` does not need.

    ``first_unused`` is the next file number the MANIFEST recorded (before any file on disk
    was marked used); ``deleted`` holds the ``(kind, number)`` the MANIFEST records deleted."""
    live_tables = {f.number for _, f in vs.current.all_files()}
    out = []
    for (kind, number), name in sorted(on_disk.items()):
        if kind == WAL:
            if number < vs.log_number:
                out.append((name, DELETE, "flushed WAL"))
            continue
        if kind == MANIFEST:
            if number == vs.manifest_number:
                continue
            if number < vs.manifest_number:
                out.append((name, DELETE, "old MANIFEST"))
            elif number >= first_unused:
                out.append((name, DELETE, "MANIFEST of an interrupted roll (CURRENT never named it)"))
            else:
                out.append((name, MOVE, "MANIFEST newer than the one CURRENT names"))
            continue
        if (kind == TABLE and number in live_tables) or (kind == VLOG and number in vs.vlogs):
            continue
        what = "table" if kind == TABLE else "value-log file"
        if number >= first_unused:
            out.append((name, DELETE, f"{what} no MANIFEST edit ever named (output of an interrupted job)"))
        elif (kind, number) in deleted:
            out.append((name, DELETE, f"{what} the MANIFEST records as deleted"))
        else:
            out.append((name, MOVE, f"{what} the MANIFEST does not list"))
    return out
