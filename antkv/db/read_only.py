"""Read-only opens beside a live writer: one consistent MANIFEST state, retried when it moved.

A read-only open (``antkv.open(path, read_only=True)``, every read command of ``antkv``) reads
``CURRENT``, the MANIFEST it names, the WALs that state implies and the value-log files it
lists, without the LOCK, so another process may be writing the database meanwhile.  Such a
writer changes the files in one order only: it writes a new MANIFEST edit (or rolls to a new
MANIFEST and swaps ``CURRENT``) *before* it deletes any file that edit stops needing, and it
rotates to a new value-log file through an edit too.  So:

* a file the read state names can vanish only after the MANIFEST moved on: a missing table,
  WAL or value-log file, a WAL record pointing into a value-log file the read state does not
  know, or a MANIFEST that ``CURRENT`` no longer names, all come with a changed
  :func:`manifest_state`.  The open is then thrown away (:class:`WriterMovedOn`) and started
  again from ``CURRENT``; the same error with an unchanged MANIFEST is real damage and raised;
* the attempts of one open share what they read (:class:`ReadOnlyAttempts`): a retry reads only
  the MANIFEST edits appended since the last attempt, not the whole history again.  The time
  from reading the MANIFEST to holding its files is the window in which the writer can delete
  one of them; were every attempt to decode the whole MANIFEST, that window would grow with
  the MANIFEST until a busy writer moved on within every attempt;
* a writer that still moves on within every attempt after :data:`RETRY_SECONDS` makes the open
  fail with an :class:`~antkv.errors.IOError` (``EAGAIN``) saying so -- never with the
  ``CorruptionError`` the last attempt met, which is no damage;
* once the open chose its files it holds them open (:class:`~antkv.fs.pinned.PinnedFileSystem`)
  until it closes, so a writer deleting them never breaks a running scan, ``get`` or
  ``verify``; nothing is written or left behind.

What such a view sees: every write the writer acknowledged before the open read its WALs (the
WAL is appended before a write returns), and nothing later -- it is a snapshot of the moment
of the open, as stale as the view is old.  A write being appended during the open (a torn last
record of the newest WAL or of the active value-log file) is simply not seen yet.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import time

from ..base.filenames import current_file_name, parse_file_name
from ..errors import Error
from ..errors import IOError as AntIOError
from ..fs import default_file_system
from ..fs.pinned import PinnedFileSystem

RETRY_SECONDS = 30.0  # how long opens are tried again while the writer keeps moving the MANIFEST on


class WriterMovedOn(Error):
    """A read-only open failed because a live writer changed the MANIFEST meanwhile: the open
    is tried again (only :func:`open_read_only` sees this; ``cause`` is the error met)."""

    def __init__(self, cause: Error):
        super().__init__(str(cause))
        self.cause = cause


def manifest_state(fs, dbname: str):
    """What ``CURRENT`` says and how long the MANIFEST it names is: any MANIFEST edit or roll
    changes it (edits only append; a roll names a new MANIFEST)."""
    try:
        current = fs.read_all(current_file_name(dbname))
    except Error:
        return None
    name = current.decode("ascii", "replace").strip()
    if parse_file_name(name) is None:
        return current, None
    try:
        return current, fs.size(os.path.join(dbname, name))
    except Error:
        return current, None


class ReadOnlyAttempts:
    """What the attempts of one read-only open share: the files they hold (``files``, a
    :class:`~antkv.fs.pinned.PinnedFileSystem`) and how far the MANIFEST was read
    (``manifest``, a :class:`~antkv.manifest.version_set.ManifestProgress`, or None)."""

    def __init__(self, files: PinnedFileSystem):
        self.files = files
        self.manifest = None
        self.count = 0


def open_read_only(make_db, path: str, options):
    """``make_db(path, options, attempts)``, tried again while a live writer keeps moving on
    under it.

    The attempts share one :class:`ReadOnlyAttempts`: a file an attempt already holds stays
    held (file numbers are never reused) and a retry reads only the MANIFEST edits appended
    since, so each retry has only the writer's newest changes left to catch."""
    pinned = options.file_system
    if not isinstance(pinned, PinnedFileSystem):
        pinned = PinnedFileSystem(pinned or default_file_system())
        options = dataclasses.replace(options, file_system=pinned)
    attempts = ReadOnlyAttempts(pinned)
    delay = 0.001
    deadline = time.monotonic() + RETRY_SECONDS
    try:
        while True:
            attempts.count += 1
            try:
                return make_db(path, options, attempts)
            except WriterMovedOn as e:
                if time.monotonic() > deadline:
                    raise AntIOError(
                        f"read-only open of {path}: a live writer changed the database under each of "
                        f"{attempts.count} attempts in {RETRY_SECONDS:g} s; try again (the last attempt met: {e.cause})",
                        OSError(errno.EAGAIN, os.strerror(errno.EAGAIN), path), path) from None
                time.sleep(delay)
                delay = min(delay * 2, 0.02)
    except BaseException:
        pinned.release()
        raise
