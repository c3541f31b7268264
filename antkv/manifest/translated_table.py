"""Opening a live table, and reading a table that came from another database.

Every table of a version is opened by :func:`open_table_reader` (the table cache, the worker
processes and ``verify`` all do).  A table written by this database is a plain
:class:`~antkv.sst.reader.TableReader`.  A table brought in by ingestion (:mod:`antkv.db.ingest`)
keeps the bytes it was written with -- sequence numbers of the database (or the external
writer) that wrote it, value pointers naming that database's value-log files -- and its
``FileMetaData`` carries a *translation* (``seq_offset``, ``vlog_map``; a MANIFEST
``table_translation`` record).  :class:`TranslatedTableReader` applies it to everything it
returns, so the layers above see entries of this database only::

    in the file:     (b"k", seq 7, VALUE_POINTER, ->vlog 12 @ 4096)
    seq_offset 900, vlog_map {12: 31}
    returned:        (b"k", seq 907, VALUE_POINTER, ->vlog 31 @ 4096)

Invariant: translation is order-preserving (one offset per table), so a block's internal-key
order is the same before and after; only the plain reader's path costs nothing extra.
"""

from __future__ import annotations

from ..base.dbformat import EXPIRING, VALUE_POINTER
from ..base.expiry import HEAD_SIZE, pointer_in
from ..base.filenames import table_file_name
from ..errors import CorruptionError
from ..sst.reader import TableReader
from ..vlog.pointer import decode_pointer, encode_pointer


def open_table_reader(
    fs, dbname: str, f, *, cache=None, verify_checksums: bool = True, cache_index_and_filter_blocks: bool = False
) -> TableReader:
    """The reader of live table ``f`` (a ``FileMetaData``) of the database in ``dbname``."""
    path = table_file_name(dbname, f.number)
    cls = TableReader if not f.seq_offset and not f.vlog_map else TranslatedTableReader
    r = cls.open(fs, path, f.number, cache=cache, verify_checksums=verify_checksums,
                 cache_index_and_filter_blocks=cache_index_and_filter_blocks)
    if cls is TableReader:
        return r
    r.set_translation(f.seq_offset, f.vlog_map)
    return r


class TranslatedTableReader(TableReader):
    """A :class:`TableReader` whose sequence numbers and value pointers are translated into
    this database's spaces (module docstring).  Call :meth:`set_translation` once after
    ``open``, before sharing it."""

    def set_translation(self, seq_offset: int, vlog_map: dict[int, int]) -> None:
        self.seq_offset = seq_offset
        self.vlog_map = dict(vlog_map)
        # the fused point read (DB.get, antkv.db.read_api) returns a block's entries as stored:
        # every lookup of a translated table goes through find(), which translates them
        self.point = None
        self.range_tombstones = [(b, e, s + seq_offset) for b, e, s in self.range_tombstones]

    # --- translation of what the plain reader returns ---

    def _pointer(self, pointer: bytes) -> bytes:
        number, offset, size = decode_pointer(pointer, self.path)
        mapped = self.vlog_map.get(number)
        if mapped is None:
            raise CorruptionError(f"value pointer names value-log file {number}, which the table did not bring", self.path)
        return encode_pointer(mapped, offset, size)

    def _value(self, kind: int, value: bytes) -> bytes:
        """``value`` with the pointer it holds renamed (a VALUE_POINTER, or an EXPIRING entry
        wrapping one)."""
        p = pointer_in(kind, value)
        if p is None:
            return value
        return self._pointer(p) if kind == VALUE_POINTER else value[:HEAD_SIZE] + self._pointer(p)

    def _block(self, block):
        keys, negs, kinds, values = block
        off = self.seq_offset
        if off:
            negs = [n - off for n in negs]
        if VALUE_POINTER in kinds or EXPIRING in kinds:
            v = self._value
            values = [v(k, x) if k >= VALUE_POINTER else x for k, x in zip(kinds, values)]
        return keys, negs, kinds, values

    def find(self, user_key: bytes, neg_read: int):
        e = super().find(user_key, neg_read + self.seq_offset)
        if e is None:
            return None
        seq, kind, value = e
        return seq + self.seq_offset, kind, (self._value(kind, value) if kind >= VALUE_POINTER else value)

    def columns(self, lo=None, hi=None):
        return self._block(super().columns(lo, hi))

    def blocks_forward(self, start=None):
        return map(self._block, super().blocks_forward(start))

    def blocks_backward(self, start=None, exclusive=False):
        return map(self._block, super().blocks_backward(start, exclusive))

    def iter_forward(self, start=None):
        for keys, negs, kinds, values in self.blocks_forward(start):
            yield from zip(keys, negs, kinds, values)

    def iter_backward(self, start=None):
        for keys, negs, kinds, values in self.blocks_backward(start):
            yield from zip(reversed(keys), reversed(negs), reversed(kinds), reversed(values))
