"""The two encodings of Spark state: grouping keys (order-preserving) and rows (compact).

Both are defined here and nowhere else; the engine checksums the bytes they produce.

Grouping-key encoding (``encode_key`` / ``decode_key``)
=======================================================

A grouping key is a tuple of scalars.  Its encoding is each element's encoding followed by one
end-of-tuple byte ``0x01``.  Every element starts with a type tag greater than ``0x01``, so:

* the encoding is **prefix-free**: no tuple's encoding is a prefix of another's, and a prefix
  scan over ``stored key prefix + encode_key(k)`` finds exactly the entries of ``k``;
* bytewise order of encodings equals Python's tuple order whenever the tuples compare element by
  element with the same types (a shorter tuple sorts before its extensions).  Across types the
  order is by tag: ``None < False < True < int < float < date < datetime < bytes < str``.

=====  ======================  ==============================================================
tag    type                    payload
=====  ======================  ==============================================================
0x01   (end of tuple)          --
0x02   None                    --
0x03   False                   --
0x04   True                    --
0x0C   int < 0, 8 bytes        ones' complement of ``-v``, big-endian, in ``0x14 - tag`` bytes
 ...   ...                     (``0x0C`` .. ``0x13``: 8 .. 1 bytes; more bytes = more negative)
0x14   int == 0                --
0x15   int > 0, 1 byte         ``v`` big-endian in ``tag - 0x14`` bytes
 ...   ...                     (``0x15`` .. ``0x1C``: 1 .. 8 bytes)
0x20   float                   IEEE-754 binary64, big-endian, sign bit flipped for ``>= 0``,
                               all bits flipped for ``< 0``; ``-0.0`` is stored as ``0.0`` and
                               every NaN as the one quiet NaN (Spark groups them the same way)
0x30   datetime.date           ``date.toordinal()``, 4 bytes big-endian
0x31   datetime.datetime       microseconds since 0001-01-01T00:00, 8 bytes big-endian; an
                               aware datetime is converted to UTC and decodes naive (UTC)
0x40   bytes                   the bytes with ``0x00`` escaped as ``0x00 0xFF``, then ``0x00``
0x41   str                     UTF-8, escaped and terminated as bytes
=====  ======================  ==============================================================

Integers are limited to ``-(2**64 - 1) .. 2**64 - 1``.  NumPy scalars are accepted through
their ``item()``.

Row encoding (``encode_row`` / ``decode_row`` / ``decode_rows``)
================================================================

A row (a tuple of values, for value state, list elements and map values) is a varint element
count followed by each element as ``tag payload``.  A row is self-delimiting, so a list of rows
is stored as the plain **concatenation** of their encodings: appending to a list is appending
bytes, never decoding it.

=====  ======================  ==============================================================
tag    type                    payload
=====  ======================  ==============================================================
0x00   None                    --
0x01   False                   --
0x02   True                    --
0x03   int                     zigzag LEB128 varint (any size)
0x04   float                   IEEE-754 binary64, little-endian
0x05   bytes                   varint length, bytes
0x06   str                     varint length, UTF-8 bytes
0x07   datetime.date           zigzag varint of ``date.toordinal()``
0x08   datetime.datetime       varint microseconds since 0001-01-01T00:00 (aware: as UTC)
0x09   tuple or list           a nested row (decodes as a tuple)
=====  ======================  ==============================================================

Malformed input to a decoder raises :class:`antkv.CorruptionError`; a value of an unsupported
type raises ``TypeError``; an out-of-range value raises :class:`antkv.InvalidArgumentError`.
"""

from __future__ import annotations

import datetime as _dt
import math
import struct

from antkv import CorruptionError, InvalidArgumentError

_EPOCH = _dt.datetime(1, 1, 1)
_MICRO = _dt.timedelta(microseconds=1)
_D_BE = struct.Struct(">d")
_Q_BE = struct.Struct(">Q")
_I_BE = struct.Struct(">I")
_D_LE = struct.Struct("<d")
_SIGN = 1 << 63
_MASK64 = (1 << 64) - 1
_CANONICAL_NAN = _Q_BE.unpack(b"\x7f\xf8\x00\x00\x00\x00\x00\x00")[0]

# Grouping-key tags: part of the stored key format, never renumber.
K_END = 0x01
K_NONE = 0x02
K_FALSE = 0x03
K_TRUE = 0x04
K_INT_ZERO = 0x14
K_FLOAT = 0x20
K_DATE = 0x30
K_DATETIME = 0x31
K_BYTES = 0x40
K_STR = 0x41

# Row tags: part of the stored value format, never renumber.
R_NONE = 0x00
R_FALSE = 0x01
R_TRUE = 0x02
R_INT = 0x03
R_FLOAT = 0x04
R_BYTES = 0x05
R_STR = 0x06
R_DATE = 0x07
R_DATETIME = 0x08
R_ROW = 0x09


def _as_python_scalar(value):
    """A NumPy (or pandas) scalar as the Python scalar it stands for; anything else unchanged."""
    item = getattr(value, "item", None)
    if item is not None and not isinstance(value, (bytes, str, tuple, list)):
        return item()
    return value


def _micros(value: _dt.datetime) -> int:
    if getattr(value, "nanosecond", 0):
        raise InvalidArgumentError(f"timestamp {value} has nanoseconds; state keeps microseconds")
    if value.tzinfo is not None:
        value = value.astimezone(_dt.timezone.utc).replace(tzinfo=None)
    return (value - _EPOCH) // _MICRO


def _from_micros(micros: int) -> _dt.datetime:
    return _EPOCH + _dt.timedelta(microseconds=micros)


# --------------------------------------------------------------------------- grouping keys


def _escape(data: bytes) -> bytes:
    return data.replace(b"\x00", b"\x00\xff") + b"\x00"


def _encode_key_element(value, out: bytearray) -> None:
    if value is None:
        out.append(K_NONE)
    elif value is True or value is False:
        out.append(K_TRUE if value else K_FALSE)
    elif isinstance(value, str):
        out.append(K_STR)
        out += _escape(value.encode("utf-8"))
    elif isinstance(value, (bytes, bytearray, memoryview)):
        out.append(K_BYTES)
        out += _escape(bytes(value))
    elif isinstance(value, int):
        if value == 0:
            out.append(K_INT_ZERO)
            return
        magnitude = -value if value < 0 else value
        if magnitude > _MASK64:
            raise InvalidArgumentError(f"integer {value} is outside the key range +-(2**64 - 1)")
        n = (magnitude.bit_length() + 7) // 8
        if value > 0:
            out.append(K_INT_ZERO + n)
            out += magnitude.to_bytes(n, "big")
        else:
            out.append(K_INT_ZERO - n)
            out += (magnitude ^ ((1 << (8 * n)) - 1)).to_bytes(n, "big")
    elif isinstance(value, float):
        if math.isnan(value):
            bits = _CANONICAL_NAN
        else:
            bits = _Q_BE.unpack(_D_BE.pack(value + 0.0))[0]  # + 0.0 turns -0.0 into 0.0
        bits = (bits ^ _MASK64) if bits & _SIGN else (bits | _SIGN)
        out.append(K_FLOAT)
        out += _Q_BE.pack(bits)
    elif isinstance(value, _dt.datetime):  # before date: datetime is a date subclass
        out.append(K_DATETIME)
        out += _Q_BE.pack(_micros(value))
    elif isinstance(value, _dt.date):
        out.append(K_DATE)
        out += _I_BE.pack(value.toordinal())
    else:
        plain = _as_python_scalar(value)
        if plain is value:
            raise TypeError(f"a grouping key element cannot be {type(value).__name__}")
        _encode_key_element(plain, out)


_ONE_INT_HEADS = [bytes((K_INT_ZERO + n,)) for n in range(9)]  # a positive int of n bytes
_END = bytes((K_END,))
_ONE_STR_HEAD = bytes((K_STR,))
_ONE_STR_TAIL = b"\x00" + bytes((K_END,))


def encode_key(key: tuple) -> bytes:
    """The order-preserving, prefix-free encoding of a grouping-key tuple."""
    if type(key) is tuple and len(key) == 1:
        element = key[0]
        if type(element) is str:  # the commonest key, inlined
            raw = element.encode("utf-8")
            if b"\x00" in raw:
                raw = raw.replace(b"\x00", b"\x00\xff")
            return _ONE_STR_HEAD + raw + _ONE_STR_TAIL
        if type(element) is int and 0 < element <= _MASK64:  # as common (a map's user key), inlined
            n = (element.bit_length() + 7) >> 3
            return _ONE_INT_HEADS[n] + element.to_bytes(n, "big") + _END
    if not isinstance(key, tuple):
        raise TypeError(f"a grouping key must be a tuple, not {type(key).__name__}")
    out = bytearray()
    for element in key:
        _encode_key_element(element, out)
    out.append(K_END)
    return bytes(out)


def _unescape(data: bytes, pos: int) -> tuple[bytes, int]:
    parts = []
    while True:
        zero = data.find(b"\x00", pos)
        if zero < 0:
            raise CorruptionError(f"unterminated string in an encoded grouping key at {pos}")
        parts.append(data[pos:zero])
        if zero + 1 < len(data) and data[zero + 1] == 0xFF:
            parts.append(b"\x00")
            pos = zero + 2
        else:
            return b"".join(parts), zero + 1


def decode_key(data: bytes, pos: int = 0) -> tuple[tuple, int]:
    """Decode one grouping key starting at ``pos``; returns ``(key, position after it)``."""
    out = []
    try:
        while True:
            tag = data[pos]
            pos += 1
            if tag == K_END:
                return tuple(out), pos
            if tag == K_NONE:
                out.append(None)
            elif tag == K_FALSE or tag == K_TRUE:
                out.append(tag == K_TRUE)
            elif K_INT_ZERO - 8 <= tag <= K_INT_ZERO + 8:
                n = abs(tag - K_INT_ZERO)
                if pos + n > len(data):
                    raise IndexError
                raw = int.from_bytes(data[pos : pos + n], "big")
                pos += n
                out.append(raw if tag >= K_INT_ZERO else -(raw ^ ((1 << (8 * n)) - 1)))
            elif tag == K_FLOAT:
                bits = _Q_BE.unpack_from(data, pos)[0]
                pos += 8
                bits = (bits ^ _SIGN) if bits & _SIGN else (bits ^ _MASK64)
                out.append(_D_BE.unpack(_Q_BE.pack(bits))[0])
            elif tag == K_DATE:
                out.append(_dt.date.fromordinal(_I_BE.unpack_from(data, pos)[0]))
                pos += 4
            elif tag == K_DATETIME:
                out.append(_from_micros(_Q_BE.unpack_from(data, pos)[0]))
                pos += 8
            elif tag == K_BYTES or tag == K_STR:
                raw, pos = _unescape(data, pos)
                out.append(raw.decode("utf-8") if tag == K_STR else raw)
            else:
                raise CorruptionError(f"unknown grouping-key tag 0x{tag:02x} at {pos - 1}")
    except (IndexError, struct.error, ValueError, OverflowError) as e:
        raise CorruptionError(f"malformed encoded grouping key at {pos}: {e}") from None


# --------------------------------------------------------------------------- rows


def _put_varint(n: int, out: bytearray) -> None:
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _get_varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


def _zigzag(n: int) -> int:
    return n << 1 if n >= 0 else ((-n) << 1) - 1


def _unzigzag(z: int) -> int:
    return z >> 1 if not z & 1 else -((z + 1) >> 1)


def _encode_value(value, out: bytearray) -> None:
    """One value of a row (``_row_parts`` writes exact ints, None, tuples and short bytes itself)."""
    if value is None:  # a NumPy NaT's item()
        out.append(R_NONE)
    elif value is True or value is False:
        out.append(R_TRUE if value else R_FALSE)
    elif isinstance(value, (bytes, bytearray, memoryview)):
        out.append(R_BYTES)
        _put_varint(len(value), out)
        out += value
    elif isinstance(value, str):
        raw = value.encode("utf-8")
        out.append(R_STR)
        _put_varint(len(raw), out)
        out += raw
    elif isinstance(value, int):
        out.append(R_INT)
        _put_varint(_zigzag(value), out)
    elif isinstance(value, float):
        out.append(R_FLOAT)
        out += _D_LE.pack(value)
    elif isinstance(value, _dt.datetime):  # before date: datetime is a date subclass
        out.append(R_DATETIME)
        _put_varint(_micros(value), out)
    elif isinstance(value, _dt.date):
        out.append(R_DATE)
        _put_varint(_zigzag(value.toordinal()), out)
    elif isinstance(value, (tuple, list)):
        out.append(R_ROW)
        _encode_row_into(value, out)
    else:
        plain = _as_python_scalar(value)
        if plain is value:
            raise TypeError(f"a state value cannot hold {type(value).__name__}")
        _encode_value(plain, out)


# The pieces the commonest values encode as, made once: an int of one varint byte (-64..63), a
# row's count below 0x80, None and a nested row's tag.  A row is encoded as a list of pieces
# joined once (``_row_parts``): a lookup per value instead of a tag, a zigzag and a varint loop.
# (Shared with :mod:`antkv.spark.state.rows_codec`, whose encoders join the same pieces.)
INT_PIECES = {v: bytes((R_INT, _zigzag(v))) for v in range(-64, 64)}
COUNT_PIECES = [bytes((n,)) for n in range(0x80)]
NONE_PIECE = bytes((R_NONE,))
ROW_PIECE = bytes((R_ROW,))


def int_piece(value: int) -> bytearray:
    """``R_INT`` and the zigzag LEB128 varint of ``value``."""
    out = bytearray((R_INT,))
    z = value << 1 if value >= 0 else ((-value) << 1) - 1
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return out


def _row_parts(row, parts: list) -> None:
    """Append the encoding of ``row`` (a tuple or list) to ``parts`` as pieces to be joined."""
    count = len(row)
    if count < 0x80:
        parts.append(COUNT_PIECES[count])
    else:
        out = bytearray()
        _put_varint(count, out)
        parts.append(out)
    small_int = INT_PIECES.get
    for value in row:
        if type(value) is int:  # the commonest value (bool is not int here)
            parts.append(small_int(value) or int_piece(value))
        elif value is None:
            parts.append(NONE_PIECE)
        elif type(value) is tuple:  # a nested row (a value state's row inside its TTL pair)
            parts.append(ROW_PIECE)
            _row_parts(value, parts)
        elif type(value) is bytes and len(value) < 0x80:  # as common: tag, one length byte, bytes
            parts.append(bytes((R_BYTES, len(value))))
            parts.append(value)
        else:
            out = bytearray()
            _encode_value(value, out)
            parts.append(out)


def _encode_row_into(row, out: bytearray) -> None:
    parts: list = []
    _row_parts(row, parts)
    out += b"".join(parts)


def encode_row(row) -> bytes:
    """The compact encoding of one row (a tuple or list of values)."""
    if not isinstance(row, (tuple, list)):
        raise TypeError(f"a state row must be a tuple, not {type(row).__name__}")
    parts: list = []
    _row_parts(row, parts)
    return b"".join(parts)


def encode_rows(rows) -> bytes:
    """The concatenated encodings of ``rows`` (how a list of rows is stored)."""
    parts: list = []
    for row in rows:
        if type(row) is not tuple and not isinstance(row, (tuple, list)):
            raise TypeError(f"a state row must be a tuple, not {type(row).__name__}")
        _row_parts(row, parts)
    return b"".join(parts)


_MALFORMED = (IndexError, struct.error, ValueError, OverflowError, UnicodeDecodeError)  # what bad row bytes raise


def _decode_row_at(data: bytes, pos: int) -> tuple[tuple, int]:
    count = data[pos]
    pos += 1
    if count > 0x7F:
        count, pos = _get_varint(data, pos - 1)
    out = []
    for _ in range(count):
        tag = data[pos]
        pos += 1
        if tag == R_INT:  # the commonest value, inlined: LEB128 then un-zigzag
            z = shift = 0
            while True:
                byte = data[pos]
                pos += 1
                z |= (byte & 0x7F) << shift
                if byte < 0x80:
                    break
                shift += 7
            out.append(z >> 1 if not z & 1 else -((z + 1) >> 1))
        elif tag == R_NONE:
            out.append(None)
        elif tag == R_FALSE or tag == R_TRUE:
            out.append(tag == R_TRUE)
        elif tag == R_BYTES or tag == R_STR:
            n, pos = _get_varint(data, pos)
            if pos + n > len(data):
                raise IndexError("string runs past the end")
            raw = bytes(data[pos : pos + n])
            pos += n
            out.append(raw.decode("utf-8") if tag == R_STR else raw)
        elif tag == R_FLOAT:
            out.append(_D_LE.unpack_from(data, pos)[0])
            pos += 8
        elif tag == R_DATETIME:
            micros, pos = _get_varint(data, pos)
            out.append(_from_micros(micros))
        elif tag == R_DATE:
            z, pos = _get_varint(data, pos)
            out.append(_dt.date.fromordinal(_unzigzag(z)))
        elif tag == R_ROW:
            nested, pos = _decode_row_at(data, pos)
            out.append(nested)
        else:
            raise CorruptionError(f"unknown row tag 0x{tag:02x} at {pos - 1}")
    return tuple(out), pos


def decode_row(data: bytes) -> tuple:
    """Decode a value written by :func:`encode_row` (exactly one row)."""
    try:
        row, pos = _decode_row_at(data, 0)
        if pos == len(data):
            return row
    except _MALFORMED:
        pass  # decode_rows words the error
    rows = decode_rows(data)
    if len(rows) != 1:
        raise CorruptionError(f"expected one encoded row, found {len(rows)}")
    return rows[0]


def decode_rows(data: bytes) -> list[tuple]:
    """Decode a concatenation of encoded rows (a stored list)."""
    rows = []
    pos = 0
    try:
        while pos < len(data):
            row, pos = _decode_row_at(data, pos)
            rows.append(row)
    except _MALFORMED as e:
        raise CorruptionError(f"malformed encoded row at {pos}: {e}") from None
    return rows
