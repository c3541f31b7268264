"""Record framing shared by the WAL and the MANIFEST ("log files").

A log file is a sequence of records, each framed as::

    +------------+--------------+-----------------------+-------------------+
    | length u32 | length check | payload checksum u64  | payload           |
    |            | u32          | xxh3_64(payload)      | (length bytes)    |
    +------------+--------------+-----------------------+-------------------+
      all integers little-endian; header = 16 bytes

``length check`` is a bijective mix of ``length`` (:func:`length_check`), so a flipped bit in
either field is always detected *before* the length is trusted.  That is what lets recovery
tell a torn tail (an incomplete last record, which a crash may leave) from damage in the
middle of the file (which is a :class:`~antkv.errors.CorruptionError`).

The rules a reader applies at offset ``p`` (see :class:`LogReader`):

1. fewer than 16 bytes left -> torn tail, stop;
2. length check fails -> torn tail if every byte from ``p`` to the end is zero (a file system
   may zero-fill a tail after power loss), otherwise corruption;
3. the payload runs past the end of the file -> torn tail, stop;
4. the payload checksum fails -> torn tail if the record ends exactly at the end of the file,
   otherwise corruption.

PART OF THE FILE FORMAT: the header layout and :func:`length_check`.
"""

from __future__ import annotations

import struct
from typing import Iterator

import xxhash

from ..errors import CorruptionError

HEADER = struct.Struct("<IIQ")
HEADER_SIZE = HEADER.size  # 16
MAX_RECORD_SIZE = 0xFFFFFFFF  # a record's length is a u32
LEN_MUL = 2654435761  # an odd multiplier: multiplication by it is a bijection mod 2^32
LEN_XOR = 0x616E746B  # "antk"

checksum = xxhash.xxh3_64_intdigest


def length_check(length: int) -> int:
    """The header's check of ``length``.  ``DB.put`` inlines this formula (its hot path;
    ``tests/test_put_path.py`` keeps the copy the same)."""
    return ((length ^ LEN_XOR) * LEN_MUL) & 0xFFFFFFFF


def frame(payload: bytes) -> bytes:
    """The framed bytes of one record."""
    n = len(payload)
    return HEADER.pack(n, length_check(n), checksum(payload)) + payload


class LogWriter:
    """Appends framed records to a :class:`~antkv.fs.WritableFile`."""

    __slots__ = ("file", "_append")

    def __init__(self, file):
        self.file = file
        self._append = file.append

    def add_record(self, payload: bytes) -> None:
        self._append(frame(payload))

    def sync(self) -> None:
        self.file.sync()

    def close(self) -> None:
        self.file.close()

    @property
    def size(self) -> int:
        return self.file.size


class LogReader:
    """Reads the records of a whole log file held in memory.

    Iterating yields ``(offset, payload)``.  After iteration, ``torn_tail_offset`` is the
    offset of a dropped torn tail (None when the file ended cleanly) and ``valid_length`` the
    length of the clean prefix.

    Damage in the middle raises CorruptionError, unless ``skip_corrupted``: then the reader
    resynchronises at the next offset where a whole record frames and checks (what RocksDB's
    ``kSkipAnyCorruptedRecords`` recovery and a repair do), and ``skipped`` lists the
    ``(offset, length)`` of every damaged stretch it stepped over.
    """

    def __init__(self, data: bytes, path: str, *, skip_corrupted: bool = False):
        self.data = data
        self.path = path
        self.torn_tail_offset: int | None = None
        self.valid_length = 0
        self.skip_corrupted = skip_corrupted
        self.skipped: list[tuple[int, int]] = []

    def _resync(self, p: int) -> int:
        """The first offset after ``p`` where a whole, checked record starts (else the end)."""
        data = self.data
        end = len(data)
        q = p + 1
        while q + HEADER_SIZE <= end:
            n, check, csum = HEADER.unpack_from(data, q)
            if length_check(n) == check and q + HEADER_SIZE + n <= end and n > 0:
                if checksum(data[q + HEADER_SIZE : q + HEADER_SIZE + n]) == csum:
                    return q
            q += 1
        return end

    def _corrupt(self, message: str, p: int) -> int:
        if not self.skip_corrupted:
            raise CorruptionError(message, self.path, p)
        q = self._resync(p)
        self.skipped.append((p, q - p))
        return q

    def __iter__(self) -> Iterator[tuple[int, bytes]]:
        data, path = self.data, self.path
        end = len(data)
        p = 0
        while p < end:
            if end - p < HEADER_SIZE:
                self.torn_tail_offset = p
                break
            n, check, csum = HEADER.unpack_from(data, p)
            if length_check(n) != check:
                if not any(data[p:]):
                    self.torn_tail_offset = p
                    break
                p = self._corrupt("log record header checksum mismatch", p)
                continue
            start = p + HEADER_SIZE
            stop = start + n
            if stop > end:
                self.torn_tail_offset = p
                break
            payload = data[start:stop]
            if checksum(payload) != csum:
                if stop == end:
                    self.torn_tail_offset = p
                    break
                p = self._corrupt("log record checksum mismatch", p)
                continue
            self.valid_length = stop
            yield p, payload
            p = stop
