"""The codec of the rows the state store keeps decoded (:data:`ROWS`), and its encoder of a
batch's values in bulk, specialised to rows of integers.

A value state's row and a map entry's value are kept by the store as the Python rows
themselves (``StateStore.put_decoded`` / ``get_decoded``), a tuple of rows per stored value,
and encoded when the batch's writes settle: all of a batch's values at once
(:meth:`RowsCodec.encode_many`).  The bytes are :mod:`antkv.spark.state.codec`'s, byte for
byte (``tests/test_spark_views.py`` pins them); what differs is the work.  An int of -64..63,
a row's count below 0x80, None and a nested row's tag each encode as one fixed piece, made once
(``codec``'s tables); any other int is encoded when asked.  A row of ints and Nones is then its
count's piece followed by one lookup per value, joined once -- where the general encoder tests
each value's type and runs a varint loop -- and a batch's values of one state variable, which
share a shape, are joined with loops in C only (:func:`encode_values`).  In a batch, rows of
large ints (times in ms, ids) are encoded whole in numpy (:func:`_joined_int_rows`), and a column
of mostly large ints beside other values has its pieces made at once (:func:`_varint_pieces`),
not one Python call per int.  Reading, the values a batch warms are
decoded in bulk when many share one layout of ints, Nones, bools and rows
(:func:`decode_laid_out`): a column per int in numpy, not a varint loop per byte.
"""

from __future__ import annotations

from itertools import chain, compress, repeat
from operator import is_, itemgetter

import numpy as np

from antkv.spark.state.codec import (
    COUNT_PIECES,
    INT_PIECES,
    NONE_PIECE,
    R_BYTES,
    R_FALSE,
    R_INT,
    R_NONE,
    R_ROW,
    R_TRUE,
    ROW_PIECE,
    int_piece,
    decode_rows,
    encode_rows,
)


class _IntPieces(dict):
    """An int (exactly ``int``: a bool or a float equal to a key would find the int's piece) or
    None -> its piece of a row's encoding; ints outside -64..63 are encoded when asked, not kept."""

    __slots__ = ()

    def __missing__(self, value: int) -> bytearray:
        return int_piece(value)


_PIECES = _IntPieces(INT_PIECES)
_PIECES[None] = NONE_PIECE
_piece = _PIECES.__getitem__


class _BytesHeads(dict):
    """A bytes value's length -> the head of its encoding: the tag and the length's varint."""

    __slots__ = ()

    def __missing__(self, length: int) -> bytes:
        head, n = bytearray((R_BYTES,)), length
        while n > 0x7F:
            head.append((n & 0x7F) | 0x80)
            n >>= 7
        head.append(n)
        if len(self) < _MAX_HEADS:  # (a batch's values have few lengths: each is made once)
            self[length] = bytes(head)
        return bytes(head)


_MAX_HEADS = 4096  # lengths _BYTES_HEADS keeps the head of
_BYTES_HEADS = _BytesHeads({n: bytes((R_BYTES, n)) for n in range(0x80)})
_INT_ROW_TYPES = frozenset((int, type(None)))
_PAIR_PIECE = COUNT_PIECES[2]


def _large_ints(rows: list) -> bool:
    """Whether the first or the last of ``rows`` (tuples of exact ints and Nones, not empty)
    holds an int outside -64..63: the sample that sends a batch's rows to the numpy encoders,
    quicker for such ints, where the table's pieces are quicker for small ones."""
    return None in map(_PIECES.get, rows[0] + rows[-1])  # (.get: None for an int not in the table)


def _int_rows_pieces(rows: list, width: int) -> list:
    """The pieces of ``rows`` (tuples of ``width`` exact ints and Nones, not empty), as
    ``width`` iterables to be zipped: each value's piece, row after row.  Column by column
    (:func:`_int_column_pieces`) when :func:`_large_ints`; else from the table as the rows
    come (and any large int among them is still encoded)."""
    if _large_ints(rows):
        return list(map(_int_column_pieces, zip(*rows)))
    return [map(_piece, chain.from_iterable(rows))] * width


def _int_column_pieces(column) -> list:
    """``[_piece(v) for v in column]`` for a sequence of exact ints and Nones.  A column whose
    ints are mostly outside -64..63 (times in ms, ids, large counters: each such int would be
    one Python call of :func:`int_piece`), with no None and no int beyond 64 bits, has its
    pieces made in numpy instead (:func:`_varint_pieces`), about three times quicker per int."""
    pieces = list(map(_PIECES.get, column))  # (None for each int not in the table)
    outside = pieces.count(None)
    if not outside:
        return pieces
    if outside >= _NUMPY_INTS and 2 * outside >= len(column) and None not in column and \
            -_INT64 <= min(column) and max(column) < _INT64:
        return _varint_pieces(column)
    for i in compress(range(len(pieces)), map(is_, pieces, repeat(None))):  # (the few large ints)
        pieces[i] = int_piece(column[i])
    return pieces


_NUMPY_INTS = 128  # ints outside the table in a column at least, for _int_column_pieces to use numpy
_INT64 = 1 << 63
_GROUP_SHIFTS = np.arange(0, 64, 7, dtype=np.uint64)  # a uint64's ten 7-bit groups, lowest first


def _varint_matrix(a: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """The pieces of int64 array ``a``'s values, as ``(bytes, lengths)``: row ``i`` of the
    uint8 matrix ``bytes`` starts with ``a[i]``'s piece -- the ``R_INT`` tag, then its zigzag
    cut into 7-bit groups up to its highest non-zero one (one group at least), the continuation
    bit set on every group but its last -- and is padded to the longest piece; ``lengths[i]``
    is the piece's length, or ``lengths`` is None when every piece is one length (the width)."""
    z = (a.view(np.uint64) << np.uint64(1)) ^ (a >> 63).view(np.uint64)  # zigzag, in 64 bits
    top = int(z.max()) if len(z) else 0
    groups_needed = max(1, (top.bit_length() + 6) // 7)
    groups = ((z[:, None] >> _GROUP_SHIFTS[:groups_needed]) & np.uint64(0x7F)).astype(np.uint8)
    lengths = None
    if groups_needed > 1 and int(z.min()) >> (7 * (groups_needed - 1)):  # every piece the longest
        groups[:, :-1] |= 0x80  # (times of one era, ids of one range: the common case)
    elif groups_needed > 1:
        nonzero = groups != 0
        lengths = groups_needed - np.argmax(nonzero[:, ::-1], axis=1)  # up to the highest non-zero group
        lengths[~nonzero.any(axis=1)] = 1  # zero: one group
        groups |= (np.arange(groups_needed) < lengths[:, None] - 1).astype(np.uint8) << 7
        lengths += 1  # the tag
    out = np.empty((len(a), groups_needed + 1), dtype=np.uint8)
    out[:, 0] = R_INT
    out[:, 1:] = groups
    return out, lengths


def _row_bytes(matrix: np.ndarray, lengths: np.ndarray | None, keep: np.ndarray | None = None) -> list:
    """Each row of the uint8 matrix ``matrix`` as bytes: the whole row when ``lengths`` is None,
    else row ``i``'s ``lengths[i]`` (at least 1) bytes that ``keep[i]`` marks (its first ones
    when ``keep`` is None).  The rows of one length are made by numpy at once -- an item of a
    void dtype converts to bytes, zero bytes kept -- not one slice per row."""
    n, width = matrix.shape
    if lengths is None:
        return np.ascontiguousarray(matrix).view(f"V{width}").ravel().tolist()
    if keep is None:
        keep = np.arange(width) < lengths[:, None]
    shortest, longest = int(lengths.min()), int(lengths.max())
    if shortest == longest:  # (the common case: every row one length)
        return matrix[keep].view(f"V{shortest}").tolist()
    order = np.argsort(lengths, kind="stable")
    by_length = lengths[order]
    flat = matrix[order][keep[order]]  # the rows' bytes, shortest rows first
    starts = [0, *(np.flatnonzero(np.diff(by_length)) + 1).tolist(), n]
    made, pos = [], 0
    for begin, end in zip(starts, starts[1:]):
        length = int(by_length[begin])
        made += flat[pos:pos + (end - begin) * length].view(f"V{length}").tolist()
        pos += (end - begin) * length
    where = np.empty(n, dtype=np.intp)
    where[order] = np.arange(n)
    return list(map(made.__getitem__, where.tolist()))


def _varint_pieces(ints) -> list:
    """``[int_piece(v) for v in ints]`` for ints of -2**63..2**63-1, in numpy
    (:func:`_varint_matrix`)."""
    out, lengths = _varint_matrix(np.array(ints, dtype=np.int64))
    return _row_bytes(out, lengths)


_JOIN_ROWS = 8192  # rows _joined_int_rows encodes at a time (bounding its matrices)


def _joined_int_rows(segments: list, rows: list, width: int, leading: list | None = None) -> list | None:
    """The encodings of ``rows`` (tuples of ``width`` exact ints and Nones) as ``segments`` lay
    them out: a bytes segment is the same in every encoding, an int segment ``j`` is the piece
    of the row's column ``j`` (``-1``: of ``leading[i]``, an int or None beside row ``i``) --
    made in numpy, the rows' bytes cut from one buffer, with no Python step per value.  None
    when a value is None or an int beyond 64 bits (then nothing was encoded)."""
    encoded = []
    for begin in range(0, len(rows), _JOIN_ROWS):
        chunk = rows[begin:begin + _JOIN_ROWS]
        n = len(chunk)
        try:
            a = np.fromiter(chain.from_iterable(chunk), dtype=np.int64, count=n * width).reshape(n, width)
            if leading is not None:
                lead = np.fromiter(leading[begin:begin + n], dtype=np.int64, count=n)
        except (TypeError, OverflowError):  # a None; an int beyond 64 bits
            return None
        pieces = []  # (a segment's block of bytes, its rows' lengths in it, or None: the block's width)
        for segment in segments:
            if type(segment) is bytes:
                pieces.append((np.broadcast_to(np.frombuffer(segment, dtype=np.uint8), (n, len(segment))), None))
            else:
                pieces.append(_varint_matrix(lead if segment < 0 else a[:, segment]))
        laid = np.concatenate([block for block, _ in pieces], axis=1)
        lengths = np.zeros(n, dtype=np.int64)
        for block, column_lengths in pieces:
            lengths += block.shape[1] if column_lengths is None else column_lengths
        keep = None
        if any(column_lengths is not None for _, column_lengths in pieces):  # some pieces shorter than their block
            keep = np.concatenate([np.ones(block.shape, dtype=bool) if column_lengths is None else
                                   np.arange(block.shape[1]) < column_lengths[:, None]
                                   for block, column_lengths in pieces], axis=1)
        encoded += _row_bytes(laid, None if keep is None else lengths, keep)
    return encoded


_BULK_VALUES = 32  # values encoded by encode_values' bulk paths at least (fewer: one call each)
_FIRST, _SECOND = itemgetter(0), itemgetter(1)
_TUPLES = frozenset((tuple,))
_ONE, _TWO = frozenset((1,)), frozenset((2,))
_BYTES = {bytes}


def _int_rows_width(rows: list, width: int | None = None) -> int:
    """The width of every row of ``rows`` when they are all tuples of that one width (1 to
    0x7F) of exact ints and Nones, else 0.  ``width``: the rows are known to be tuples of
    that one width."""
    if width is None:
        if not _TUPLES.issuperset(map(type, rows)):
            return 0
        widths = set(map(len, rows))
        if len(widths) != 1:
            return 0
        width = widths.pop()
    if not 0 < width < 0x80 or not _INT_ROW_TYPES.issuperset(set(map(type, chain.from_iterable(rows)))):
        return 0
    return width


def _columns_with_bytes(rows: list) -> list | None:
    """The pieces of ``rows``' encodings after their count, as lists to be zipped, when they
    are all tuples of one width (1 to 0x7F) whose every column holds either ints and Nones (a
    piece each) or bytes (a head each, then the bytes themselves, not copied); None for any
    other list."""
    if not _TUPLES.issuperset(map(type, rows)):
        return None
    widths = set(map(len, rows))
    if len(widths) != 1 or not 0 < min(widths) < 0x80:
        return None
    pieces = []
    for j in range(min(widths)):
        column = list(map(itemgetter(j), rows))
        types = set(map(type, column))
        if _INT_ROW_TYPES.issuperset(types):
            pieces.append(_int_column_pieces(column))
        elif types == _BYTES:
            pieces += (list(map(_BYTES_HEADS.__getitem__, map(len, column))), column)
        else:
            return None
    return pieces


def _expiring_int_rows(pairs: list) -> list | None:
    """The encodings of ``pairs`` -- ``(expiry, row)`` tuples (the processor's values), an
    expiry an int or None, a row a tuple -- when every row is of one width of exact ints and
    Nones and every expiry an int or None: ``2 | expiry | R_ROW | count | pieces``; else None."""
    expiries = list(map(_FIRST, pairs))
    if not _INT_ROW_TYPES.issuperset(set(map(type, expiries))):
        return None
    inner = list(map(_SECOND, pairs))
    width = _int_rows_width(inner)
    if not width:
        return None
    tail = ROW_PIECE + COUNT_PIECES[width]
    if expiries.count(None) == len(expiries):  # no time to live: one head
        head = _PAIR_PIECE + NONE_PIECE + tail
        if _large_ints(inner):
            encoded = _joined_int_rows([head, *range(width)], inner, width)
            if encoded is not None:
                return encoded
        return list(map(b"".join, zip(repeat(head), *_int_rows_pieces(inner, width))))
    # (expiries are times: large ints)
    encoded = _joined_int_rows([_PAIR_PIECE, -1, tail, *range(width)], inner, width, expiries)
    if encoded is not None:
        return encoded
    return list(map(b"".join, zip(repeat(_PAIR_PIECE), _int_column_pieces(expiries), repeat(tail),
                                  *_int_rows_pieces(inner, width))))


def encode_values(values: list) -> list:
    """``[encode_rows(v) for v in values]`` for the decoded values of a batch (tuples of rows).

    The batch's values of one state variable share a shape, and three shapes are encoded in
    bulk, with no Python step per value: every value one row of ints and Nones of one width
    (a view's value or map entry), such a row with columns of bytes among them (their heads
    from a table, the bytes joined as they are: :func:`_columns_with_bytes`), or one
    ``(expiry, row)`` pair with a row of ints and Nones (the processor's).  Each encoding is
    then joined from pieces: the head its shape fixes, the expiry's piece (part of the head
    when no value has an expiry), and the row's values' pieces -- or, for rows of ints only
    that :func:`_large_ints` samples as large, laid out whole in numpy
    (:func:`_joined_int_rows`).  Any other list is encoded value by value."""
    if len(values) >= _BULK_VALUES and _TUPLES.issuperset(map(type, values)) and _ONE.issuperset(map(len, values)):
        rows = list(map(_FIRST, values))
        widths = set(map(len, rows)) if _TUPLES.issuperset(map(type, rows)) else ()
        if widths == _TWO and type(rows[0][1]) is tuple:  # the processor's shape, likely: (expiry, row)
            encoded = _expiring_int_rows(rows)
            if encoded is not None:
                return encoded
        width = _int_rows_width(rows, widths.pop()) if len(widths) == 1 else 0
        if width:  # a view's: count | pieces
            if _large_ints(rows):
                encoded = _joined_int_rows([COUNT_PIECES[width], *range(width)], rows, width)
                if encoded is not None:
                    return encoded
            return list(map(b"".join, zip(repeat(COUNT_PIECES[width]), *_int_rows_pieces(rows, width))))
        columns = _columns_with_bytes(rows)  # (after the processor's shape: it is tried on every commit)
        if columns is not None:  # a view's, with bytes: count | pieces and heads with bytes
            return list(map(b"".join, zip(repeat(COUNT_PIECES[len(rows[0])]), *columns)))
    return list(map(encode_rows, values))


# --------------------------------------------------------------------------- decoding in bulk

_BULK_DECODE = 64  # values of one length at least, for decode_laid_out to decode them in numpy
_MAX_INT_BYTES = 9  # an int's varint bytes at most in the numpy path (63 bits: no overflow)
_LAYOUTS_TRIED = 4  # layouts decode_laid_out tries among the values of one length
_CONSTANTS = {R_NONE: None, R_FALSE: False, R_TRUE: True}


def _layout(raw: bytes):
    """``(tree, ints)`` when ``raw`` encodes exactly one row whose values are ints (varints of
    at most :data:`_MAX_INT_BYTES` bytes), Nones, bools and such rows, every count below 0x80,
    with at least one int; else None.  ``ints`` lists each int's ``(offset, bytes)``; ``tree``
    is the row: per value ``(0, constant)``, ``(1, i)`` (the i-th int) or ``(2, subtree)``.
    Every other byte of ``raw`` is a tag or a count, below 0x80."""
    ints: list = []

    def row_at(pos: int):
        if pos >= len(raw) or raw[pos] >= 0x80:
            return None
        count = raw[pos]
        pos += 1
        tree = []
        for _ in range(count):
            if pos >= len(raw):
                return None
            tag = raw[pos]
            pos += 1
            if tag == R_INT:
                end = pos
                while end < len(raw) and raw[end] >= 0x80:
                    end += 1
                if end >= len(raw) or end + 1 - pos > _MAX_INT_BYTES:
                    return None
                tree.append((1, len(ints)))
                ints.append((pos, end + 1 - pos))
                pos = end + 1
            elif tag in _CONSTANTS:
                tree.append((0, _CONSTANTS[tag]))
            elif tag == R_ROW:
                nested = row_at(pos)
                if nested is None:
                    return None
                subtree, pos = nested
                tree.append((2, subtree))
            else:
                return None
        return tree, pos

    parsed = row_at(0) if raw else None
    if parsed is None or parsed[1] != len(raw) or not ints:
        return None
    return parsed[0], ints


def _rows_of(tree, columns: list):
    """The rows ``tree`` (:func:`_layout`) describes, one per value of ``columns`` (the ints,
    decoded), as an iterator of tuples."""
    if not tree:
        return repeat(())  # an empty row, as many times as its siblings' values
    return zip(*[repeat(x) if kind == 0 else columns[x] if kind == 1 else _rows_of(x, columns)
                 for kind, x in tree])


def _decode_same_layout(raws: list, length: int):
    """For ``raws``, each ``length`` bytes: ``(indexes, values)`` of those laid out as the
    first is (:func:`_layout`: the same tags and counts at the same places, each int's varint
    ending at the same byte), decoded in numpy -- each a tuple of its one row, as
    :meth:`RowsCodec.decode` gives; none when the first has no such layout."""
    layout = _layout(raws[0])
    if layout is None:
        return [], []
    tree, ints = layout
    data = np.frombuffer(b"".join(raws), dtype=np.uint8).reshape(len(raws), length)
    first = data[0]
    in_int = np.zeros(length, dtype=bool)
    for offset, n in ints:
        in_int[offset:offset + n] = True
    same = (data[:, ~in_int] == first[~in_int]).all(axis=1)  # tags and counts
    same &= ((data[:, in_int] >= 0x80) == (first[in_int] >= 0x80)).all(axis=1)  # where each varint ends
    indexes = np.nonzero(same)[0]
    rows = data[indexes]
    columns = []
    for offset, n in ints:
        z = np.zeros(len(rows), dtype=np.uint64)
        for i in range(n):
            z |= (rows[:, offset + i] & 0x7F).astype(np.uint64) << np.uint64(7 * i)
        columns.append(((z >> np.uint64(1)).astype(np.int64) ^ -(z & np.uint64(1)).astype(np.int64)).tolist())
    return indexes.tolist(), list(zip(_rows_of(tree, columns)))


def decode_laid_out(raws: list) -> list:
    """For each of ``raws``: ``RowsCodec.decode(raw)`` when it was decoded in bulk, else None.
    Values of one length that share a layout of ints, Nones, bools and rows (:func:`_layout`:
    a value state's row of times and counts, most of a key group's) are decoded together in
    numpy, a column per int, when at least :data:`_BULK_DECODE` of them do; the others (a
    layout of their own, strings, bytes, floats, other stored formats) are left."""
    out = [None] * len(raws)
    if len(raws) < _BULK_DECODE:
        return out
    lengths = np.fromiter(map(len, raws), dtype=np.int64, count=len(raws))
    for length, count in zip(*(a.tolist() for a in np.unique(lengths, return_counts=True))):
        if count < _BULK_DECODE or not length:
            continue
        pending = np.nonzero(lengths == length)[0].tolist()
        for _ in range(_LAYOUTS_TRIED):  # the layout of the first pending value, then of the first left
            indexes, values = _decode_same_layout(list(map(raws.__getitem__, pending)), length)
            if len(indexes) == len(pending):  # all laid out alike (the common case)
                if len(pending) == len(raws):
                    return values
                list(map(out.__setitem__, pending, values))
                break
            list(map(out.__setitem__, map(pending.__getitem__, indexes), values))  # (loops in C)
            left = np.ones(len(pending), dtype=bool)
            left[indexes] = False
            left[0] = False  # (the first is done: decoded, or of no layout)
            pending = list(compress(pending, left.tolist()))
            if len(pending) < _BULK_DECODE:
                break
    return out


# --------------------------------------------------------------------------- the codec


class RowsCodec:
    """A stored value as the tuple of its rows (``decode_rows``; a value state's or map entry's
    value is one row, a list's its elements): the codec of the state store's decoded values
    (``StateStore.get_decoded`` / ``put_decoded``).  Values given to ``encode`` must be what
    ``decode`` returns for their encoding -- tuples of rows whose elements are
    :data:`PLAIN_TYPES` values or such rows -- so that the store may keep them as decoded."""

    __slots__ = ()

    @staticmethod
    def encode(rows) -> bytes:
        return encode_rows(rows)

    @staticmethod
    def decode(data: bytes) -> tuple:
        return tuple(decode_rows(data))

    @staticmethod
    def decode_some(raws: list) -> list:
        """``decode`` of each of ``raws`` that decodes in bulk, None for the others:
        :func:`decode_laid_out`."""
        return decode_laid_out(raws)

    @staticmethod
    def encode_many(values: list) -> list:
        """``[encode(v) for v in values]``: :func:`encode_values`."""
        return encode_values(values)


ROWS = RowsCodec()
PLAIN_TYPES = frozenset((int, str, float, bool, bytes, type(None)))
"""The types of the values that decode as themselves (exactly those types): a *plain row*, a
tuple ``row`` with ``PLAIN_TYPES.issuperset(map(type, row))`` (tested inline by the views,
one call per write), may be kept as its own decoded form."""
