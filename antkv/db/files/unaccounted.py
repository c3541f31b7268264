"""Which files of a database directory may be deleted at open, and moving the others aside.

The rule: **the database deletes only what it can prove is its own debris**; every other file
it cannot account for is moved to ``lost/`` (:func:`~antkv.base.filenames.lost_dir_name`),
never deleted, reported in ``db.stats()["files_removed_at_open"]`` and with a line in ``LOG``.
``lost/`` is reported (``db.stats()["lost"]``, ``antkv stats``) and emptied only on request
(``antkv empty-lost``, :func:`empty_lost`).  A numbered file (``parse_file_name``) the
recovered MANIFEST does not need is *provably* this database's debris when:

* **the MANIFEST records its deletion** (a compaction's inputs, a value-log file GC emptied):
  the file was being deleted when the process stopped;
* **the database recorded creating it**: its number is in a ``new-file`` line of the info LOG
  (:func:`~antkv.db.files.info_log.numbers_handed_out`; every file number is logged before any file of
  it is created) -- the output of a flush, compaction, value-log rotation or MANIFEST roll a
  crash interrupted, an old MANIFEST, a flushed WAL;
* it is a WAL this open replayed completely and flushed, or the MANIFEST this open recovered
  from (``CURRENT`` has moved past it), or ``CURRENT.tmp`` (a ``CURRENT`` swap that never
  finished: ``CURRENT`` is still whole).

Anything else -- a file copied in by hand, whatever its number; a WAL no record of the database
names whose records do not continue the database's sequence numbers (not replayed: another
database's writes are never merged in, :class:`~antkv.db.files.wal_replay.Replay`); each WAL holding records
recovery dropped -- goes to ``lost/``.  Files whose names the database does not parse
are never touched.  A database whose LOG holds no ``new-file`` line at all (none, or written by
an antkv that did not record them) has no such evidence: its unlisted files go to ``lost/``,
and its WALs numbered from the MANIFEST's log number on are replayed as before.

A directory that holds antkv files but no ``CURRENT`` is refused (:func:`check_without_current`)
unless the files hold no data at all (the debris of a database creation that stopped before
``CURRENT`` was written).
"""

from __future__ import annotations

import os

from ...base.filenames import CURRENT, CURRENT_TMP, MANIFEST, TABLE, VLOG, WAL, lost_dir_name, parse_file_name
from ...errors import CorruptionError, InvalidArgumentError
from ...record.wal import HEADER_RECORD_SIZE
from ...vlog.format import FILE_HEADER_SIZE

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


def move_aside(fs, dbname: str, name: str, before=None) -> str:
    """Move ``dbname/name`` into ``dbname/lost/``; both directories are synced.  Returns the
    new path.  ``before(source, target)`` is called right before the move."""
    target = _lost_target(fs, dbname, name)
    lost = os.path.dirname(target)
    if before is not None:
        before(os.path.join(dbname, name), target)
    fs.rename(os.path.join(dbname, name), target)
    fs.sync_dir(lost)
    fs.sync_dir(dbname)
    return target


def keep_copy(fs, dbname: str, name: str, before=None) -> str:
    """Copy ``dbname/name`` into ``dbname/lost/`` before the database cuts it back; returns the
    copy's path.  ``before(target)`` is called right before the copy."""
    target = _lost_target(fs, dbname, name)
    if before is not None:
        before(target)
    fs.copy(os.path.join(dbname, name), target, sync=True)
    fs.sync_dir(os.path.dirname(target))
    return target


def data_files(fs, dbname: str) -> list[str]:
    """The antkv files of ``dbname`` that may hold data: tables, WALs longer than their header
    record, value-log files with a record, MANIFESTs that list a table."""
    out = []
    for name in sorted(fs.listdir(dbname)):
        parsed = parse_file_name(name)
        if parsed is None:
            continue
        size = fs.size(os.path.join(dbname, name))
        kind = parsed[0]
        if kind == TABLE or (kind == WAL and size > HEADER_RECORD_SIZE) or (kind == VLOG and size > FILE_HEADER_SIZE):
            out.append(name)
        elif kind == MANIFEST and _manifest_lists_tables(fs, os.path.join(dbname, name)):
            out.append(name)
    return out


def _manifest_lists_tables(fs, path: str) -> bool:
    from ...manifest.version_edit import VersionEdit
    from ...record.log_format import LogReader

    try:
        for offset, payload in LogReader(fs.read_all(path), path):
            if VersionEdit.decode(payload, path, offset).new_tables:
                return True
    except CorruptionError:
        return True  # damaged: it may have listed tables; keep the database refused
    return False


def check_without_current(fs, dbname: str, on_move=None) -> list[str]:
    """``dbname`` has no ``CURRENT``: raise CorruptionError when it holds antkv data; else move
    the data-less debris of an interrupted creation aside and return the moved names
    (``on_move(source, target)`` is called before each move)."""
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
            move_aside(fs, dbname, name, on_move)
            moved.append(name)
    return moved


def sort_unlisted(on_disk: dict, vs, evidence, *, recovered_manifest: int | None = None,
                  foreign_wals=(), partial_wals=(), log_number: int | None = None,
                  manifest_number: int | None = None) -> list[tuple[str, str, str]]:
    """``(name, DELETE or MOVE, reason)`` for every numbered file of ``on_disk``
    (``{(kind, number): name}``) that the version set ``vs`` (after the open's edit) does not
    need.  ``evidence`` is an :class:`OwnFiles`; ``recovered_manifest`` the MANIFEST the open
    recovered from; ``foreign_wals`` the WALs recovery did not replay as not the database's;
    ``partial_wals`` the WALs holding intact records recovery dropped or never reached.
    ``log_number`` and ``manifest_number``, when given, stand for ``vs``'s: the WAL and
    MANIFEST numbers of the open's edit not yet applied (the files the edit adds are not on
    disk yet, and it deletes none that are)."""
    log_number = vs.log_number if log_number is None else log_number
    manifest_number = vs.manifest_number if manifest_number is None else manifest_number
    live_tables = {f.number for _, f in vs.current.all_files()}
    out = []
    for (kind, number), name in sorted(on_disk.items()):
        if kind == WAL:
            if number >= log_number:
                continue
            if number in foreign_wals:
                out.append((name, MOVE, "WAL the database has no record of writing (not replayed)"))
            elif number in partial_wals:
                out.append((name, MOVE, "WAL holding records recovery dropped"))
            elif number in evidence.replayed_wals:
                out.append((name, DELETE, "WAL replayed and flushed"))
            elif evidence.wrote(kind, number):
                out.append((name, DELETE, "flushed WAL"))
            else:
                out.append((name, MOVE, "WAL the database has no record of writing"))
            continue
        if kind == MANIFEST:
            if number == manifest_number:
                continue
            if number == recovered_manifest:
                out.append((name, DELETE, "old MANIFEST"))
            elif evidence.wrote(kind, number):
                out.append((name, DELETE, "old MANIFEST" if number < manifest_number
                            else "MANIFEST of an interrupted roll (CURRENT never named it)"))
            else:
                out.append((name, MOVE, "MANIFEST the database has no record of writing"))
            continue
        if (kind == TABLE and number in live_tables) or (kind == VLOG and number in vs.vlogs):
            continue
        what = "table" if kind == TABLE else "value-log file"
        if (kind, number) in vs.recovered_deletions:
            out.append((name, DELETE, f"{what} the MANIFEST records as deleted"))
        elif evidence.wrote(kind, number):
            out.append((name, DELETE, f"{what} no MANIFEST edit lists (output of an interrupted job)"))
        else:
            out.append((name, MOVE, f"{what} the database has no record of writing"))
    return out


class OwnFiles:
    """What proves a file is the database's own: the file numbers its info LOG records handing
    out (read once, when first needed), and the WALs this open replayed."""

    def __init__(self, fs, dbname: str):
        self._fs = fs
        self._dbname = dbname
        self._numbers: set[int] | None = None
        self.replayed_wals: set[int] = set()

    @property
    def numbers(self) -> set[int]:
        if self._numbers is None:
            from .info_log import numbers_handed_out

            self._numbers = numbers_handed_out(self._fs, self._dbname)
        return self._numbers

    def wrote(self, kind: str, number: int) -> bool:
        return number in self.numbers


def lost_usage(fs, dbname: str) -> tuple[int, int]:
    """``(files, bytes)`` in ``dbname/lost/``."""
    lost = lost_dir_name(dbname)
    files = size = 0
    if not fs.is_dir(lost):
        return 0, 0
    for name in fs.listdir(lost):
        p = os.path.join(lost, name)
        if fs.is_dir(p):
            continue
        files += 1
        try:
            size += fs.size(p)
        except Exception:  # noqa: BLE001 - removed meanwhile
            files -= 1
    return files, size


def empty_lost(fs, dbname: str) -> tuple[int, int]:
    """Delete every file in ``dbname/lost/`` (the operator decided nothing there is needed);
    returns ``(files, bytes)`` deleted."""
    lost = lost_dir_name(dbname)
    files = size = 0
    if not fs.is_dir(lost):
        return 0, 0
    for name in sorted(fs.listdir(lost)):
        p = os.path.join(lost, name)
        if fs.is_dir(p):
            continue
        n = fs.size(p)
        fs.remove(p)
        files += 1
        size += n
    fs.sync_dir(lost)
    return files, size


def antkv_evidence(fs, dbname: str) -> str | None:
    """What shows that ``dbname`` holds an antkv database, or None: an ``OPTIONS`` or
    ``STATS`` file (other engines name theirs differently), a MANIFEST or WAL whose first
    record decodes as antkv's, a table ending in antkv's magic number, or a value-log file
    starting with antkv's.  Repair, destroy and every read-write open refuse a directory
    holding database-like files without such evidence (e.g. a RocksDB directory): their
    ``CURRENT``, ``MANIFEST-*``, ``*.sst`` and ``*.log`` names look like antkv's."""
    from ...base.filenames import OPTIONS, STATS
    from ...manifest.version_edit import VersionEdit
    from ...record.batch import decode_batch
    from ...record.log_format import LogReader
    from ...vlog.format import FILE_MAGIC

    names = sorted(fs.listdir(dbname))
    for name in (OPTIONS, STATS):
        if name in names:
            return f"its {name} file"
    for name in names:
        parsed = parse_file_name(name)
        if parsed is None:
            continue
        p = os.path.join(dbname, name)
        try:
            f = fs.open_random(p)
            try:
                size = f.size()
                if parsed[0] == TABLE:
                    if size >= 8 and f.read(size - 8, 8) == b"antkvSST":
                        return f"table {name}"
                    continue
                if parsed[0] == VLOG:
                    if f.read(0, len(FILE_MAGIC)) == FILE_MAGIC:
                        return f"value-log file {name}"
                    continue
                head = f.read(0, min(size, 1 << 16))
            finally:
                f.close()
            for offset, payload in LogReader(head, p):
                if parsed[0] == MANIFEST:
                    VersionEdit.decode(payload, p, offset)
                else:
                    decode_batch(payload, p, offset)
                return f"{'MANIFEST' if parsed[0] == MANIFEST else 'WAL'} {name}"
        except Exception:  # noqa: BLE001 - unreadable or not antkv's: no evidence
            continue
    return None


def check_is_antkv(fs, dbname: str, what: str) -> None:
    """InvalidArgumentError when ``dbname`` holds files that may hold data (:func:`data_files`)
    but no :func:`antkv_evidence` that they are antkv's; nothing changed.  (Data-less files
    only: the debris of a creation that stopped early, which the open handles.)"""
    if antkv_evidence(fs, dbname) is None and data_files(fs, dbname):
        raise InvalidArgumentError(
            f"{dbname} is not an antkv database (no antkv OPTIONS, STATS, MANIFEST, WAL, table or value-log file; "
            f"another engine's, e.g. RocksDB's?): {what} refused, nothing was changed"
        )

