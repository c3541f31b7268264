"""``antkv.destroy(path)``: remove a database (RocksDB's ``DestroyDB``).

Takes the database's ``LOCK`` first (a database open elsewhere is a ``LockError``, and nothing
is removed), then removes the files a database directory is made of -- every numbered file
(``parse_file_name``), ``CURRENT``, ``CURRENT.tmp`` and the names :data:`EXTRA_FILES_PREFIXES` starts --
and finally ``LOCK``, and the directory itself when nothing else is left.  Any other file
(``lost/``, a file of the user's) is left where it is, and so is the directory.
"""

from __future__ import annotations

import os

from .base.filenames import CURRENT, CURRENT_TMP, INFO_LOG, LOCK, OPTIONS, STATS, lock_file_name, parse_file_name
from .errors import InvalidArgumentError
from .db.files.unaccounted import check_is_antkv
from .options import check_path

# names a database directory holds besides numbered files (with their .tmp and rotated forms)
EXTRA_FILES_PREFIXES = (INFO_LOG, OPTIONS, STATS)


def _owned(name: str) -> bool:
    return (
        parse_file_name(name) is not None
        or name in (CURRENT, CURRENT_TMP)
        or any(name.startswith(p) for p in EXTRA_FILES_PREFIXES)
    )


def destroy(path, *, file_system=None) -> list[str]:
    """Remove the database in directory ``path``; returns the names removed.  A missing
    directory is not an error (nothing to remove)."""
    from .fs import default_file_system

    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike, not {type(path).__name__}")
    path = os.fspath(path)
    check_path(path)
    fs = file_system or default_file_system()
    if not fs.exists(path):
        return []
    if not fs.is_dir(path):
        raise InvalidArgumentError(f"{path} is not a directory")
    check_is_antkv(fs, path, "destroy")  # another engine's database is not ours to remove
    lock = fs.lock(lock_file_name(path))
    removed = []
    try:
        for name in sorted(fs.listdir(path)):
            if _owned(name):
                fs.remove(os.path.join(path, name))
                removed.append(name)
        fs.sync_dir(path)
    finally:
        fs.unlock(lock)
    fs.remove(lock_file_name(path))
    removed.append(LOCK)
    if not fs.listdir(path):
        fs.rmdir(path)
    return removed
