"""The value pointer: where a separated value lives in the value log.

When a value is separated, the WAL, the memtable and the tables store an entry of kind
``Kind.VALUE_POINTER`` whose value is these 25 bytes instead of the value itself (after
RocksDB's ``BlobIndex``, but fixed-size and checksummed)::

    +------+-------------+-------------+-----------+--------------------+
    | type | file number | offset      | size      | check              |
    | u8=1 | u64         | u64         | u32       | u32 xxh32(0:21)    |
    +------+-------------+-------------+-----------+--------------------+
     0      1             9             17          21                  25

* ``file number`` names the value-log file (``vlog_file_name(dirname, file_number)``);
* ``offset`` is where the record starts in that file;
* ``size`` is the whole record on disk (header + key + stored value), which is what value-log
  garbage accounting adds up when a pointer is dropped.

The check makes a damaged pointer a :class:`~antkv.CorruptionError` rather than a read of the
wrong bytes.  All integers little-endian.

PART OF THE FILE FORMAT: the layout, ``POINTER_TYPE_BLOB`` and the check.
"""

from __future__ import annotations

import struct

import xxhash

from ..errors import CorruptionError, InvalidArgumentError

POINTER_TYPE_BLOB = 1  # PART OF THE FILE FORMAT
_POINTER = struct.Struct("<BQQII")
_FIELDS = struct.Struct("<BQQI")
_CHECK = struct.Struct("<I")
POINTER_SIZE = _POINTER.size  # 25
_CHECKED = _FIELDS.size  # 21
_xxh32 = xxhash.xxh32_intdigest


def encode_pointer(file_number: int, offset: int, size: int) -> bytes:
    """The 25 bytes of a pointer to the record of ``size`` bytes at ``offset`` in the file."""
    try:
        pre = _FIELDS.pack(POINTER_TYPE_BLOB, file_number, offset, size)
    except struct.error:
        if not all(type(x) is int for x in (file_number, offset, size)):
            raise TypeError("value pointer fields must be ints") from None
        raise InvalidArgumentError(
            f"value pointer out of range: file {file_number}, offset {offset}, size {size}"
        ) from None
    return pre + _CHECK.pack(_xxh32(pre))


def decode_pointer(data: bytes, where: str = "") -> tuple[int, int, int]:
    """``(file_number, offset, size)`` of an encoded pointer.

    A pointer of the wrong length, with a failing check or an unknown type raises
    CorruptionError; ``where`` (e.g. a table name and block offset) goes into its message.
    Something that is not bytes-like raises TypeError.
    """
    try:
        kind, file_number, offset, size, check = _POINTER.unpack(data)
    except struct.error:
        raise CorruptionError(f"damaged value pointer ({len(data)} bytes, expected {POINTER_SIZE})", where or None) from None
    except TypeError:
        raise TypeError(f"a value pointer is bytes, not {type(data).__name__}") from None
    if _xxh32(data[:_CHECKED]) != check:
        raise CorruptionError("damaged value pointer (checksum mismatch)", where or None)
    if kind != POINTER_TYPE_BLOB:
        raise CorruptionError(f"unknown value pointer type {kind}", where or None)
    return file_number, offset, size
