"""The expiring entry: a value with a time to live (RocksDB's DBWithTTL, Flink's state TTL).

An entry of kind ``EXPIRING`` (:mod:`antkv.base.dbformat`) wraps a VALUE or a VALUE_POINTER
with the time it expires.  Its value, in the WAL, the memtable and the tables, is::

    +----------------------+-------------+------------------------------------------+
    | expiry               | inner kind  | inner value                              |
    | u64 big-endian, ms   | u8: 1 VALUE | the user's value (VALUE), or the 25-byte |
    | since the Unix epoch | 3 POINTER   | value pointer (VALUE_POINTER)            |
    +----------------------+-------------+------------------------------------------+
     0                      8             9

Once the clock (``Options.clock``, seconds) reaches ``expiry`` the entry reads as a deletion:
it hides the key and every older version of it.  Flush and compaction turn an expired entry
into a DELETION (its value-log record counts as garbage), which the bottom level then drops,
as a compaction filter returning *remove* does in RocksDB.

PART OF THE FILE FORMAT: the layout and the kind numbers it holds.
"""

from __future__ import annotations

import struct

from ..errors import CorruptionError
from .dbformat import EXPIRING, VALUE, VALUE_POINTER

_HEAD = struct.Struct(">QB")
HEAD_SIZE = _HEAD.size  # 9
_unpack_head = _HEAD.unpack_from


def encode_expiring(expiry_ms: int, inner_kind: int, inner_value: bytes) -> bytes:
    return _HEAD.pack(expiry_ms, inner_kind) + inner_value


def decode_expiring(value: bytes) -> tuple[int, int, bytes]:
    """``(expiry_ms, inner kind, inner value)``; CorruptionError if it cannot be one."""
    try:
        expiry, kind = _unpack_head(value, 0)
    except struct.error:
        raise CorruptionError(f"expiring entry of {len(value)} bytes is too short") from None
    if kind != VALUE and kind != VALUE_POINTER:
        raise CorruptionError(f"expiring entry wraps kind {kind}")
    return expiry, kind, value[HEAD_SIZE:]


def expiry_of(value: bytes) -> int:
    """The expiry (ms) of an expiring entry's value."""
    return _unpack_head(value, 0)[0]


def now_ms(clock) -> int:
    """The time of ``clock`` (a callable returning seconds since the epoch) in ms."""
    return int(clock() * 1000)


def live_inner(value: bytes, now: int) -> tuple[int, bytes] | None:
    """``(inner kind, inner value)`` of an expiring entry still alive at ``now`` (ms), else
    None (it reads as a deletion)."""
    expiry, kind, inner = decode_expiring(value)
    return None if expiry <= now else (kind, inner)


def pointer_in(kind: int, value: bytes) -> bytes | None:
    """The value pointer an entry of ``kind`` holds (a VALUE_POINTER, or an EXPIRING entry
    wrapping one), else None."""
    if kind == VALUE_POINTER:
        return value
    if kind == EXPIRING and value[8:9] == _POINTER_BYTE:
        return value[HEAD_SIZE:]
    return None


_POINTER_BYTE = bytes((VALUE_POINTER,))
