"""Reading the value log: pointer resolution, whole-file scans, crash recovery, verification.

* :class:`ValueLogReader` resolves value pointers of one database directory.  It keeps an LRU
  cache of open :class:`~antkv.fs.RandomAccessFile` handles; a handle in use by a read is
  pinned (reference-counted) and closed only when the last reader lets go, so evicting a file
  never closes a descriptor under a concurrent ``pread``.  ``get`` is thread-safe: scans
  prefetch values from several threads at once (``pread`` releases the GIL).
* :class:`ValueLogScan` walks a whole file record by record with the torn-tail rules of
  ``format.py``; :func:`iter_records`, :func:`recover_file`, :func:`verify_file` and
  :func:`dump_vlog` are built on it.  It reads the file in 1 MiB windows, so scanning a
  256 MiB file does not load it whole.

Every piece of damage is a :class:`~antkv.CorruptionError` naming the file and the offset.
"""

from __future__ import annotations

import errno
import threading
from collections import OrderedDict, deque
from typing import Iterator

from ..base.compression import COMPRESSION_NAMES, COMPRESSION_NONE
from ..base.filenames import vlog_file_name
from ..errors import CorruptionError, DBClosedError, InvalidArgumentError
from ..errors import IOError as AntIOError
from .format import (
    FILE_HEADER_SIZE,
    FILE_MAGIC,
    FOOTER_MAGIC,
    FOOTER_SIZE,
    RECORD_HEADER_SIZE,
    decode_file_header,
    decode_footer,
    decode_record,
    decompress,
    header_fields_error,
    parse_record_header,
    payload_check,
)
from .pointer import decode_pointer

__all__ = [
    "ValueLogReader",
    "ValueLogScan",
    "iter_records",
    "recover_file",
    "verify_file",
    "dump_vlog",
]

_WINDOW = 1 << 20

# A cached handle is a list (mutable, no per-read object): [file, pins, evicted, path].
_FILE, _PINS, _EVICTED, _PATH = 0, 1, 2, 3


class ValueLogReader:
    """Resolves value pointers of the database directory ``dirname``."""

    def __init__(self, fs, dirname: str, *, max_open_files: int = 64):
        if type(max_open_files) is not int:
            raise TypeError("max_open_files must be an int")
        if max_open_files < 1:
            raise InvalidArgumentError(f"max_open_files must be >= 1, got {max_open_files}")
        self.fs = fs
        self.dirname = dirname
        self.max_open_files = max_open_files
        self._handles: OrderedDict[int, list] = OrderedDict()
        self._lock = threading.Lock()
        self._closed = False

    # --- reads ---

    def get(self, pointer: bytes) -> bytes:
        """The value ``pointer`` points to; CorruptionError for any damage."""
        return self.get_record(pointer)[1]

    def get_checked(self, pointer: bytes, expected_key: bytes) -> bytes:
        """Like :meth:`get`, and the record must hold ``expected_key`` (else CorruptionError)."""
        key, value = self.get_record(pointer)
        if key != expected_key:
            fn, offset, _ = decode_pointer(pointer)
            raise CorruptionError(
                f"value-log record holds key {key[:32]!r}, the pointer was stored under {bytes(expected_key)[:32]!r}",
                vlog_file_name(self.dirname, fn),
                offset,
            )
        return value

    def get_record(self, pointer: bytes) -> tuple[bytes, bytes]:
        """``(key, value)`` of the record ``pointer`` points to."""
        fn, offset, size = decode_pointer(pointer)
        handles = self._handles
        with self._lock:  # the cache-hit path of _pin, inlined (this is the hot path)
            h = handles.get(fn)  # close() empties the cache, so a closed reader takes _pin
            if h is not None:
                handles.move_to_end(fn)
                h[_PINS] += 1
        if h is None:
            h = self._pin(fn)
        try:
            data = h[_FILE].read(offset, size)
        finally:
            self._unpin(h)
        return decode_record(data, h[_PATH], offset)

    # --- the handle cache ---

    def _pin(self, fn: int) -> list:
        with self._lock:
            if self._closed:
                raise DBClosedError("the database is closed: its value log can no longer be read")
            h = self._handles.get(fn)
            if h is not None:
                self._handles.move_to_end(fn)
                h[_PINS] += 1
                return h
        path = vlog_file_name(self.dirname, fn)
        try:
            f = self.fs.open_random(path)
        except AntIOError as e:
            if e.errno == errno.ENOENT:
                raise CorruptionError(f"value pointer names missing value-log file {fn}", path) from None
            raise
        stale = []
        with self._lock:
            if self._closed:
                stale.append(f)
                h = None
            else:
                h = self._handles.get(fn)
                if h is None:
                    h = self._handles[fn] = [f, 0, False, path]
                    while len(self._handles) > self.max_open_files:
                        _, old = self._handles.popitem(last=False)
                        old[_EVICTED] = True
                        if old[_PINS] == 0:
                            stale.append(old[_FILE])
                else:  # another thread opened it meanwhile
                    stale.append(f)
                    self._handles.move_to_end(fn)
                h[_PINS] += 1
        for s in stale:
            s.close()
        if h is None:
            raise DBClosedError("the database is closed: its value log can no longer be read")
        return h

    def _unpin(self, h: list) -> None:
        with self._lock:
            h[_PINS] -= 1
            if not (h[_EVICTED] and h[_PINS] == 0):
                return
        h[_FILE].close()

    def evict(self, file_number: int) -> None:
        """Close the cached handle of ``file_number`` (the file is being deleted)."""
        with self._lock:
            h = self._handles.pop(file_number, None)
            if h is None:
                return
            h[_EVICTED] = True
            if h[_PINS]:
                return  # the last reader closes it
        h[_FILE].close()

    def close(self) -> None:
        """Close every handle; later reads raise DBClosedError.  Idempotent."""
        with self._lock:
            self._closed = True
            handles = list(self._handles.values())
            self._handles.clear()
            idle = []
            for h in handles:
                h[_EVICTED] = True
                if not h[_PINS]:
                    idle.append(h[_FILE])
        for f in idle:
            f.close()

    @property
    def num_open_files(self) -> int:
        with self._lock:
            return len(self._handles)


class _Window:
    """Positional reads through a 1 MiB read-ahead buffer."""

    __slots__ = ("file", "buf", "start")

    def __init__(self, file):
        self.file = file
        self.buf = b""
        self.start = 0

    def get(self, pos: int, n: int) -> bytes:
        """Up to ``n`` bytes at ``pos`` (fewer only at the end of the file)."""
        rel = pos - self.start
        if rel >= 0 and rel + n <= len(self.buf):
            return self.buf[rel : rel + n]
        self.buf = self.file.read(pos, max(n, _WINDOW))
        self.start = pos
        return self.buf[:n]


class ValueLogScan:
    """One pass over a value-log file, record by record.

    Iterating yields ``(offset, size, key, value, ctype)`` of every intact record, with the
    value decompressed.  A torn tail ends the iteration quietly (``strict=False``) or raises
    CorruptionError (``strict=True``: every byte must be intact, as ``verify`` demands);
    damage followed by more data always raises.  After (or during) iteration:

    * ``file_number``, ``compression`` -- from the file header (None if it was torn);
    * ``valid_length`` -- the end of the last intact record (or footer);
    * ``torn_tail_offset`` -- where a dropped torn tail starts, None when the file is clean;
    * ``sealed`` -- an intact footer ended the file;
    * ``num_records``, ``record_bytes``, ``file_size``.

    ``length`` scans only the first ``length`` bytes, as if the file ended there: how the
    active file is verified while a writer may be appending (pass the writer's ``size``).
    """

    def __init__(self, fs, path: str, *, strict: bool = False, length: int | None = None):
        self.fs = fs
        self.path = path
        self.strict = strict
        self.length = length
        self.file_number: int | None = None
        self.compression: str | None = None
        self.valid_length = 0
        self.torn_tail_offset: int | None = None
        self.sealed = False
        self.num_records = 0
        self.record_bytes = 0
        self.file_size = 0

    def run(self) -> "ValueLogScan":
        """Scan to the end without keeping the records; returns self."""
        deque(self, maxlen=0)  # the scan's side effects (counts, valid_length) are the result
        return self

    def recover(self) -> "ValueLogScan":
        """Scan, then truncate a torn tail (the recovery of an active file); returns self.

        One pass gives both the valid length and the record count/bytes a caller records
        when it seals the recovered file in the MANIFEST.
        """
        if self.length is not None:
            raise InvalidArgumentError("recover() scans the whole file; do not pass length")
        self.run()
        if self.valid_length < self.file_size:
            self.fs.truncate(self.path, self.valid_length)
        return self

    def _torn(self, offset: int, why: str) -> None:
        if self.strict:
            raise CorruptionError(f"value-log file ends in a torn {why}", self.path, offset)
        self.torn_tail_offset = offset

    def _zeros_from(self, win: _Window, pos: int, end: int) -> bool:
        while pos < end:
            chunk = win.get(pos, min(_WINDOW, end - pos))
            if not chunk or chunk.count(0) != len(chunk):
                return False
            pos += len(chunk)
        return True

    def __iter__(self) -> Iterator[tuple[int, int, bytes, bytes, int]]:
        f = self.fs.open_random(self.path)
        try:
            yield from self._scan(f)
        finally:
            f.close()

    def _scan(self, f) -> Iterator[tuple[int, int, bytes, bytes, int]]:
        path = self.path
        end = self.file_size = f.size() if self.length is None else min(f.size(), self.length)
        win = _Window(f)
        head = win.get(0, min(FILE_HEADER_SIZE, end))
        zeros = head.count(0) == len(head)
        if len(head) < FILE_HEADER_SIZE:  # a crash right after create: a prefix of the header
            if not zeros and head[:8] != FILE_MAGIC[: len(head[:8])]:
                raise CorruptionError("not a value-log file (bad magic)", path, 0)
            self._torn(0, "file header")
            return
        if zeros and self._zeros_from(win, 0, end):
            self._torn(0, "file header (zero-filled)")
            return
        self.file_number, ctype = decode_file_header(head, path)
        self.compression = COMPRESSION_NAMES[ctype]
        p = self.valid_length = FILE_HEADER_SIZE
        magic_prefix = FOOTER_MAGIC
        while p < end:
            n = end - p
            first = win.get(p, 8 if n > 8 else n)
            if first == magic_prefix[: len(first)]:
                self._footer(win, p, n)
                return
            if n < RECORD_HEADER_SIZE:
                self._torn(p, "record header")
                return
            fields = parse_record_header(win.get(p, RECORD_HEADER_SIZE), 0)
            if fields is None:
                if self._zeros_from(win, p, end):
                    self._torn(p, "record (zero-filled)")
                    return
                raise CorruptionError("value-log record header checksum mismatch", path, p)
            klen, vlen, raw_len, ctype, pcheck = fields
            why = header_fields_error(klen, vlen, raw_len, ctype)
            if why is not None:
                raise CorruptionError(f"value-log record header: {why}", path, p)
            size = RECORD_HEADER_SIZE + klen + vlen
            if size > n:
                self._torn(p, "record")
                return
            rec = win.get(p, size)
            if payload_check(memoryview(rec)[RECORD_HEADER_SIZE:]) != pcheck:
                if size == n:
                    self._torn(p, "record (checksum mismatch at the end of the file)")
                    return
                raise CorruptionError("value-log record checksum mismatch", path, p)
            vstart = RECORD_HEADER_SIZE + klen
            value = rec[vstart:]
            if ctype != COMPRESSION_NONE:
                value = decompress(value, raw_len, path, p)
            self.num_records += 1
            self.record_bytes += size
            self.valid_length = p + size
            yield p, size, rec[RECORD_HEADER_SIZE:vstart], value, ctype
            p += size

    def _footer(self, win: _Window, p: int, n: int) -> None:
        path = self.path
        if n < FOOTER_SIZE:
            self._torn(p, "footer")
            return
        footer = decode_footer(win.get(p, FOOTER_SIZE), 0)
        if footer is None:
            if n == FOOTER_SIZE:
                self._torn(p, "footer (checksum mismatch at the end of the file)")
                return
            raise CorruptionError("value-log footer checksum mismatch", path, p)
        file_number, count, nbytes = footer
        if (file_number, count, nbytes) != (self.file_number, self.num_records, self.record_bytes):
            raise CorruptionError(
                f"value-log footer says file {file_number}, {count} records, {nbytes} bytes; "
                f"the file holds file {self.file_number}, {self.num_records} records, {self.record_bytes} bytes",
                path,
                p,
            )
        if n > FOOTER_SIZE:
            raise CorruptionError(f"{n - FOOTER_SIZE} bytes follow the value-log footer", path, p + FOOTER_SIZE)
        self.sealed = True
        self.valid_length = p + FOOTER_SIZE


def iter_records(fs, path: str) -> Iterator[tuple[int, int, bytes, bytes]]:
    """``(offset, size, key, value)`` of every intact record of a value-log file.

    A torn tail ends the iteration; damage with data after it raises CorruptionError.
    """
    for offset, size, key, value, _ in ValueLogScan(fs, path):
        yield offset, size, key, value


def recover_file(fs, path: str) -> int:
    """Recover the active file after a crash: the valid length, with a torn tail truncated.

    Returns the end of the last intact record (or of the footer); 0 when not even the file
    header survived (the file holds nothing and may be deleted).  Damage followed by intact
    data raises CorruptionError and changes nothing.
    """
    return ValueLogScan(fs, path).recover().valid_length


def verify_file(fs, path: str, *, length: int | None = None) -> tuple[int, int]:
    """``(number of records, record bytes)`` after checking every checksum (and the footer).

    Strict: a torn tail is CorruptionError too, so run it on sealed or recovered files -- or
    on the active file with ``length`` = the writer's ``size`` read under the write lock, so
    a record being appended meanwhile is not mistaken for a torn one.
    """
    scan = ValueLogScan(fs, path, strict=True, length=length).run()
    return scan.num_records, scan.record_bytes


def _show(b: bytes, limit: int = 48) -> str:
    s = repr(b[:limit])
    return s + ("..." if len(b) > limit else "")


def dump_vlog(fs, path: str) -> Iterator[str]:
    """Human-readable lines describing every record of a value-log file (``antkv dump-vlog``)."""
    scan = ValueLogScan(fs, path)
    records = iter(scan)
    first = next(records, None)
    yield (
        f"value-log file {path}: file number {scan.file_number}, "
        f"compression {scan.compression or 'none'}, {scan.file_size} bytes"
    )
    if first is not None:
        for offset, size, key, value, ctype in _chain(first, records):
            stored = size - RECORD_HEADER_SIZE - len(key)
            yield (
                f"  @{offset} size {size}: key {_show(key)} ({len(key)} B), value {len(value)} B"
                f" ({stored} B on disk, {COMPRESSION_NAMES[ctype] or 'uncompressed'})"
            )
    state = "sealed" if scan.sealed else "unsealed"
    yield f"{scan.num_records} records, {scan.record_bytes} record bytes, {state}, valid length {scan.valid_length}"
    if scan.torn_tail_offset is not None:
        yield f"torn tail at offset {scan.torn_tail_offset} ({scan.file_size - scan.torn_tail_offset} bytes dropped)"


def _chain(first, rest):
    yield first
    yield from rest
