"""The error classes of antkv.

Every failure that leaves the public API is an :class:`Error` subclass, except
``TypeError`` for arguments of the wrong type (as Python itself does).

* :class:`InvalidArgumentError` -- a bad value (also a ``ValueError``).
* :class:`CorruptionError` -- a checksum or format violation; names the file and offset.
* :class:`DBClosedError` -- an operation on a closed database, iterator or snapshot.
* :class:`ReadOnlyError` -- a write (or maintenance) call on a database opened read-only.
* :class:`LockError` -- another opener holds the database's ``LOCK`` file.
* :class:`MemoryLimitError` -- a strict cache could not make room for an insert.
* :class:`IOError` -- an operating-system failure; wraps the ``OSError`` (as ``__cause__``
  and ``.os_error``). It is also an ``OSError``, so ``except OSError`` catches it.
"""

from __future__ import annotations

import errno as _errno


class Error(Exception):
    """Base class of every antkv error."""


class InvalidArgumentError(Error, ValueError):
    """An argument has the right type but a value antkv cannot accept."""


class CorruptionError(Error):
    """Stored data failed a checksum or format check.

    ``path`` and ``offset`` locate the damage (either may be None when unknown).
    """

    def __init__(self, message: str, path: str | None = None, offset: int | None = None):
        where = ""
        if path is not None:
            where = f" in {path}" + (f" at offset {offset}" if offset is not None else "")
        super().__init__(message + where)
        self.path = path
        self.offset = offset


class DBClosedError(Error):
    """The database (or an iterator or snapshot of it) is closed."""


class ReadOnlyError(Error):
    """The database was opened with ``read_only=True``: it writes nothing."""


class LockError(Error):
    """Another opener holds the database directory's LOCK file."""


class MemoryLimitError(Error):
    """A cache with ``strict_capacity_limit`` could not make room for an entry."""


class IOError(Error, OSError):  # noqa: A001 - the SPEC names it antkv.IOError
    """An operating-system error from the file-system layer.

    ``os_error`` is the original ``OSError``; ``errno`` and ``filename`` are copied from it.
    """

    def __init__(self, message: str, os_error: OSError | None = None, path: str | None = None):
        code = os_error.errno if os_error is not None and os_error.errno is not None else _errno.EIO
        OSError.__init__(self, code, message, path)
        self.os_error = os_error

    def __str__(self) -> str:
        base = self.strerror or ""
        return f"{base}: {self.filename}" if self.filename else base


class BackgroundError(IOError):
    """A write or background job failed; the database is read-only until ``db.resume()`` (once
    the cause is gone) or until it is reopened."""
