"""The bloom filter of a table: "is this user key possibly in the table?"

One filter per table covers every distinct user key of its point entries (not range
tombstones).  A key is hashed once with 128-bit MurmurHash3 (``mmh3.hash64``, seed 0, x64
variant, unsigned), giving ``h1, h2``; probe ``i`` (``0 <= i < k``) tests bit
``(h1 + i * h2) mod m`` (Kirsch-Mitzenmacher double hashing).  With ``b`` bits per key the
filter has ``m = max(64, n * b)`` bits rounded up to a byte, and ``k = clamp(int(b * ln 2), 1,
30)`` probes: about 1% false positives at the default 10 bits per key, and never a false
negative.

Filter block contents::

    +-------------------------------------------+-------------------+
    | bit array, m / 8 bytes                    | k: num probes u8  |
    | bit p = byte p >> 3, bit (p & 7) (LSB = 0)|                   |
    +-------------------------------------------+-------------------+

``k == 0`` (an empty bit array) means "no filter": every key may be present.  That is what a
table built with ``bloom_bits_per_key == 0`` or without point entries stores.

PART OF THE FILE FORMAT: the hash function, its seed, the probe sequence and the layout.
"""

from __future__ import annotations

from collections import deque
from itertools import repeat
from operator import add, mod

import mmh3

from ..errors import CorruptionError

HASH_SEED = 0  # PART OF THE FILE FORMAT
_LN2 = 0.6931471805599453
_ASCII_ONE = 0x31  # ord("1")

hash64 = mmh3.hash64


def key_hash(user_key: bytes) -> tuple[int, int]:
    """``(h1, h2)`` of a user key, as the filter uses them."""
    return hash64(user_key, HASH_SEED, True, False)


def num_probes(bits_per_key: int) -> int:
    return max(1, min(30, int(bits_per_key * _LN2)))


def build_filter(hashes: list[tuple[int, int]], bits_per_key: int) -> bytes:
    """Filter block contents for the keys whose :func:`key_hash` values are ``hashes``.

    Built without a Python loop per bit: each probe round maps all keys to bit positions and
    marks them in an ASCII '0'/'1' array, which ``int(..., 2)`` then packs into bits.
    """
    if bits_per_key <= 0 or not hashes:
        return b"\x00"
    k = num_probes(bits_per_key)
    m = (max(64, len(hashes) * bits_per_key) + 7) // 8 * 8
    h1s, h2s = zip(*hashes)
    # (h1 + i*h2) mod m == (a + i*b) mod m with a, b reduced mod m: small-int arithmetic.
    positions = list(map(mod, h1s, repeat(m)))
    steps = list(map(mod, h2s, repeat(m)))
    flags = bytearray(b"0") * m
    mark = flags.__setitem__
    for i in range(k):
        if i:
            positions = list(map(mod, map(add, positions, steps), repeat(m)))
        deque(map(mark, positions, repeat(_ASCII_ONE)), maxlen=0)
    flags.reverse()  # bit 0 becomes the least significant digit
    return int(flags, 2).to_bytes(m // 8, "little") + bytes((k,))


def decode_filter(buf: bytes, size: int, path: str, offset: int) -> tuple[bytes, int, int]:
    """``(bit array, m, k)`` from filter block contents ``buf[:size]``."""
    if size < 1:
        raise CorruptionError("empty filter block", path, offset)
    k = buf[size - 1]
    bits = buf[: size - 1]
    if k > 30 or (k == 0) != (len(bits) == 0):
        raise CorruptionError(f"bad filter block (k={k}, {len(bits)} bytes)", path, offset)
    return bits, len(bits) * 8, k


def may_contain(filt: tuple[bytes, int, int], user_key: bytes) -> bool:
    """False only when ``user_key`` was certainly not added to the filter."""
    bits, m, k = filt
    if not k:
        return True
    h1, h2 = hash64(user_key, HASH_SEED, True, False)
    p = h1 % m
    step = h2 % m
    for _ in range(k):
        if not (bits[p >> 3] >> (p & 7)) & 1:
            return False
        p = (p + step) % m
    return True
