"""The value-log file format: file header, records, footer.  Defined here and nowhere else.

A value-log file holds the large values that key-value separation takes out of the LSM tree.
It is append-only: a 24-byte file header, then records, then -- once the file is *sealed* --
a 36-byte footer.  A file without a footer (the active file, or one left by a crash) is
*unsealed* and just as readable.  Every byte is covered by a checksum.  All integers are
little-endian.  ``docs/format/vlog.md`` explains every byte with examples.

File header (24 bytes, written by one append when the file is created)::

    +---------+-------------+-------------+----------+-------------+-----------------+
    | magic   | version u16 | compression | reserved | file number | header check    |
    | 8 bytes | (= 1)       | u8          | u8 (= 0) | u64         | u32 xxh32(0:20) |
    +---------+-------------+-------------+----------+-------------+-----------------+
     0         8             10            11         12            20

Record (one append per record; ``size`` = 25 + key length + value length on disk)::

    +---------+-----------+---------+-------+--------------------+----------------+-----+-------+
    | key len | value len | raw len | ctype | payload check      | header check   | key | value |
    | u32     | u32 (disk)| u32     | u8    | u64 xxh3_64(key    | u32 xxh32 of   |     | (disk)|
    | < 2^31  |           |         |       |     || value)      | bytes 0:21     |     |       |
    +---------+-----------+---------+-------+--------------------+----------------+-----+-------+
     0         4           8         12      13                   21               25

``ctype`` is the compression of this record's value (0 none, 1 zstd); with ctype 0 the raw
length equals the on-disk length.  A writer with compression stores a value raw when zstd
does not make it smaller, so ctype is per record, not per file.  The key is kept so that GC
and ``verify`` can check a record on its own.

Footer (36 bytes, appended by ``seal``)::

    +--------------+-------------+--------------+--------------+--------------------+
    | footer magic | file number | record count | record bytes | footer check       |
    | 8 bytes      | u64         | u64          | u64          | u32 xxh32(0:32)    |
    +--------------+-------------+--------------+--------------+--------------------+

The footer is recognised only at a record boundary, by its magic: the magic's first four bytes
read as a u32 have the high bit set, which a record's key length (< 2^31) never has.  So a
user value can never be mistaken for a footer.  ``record bytes`` is the sum of the records'
sizes, i.e. the footer starts at ``24 + record bytes``, and nothing may follow it.

Telling a torn tail from corruption (the scanner in ``reader.py`` applies these at a record
boundary ``p``; ``n`` = bytes from ``p`` to the end of the file):

1. the bytes at ``p`` are a prefix of the footer magic and ``n`` < 36 -> torn footer (tail);
   a complete footer whose check fails is torn if it ends the file (a crash mid-seal);
2. ``n`` < 25 -> torn tail;
3. the header check fails -> torn tail if every byte from ``p`` on is zero, else corruption;
4. the header is intact but its fields are impossible -> corruption;
5. the record runs past the end of the file -> torn tail;
6. the payload check fails -> torn tail if the record ends exactly at the end of the file,
   else corruption.

PART OF THE FILE FORMAT: every constant and struct below, the checksum definitions and the
compression codes (:mod:`antkv.base.compression`, shared with tables).
"""

from __future__ import annotations

import struct
import threading

import xxhash
import zstandard

from ..base.compression import COMPRESSION_CODES, COMPRESSION_NAMES, COMPRESSION_NONE, COMPRESSION_ZSTD
from ..errors import CorruptionError, InvalidArgumentError

# --- constants: PART OF THE FILE FORMAT -------------------------------------------------

FILE_MAGIC = b"ANTKVLOG"
FORMAT_VERSION = 1
FOOTER_MAGIC = b"VLG\xf7SEAL"  # bytes 0:4 as u32 = 0xF7474C56: high bit set, never a key length

FILE_HEADER = struct.Struct("<8sHBBQI")
FILE_HEADER_SIZE = FILE_HEADER.size  # 24
RECORD_PREFIX = struct.Struct("<IIIBQ")  # the header bytes the header check covers
RECORD_HEADER = struct.Struct("<IIIBQI")
RECORD_HEADER_SIZE = RECORD_HEADER.size  # 25
_CHECKED = RECORD_PREFIX.size  # 21
_CHECK = struct.Struct("<I")
FOOTER = struct.Struct("<8sQQQI")
FOOTER_SIZE = FOOTER.size  # 36

MAX_KEY_LENGTH = (1 << 31) - 1
MAX_RECORD_SIZE = (1 << 32) - 1  # the pointer's size field is a u32

header_check = xxhash.xxh32_intdigest  # of the first 20 / 21 / 32 bytes of a header or footer
payload_check = xxhash.xxh3_64_intdigest  # of key || value-on-disk

ZSTD_LEVEL = 3


def compression_code(name: str | None) -> int:
    """The ctype of a compression name (``None`` or ``"zstd"``)."""
    try:
        return COMPRESSION_CODES[name]
    except (KeyError, TypeError):
        raise InvalidArgumentError(f"value-log compression must be None or 'zstd', got {name!r}") from None


# --- compression: one zstd (de)compressor per thread (they are not thread-safe) ---------

_tls = threading.local()


def _compressor() -> zstandard.ZstdCompressor:
    try:
        return _tls.compressor
    except AttributeError:
        c = _tls.compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_checksum=False)
        return c


def _decompressor() -> zstandard.ZstdDecompressor:
    try:
        return _tls.decompressor
    except AttributeError:
        d = _tls.decompressor = zstandard.ZstdDecompressor()
        return d


def decompress(stored, raw_len: int, path: str, offset: int) -> bytes:
    """The raw value of a zstd record, or CorruptionError."""
    try:
        # the frame's own content size must agree before zstd allocates it (a crafted frame
        # could otherwise ask for any amount of memory)
        if zstandard.frame_content_size(stored) != raw_len:
            raise CorruptionError(f"value-log record's zstd frame does not hold {raw_len} bytes", path, offset)
        raw = _decompressor().decompress(stored, max_output_size=raw_len)
    except zstandard.ZstdError as e:
        raise CorruptionError(f"value-log record does not decompress ({e})", path, offset) from None
    if len(raw) != raw_len:
        raise CorruptionError(
            f"value-log record decompresses to {len(raw)} bytes, header says {raw_len}", path, offset
        )
    return raw


# --- file header ------------------------------------------------------------------------


def encode_file_header(file_number: int, compression: int) -> bytes:
    pre = FILE_HEADER.pack(FILE_MAGIC, FORMAT_VERSION, compression, 0, file_number, 0)[:20]
    return pre + _CHECK.pack(header_check(pre))


def decode_file_header(data: bytes, path: str) -> tuple[int, int]:
    """``(file_number, compression)`` of a complete 24-byte header, or CorruptionError."""
    try:
        magic, version, compression, reserved, file_number, check = FILE_HEADER.unpack_from(data, 0)
    except struct.error:
        raise CorruptionError("value-log file header is truncated", path, 0) from None
    if magic != FILE_MAGIC:
        raise CorruptionError("not a value-log file (bad magic)", path, 0)
    if header_check(data[:20]) != check:
        raise CorruptionError("value-log file header checksum mismatch", path, 0)
    if version != FORMAT_VERSION:
        raise CorruptionError(f"unsupported value-log format version {version}", path, 0)
    if compression not in COMPRESSION_NAMES or reserved != 0:
        raise CorruptionError("value-log file header has impossible fields", path, 0)
    return file_number, compression


# --- records ----------------------------------------------------------------------------


def encode_record(key: bytes, value: bytes, compression: int) -> bytes:
    """The on-disk bytes of one record (compressing ``value`` when that makes it smaller).

    REQUIRES: key and value are ``bytes``.  Raises InvalidArgumentError when the key or the
    record is too large for the format.
    """
    raw_len = len(value)
    stored, ctype = value, COMPRESSION_NONE
    if compression and raw_len:
        packed = _compressor().compress(value)
        if len(packed) < raw_len:
            stored, ctype = packed, COMPRESSION_ZSTD
    klen = len(key)
    vlen = len(stored)
    if klen > MAX_KEY_LENGTH or RECORD_HEADER_SIZE + klen + vlen > MAX_RECORD_SIZE or raw_len > 0xFFFFFFFF:
        raise InvalidArgumentError(
            f"value-log record too large (key {klen} bytes, value {raw_len} bytes; "
            f"a record is limited to {MAX_RECORD_SIZE} bytes)"
        )
    h = xxhash.xxh3_64(key)
    h.update(stored)
    pre = RECORD_PREFIX.pack(klen, vlen, raw_len, ctype, h.intdigest())
    return b"".join((pre, _CHECK.pack(header_check(pre)), key, stored))


def parse_record_header(data, pos: int) -> tuple[int, int, int, int, int] | None:
    """``(key_len, value_len, raw_len, ctype, payload_check)`` of the header at ``pos``.

    None when the header check fails.  REQUIRES: 25 bytes available at ``pos``.  The fields
    are not validated; see :func:`header_fields_error`.
    """
    klen, vlen, raw_len, ctype, pcheck, hcheck = RECORD_HEADER.unpack_from(data, pos)
    if header_check(data[pos : pos + _CHECKED]) != hcheck:
        return None
    return klen, vlen, raw_len, ctype, pcheck


def header_fields_error(klen: int, vlen: int, raw_len: int, ctype: int) -> str | None:
    """Why an intact record header is nonetheless impossible, or None when it is fine."""
    if klen > MAX_KEY_LENGTH:
        return f"key length {klen} out of range"
    if ctype == COMPRESSION_NONE:
        if raw_len != vlen:
            return f"uncompressed record with raw length {raw_len} != stored length {vlen}"
    elif ctype != COMPRESSION_ZSTD:
        return f"unknown compression type {ctype}"
    if RECORD_HEADER_SIZE + klen + vlen > MAX_RECORD_SIZE:
        return "record size out of range"
    return None


def decode_record(data: bytes, path: str, offset: int) -> tuple[bytes, bytes]:
    """``(key, raw value)`` of ``data``, which must be exactly one whole record.

    Any damage -- a header or payload checksum mismatch, impossible fields, a length that does
    not match ``len(data)`` (a damaged or misdirected pointer), a value that does not
    decompress -- raises CorruptionError naming ``path`` and ``offset``.
    """
    size = len(data)
    if size < RECORD_HEADER_SIZE:
        raise CorruptionError(f"value-log record truncated ({size} bytes)", path, offset)
    klen, vlen, raw_len, ctype, pcheck, hcheck = RECORD_HEADER.unpack_from(data, 0)
    if header_check(data[:_CHECKED]) != hcheck:
        raise CorruptionError("value-log record header checksum mismatch", path, offset)
    if RECORD_HEADER_SIZE + klen + vlen != size:
        raise CorruptionError(
            f"value-log record is {RECORD_HEADER_SIZE + klen + vlen} bytes, pointer says {size}", path, offset
        )
    if payload_check(memoryview(data)[RECORD_HEADER_SIZE:]) != pcheck:
        raise CorruptionError("value-log record checksum mismatch", path, offset)
    vstart = RECORD_HEADER_SIZE + klen
    if ctype == COMPRESSION_NONE and raw_len == vlen:
        return data[RECORD_HEADER_SIZE:vstart], data[vstart:]
    why = header_fields_error(klen, vlen, raw_len, ctype)
    if why is not None:
        raise CorruptionError(f"value-log record header: {why}", path, offset)
    return data[RECORD_HEADER_SIZE:vstart], decompress(memoryview(data)[vstart:], raw_len, path, offset)


# --- footer -----------------------------------------------------------------------------


def encode_footer(file_number: int, record_count: int, record_bytes: int) -> bytes:
    pre = FOOTER.pack(FOOTER_MAGIC, file_number, record_count, record_bytes, 0)[:32]
    return pre + _CHECK.pack(header_check(pre))


def decode_footer(data, pos: int) -> tuple[int, int, int] | None:
    """``(file_number, record_count, record_bytes)`` of an intact footer at ``pos``, else None.

    REQUIRES: 36 bytes available at ``pos``.
    """
    magic, file_number, count, nbytes, check = FOOTER.unpack_from(data, pos)
    if magic != FOOTER_MAGIC or header_check(data[pos : pos + 32]) != check:
        return None
    return file_number, count, nbytes
