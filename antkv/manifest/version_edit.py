"""``VersionEdit``: one change to the set of live files, as recorded in the MANIFEST.

The MANIFEST is a log file (:mod:`antkv.record.log_format` framing) whose records are encoded edits.
The first record of every MANIFEST is a full snapshot (all live tables and value-log files and
the counters), so a MANIFEST never depends on an older one.

An edit is a sequence of tagged fields (integers little-endian; ``bytes`` = u32 length + data).
The tags are PART OF THE FILE FORMAT::

    tag  field                 body
    ---  --------------------  -----------------------------------------------------------
      1  log_number            u64   WALs with a smaller number are fully flushed
      2  next_file_number      u64
      3  last_sequence         u64
      4  new_table             u8 level | u64 number | u64 size | u64 smallest_seq |
                               u64 largest_seq | bytes smallest | bytes largest |
                               u8 largest_is_exclusive | u64 num_entries |
                               u32 n | n x (u64 vlog number, u64 bytes referenced)
      5  deleted_table         u8 level | u64 number
      6  new_vlog_file         u64 number
      7  sealed_vlog_file      u64 number | u64 total record bytes
      8  vlog_garbage          u64 number | u64 garbage bytes added
      9  deleted_vlog_file     u64 number
     10  table_translation     u64 number | i64 seq_offset |
                               u32 n | n x (u64 vlog number in the table, u64 vlog number here)

A ``table_translation`` follows the ``new_table`` of the same number in the same edit.  It is
written only for a table brought in by ingestion (:mod:`antkv.db.ingest`) whose entries were
written in another sequence-number and file-number space: the reader adds ``seq_offset`` to
every sequence number it reads from the file and renames the value-log files its pointers
name (``docs/format.md``, "Ingested tables").
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from ..errors import CorruptionError

TAG_LOG_NUMBER = 1
TAG_NEXT_FILE_NUMBER = 2
TAG_LAST_SEQUENCE = 3
TAG_NEW_TABLE = 4
TAG_DELETED_TABLE = 5
TAG_NEW_VLOG = 6
TAG_SEALED_VLOG = 7
TAG_VLOG_GARBAGE = 8
TAG_DELETED_VLOG = 9
TAG_TABLE_TRANSLATION = 10

_U8 = struct.Struct("<B")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_U64x2 = struct.Struct("<QQ")
_TABLE_HEAD = struct.Struct("<BQQQQ")
_DEL_TABLE = struct.Struct("<BQ")
_TRANSLATION = struct.Struct("<Qq")  # table number, signed sequence offset


@dataclass
class FileMetaData:
    """A live table.  ``largest`` is exclusive when it is the end of a range tombstone."""

    number: int
    size: int
    smallest: bytes
    largest: bytes
    largest_exclusive: bool = False
    smallest_seq: int = 0
    largest_seq: int = 0
    num_entries: int = 0
    blob_refs: dict[int, int] = field(default_factory=dict)  # in this database's vlog numbers
    # an ingested table's translation (persisted as a table_translation record): the sequence
    # numbers in its file plus ``seq_offset`` are this database's (``smallest_seq`` and
    # ``largest_seq`` above are already translated); a value pointer naming value-log file ``a``
    # in the file names ``vlog_map[a]`` here
    seq_offset: int = 0
    vlog_map: dict[int, int] = field(default_factory=dict)
    # runtime state, not persisted
    reader: object = field(default=None, compare=False, repr=False)
    # the open reader's point-read form followed by the reader itself (``reader.point +
    # (reader,)``), set with ``reader`` by the table cache; None while the table is not open or
    # when its reader has no such form.  A point read (DB.get, antkv.db.read_api) takes it in one
    # step instead of two: the reader's attributes are in a dict, not a slot.
    point: tuple | None = field(default=None, compare=False, repr=False)

    @classmethod
    def from_properties(cls, number: int, props) -> "FileMetaData":
        """The metadata of table ``number`` from its :class:`~antkv.sst.properties.TableProperties`."""
        return cls(
            number=number,
            size=props.file_size,
            smallest=props.smallest_key,
            largest=props.largest_key,
            largest_exclusive=props.largest_is_exclusive,
            smallest_seq=props.smallest_seq,
            largest_seq=props.largest_seq,
            num_entries=props.num_entries,
            blob_refs=dict(props.blob_refs),
        )

    def contains_key(self, key: bytes) -> bool:
        if key < self.smallest:
            return False
        return key < self.largest if self.largest_exclusive else key <= self.largest

    def overlaps(self, lo: bytes | None, hi: bytes | None) -> bool:
        """Whether the file may hold keys in ``[lo, hi]`` (None = unbounded)."""
        if hi is not None and self.smallest > hi:
            return False
        if lo is not None:
            if self.largest < lo or (self.largest_exclusive and self.largest == lo):
                return False
        return True


@dataclass
class VersionEdit:
    log_number: int | None = None
    next_file_number: int | None = None
    last_sequence: int | None = None
    new_tables: list[tuple[int, FileMetaData]] = field(default_factory=list)
    deleted_tables: list[tuple[int, int]] = field(default_factory=list)
    new_vlogs: list[int] = field(default_factory=list)
    sealed_vlogs: list[tuple[int, int]] = field(default_factory=list)
    vlog_garbage: list[tuple[int, int]] = field(default_factory=list)
    deleted_vlogs: list[int] = field(default_factory=list)

    def encode(self) -> bytes:
        out = bytearray()
        if self.log_number is not None:
            out += _U8.pack(TAG_LOG_NUMBER) + _U64.pack(self.log_number)
        if self.next_file_number is not None:
            out += _U8.pack(TAG_NEXT_FILE_NUMBER) + _U64.pack(self.next_file_number)
        if self.last_sequence is not None:
            out += _U8.pack(TAG_LAST_SEQUENCE) + _U64.pack(self.last_sequence)
        for level, f in self.new_tables:
            out += _U8.pack(TAG_NEW_TABLE)
            out += _TABLE_HEAD.pack(level, f.number, f.size, f.smallest_seq, f.largest_seq)
            out += _U32.pack(len(f.smallest)) + f.smallest
            out += _U32.pack(len(f.largest)) + f.largest
            out += _U8.pack(1 if f.largest_exclusive else 0) + _U64.pack(f.num_entries)
            out += _U32.pack(len(f.blob_refs))
            for vnum, nbytes in sorted(f.blob_refs.items()):
                out += _U64x2.pack(vnum, nbytes)
            if f.seq_offset or f.vlog_map:
                out += _U8.pack(TAG_TABLE_TRANSLATION) + _TRANSLATION.pack(f.number, f.seq_offset)
                out += _U32.pack(len(f.vlog_map))
                for src, dst in sorted(f.vlog_map.items()):
                    out += _U64x2.pack(src, dst)
        for level, number in self.deleted_tables:
            out += _U8.pack(TAG_DELETED_TABLE) + _DEL_TABLE.pack(level, number)
        for number in self.new_vlogs:
            out += _U8.pack(TAG_NEW_VLOG) + _U64.pack(number)
        for number, total in self.sealed_vlogs:
            out += _U8.pack(TAG_SEALED_VLOG) + _U64x2.pack(number, total)
        for number, garbage in self.vlog_garbage:
            out += _U8.pack(TAG_VLOG_GARBAGE) + _U64x2.pack(number, garbage)
        for number in self.deleted_vlogs:
            out += _U8.pack(TAG_DELETED_VLOG) + _U64.pack(number)
        return bytes(out)

    @classmethod
    def decode(cls, data: bytes, path: str, offset: int) -> "VersionEdit":
        e = cls()
        p = 0
        try:
            while p < len(data):
                tag = data[p]
                p += 1
                if tag == TAG_LOG_NUMBER:
                    (e.log_number,) = _U64.unpack_from(data, p)
                    p += 8
                elif tag == TAG_NEXT_FILE_NUMBER:
                    (e.next_file_number,) = _U64.unpack_from(data, p)
                    p += 8
                elif tag == TAG_LAST_SEQUENCE:
                    (e.last_sequence,) = _U64.unpack_from(data, p)
                    p += 8
                elif tag == TAG_NEW_TABLE:
                    level, number, size, sseq, lseq = _TABLE_HEAD.unpack_from(data, p)
                    p += _TABLE_HEAD.size
                    smallest, p = _read_bytes(data, p)
                    largest, p = _read_bytes(data, p)
                    excl = data[p]
                    (n_entries,) = _U64.unpack_from(data, p + 1)
                    p += 9
                    (nrefs,) = _U32.unpack_from(data, p)
                    p += 4
                    refs = {}
                    for _ in range(nrefs):
                        vnum, nbytes = _U64x2.unpack_from(data, p)
                        p += 16
                        refs[vnum] = nbytes
                    if excl > 1:
                        raise ValueError("bad flag")
                    meta = FileMetaData(number, size, smallest, largest, bool(excl), sseq, lseq, n_entries, refs)
                    e.new_tables.append((level, meta))
                elif tag == TAG_TABLE_TRANSLATION:
                    number, offset = _TRANSLATION.unpack_from(data, p)
                    (nmap,) = _U32.unpack_from(data, p + 16)
                    p += 20
                    vmap = {}
                    for _ in range(nmap):
                        src, dst = _U64x2.unpack_from(data, p)
                        p += 16
                        vmap[src] = dst
                    metas = [m for _, m in e.new_tables if m.number == number]
                    if not metas:
                        raise ValueError(f"translation of table {number}, which the edit does not add")
                    metas[-1].seq_offset, metas[-1].vlog_map = offset, vmap
                elif tag == TAG_DELETED_TABLE:
                    e.deleted_tables.append(_DEL_TABLE.unpack_from(data, p))
                    p += _DEL_TABLE.size
                elif tag == TAG_NEW_VLOG:
                    e.new_vlogs.append(_U64.unpack_from(data, p)[0])
                    p += 8
                elif tag == TAG_SEALED_VLOG:
                    e.sealed_vlogs.append(_U64x2.unpack_from(data, p))
                    p += 16
                elif tag == TAG_VLOG_GARBAGE:
                    e.vlog_garbage.append(_U64x2.unpack_from(data, p))
                    p += 16
                elif tag == TAG_DELETED_VLOG:
                    e.deleted_vlogs.append(_U64.unpack_from(data, p)[0])
                    p += 8
                else:
                    raise ValueError(f"unknown tag {tag}")
        except (struct.error, IndexError, ValueError) as ex:
            raise CorruptionError(f"malformed version edit ({ex})", path, offset) from None
        return e


def _read_bytes(data: bytes, p: int) -> tuple[bytes, int]:
    (n,) = _U32.unpack_from(data, p)
    p += 4
    if p + n > len(data):
        raise ValueError("truncated bytes field")
    return data[p : p + n], p + n
