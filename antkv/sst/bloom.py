"""The bloom filter of a table: "is this user key possibly in the table?"

A *blocked* bloom filter (as RocksDB's FastLocalBloom): the bit array is split into 512-bit
blocks, and each key sets all its ``k`` bits inside ONE block chosen by its hash, so a probe
touches one 64-byte block (one cache line) instead of ``k`` random places.  One filter per table covers every distinct user key of its point
entries (not range tombstones).

*Hash.*  ``d = mmh3.mmh3_x64_128_digest(user_key)`` (128-bit MurmurHash3, x64 variant, seed 0):
16 bytes, read as little-endian fields:

* ``x = u32(d[0:4])`` chooses the block: ``x mod B`` for a filter of ``B`` blocks;
* ``lane j = u16(d[4+2j : 6+2j]) & 0x3FFF`` for ``j < t`` (``t <= 6``) chooses a *mask*
  ``MASK_TABLE[lane j]``; the key's bits are the OR of its ``t`` masks, ``k = 3 t`` bits.

*Mask table.*  ``MASK_TABLE[i]`` (``0 <= i < 2**14``) holds the bits ``p0, p1, p2`` of a 512-bit
block, with ``y = (i * 0x9E3779B97F4A7C15) mod 2**64`` (Fibonacci hashing):
``p0 = y >> 55``, ``p1 = (y >> 46) & 511``, ``p2 = (y >> 37) & 511`` (they coincide for a few
``i``, which then set fewer bits).  The table turns the hash into bits with one lookup per 3
bits, so no Python code runs per bit: building costs C-level ``map``/slice steps per key plus
one Python loop step (``blocks[i] = blocks[i] | mask`` on 512-bit ints); a probe tests the bits
byte by byte from ``PROBE_TABLE`` (the same bits as (byte, bit mask) pairs) and stops at the
first clear one.  Drawing the masks from 2**14 entries instead of fully random bits costs about
0.05 percentage points of false positives (measured at 10 bits per key over 1M keys: 1.02-1.04%
against 0.98% with 6 independent random bits per key in the same blocks).  The two tables
take ~3 MB per process and ~20 ms to build at import.  Where numpy is installed (it comes
with antkv's Spark extras), a filter of more than :data:`_NUMPY_MIN_KEYS` keys is built with
array operations instead (the same bytes, about a fifth of the time: no Python step per key).

*Sizing.*  With ``b`` bits per key and ``N`` keys: ``B = ceil(N * b / 512)`` blocks and
``t = clamp(nearest integer to b * ln 2 / 3, 1, 6)`` masks (``k = 6`` bits at the default ``b = 10``:
about 1.0% false positives, never a false negative).

Filter block contents::

    +-------------------------------------------+----------------------+
    | B blocks of 64 bytes; block i holds bits  | k: bits per key, u8  |
    | 512 i .. 512 i + 511; bit p of a block is | (3 t; 0 = no filter) |
    | bit p & 7 (LSB = 0) of its byte p >> 3    |                      |
    +-------------------------------------------+----------------------+

``k == 0`` (an empty bit array) means "no filter": every key may be present.  That is what a
table built with ``bloom_bits_per_key == 0`` or without point entries stores.

PART OF THE FILE FORMAT: the hash function, its seed, the field layout of the digest, the mask
table, the block size and the layout above.
"""

from __future__ import annotations

import struct
import sys
from array import array
from itertools import repeat
from operator import or_

import mmh3

from ..errors import CorruptionError

BLOCK_BITS = 512  # PART OF THE FILE FORMAT
BLOCK_BYTES = BLOCK_BITS // 8
LANE_BITS = 14  # PART OF THE FILE FORMAT: mask table index bits
MAX_MASKS = 6  # 16-bit lanes in digest bytes 4..15
BITS_PER_MASK = 3
_LN2 = 0.6931471805599453
LANE_MASK = (1 << LANE_BITS) - 1
_HIGH_BYTE_MASK = bytes(b & (LANE_MASK >> 8) for b in range(256))  # for bytes.translate
_SWAP = sys.byteorder != "little"  # arrays are native-endian; the format is little-endian

digest = mmh3.mmh3_x64_128_digest  # PART OF THE FILE FORMAT (seed 0)
DIGEST_HEAD = struct.Struct("<IHH").unpack_from  # x, lane 0, lane 1 of a digest
_MORE_LANES = struct.Struct("<4H").unpack_from  # lanes 2..5, from digest byte 8


def _table_bits(i: int) -> tuple[int, int, int]:
    """The bit positions ``p0, p1, p2`` of mask ``i`` (see the module docstring)."""
    y = (i * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    return y >> 55, (y >> 46) & 511, (y >> 37) & 511


if array("I").itemsize != 4 or array("H").itemsize != 2:
    raise ImportError("antkv.sst.bloom needs 4-byte array('I') and 2-byte array('H')")

_POSITIONS = [_table_bits(i) for i in range(1 << LANE_BITS)]
# MASK_TABLE[i]: mask i as a 512-bit int (little-endian: bit p of the block is 1 << p), to build
MASK_TABLE = [(1 << p0) | (1 << p1) | (1 << p2) for p0, p1, p2 in _POSITIONS]
# PROBE_TABLE[i]: (byte, bit mask) of each of mask i's bits within a 64-byte block, to probe
PROBE_TABLE = [(p0 >> 3, 1 << (p0 & 7), p1 >> 3, 1 << (p1 & 7), p2 >> 3, 1 << (p2 & 7)) for p0, p1, p2 in _POSITIONS]
del _POSITIONS
_mask_of = MASK_TABLE.__getitem__


def num_masks(bits_per_key: int) -> int:
    """``t``: masks (of 3 bits each) per key for ``bits_per_key``."""
    return max(1, min(MAX_MASKS, round(bits_per_key * _LN2 / BITS_PER_MASK)))


def num_probes(bits_per_key: int) -> int:
    """``k``: bits set per key (``3 t``)."""
    return BITS_PER_MASK * num_masks(bits_per_key)


def key_digests(keys) -> bytes:
    """The concatenated 16-byte hash digests of ``keys`` (what :func:`build_filter` takes)."""
    return b"".join(map(digest, keys))


def _lanes(digests: bytes, n: int, j: int) -> array:
    """Lane ``j`` (14 bits of digest bytes ``4+2j``, ``5+2j``) of each of ``n`` digests, in C."""
    buf = bytearray(2 * n)
    buf[0::2] = digests[4 + 2 * j :: 16]
    buf[1::2] = digests[5 + 2 * j :: 16].translate(_HIGH_BYTE_MASK)
    lanes = array("H", buf)
    if _SWAP:
        lanes.byteswap()
    return lanes


_NUMPY_MIN_KEYS = 256  # below this many keys the loop is as quick as numpy's fixed costs
_NUMPY_CHUNK = 1 << 16  # keys whose bits _bits_numpy sets at a time
_numpy = None  # numpy, imported at the first filter large enough to use it (False: not installed)
_numpy_positions = None  # the bits of MASK_TABLE[i] as a (2**14, 3) array, made with it


def _import_numpy():
    """numpy, or None where it is not installed; imported once, when first needed (so that
    ``import antkv`` does not pay for it)."""
    global _numpy, _numpy_positions
    if _numpy is None:
        try:
            import numpy
        except ImportError:  # pragma: no cover - numpy comes with the Spark extras and the tests
            _numpy = False
        else:
            _numpy_positions = numpy.array([_table_bits(i) for i in range(1 << LANE_BITS)], dtype=numpy.int64)
            _numpy = numpy
    return _numpy or None


def build_filter(digests: bytes, bits_per_key: int) -> bytes:
    """Filter block contents for the keys whose :func:`key_digests` are ``digests``.

    ``digests`` may repeat a key (it is then counted twice when sizing).  With numpy, for
    more than :data:`_NUMPY_MIN_KEYS` keys, :func:`_bits_numpy`; else :func:`_bits_python`.
    """
    n = len(digests) >> 4
    if bits_per_key <= 0 or not n:
        return b"\x00"
    t = num_masks(bits_per_key)
    nblocks = (n * bits_per_key + BLOCK_BITS - 1) // BLOCK_BITS
    bits = _bits_numpy if n > _NUMPY_MIN_KEYS and _import_numpy() is not None else _bits_python
    return bits(digests, n, t, nblocks) + bytes((BITS_PER_MASK * t,))


def _bits_numpy(digests: bytes, n: int, t: int, nblocks: int) -> bytes:
    """The bit array of ``nblocks`` blocks for ``n`` digests of ``t`` masks, in array
    operations: each key's bit positions (its block's first bit plus the positions of its
    masks) set in one array of booleans, packed least significant bit first; the keys are
    taken :data:`_NUMPY_CHUNK` at a time, so its temporary arrays stay a few MB whatever the
    table's size.  REQUIRES: :func:`_import_numpy` found numpy."""
    numpy = _numpy
    bits = numpy.zeros(nblocks * BLOCK_BITS, dtype=bool)
    for begin in range(0, n, _NUMPY_CHUNK):
        chunk = digests[16 * begin : 16 * (begin + _NUMPY_CHUNK)]
        block = numpy.frombuffer(chunk, dtype="<u4")[0::4].astype(numpy.int64) % nblocks
        lanes = numpy.frombuffer(chunk, dtype="<u2").reshape(-1, 8)[:, 2 : 2 + t] & LANE_MASK
        positions = _numpy_positions[lanes]  # (keys, t, 3): the bits of each key's masks in its block
        positions += (block * BLOCK_BITS)[:, None, None]
        bits[positions.ravel()] = True
    return numpy.packbits(bits, bitorder="little").tobytes()


def _bits_python(digests: bytes, n: int, t: int, nblocks: int) -> bytes:
    """:func:`_bits_numpy`'s bit array in one Python loop step per key, everything else in
    C (slices, ``translate``, ``array``, ``map``): a 512-bit int per block, OR-ed masks."""
    xs = array("I", digests)[0::4]
    if _SWAP:
        xs.byteswap()
    blocks = [0] * nblocks
    if t == 2:  # the default (10 bits per key): OR-ing the two masks in the loop is cheapest
        table = MASK_TABLE
        for x, a, b in zip(xs, _lanes(digests, n, 0), _lanes(digests, n, 1)):
            i = x % nblocks
            blocks[i] = blocks[i] | table[a] | table[b]
    else:
        masks = map(_mask_of, _lanes(digests, n, 0))
        for j in range(1, t):
            masks = map(or_, masks, map(_mask_of, _lanes(digests, n, j)))
        for x, m in zip(xs, masks):
            i = x % nblocks
            blocks[i] = blocks[i] | m
    return b"".join(map(int.to_bytes, blocks, repeat(BLOCK_BYTES), repeat("little")))


def decode_filter(buf: bytes, size: int, path: str, offset: int) -> tuple[bytes, int, int]:
    """``(bit array, m, k)`` from filter block contents ``buf[:size]`` (``m`` bits, a multiple
    of 512; ``k`` bits per key)."""
    if size < 1:
        raise CorruptionError("empty filter block", path, offset)
    k = buf[size - 1]
    bits = buf[: size - 1]
    if (
        k % BITS_PER_MASK
        or k > BITS_PER_MASK * MAX_MASKS
        or (k == 0) != (len(bits) == 0)
        or len(bits) % BLOCK_BYTES
    ):
        raise CorruptionError(f"bad filter block (k={k}, {len(bits)} bytes)", path, offset)
    return bits, len(bits) * 8, k


def key_probe(user_key: bytes) -> tuple:
    """What probing any filter for ``user_key`` needs, computed once per key (a point read
    probes up to one filter per L0 table and level): ``(x, mask 0 probes, mask 1 probes,
    digest)`` (see the module docstring)."""
    d = digest(user_key)
    x, a, b = DIGEST_HEAD(d)
    return x, PROBE_TABLE[a & LANE_MASK], PROBE_TABLE[b & LANE_MASK], d


def may_contain_probe(filt: tuple[bytes, int, int], probe: tuple) -> bool:
    """False only when the key of ``probe`` (:func:`key_probe`) was certainly not added.

    Tests the key's bits one byte at a time (``PROBE_TABLE``), mask by mask, stopping at the
    first clear bit: an absent key is usually rejected after a bit or two.
    """
    bits, m, k = filt
    if not k:
        return True
    x, e, f, d = probe
    o = (x % (m >> 9)) << 6
    if not (bits[o + e[0]] & e[1] and bits[o + e[2]] & e[3] and bits[o + e[4]] & e[5]):
        return False
    if k == BITS_PER_MASK:
        return True
    if not (bits[o + f[0]] & f[1] and bits[o + f[2]] & f[3] and bits[o + f[4]] & f[5]):
        return False
    if k == 2 * BITS_PER_MASK:  # the default (10 bits per key): two masks, both tested
        return True
    for lane in _MORE_LANES(d, 8)[: k // BITS_PER_MASK - 2]:
        e = PROBE_TABLE[lane & LANE_MASK]
        if not (bits[o + e[0]] & e[1] and bits[o + e[2]] & e[3] and bits[o + e[4]] & e[5]):
            return False
    return True


def may_contain(filt: tuple[bytes, int, int], user_key: bytes) -> bool:
    """False only when ``user_key`` was certainly not added to the filter."""
    return may_contain_probe(filt, key_probe(user_key))
