"""``SstFileWriter``: a standalone table file for :meth:`antkv.DB.ingest` (RocksDB's idea).

An *external table* is an ordinary antkv table (``docs/format/sst.md``) written outside any
database, from sorted puts and deletes and from range deletes in any order.  Every entry carries
sequence number :data:`EXTERNAL_SEQ` (0): the database that ingests the file gives the whole file
one sequence number of its own (RocksDB's *global sequence number*), newer than everything it
held, by a translation in its MANIFEST -- the file is never rewritten.  As in RocksDB, a put and
a range delete of the same file do not hide each other's keys: a range tombstone hides only
older data, and within the file nothing is older.

Large values (``len >= Options.min_blob_size`` with ``enable_blob_files``) go to a companion
value-log file, :func:`~antkv.base.filenames.external_vlog_path` of the table (``T.sst`` ->
``T.sst.vlog``), numbered :data:`EXTERNAL_VLOG_NUMBER`; the table's pointers name that number
and the ingesting database renames it.  The pair travels together::

    out.sst        the table: data blocks, bloom filter, range-del block, index, properties
    out.sst.vlog   only when some value was large: header, records, footer (sealed)

``finish()`` syncs both files and their directory; until then the files are incomplete (an
ingest refuses them: their footer is missing).
"""

from __future__ import annotations

import os
from itertools import compress, repeat
from operator import ge

from ..base.dbformat import DELETION, VALUE, VALUE_POINTER
from ..base.filenames import external_vlog_path
from ..errors import InvalidArgumentError
from ..fs import default_file_system
from ..fs.buffered import BufferedWritableFile
from ..options import Options
from ..record.batch import as_bytes
from ..sst.builder import TableBuilder
from ..vlog.pointer import decode_pointer
from ..vlog.writer import ValueLogWriter

EXTERNAL_SEQ = 0
"""The sequence number of every entry of an external table.  PART OF THE FILE FORMAT."""
EXTERNAL_VLOG_NUMBER = 0
"""The value-log file number an external table's pointers name (its companion file).  PART OF
THE FILE FORMAT; a database never numbers a file 0."""


def _bytes(x, what: str) -> bytes:
    if type(x) is bytes:
        return x
    return as_bytes(x, what)  # TypeError for str and other types; InvalidArgumentError for a released buffer


class SstFileWriter:
    """Writes one external table at ``path`` (which must not exist).

    ``options`` (an :class:`antkv.Options`, default ``Options()``) gives the table settings
    (``block_size``, ``bloom_bits_per_key``, ``compression``), the value-log ones
    (``enable_blob_files``, ``min_blob_size``, ``blob_compression``) and the ``file_system``.
    Point keys must come in strictly increasing bytewise order; range deletes may come in any
    order.  Use as a context manager: a clean exit finishes the file, an exception abandons it
    (both files removed).
    """

    def __init__(self, path, options=None):
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"path must be a str or os.PathLike, not {type(path).__name__}")
        if options is None:
            options = Options()
        elif not isinstance(options, Options):
            raise TypeError(f"options must be an antkv.Options, not {type(options).__name__}")
        self.path = os.fspath(path)
        self._options = options
        self._fs = fs = options.file_system or default_file_system()
        if fs.exists(self.path):
            raise InvalidArgumentError(f"external table {self.path} already exists")
        self._min_blob = options.min_blob_size if options.enable_blob_files else 1 << 62
        self._file = BufferedWritableFile(fs.create(self.path))  # (nothing counts until finish syncs it)
        self._builder = TableBuilder(
            self._file,
            file_number=0,
            block_size=options.block_size,
            bloom_bits_per_key=options.bloom_bits_per_key,
            compression=options.compression,
        )
        self._vlog: ValueLogWriter | None = None
        self._refs = 0
        self._tombstones = 0
        self._last: bytes | None = None
        self._state = "open"  # "open" | "finished" | "abandoned"

    # --- adding ---

    def _point(self, key, kind: int, value: bytes) -> None:
        if self._state != "open":
            raise InvalidArgumentError(f"external table {self.path} is {self._state}")
        key = _bytes(key, "key")
        if self._last is not None and key <= self._last:
            raise InvalidArgumentError(
                f"keys must be added in strictly increasing order: {key!r} after {self._last!r}"
            )
        if kind == VALUE and len(value) >= self._min_blob:
            value = self._blob(key, value)
            kind = VALUE_POINTER
        self._builder.add(key, EXTERNAL_SEQ, kind, value)
        self._last = key

    def _blob(self, key: bytes, value: bytes) -> bytes:
        """Store ``value`` in the companion value-log file; its pointer."""
        if self._vlog is None:
            self._vlog = ValueLogWriter(
                self._fs, external_vlog_path(self.path), EXTERNAL_VLOG_NUMBER,
                compression=self._options.blob_compression,
            )
        pointer = self._vlog.add(key, value)
        self._refs += decode_pointer(pointer)[2]
        return pointer

    def put(self, key, value) -> None:
        """Add ``key -> value``; ``key`` must be greater than every point key added before."""
        self._point(key, VALUE, _bytes(value, "value"))

    def put_sorted(self, keys, values) -> None:
        """Add ``keys[i] -> values[i]`` for every ``i``: what a :meth:`put` of each pair in turn
        adds (``keys`` strictly increasing, after every point key added before), in one call
        whose blocks are built in bulk (no Python call per entry) when it starts a block."""
        if self._state != "open":
            raise InvalidArgumentError(f"external table {self.path} is {self._state}")
        keys, values = list(keys), list(values)
        if len(keys) != len(values):
            raise InvalidArgumentError("put_sorted: as many values as keys needed")
        if not keys:
            return
        if self._builder.num_buffered:  # a block is open: only put() continues it
            for key, value in zip(keys, values):
                self.put(key, value)
            return
        if not set(map(type, keys)) | set(map(type, values)) <= {bytes}:
            raise TypeError("keys and values must be bytes")
        if self._last is not None and keys[0] <= self._last:
            raise InvalidArgumentError(
                f"keys must be added in strictly increasing order: {keys[0]!r} after {self._last!r}"
            )
        kinds = VALUE
        if max(map(len, values)) >= self._min_blob:
            if not all(map(bytes.__lt__, keys, keys[1:])):  # before any value is stored
                raise InvalidArgumentError("put_sorted: keys must be strictly increasing")
            kinds = [VALUE] * len(values)
            large = map(ge, map(len, values), repeat(self._min_blob))
            for i in list(compress(range(len(values)), large)):
                values[i] = self._blob(keys[i], values[i])  # (values is a copy)
                kinds[i] = VALUE_POINTER
        self._builder.add_sorted_values(keys, values, EXTERNAL_SEQ, kinds)
        self._last = keys[-1]

    def delete(self, key) -> None:
        """Add a deletion of ``key`` (hides the key's older versions once ingested)."""
        self._point(key, DELETION, b"")

    def delete_range(self, begin, end) -> None:
        """Add a deletion of ``[begin, end)`` (older data only); ``begin == end`` is a no-op."""
        if self._state != "open":
            raise InvalidArgumentError(f"external table {self.path} is {self._state}")
        begin, end = _bytes(begin, "begin"), _bytes(end, "end")
        if begin > end:
            raise InvalidArgumentError(f"delete_range: begin {begin!r} > end {end!r}")
        if begin < end:
            self._builder.add_range_tombstone(begin, end, EXTERNAL_SEQ)
            self._tombstones += 1

    # --- finishing ---

    def finish(self) -> dict:
        """Write the table's footer (and seal the value-log file), sync both and the
        directory; returns ``{"path", "vlog_path", "entries", "range_deletions", "smallest",
        "largest", "file_size"}``.  An empty file is an error, as in RocksDB."""
        if self._state != "open":
            raise InvalidArgumentError(f"external table {self.path} is {self._state}")
        b = self._builder
        if b.num_entries == 0 and not self._tombstones:
            self.abandon()
            raise InvalidArgumentError("an external table needs at least one entry")
        try:
            refs = {EXTERNAL_VLOG_NUMBER: self._refs} if self._vlog is not None else {}
            props = b.finish(blob_refs=refs)
            self._file.sync()
            self._file.close()
            if self._vlog is not None:
                self._vlog.seal()
            self._fs.sync_dir(os.path.dirname(self.path) or ".")
        except BaseException:
            self.abandon()
            raise
        self._state = "finished"
        return {
            "path": self.path,
            "vlog_path": external_vlog_path(self.path) if self._vlog is not None else None,
            "entries": props.num_entries,
            "range_deletions": props.num_range_deletions,
            "smallest": props.smallest_key,
            "largest": props.largest_key,
            "file_size": props.file_size,
        }

    def abandon(self) -> None:
        """Stop and remove what was written.  Idempotent."""
        if self._state != "open":
            return
        self._state = "abandoned"
        self._builder.abandon()
        self._file.discard()
        paths = [self.path]
        if self._vlog is not None:
            self._vlog.close()
            paths.append(self._vlog.path)
        for p in paths:
            if self._fs.exists(p):
                self._fs.remove(p)

    def __enter__(self) -> "SstFileWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.abandon()
        elif self._state == "open":
            self.finish()
