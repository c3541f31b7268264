"""Block contents: a sorted run of entries laid out in columns, decodable in C loops.

Data blocks, the index block, the range-del block and the properties block all use this one
layout.  An *entry* is ``(key: bytes, seq: int, kind: int, value: bytes)``; entries are stored in
the order given (for data blocks: internal-key order).  The contents of a block of ``n`` entries
(``n`` may be 0) with restart interval ``R``::

    +--------------------------------------------------------------------------+
    | key suffixes, concatenated          K bytes                              |
    | values, concatenated                V bytes                              |
    | ends     2n x uE   end offset (from block start) of suffix 0..n-1, then   |
    |                    of value 0..n-1; each piece starts where the last ends |
    | shared    n x uS   bytes entry i shares with its restart key              |
    | seqs      n x uQ   sequence number of entry i                             |
    | kinds     n x u8   kind of entry i (antkv.dbformat.Kind)                  |
    | block footer, 9 bytes:                                                   |
    |   n u32 | R u16 | E u8 | S u8 | Q u8     E, S, Q in {1, 2, 4, 8}: widths  |
    +--------------------------------------------------------------------------+
      all integers little-endian; uE etc. = unsigned integer of E bytes

*Restart points and key prefix compression*: entries ``0, R, 2R, ...`` are restart points and
store their whole key (``shared == 0``).  Every other entry stores only what follows the first
``shared`` bytes it has in common with the key of its group's restart point::

    key[i] == key[R * (i // R)][:shared[i]] + suffix[i]

Sharing with the restart key rather than the previous key (as LevelDB does) makes every key
decodable independently of its neighbours, so :func:`decode_block` rebuilds all keys with
``map`` and slicing -- C loops, no Python bytecode per entry.  The column widths are chosen per
block (the smallest that fits), which keeps the per-entry overhead near LevelDB's varints.

A *decoded block* is the tuple of PARALLEL LISTS ``(keys, neg_seqs, kinds, values)`` with
``neg_seqs[i] == -seq[i]``, so ``zip(*decoded)`` yields antkv's entry tuples and ``bisect`` on
``keys`` (then on ``neg_seqs`` within one key's run) finds an internal key.

PART OF THE FILE FORMAT: the layout above and the block footer struct.
"""

from __future__ import annotations

import struct
from itertools import accumulate, chain, repeat
from operator import le, neg

from ..errors import CorruptionError

BLOCK_FOOTER = struct.Struct("<IHBBB")  # PART OF THE FILE FORMAT: n, R, E, S, Q
BLOCK_FOOTER_SIZE = BLOCK_FOOTER.size  # 9
DEFAULT_RESTART_INTERVAL = 16
_WIDTH_CODES = {1: "B", 2: "H", 4: "I", 8: "Q"}
_MAX_KIND = 3

_structs: dict[tuple[int, str], struct.Struct] = {}


def _array_struct(n: int, code: str) -> struct.Struct:
    """A cached ``struct.Struct`` for ``n`` little-endian integers of type ``code``."""
    s = _structs.get((n, code))
    if s is None:
        if len(_structs) > 4096:
            _structs.clear()
        s = _structs[(n, code)] = struct.Struct(f"<{n}{code}")
    return s


def _width(max_value: int) -> int:
    if max_value < 0x100:
        return 1
    if max_value < 0x10000:
        return 2
    if max_value < 0x100000000:
        return 4
    return 8


def shared_prefix_len(a: bytes, b: bytes) -> int:
    """The length of the longest common prefix of ``a`` and ``b`` (computed in C)."""
    n = min(len(a), len(b))
    x = int.from_bytes(a[:n], "big") ^ int.from_bytes(b[:n], "big")
    return n - ((x.bit_length() + 7) >> 3)


def shared_lengths(keys: list[bytes], restart_interval: int) -> list[int]:
    """``shared`` for each key: its common prefix with its group's restart key."""
    out = []
    append = out.append
    base = b""
    for i, key in enumerate(keys):
        if i % restart_interval == 0:
            base = key
            append(0)
        else:
            append(shared_prefix_len(base, key))
    return out


def encode_block(
    keys: list[bytes],
    shared: list[int],
    seqs: list[int],
    kinds: list[int],
    values: list[bytes],
    restart_interval: int = DEFAULT_RESTART_INTERVAL,
) -> bytes:
    """The contents of a block of parallel lists of entries.

    REQUIRES: ``shared == shared_lengths(keys, restart_interval)`` (callers computing it on the
    fly pass their own); every seq < 2**64; every kind < 256.
    """
    n = len(keys)
    suffixes = list(map(bytes.__getitem__, keys, map(slice, shared, repeat(None))))
    ends = list(accumulate(chain(map(len, suffixes), map(len, values))))
    if n:
        ew = _width(ends[-1])
        sw = _width(max(shared))
        qw = _width(max(seqs))
    else:
        ew = sw = qw = 1
    return b"".join(
        (
            b"".join(suffixes),
            b"".join(values),
            _array_struct(2 * n, _WIDTH_CODES[ew]).pack(*ends),
            _array_struct(n, _WIDTH_CODES[sw]).pack(*shared),
            _array_struct(n, _WIDTH_CODES[qw]).pack(*seqs),
            bytes(kinds),
            BLOCK_FOOTER.pack(n, restart_interval, ew, sw, qw),
        )
    )


def encode_entries(entries: list[tuple[bytes, int, int, bytes]]) -> bytes:
    """The contents of a block of ``(key, seq, kind, value)`` entries (not a hot path)."""
    keys = [e[0] for e in entries]
    return encode_block(
        keys,
        shared_lengths(keys, DEFAULT_RESTART_INTERVAL),
        [e[1] for e in entries],
        [e[2] for e in entries],
        [e[3] for e in entries],
    )


def decode_block(buf: bytes, size: int, path: str, offset: int) -> tuple[list, list, list, list]:
    """The decoded block ``(keys, neg_seqs, kinds, values)`` of contents ``buf[:size]``.

    Raises CorruptionError (naming ``path`` and the block's file ``offset``) when the contents
    are not a well-formed block.  ``buf`` must be ``bytes`` (the pieces are slices of it).
    """
    try:
        if size < BLOCK_FOOTER_SIZE:
            raise ValueError("shorter than its footer")
        n, restart, ew, sw, qw = BLOCK_FOOTER.unpack_from(buf, size - BLOCK_FOOTER_SIZE)
        if restart == 0:
            raise ValueError("restart interval 0")
        kinds_off = size - BLOCK_FOOTER_SIZE - n
        seqs_off = kinds_off - n * qw
        shared_off = seqs_off - n * sw
        ends_off = shared_off - 2 * n * ew
        if ends_off < 0:
            raise ValueError("columns overrun the block")
        if n == 0:
            if ends_off != 0:
                raise ValueError("bytes before an empty block's footer")
            return [], [], [], []
        ends = _array_struct(2 * n, _WIDTH_CODES[ew]).unpack_from(buf, ends_off)
        starts = (0,) + ends[:-1]
        if ends[-1] != ends_off or not all(map(le, starts, ends)):
            raise ValueError("inconsistent piece offsets")
        pieces = list(map(buf.__getitem__, map(slice, starts, ends)))
        suffixes = pieces[:n]
        shared = _array_struct(n, _WIDTH_CODES[sw]).unpack_from(buf, shared_off)
        neg_seqs = list(map(neg, _array_struct(n, _WIDTH_CODES[qw]).unpack_from(buf, seqs_off)))
        kinds = list(buf[kinds_off : kinds_off + n])
        if max(kinds) > _MAX_KIND:
            raise ValueError("unknown entry kind")
        if any(shared):
            bases = chain.from_iterable(map(repeat, suffixes[::restart], repeat(restart)))
            keys = list(map(bytes.__add__, map(bytes.__getitem__, bases, map(slice, shared)), suffixes))
        else:
            keys = suffixes
        return keys, neg_seqs, kinds, pieces[n:]
    except (struct.error, KeyError, ValueError, IndexError, TypeError) as e:
        raise CorruptionError(f"undecodable block ({e})", path, offset) from None
