"""The SST file layout: block handles, the per-block trailer, the footer.

An SST file (a *table*) is a sequence of blocks followed by a fixed-size footer::

    +-----------------------------+  offset 0
    | data block 0     + trailer  |
    | data block 1     + trailer  |  entries in internal-key order, ~block_size bytes each
    | ...                         |
    | filter block     + trailer  |  blocked bloom filter over the user keys (bloom.py)
    | range-del block  + trailer  |  range tombstones, sorted (begin, -seq) (block.py)
    | index block      + trailer  |  one entry per data block              (block.py)
    | properties block + trailer  |  counts, key and sequence ranges, ...  (properties.py)
    | footer (68 bytes)           |
    +-----------------------------+  offset file_size

Every block is written by :func:`write_block` and read back by :func:`read_block`.  It is
followed by a 9-byte *block trailer*::

    +--------------------+--------------------+----------------------------------------+
    | block bytes        | compression u8     | checksum u64 LE                        |
    | (size bytes, maybe | 0 = none, 1 = zstd | xxh3_64(block bytes + compression byte)|
    |  compressed)       |                    |                                        |
    +--------------------+--------------------+----------------------------------------+

A *block handle* ``(offset u64, size u32)`` (12 bytes, little-endian) locates a block; ``size``
counts the (possibly compressed) block bytes, NOT the trailer.  A zstd block is one complete
zstd frame (with its content size, no dictionary).

The footer, the last 68 bytes of the file::

    +--------+-----------------------------------------------+
    | offset | field                                         |
    +--------+-----------------------------------------------+
    |   0    | filter block handle      (u64 offset, u32 size) |
    |  12    | range-del block handle   (u64 offset, u32 size) |
    |  24    | index block handle       (u64 offset, u32 size) |
    |  36    | properties block handle  (u64 offset, u32 size) |
    |  48    | format version u32 (= 2)                      |
    |  52    | checksum u64 = xxh3_64(footer bytes 0..51)    |
    |  60    | magic u64 = b"antkvSST"                       |
    +--------+-----------------------------------------------+

Invariants a reader checks: the magic, the footer checksum, a known format version, every handle
lying inside ``[0, footer offset)``, and every block's checksum (when verifying).  Any failure is a
:class:`~antkv.errors.CorruptionError` naming the file and the offset of the damaged part.

PART OF THE FILE FORMAT: every constant and struct in this module.
"""

from __future__ import annotations

import struct
import threading

import xxhash
import zstandard

from ..base.compression import COMPRESSION_CODES, COMPRESSION_NAMES, COMPRESSION_NONE, COMPRESSION_ZSTD
from ..errors import CorruptionError, InvalidArgumentError

MAGIC = int.from_bytes(b"antkvSST", "little")  # PART OF THE FILE FORMAT
FORMAT_VERSION = 2  # PART OF THE FILE FORMAT; 2: blocked bloom filter (1: per-key double hashing)

BLOCK_HANDLE = struct.Struct("<QI")  # PART OF THE FILE FORMAT
BLOCK_TRAILER_SIZE = 9  # PART OF THE FILE FORMAT: compression u8 + checksum u64
_CHECKSUM = struct.Struct("<Q")
FOOTER = struct.Struct("<QIQIQIQIIQQ")  # PART OF THE FILE FORMAT
FOOTER_SIZE = FOOTER.size  # 68
_FOOTER_CHECKED = FOOTER_SIZE - 16  # bytes covered by the footer checksum

MAX_BLOCK_SIZE = 0xFFFFFFFF  # a block handle's size is a u32
BLOCK_ENTRY_OVERHEAD = 256  # what a block adds around a single entry: footer, offsets, sequence, kind


def max_entry_size() -> int:
    """The most bytes of key plus value one table entry may have: it must fit a block by
    itself (read at each call, so a test may scale :data:`MAX_BLOCK_SIZE` down)."""
    return MAX_BLOCK_SIZE - BLOCK_ENTRY_OVERHEAD

ZSTD_LEVEL = 3
# Compressed bytes are kept only when they save at least 1/8 of the block (as RocksDB does).
_MIN_RATIO_SAVING = 8

checksum = xxhash.xxh3_64_intdigest


class _ZstdContext(threading.local):
    """zstd (de)compressor objects are not thread-safe: one pair per thread."""

    def __init__(self) -> None:
        self.compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_content_size=True)
        self.decompressor = zstandard.ZstdDecompressor()


_zstd = _ZstdContext()


def compression_type(name: str | None) -> int:
    """The on-disk compression byte for an ``Options.compression`` value."""
    try:
        return COMPRESSION_CODES[name]
    except (KeyError, TypeError):
        raise InvalidArgumentError(f"unknown compression {name!r}; use 'zstd' or None") from None


def compression_name(ctype: int) -> str | None:
    return COMPRESSION_NAMES.get(ctype)


def write_block(file, contents: bytes, ctype: int) -> tuple[int, int]:
    """Append ``contents`` (compressed when worthwhile) plus its trailer; return its handle.

    REQUIRES: ``file.size`` is the offset the block lands at.
    """
    data = contents
    if ctype == COMPRESSION_ZSTD:
        packed = _zstd.compressor.compress(contents)
        if len(packed) <= len(contents) - len(contents) // _MIN_RATIO_SAVING - 1:
            data = packed
        else:
            ctype = COMPRESSION_NONE
    size = len(data)
    if size > MAX_BLOCK_SIZE:
        raise InvalidArgumentError(f"a table block of {size} bytes exceeds the 4 GiB limit")
    offset = file.size
    tail = bytes((ctype,))
    file.append(data + tail + _CHECKSUM.pack(checksum(data + tail)))
    return offset, size


class BlockRun:
    """Consecutive blocks of a table read with one ``pread`` (from file offset ``base``), served
    to :func:`read_block` like the file itself: long scans and compactions read many blocks
    per system call."""

    __slots__ = ("buf", "base")

    def __init__(self, file, base: int, end: int):
        self.buf = file.read(base, end - base)
        self.base = base

    def read(self, offset: int, n: int) -> bytes:
        offset -= self.base
        return self.buf[offset : offset + n]


def read_block(file, offset: int, size: int, verify: bool, path: str) -> tuple[bytes, int]:
    """Read the block at ``(offset, size)``: ``(buffer, n)``, its contents being ``buffer[:n]``.

    The buffer may hold trailing bytes beyond ``n`` (the trailer) -- decoders use ``n``, never
    ``len(buffer)``.  Checks the trailer checksum when ``verify``; decompresses zstd blocks.
    """
    return check_block(file.read(offset, size + BLOCK_TRAILER_SIZE), offset, size, verify, path)


def check_block(buf: bytes, offset: int, size: int, verify: bool, path: str) -> tuple[bytes, int]:
    """:func:`read_block` once the block's bytes are read: ``buf`` is what was read at ``offset``
    for a block of ``size`` bytes plus its trailer."""
    want = size + BLOCK_TRAILER_SIZE
    if len(buf) != want:
        raise CorruptionError(f"truncated block ({len(buf)} of {want} bytes)", path, offset)
    if verify:
        stored = _CHECKSUM.unpack_from(buf, size + 1)[0]
        if checksum(memoryview(buf)[: size + 1]) != stored:
            raise CorruptionError("block checksum mismatch", path, offset)
    ctype = buf[size]
    if ctype == COMPRESSION_NONE:
        return buf, size
    if ctype == COMPRESSION_ZSTD:
        frame = buf[:size]
        try:
            n = zstandard.frame_content_size(frame)
            if n < 0 or n > MAX_BLOCK_SIZE:
                raise CorruptionError("zstd block without a valid content size", path, offset)
            out = _zstd.decompressor.decompress(frame)
        except (zstandard.ZstdError, MemoryError, ValueError) as e:
            raise CorruptionError(f"undecodable zstd block ({e})", path, offset) from None
        return out, len(out)
    raise CorruptionError(f"unknown block compression type {ctype}", path, offset)


def encode_footer(handles: list[tuple[int, int]]) -> bytes:
    """The footer for the filter, range-del, index and properties block handles (in that order)."""
    (fo, fs), (ro, rs), (io, is_), (po, ps) = handles
    head = FOOTER.pack(fo, fs, ro, rs, io, is_, po, ps, FORMAT_VERSION, 0, MAGIC)[:_FOOTER_CHECKED]
    return head + _CHECKSUM.pack(checksum(head)) + _CHECKSUM.pack(MAGIC)


def decode_footer(buf: bytes, footer_offset: int, path: str) -> list[tuple[int, int]]:
    """The four block handles of a footer found at ``footer_offset``; checks everything."""
    if len(buf) != FOOTER_SIZE:
        raise CorruptionError("file too short to be a table", path, footer_offset)
    fields = FOOTER.unpack(buf)
    if fields[10] != MAGIC:
        raise CorruptionError("bad table magic number", path, footer_offset + FOOTER_SIZE - 8)
    if fields[9] != checksum(buf[:_FOOTER_CHECKED]):
        raise CorruptionError("table footer checksum mismatch", path, footer_offset)
    if fields[8] != FORMAT_VERSION:
        raise CorruptionError(f"unsupported table format version {fields[8]}", path, footer_offset + 48)
    handles = [(fields[0], fields[1]), (fields[2], fields[3]), (fields[4], fields[5]), (fields[6], fields[7])]
    for i, (off, size) in enumerate(handles):
        if off + size + BLOCK_TRAILER_SIZE > footer_offset:
            raise CorruptionError("block handle points past the footer", path, footer_offset + 12 * i)
    return handles
