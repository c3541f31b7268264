"""Block contents: a sorted run of entries laid out in columns, decodable in C loops.

Data blocks, the index block, the range-del block and the properties block all use this one
layout.  An *entry* is ``(key: bytes, seq: int, kind: int, value: bytes)``; entries are stored in
the order given (for data blocks: internal-key order).  The contents of a block of ``n`` entries
(``n`` may be 0) with restart interval ``R``, in ``g = ceil(n / R)`` groups::

    +--------------------------------------------------------------------------+
    | group prefixes, concatenated        P bytes                              |
    | key suffixes, concatenated          K bytes                              |
    | values, concatenated                V bytes                              |
    | ends  (g + 2n) x uE   end offset (from block start) of prefix 0..g-1,    |
    |                       suffix 0..n-1, value 0..n-1; a piece starts where  |
    |                       the one before it ends (the first at 0)            |
    | seqs       n x uQ     sequence number of entry i                         |
    | kinds      n x u8     kind of entry i (antkv.base.dbformat.Kind)              |
    | block footer, 8 bytes: n u32 | R u16 | E u8 | Q u8   E, Q in {1,2,4,8}   |
    +--------------------------------------------------------------------------+
      all integers little-endian; uE = unsigned integer of E bytes

*Restart points and key prefix compression*: entries ``0, R, 2R, ...`` are restart points, each
starting a group of (at most) ``R`` entries.  A group stores once a prefix common to all its
keys (the longest, or empty in every group of a block where prefixes would save too little:
:func:`worth_prefixes`); each entry stores only the rest of its key::

    key[i] == prefix[i // R] + suffix[i]

Every key is thus decodable independently of its neighbours (LevelDB instead shares with the
previous key, which forces a sequential decode), so :func:`decode_block` rebuilds all keys with
``map`` -- C loops, no Python bytecode per entry -- and :func:`search_block` binary-searches a
block straight from its bytes, building only the ~log2(n) keys it compares.  The column widths
are chosen per block (the smallest that fits).

A *decoded block* is the tuple of PARALLEL TUPLES ``(keys, neg_seqs, kinds, values)`` with
``neg_seqs[i] == -seq[i]``, so ``zip(*decoded)`` yields antkv's entry tuples and ``bisect`` on
``keys`` (then on ``neg_seqs`` within one key's run) finds an internal key.  Tuples, not lists:
the keys and values come straight out of the block's splitter as one tuple (no copy), and a
tuple of bytes and ints leaves the garbage collector's watch, so a cache full of decoded blocks
costs no collection time.  Decoded blocks are shared (through the cache): never mutated.

PART OF THE FILE FORMAT: the layout above and the block footer struct.
"""

from __future__ import annotations

import struct
from itertools import accumulate, chain, repeat
from operator import concat, eq, getitem, neg, sub

from ..base.dbformat import MAX_KIND
from ..errors import CorruptionError

BLOCK_FOOTER = struct.Struct("<IHBB")  # PART OF THE FILE FORMAT: n, R, E, Q
BLOCK_FOOTER_SIZE = BLOCK_FOOTER.size  # 8
DEFAULT_RESTART_INTERVAL = 16
_WIDTH_CODES = {1: "B", 2: "H", 4: "I", 8: "Q"}

_structs: dict[tuple[int, str], struct.Struct] = {}


def _array_struct(n: int, code: str) -> struct.Struct:
    """A cached ``struct.Struct`` for ``n`` little-endian integers of type ``code``."""
    s = _structs.get((n, code))
    if s is None:
        if len(_structs) > 4096:
            _structs.clear()
        s = _structs[(n, code)] = struct.Struct(f"<{n}{code}")
    return s


def shared_prefix_len(a: bytes, b: bytes) -> int:
    """The length of the longest common prefix of ``a`` and ``b`` (computed in C)."""
    n = len(a)
    if n != len(b):
        if len(b) < n:
            n = len(b)
            a = a[:n]
        else:
            b = b[:n]
    return n - (((int.from_bytes(a, "big") ^ int.from_bytes(b, "big")).bit_length() + 7) >> 3)


def group_prefix_lengths(keys: list[bytes], restart_interval: int) -> list[int]:
    """For each group of ``restart_interval`` keys, the length of the prefix all of them share.

    REQUIRES: ``keys`` ascending, so a group's common prefix is that of its first and last keys.
    """
    r = restart_interval
    if len(keys) <= r:
        return [shared_prefix_len(keys[0], keys[-1])] if keys else []
    lasts = keys[r - 1 :: r]
    if len(keys) % r:
        lasts.append(keys[-1])
    return list(map(shared_prefix_len, keys[::r], lasts))


PREFIX_MIN_SAVING = 8
"""Group prefixes are stored only when they save at least 1/PREFIX_MIN_SAVING of the block's
key bytes; otherwise every prefix is empty and each suffix is the whole key."""


def worth_prefixes(plens: list[int], n: int, r: int, keys: list[bytes]) -> bool:
    """Whether a block of ``n`` keys with group prefix lengths ``plens`` stores its prefixes.

    A stored prefix costs every read that decodes the block one concatenation per key (a
    third of :func:`decode_block` for 16-byte keys); random keys share a byte or two per
    group, saving ~1% of the block, so their blocks store none.  Keys with long common
    prefixes (``b"user:000123"``) save far more than 1/8 and keep them.  Either way the block
    reads the same: the format allows empty prefixes.
    """
    total = sum(plens)
    if not total:
        return False
    saved = total * (r - 1) - plens[-1] * (len(plens) * r - n)  # suffix bytes saved - prefix bytes stored
    return saved * PREFIX_MIN_SAVING >= sum(map(len, keys))


_SUFFIX_SLICES = [slice(p, None) for p in range(256)]  # key[p:] for the common prefix lengths


def encode_block(
    keys: list[bytes],
    seqs: list[int],
    kinds: list[int],
    values: list[bytes],
    restart_interval: int = DEFAULT_RESTART_INTERVAL,
) -> bytes:
    """The contents of a block of parallel lists of entries.

    REQUIRES: ``keys`` ascending (not necessarily strictly); every seq < 2**64; every kind <
    256; the block smaller than 2**64 bytes.
    """
    n = len(keys)
    if not n:
        return BLOCK_FOOTER.pack(0, restart_interval, 1, 1)
    r = restart_interval
    plens = group_prefix_lengths(keys, r)
    if worth_prefixes(plens, n, r, keys):
        prefixes = list(map(getitem, keys[::r], map(slice, plens)))
        if max(plens) < 256:
            per_key = chain.from_iterable(map(repeat, map(_SUFFIX_SLICES.__getitem__, plens), repeat(r)))
        else:
            per_key = chain.from_iterable(map(repeat, map(slice, plens, repeat(None)), repeat(r)))
        suffixes = list(map(getitem, keys, per_key))
    else:
        prefixes = [b""] * len(plens)
        suffixes = keys
    ends = list(accumulate(chain(map(len, prefixes), map(len, suffixes), map(len, values))))
    e, q = ends[-1], max(seqs)
    ew = 1 if e < 0x100 else 2 if e < 0x10000 else 4 if e < 0x100000000 else 8
    qw = 1 if q < 0x100 else 2 if q < 0x10000 else 4 if q < 0x100000000 else 8
    return b"".join(
        (
            b"".join(prefixes),
            b"".join(suffixes),
            b"".join(values),
            _array_struct(len(ends), _WIDTH_CODES[ew]).pack(*ends),
            _array_struct(n, _WIDTH_CODES[qw]).pack(*seqs),
            bytes(kinds),
            BLOCK_FOOTER.pack(n, r, ew, qw),
        )
    )


def encode_entries(entries: list[tuple[bytes, int, int, bytes]]) -> bytes:
    """The contents of a block of ``(key, seq, kind, value)`` entries (not a hot path)."""
    return encode_block(
        [e[0] for e in entries], [e[1] for e in entries], [e[2] for e in entries], [e[3] for e in entries]
    )


_DECODE_ERRORS = (struct.error, KeyError, ValueError, IndexError, TypeError)
_FOOTER_AT = BLOCK_FOOTER.unpack_from
# one sequence number's unpacker per width Q (None, hence a TypeError, for a width that is not one)
_SEQ_AT = tuple(struct.Struct("<" + _WIDTH_CODES[q]).unpack_from if q in _WIDTH_CODES else None for q in range(9))


_PIECE_CODES = [f"{i}s" for i in range(4096)]  # struct codes of piece lengths, cached
_MAX_LAYOUTS = 1024  # block layouts kept (see _layouts); the table is cleared when it fills up


def _compile_splitter(ends: tuple) -> struct.Struct:
    """A ``struct.Struct`` cutting the pieces ending at ``ends`` out of a buffer in one C call
    (each piece starts where the one before it ends); cheaper than a ``slice`` object and a
    ``__getitem__`` per piece.  Lengths come out negative, and the format invalid
    (struct.error), if ``ends`` is not ascending."""
    lens = list(map(sub, ends, chain((0,), ends)))
    if max(lens) < 4096:
        return struct.Struct("".join(map(_PIECE_CODES.__getitem__, lens)))
    return struct.Struct("".join(map("{}s".format, lens)))


# The layouts of recently read blocks, keyed by the raw bytes of a block's ``ends`` column:
# blocks of entries of the same sizes (the common case: fixed-size keys and values) share one,
# so reading them skips unpacking the ends (a tuple of g + 2n ints) and, to decode, building a
# format.  A value is the list ``[splitter or None, n, R, E, ends offset, has_prefix, ends,
# key width]``: what it was validated against (a hit must match the block's n, R, E and the
# offset where its columns start), the ends, the compiled splitter once a decode needed one (a
# point read only searches: it never pays for compiling one), and the key width (below).
_layouts: dict[bytes, list] = {}
_SPLITTER, _HAS_PREFIX, _ENDS, _KEY_WIDTH = 0, 5, 6, 7


def _key_width(ends: tuple, g: int, n: int) -> int:
    """``L`` when every prefix of the block is empty and every key is ``L > 0`` bytes long (the
    key column is then ``n`` keys of ``L`` bytes end to end), else 0."""
    if ends[g - 1]:
        return 0
    width = ends[g]
    if not width or ends[g + n - 1] != n * width:
        return 0
    return width if all(map(eq, map(sub, ends[g : g + n], ends[g - 1 : g + n - 1]), repeat(width))) else 0


def _block_layout(buf: bytes, size: int) -> tuple:
    """``(layout, g, seqs_off, qw, kinds_off)`` of block contents ``buf[:size]``, where
    ``layout`` is a :data:`_layouts` value (None for an empty block).  Checks that the columns
    fit and that the pieces end where the columns start (ValueError otherwise)."""
    if size < BLOCK_FOOTER_SIZE:
        raise ValueError("shorter than its footer")
    n, r, ew, qw = BLOCK_FOOTER.unpack_from(buf, size - BLOCK_FOOTER_SIZE)
    if r == 0:
        raise ValueError("restart interval 0")
    g = (n + r - 1) // r
    kinds_off = size - BLOCK_FOOTER_SIZE - n
    seqs_off = kinds_off - n * qw
    ends_off = seqs_off - (g + 2 * n) * ew
    if ends_off < 0:
        raise ValueError("columns overrun the block")
    if n == 0:
        if ends_off != 0:
            raise ValueError("bytes before an empty block's footer")
        return None, 0, seqs_off, qw, kinds_off
    column = buf[ends_off:seqs_off]
    hit = _layouts.get(column)
    if hit is not None and hit[1] == n and hit[2] == r and hit[3] == ew and hit[4] == ends_off:
        return hit, g, seqs_off, qw, kinds_off
    ends = _array_struct(g + 2 * n, _WIDTH_CODES[ew]).unpack_from(buf, ends_off)
    if ends[-1] != ends_off:
        raise ValueError("pieces do not end where the columns start")
    hit = [None, n, r, ew, ends_off, ends[g - 1] != 0, ends, _key_width(ends, g, n)]
    if len(_layouts) >= _MAX_LAYOUTS:
        _layouts.clear()
    _layouts[column] = hit
    return hit, g, seqs_off, qw, kinds_off


def decode_block(buf: bytes, size: int, path: str, offset: int) -> tuple[tuple, tuple, tuple, tuple]:
    """The decoded block ``(keys, neg_seqs, kinds, values)`` of contents ``buf[:size]``.

    Raises CorruptionError (naming ``path`` and the block's file ``offset``) when the contents
    are not a well-formed block.
    """
    try:
        layout, g, seqs_off, qw, kinds_off = _block_layout(buf, size)
        if layout is None:
            return (), (), (), ()
        n, r = layout[1], layout[2]
        splitter = layout[_SPLITTER]
        if splitter is None:
            splitter = layout[_SPLITTER] = _compile_splitter(layout[_ENDS])
        pieces = splitter.unpack_from(buf)
        neg_seqs = tuple(map(neg, _array_struct(n, _WIDTH_CODES[qw]).unpack_from(buf, seqs_off)))
        kinds = tuple(buf[kinds_off : kinds_off + n])
        if max(kinds) > MAX_KIND:
            raise ValueError("unknown entry kind")
        if layout[_HAS_PREFIX]:
            keys = tuple(map(concat, chain.from_iterable(map(repeat, pieces[:g], repeat(r))), pieces[g : g + n]))
        else:
            keys = pieces[g : g + n]
        return keys, neg_seqs, kinds, pieces[g + n :]
    except _DECODE_ERRORS as e:
        raise CorruptionError(f"undecodable block ({e})", path, offset) from None


SEARCHABLE_FIELDS = 10
"""The length of a *searchable block* tuple (a decoded block has 4 fields): see
:func:`searchable_block`."""


def searchable_block(buf: bytes, size: int, path: str, offset: int) -> tuple:
    """The block of contents ``buf[:size]`` with its layout, ready for :func:`search_searchable`
    to search without looking anything up: ``(buf, size, width, n, seqs_off, qw, kinds_off,
    ends, g, r)`` -- the key width (0 unless every key is ``width`` bytes with no
    prefix), the entry count, where the sequence-number column starts and its width, where the
    kinds start, the piece ends, the group count and ``r`` (below).  A block
    cache keeps blocks in this form (the layout is found once, when the block is read); the
    ``ends`` tuple is shared by every block of the same entry sizes.  ``r`` is the restart
    interval when the groups store prefixes, else 0.

    Raises CorruptionError (naming ``path`` and ``offset``) when the columns do not fit.
    """
    try:
        layout, g, seqs_off, qw, kinds_off = _block_layout(buf, size)
    except _DECODE_ERRORS as e:
        raise CorruptionError(f"undecodable block ({e})", path, offset) from None
    if layout is None:
        return buf, size, 0, 0, seqs_off, qw, kinds_off, (), 0, 0
    r = layout[2] if layout[_HAS_PREFIX] else 0
    return buf, size, layout[_KEY_WIDTH], layout[1], seqs_off, qw, kinds_off, layout[_ENDS], g, r


def search_block(buf: bytes, size: int, key: bytes, neg_seq: int, path: str, offset: int):
    """:func:`search_searchable` of the block of contents ``buf[:size]``."""
    return search_searchable(searchable_block(buf, size, path, offset), key, neg_seq, path, offset)


def search_searchable(block: tuple, key: bytes, neg_seq: int, path: str, offset: int):
    """``(seq, kind, value)`` of the first entry >= ``(key, neg_seq)`` if its key is ``key``
    (a *found entry*: the sequence number positive, as memtables return it), in a
    :func:`searchable_block`.

    Straight on the block's bytes, never decoding the whole block.  When the keys are all of
    one width ``L`` with no prefixes (fixed-size keys, the common case), the key column is
    ``n`` keys of ``L`` bytes end to end, and ``bytes.find`` (a C loop) finds the first
    occurrence of ``key`` that starts on a multiple of ``L`` -- the first entry of ``key``, the
    newest version; later versions follow it.  Otherwise a binary search that builds only the
    keys it compares (one slice of the group prefix, one of the suffix).  None when absent.
    """
    buf, size, width, n, seqs_off, qw, kinds_off, ends, g, r = block
    if not n:
        return None
    try:
        seq_at = _SEQ_AT[qw]
        if width:
            if len(key) != width:
                return None
            end = n * width  # the key column is buf[0:end]: the prefixes are empty
            pos = buf.find(key, 0, end)
            while pos > 0 and pos % width:  # a match across two keys: go on from the next key
                pos = buf.find(key, pos - pos % width + width, end)
            if pos < 0:
                return None
            i = pos // width
            while True:  # the versions of key, newest first: the first visible at neg_seq
                seq = seq_at(buf, seqs_off + i * qw)[0]
                if -seq >= neg_seq:
                    break
                i += 1
                if i == n or buf[i * width : i * width + width] != key:
                    return None
            v = g + n + i
            kind = buf[kinds_off + i]
            if kind > MAX_KIND:
                raise ValueError("unknown entry kind")
            return seq, kind, buf[ends[v - 1] : ends[v]]
        lo, hi = 0, n
        found = None
        while lo < hi:
            mid = (lo + hi) >> 1
            s = g + mid
            if r:
                gi = mid // r
                k = buf[ends[gi - 1] if gi else 0 : ends[gi]] + buf[ends[s - 1] : ends[s]]
            else:
                k = buf[ends[s - 1] : ends[s]]
            if k < key:
                lo = mid + 1
            elif k > key:
                hi = mid
            else:
                mneg = -seq_at(buf, seqs_off + mid * qw)[0]
                if mneg < neg_seq:
                    lo = mid + 1
                else:
                    found = mid
                    hi = mid
        if found is None:
            return None
        v = g + n + found
        kind = buf[kinds_off + found]
        if kind > MAX_KIND:
            raise ValueError("unknown entry kind")
        return seq_at(buf, seqs_off + found * qw)[0], kind, buf[ends[v - 1] : ends[v]]
    except _DECODE_ERRORS as e:
        raise CorruptionError(f"undecodable block ({e})", path, offset) from None

