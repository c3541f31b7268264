"""The value-log writer: appends records to the active value-log file.

Invariants:

* the file header is written by the constructor (one append); every record by exactly one
  append, so a crash can tear only the last record (which recovery cuts back);
* a pointer is returned only after its record was handed to the file system, so any pointer
  that exists resolves (after a process kill; after power loss only if ``sync`` ran -- the
  engine syncs the value log before the WAL for ``sync=True`` writes);
* after a failed append the writer refuses further appends: a record appended after a
  partial one would turn a torn tail into damage in the middle of the file;
* ``seal`` appends the footer, syncs and closes; the file is immutable afterwards.

``add`` may be called from several threads (foreground writes and GC relocation share the
active file): compression runs outside the lock, the append and the accounting inside it.
"""

from __future__ import annotations

import threading

from ..base.filenames import vlog_file_name
from ..errors import Error, InvalidArgumentError
from ..errors import IOError as AntIOError
from .format import (
    FILE_HEADER_SIZE,
    compression_code,
    encode_file_header,
    encode_footer,
    encode_record,
)
from .pointer import encode_pointer


def _as_bytes(x, what: str) -> bytes:
    if isinstance(x, (bytes, bytearray, memoryview)):
        return bytes(x)
    raise TypeError(f"{what} must be bytes-like, not {type(x).__name__}")


class ValueLogWriter:
    """The active value-log file ``path`` with number ``file_number``.

    ``size`` is the bytes written so far (header + records, + footer once sealed);
    ``num_records`` and ``record_bytes`` count the records (``record_bytes`` is what the
    footer and garbage accounting use: the sum of the pointers' sizes).
    """

    __slots__ = (
        "fs",
        "path",
        "file_number",
        "compression",
        "size",
        "num_records",
        "record_bytes",
        "_file",
        "_ctype",
        "_lock",
        "_state",
        "_synced_size",
    )

    def __init__(self, fs, path: str, file_number: int, *, compression: str | None = None):
        if type(file_number) is not int:
            raise TypeError("file_number must be an int")
        if not 0 <= file_number < 1 << 64:
            raise InvalidArgumentError(f"value-log file number out of range: {file_number}")
        self._ctype = compression_code(compression)
        self.fs = fs
        self.path = path
        self.file_number = file_number
        self.compression = compression
        self.num_records = 0
        self.record_bytes = 0
        self._lock = threading.Lock()
        self._state = "open"  # "open" | "failed" | "sealed" | "closed"
        self._synced_size = 0  # bytes made durable by sync (an open file: ``size`` at its last sync)
        self._file = fs.create(path)
        try:
            self._file.append(encode_file_header(file_number, self._ctype))
        except BaseException:
            self._state = "failed"
            self._close_quietly()
            raise
        self.size = FILE_HEADER_SIZE

    @classmethod
    def create_in(cls, fs, dirname: str, file_number: int, *, compression: str | None = None) -> "ValueLogWriter":
        """A new value-log file ``file_number`` in database directory ``dirname``."""
        return cls(fs, vlog_file_name(dirname, file_number), file_number, compression=compression)

    def add(self, key: bytes, value: bytes) -> bytes:
        """Append one record; the encoded value pointer to it."""
        if type(key) is not bytes:
            key = _as_bytes(key, "key")
        if type(value) is not bytes:
            value = _as_bytes(value, "value")
        record = encode_record(key, value, self._ctype)
        n = len(record)
        with self._lock:
            if self._state != "open":
                self._refuse()
            offset = self.size
            try:
                self._file.append(record)
            except BaseException:
                self._state = "failed"
                raise
            self.size = offset + n
            self.num_records += 1
            self.record_bytes += n
        return encode_pointer(self.file_number, offset, n)

    def sync(self) -> None:
        """Make every record added so far durable.

        A sealed file is durable already (``seal`` syncs it before it says so), so syncing one
        is a no-op: a flush may sync the file its memtable points into just after a writer
        sealed it and started the next one.  So is syncing an open file nothing was added to
        since its last sync (every flush syncs the active file, which small values never reach)."""
        with self._lock:
            if self._state == "sealed" or (self._state == "open" and self._synced_size == self.size):
                return
            if self._state not in ("open", "failed"):
                self._refuse()
            size = self.size
            self._file.sync()
            self._synced_size = size

    def seal(self) -> None:
        """Append the footer, sync and close; the file is immutable afterwards."""
        with self._lock:
            if self._state != "open":
                self._refuse()
            footer = encode_footer(self.file_number, self.num_records, self.record_bytes)
            try:
                self._file.append(footer)
                self.size += len(footer)
                self._file.sync()
            except BaseException:
                self._state = "failed"
                raise
            self._state = "sealed"
            self._file.close()

    def close(self) -> None:
        """Close without a footer (the file stays valid, just unsealed).  Idempotent."""
        with self._lock:
            if self._state in ("open", "failed"):
                self._state = "closed"
                self._file.close()

    @property
    def sealed(self) -> bool:
        return self._state == "sealed"

    def _refuse(self) -> None:
        if self._state == "failed":
            raise AntIOError(f"an earlier write to value-log file {self.path} failed; it takes no more records", path=self.path)
        raise InvalidArgumentError(f"value-log file {self.path} is {self._state}")

    def _close_quietly(self) -> None:
        try:
            self._file.close()
        except Error:
            pass  # the append already failed; that error is the one the caller sees

    def __repr__(self) -> str:
        return f"ValueLogWriter({self.path!r}, file_number={self.file_number}, size={self.size}, {self._state})"
