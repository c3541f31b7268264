"""Block encoding (restart points, prefix compression, column widths) and the bloom filter."""

from __future__ import annotations

import random

import pytest
import xxhash

from antkv.base.dbformat import VALUE
from antkv.errors import CorruptionError
from antkv.sst.block import (
    BLOCK_FOOTER,
    BLOCK_FOOTER_SIZE,
    decode_block,
    encode_block,
    encode_entries,
    group_prefix_lengths,
    search_block,
    _layouts,
    shared_prefix_len,
)
from antkv.sst.bloom import build_filter, decode_filter, key_digests, may_contain, num_probes


def test_shared_prefix_len():
    rng = random.Random(1)
    for _ in range(2000):
        a = rng.randbytes(rng.randint(0, 6)) if rng.random() < 0.5 else b"pre" + rng.randbytes(rng.randint(0, 3))
        b = a[: rng.randint(0, len(a))] + rng.randbytes(rng.randint(0, 3))
        expect = 0
        while expect < min(len(a), len(b)) and a[expect] == b[expect]:
            expect += 1
        assert shared_prefix_len(a, b) == expect, (a, b)


def test_restart_points_and_prefix_compression():
    keys = [b"user:%04d" % i for i in range(40)]
    # groups of 16 from each restart point: 0000-0015, 0016-0031, 0032-0039
    assert group_prefix_lengths(keys, 16) == [len(b"user:00"), len(b"user:00"), len(b"user:003")]
    entries = [(k, i, VALUE, b"v") for i, k in enumerate(keys)]
    raw = encode_entries(entries)
    assert len(raw) < sum(len(k) for k in keys)  # prefixes are stored once per group
    assert raw.startswith(b"user:00user:00user:003")
    n, restart, ew, qw = BLOCK_FOOTER.unpack_from(raw, len(raw) - BLOCK_FOOTER_SIZE)
    assert (n, restart, ew, qw) == (40, 16, 1, 1)  # every column fits a byte
    keys2, negs, kinds, values = decode_block(raw, len(raw), "t", 0)
    assert keys2 == tuple(keys) and negs == tuple(-i for i in range(40)) and kinds == (VALUE,) * 40
    assert values == (b"v",) * 40


def model_search(entries, key, neg):
    for k, ng, kind, value in entries:
        if (k, ng) >= (key, neg):
            return (-ng, kind, value) if k == key else None
    return None


@pytest.mark.parametrize("restart", [1, 2, 16, 1000])
def test_block_round_trip_and_search_random(restart):
    rng = random.Random(restart)
    for trial in range(30):
        n = rng.randint(0, 60)
        pool = [rng.randbytes(rng.randint(0, 3)) for _ in range(8)]
        seq_pool = (0, 7, 300, 70000, 1 << 40, (1 << 56) - 1)
        pairs = {(rng.choice(pool) + rng.randbytes(rng.randint(0, 2)), rng.choice(seq_pool)) for _ in range(n)}
        pairs = sorted(pairs, key=lambda p: (p[0], -p[1]))  # internal order
        n = len(pairs)
        keys = [p[0] for p in pairs]
        seqs = [p[1] for p in pairs]
        kinds = [rng.choice((0, 1, 3)) for _ in range(n)]
        values = [rng.randbytes(rng.choice((0, 3, 200, 70000))) for _ in range(n)]
        raw = encode_block(keys, seqs, kinds, values, restart)
        padded = raw + b"trailer!"  # decoders must use the size, not len(buffer)
        decoded = decode_block(padded, len(raw), "t", 0)
        assert decoded == (tuple(keys), tuple(-s for s in seqs), tuple(kinds), tuple(values))
        entries = list(zip(*decoded))
        probes = keys + [k + b"\x00" for k in keys] + [b"", b"\xff" * 8]
        for key in probes:
            for neg in {0, -1, -300, -(1 << 41), -(1 << 56), *(-s for s in seqs[:5])}:
                assert search_block(padded, len(raw), key, neg, "t", 0) == model_search(entries, key, neg)


def bloom(keys, bits_per_key):
    raw = build_filter(key_digests(keys), bits_per_key)
    return raw, decode_filter(raw, len(raw), "t", 0)


def test_bloom_filter_false_positive_rate():
    rng = random.Random(7)
    keys = [rng.randbytes(16) for _ in range(20000)]
    raw, filt = bloom(keys, 10)
    assert filt[1] == 391 * 512 and filt[2] == num_probes(10) == 6  # ceil(200000 / 512) blocks
    assert all(may_contain(filt, k) for k in keys)  # never a false negative
    others = [b"other" + rng.randbytes(11) for _ in range(20000)]
    rate = sum(map(lambda k: may_contain(filt, k), others)) / len(others)
    assert 0.006 < rate < 0.015, rate  # about 1% at 10 bits per key (1.02% over 1M keys)


def test_bloom_bits_per_key_trade_off_and_no_filter():
    rng = random.Random(8)
    keys = [rng.randbytes(12) for _ in range(5000)]
    others = [rng.randbytes(13) for _ in range(5000)]
    rates = []
    for bits in (4, 10, 20):
        raw, filt = bloom(keys, bits)
        assert all(may_contain(filt, k) for k in keys)
        rates.append(sum(may_contain(filt, k) for k in others))
    assert rates[0] > rates[1] > rates[2]
    for raw in (build_filter(key_digests(keys), 0), build_filter(b"", 10)):
        filt = decode_filter(raw, len(raw), "t", 0)
        assert raw == b"\x00" and all(may_contain(filt, k) for k in others[:100])


def test_bloom_never_a_false_negative():
    """Random key sets of every small size (0 and 1 included), key lengths and bits per key."""
    rng = random.Random(9)
    for trial in range(400):
        n = trial % 40 if trial < 200 else rng.randint(0, 3000)
        bits = rng.choice((1, 2, 3, 5, 8, 10, 16, 24, 40))
        keys = [rng.randbytes(rng.randint(0, 24)) for _ in range(n)]
        raw, filt = bloom(keys, bits)
        assert all(may_contain(filt, k) for k in keys), (trial, n, bits)
        if n:
            assert filt[1] % 512 == 0 and filt[1] >= n * bits and filt[2] % 3 == 0 and filt[2] >= 3
        else:
            assert raw == b"\x00"


def reference_filter(keys, bits_per_key):
    """The filter block as docs/format/sst.md defines it, written the slow, obvious way."""
    import math

    import mmh3

    if not keys or bits_per_key <= 0:
        return b"\x00"
    t = max(1, min(6, round(bits_per_key * math.log(2) / 3)))
    nblocks = -(-len(keys) * bits_per_key // 512)
    bits = bytearray(64 * nblocks)
    for key in keys:
        d = mmh3.mmh3_x64_128_digest(key, 0)
        block = int.from_bytes(d[0:4], "little") % nblocks
        for j in range(t):
            i = int.from_bytes(d[4 + 2 * j : 6 + 2 * j], "little") & 0x3FFF
            y = (i * 0x9E3779B97F4A7C15) % 2**64
            for p in (y >> 55, (y >> 46) & 511, (y >> 37) & 511):
                bits[64 * block + p // 8] |= 1 << (p % 8)
    return bytes(bits) + bytes((3 * t,))


GOLDEN_FILTER_XXH3 = 0xB0163516866527AF  # of the filter of apple, banana, cherry at 10 bits/key


def test_bloom_filter_matches_the_documented_format():
    rng = random.Random(10)
    for n, bits in ((1, 10), (7, 10), (300, 10), (1000, 4), (1000, 20), (500, 40), (50, 1)):
        keys = [rng.randbytes(rng.randint(1, 20)) for _ in range(n)]
        assert build_filter(key_digests(keys), bits) == reference_filter(keys, bits), (n, bits)
    # and a fixed vector, so the format cannot drift along with the reference above
    raw = build_filter(key_digests([b"apple", b"banana", b"cherry"]), 10)
    assert len(raw) == 65 and raw[-1] == 6
    assert xxhash.xxh3_64_intdigest(raw) == GOLDEN_FILTER_XXH3


def test_both_ways_of_building_a_filter_give_the_documented_bytes():
    """The array build (numpy, for large filters) and the loop build write the same bits, for
    every number of masks and for sizes on both sides of the size that picks between them."""
    from antkv.sst import bloom as bloom_module

    assert bloom_module._import_numpy() is not None  # (numpy comes with the test dependencies)
    rng = random.Random(11)
    for n, bits in ((1, 10), (255, 10), (256, 10), (257, 10), (3000, 10), (2000, 1), (2000, 4),
                    (2000, 7), (2000, 13), (2000, 16), (2000, 40), (140_000, 10)):  # (the last: three chunks)
        keys = [rng.randbytes(rng.randint(0, 24)) for _ in range(n)]
        digests = key_digests(keys)
        expected = reference_filter(keys, bits)
        t = expected[-1] // 3
        nblocks = (len(expected) - 1) // 64
        for build in (bloom_module._bits_numpy, bloom_module._bits_python):
            assert build(digests, n, t, nblocks) + expected[-1:] == expected, (build.__name__, n, bits)
        assert build_filter(digests, bits) == expected


def test_decode_filter_rejects_malformed_contents():
    good, _ = bloom([b"k%d" % i for i in range(100)], 10)
    bad = [
        b"",  # no k byte
        good[:-1] + b"\x00",  # k = 0 with bits
        b"\x06",  # k = 6 without bits
        good[:-1] + b"\x05",  # k not a multiple of 3
        good[:-1] + b"\x15",  # k = 21 > 18
        good[:-2] + good[-1:],  # not whole 64-byte blocks
    ]
    for raw in bad:
        with pytest.raises(CorruptionError):
            decode_filter(raw, len(raw), "t", 0)


def _read_or_error(buf: bytes, probes: list[bytes]):
    """What decoding ``buf`` and searching it for ``probes`` give ("corrupt" for an error)."""
    out = []
    for read in [lambda: decode_block(buf, len(buf), "t", 0)] + [
        lambda k=k: search_block(buf, len(buf), k, -(1 << 50), "t", 0) for k in probes
    ]:
        try:
            out.append(read())
        except CorruptionError:
            out.append("corrupt")
    return out


def test_cached_layouts_read_exactly_what_a_cold_read_does():
    """Blocks with the same piece sizes share a cached layout (keyed by their ends column):
    a warm decode or search must equal a cold one, for intact blocks and damaged ones alike,
    whether the layout was cached by a search (no splitter yet) or by a decode."""
    rng = random.Random(7)
    blocks = []
    for trial in range(40):
        n = rng.choice((1, 5, 16, 17, 40))
        keys = sorted(b"k%07d" % rng.randrange(10**7) for _ in range(n))
        top = rng.choice((200, 60000, 1 << 40))
        seqs = [rng.randrange(top) for _ in range(n)]
        kinds = [rng.choice((0, 1, 3)) for _ in range(n)]
        values = [rng.randbytes(10) for _ in range(n)]  # fixed sizes: splitters are shared
        blocks.append(encode_block(keys, seqs, kinds, values, rng.choice((4, 16))))
    damaged = []
    for raw in blocks:
        for _ in range(10):
            pos = len(raw) - 1 - rng.randrange(min(len(raw), 60))  # footer, kinds, seqs, ends
            damaged.append(raw[:pos] + bytes([raw[pos] ^ (1 << rng.randrange(8))]) + raw[pos + 1 :])
    probes = [b"k%07d" % rng.randrange(10**7) for _ in range(5)] + [b"", b"\xff"]
    for buf in blocks + damaged:
        probes[0] = buf[:8]  # often a key of the block
        _layouts.clear()
        cold = _read_or_error(buf, probes)
        for warm_by_decode in (False, True):
            _layouts.clear()
            for other in blocks:  # warm the table with every intact block's layout
                if warm_by_decode:
                    decode_block(other, len(other), "t", 0)
                else:
                    search_block(other, len(other), b"k", 0, "t", 0)
            assert _read_or_error(buf, probes) == cold


def test_a_layout_is_not_reused_for_the_same_ends_bytes_at_another_width():
    """Block ``y`` carries block ``x``'s ends column byte for byte, read as 3 two-byte ends of
    one entry instead of 6 one-byte ends of two: it must decode as itself, not with x's
    cached layout."""
    x = encode_block([b"a", b"b"], [1, 2], [VALUE, VALUE], [b"vv", b"ww"], 1)
    n, _, ew, _ = BLOCK_FOOTER.unpack_from(x, len(x) - BLOCK_FOOTER_SIZE)
    ends_off = len(x) - BLOCK_FOOTER_SIZE - 2 * n - 6 * ew
    column = x[ends_off : ends_off + 6]
    assert ew == 1 and column[-1] == ends_off
    wide = [int.from_bytes(column[i : i + 2], "little") for i in (0, 2, 4)]  # ascending
    y = bytes(range(256)) * (wide[-1] // 256 + 1)
    y = y[: wide[-1]] + column + bytes([9, VALUE]) + BLOCK_FOOTER.pack(1, 1, 2, 1)
    expect = (
        (y[: wide[0]] + y[wide[0] : wide[1]],),
        (-9,),
        (VALUE,),
        (y[wide[1] : wide[2]],),
    )
    for first in (x, y):
        _layouts.clear()
        decode_block(first, len(first), "t", 0)
        assert decode_block(y, len(y), "t", 0) == expect
        assert search_block(y, len(y), expect[0][0], -9, "t", 0) == (9, VALUE, expect[3][0])
        assert decode_block(x, len(x), "t", 0) == ((b"a", b"b"), (-1, -2), (VALUE, VALUE), (b"vv", b"ww"))


def test_random_keys_store_no_group_prefixes():
    # 16-byte random keys share a byte or two per group: not worth a concatenation per key on
    # every decode, so the block stores empty prefixes (and still decodes and searches)
    rng = random.Random(3)
    keys = sorted({b"\x07" + rng.randbytes(15) for _ in range(40)})  # groups share >= 1 byte
    assert all(group_prefix_lengths(keys, 16))
    n = len(keys)
    raw = encode_block(keys, list(range(n)), [VALUE] * n, [b"v"] * n)
    assert raw.startswith(keys[0] + keys[1])  # no prefix before the first suffix: whole keys
    assert decode_block(raw, len(raw), "t", 0)[0] == tuple(keys)
    for i, k in enumerate(keys):
        assert search_block(raw, len(raw), k, -(1 << 56), "t", 0) == (i, VALUE, b"v")


@pytest.mark.parametrize("restart", [1, 16])
def test_search_fixed_width_keys(restart):
    # Fixed-width keys with no prefixes take the bytes.find path: it must skip matches that
    # straddle two keys, find every version, and agree with the model everywhere.
    rng = random.Random(restart)
    fast = 0
    for trial in range(40):
        alphabet = [b"ab", b"ba", b"aa", b"b\x00"]  # few distinct halves: many straddling matches
        keys = sorted({rng.choice(alphabet) + rng.choice(alphabet) for _ in range(rng.randint(1, 12))})
        pairs = sorted(
            {(k, rng.choice((1, 5, 9, 300, 1 << 40))) for k in keys for _ in range(rng.randint(1, 3))},
            key=lambda p: (p[0], -p[1]),
        )
        ks, seqs = [p[0] for p in pairs], [p[1] for p in pairs]
        kinds = [rng.choice((0, 1, 3)) for _ in pairs]
        values = [rng.randbytes(rng.randint(0, 5)) for _ in pairs]
        raw = encode_block(ks, seqs, kinds, values, restart)
        fast += raw.startswith(b"".join(ks))  # no prefixes: the key column is the whole keys
        entries = list(zip(ks, [-s for s in seqs], kinds, values))
        probes = {a + b for a in alphabet for b in alphabet} | {b"ab", b"abab" + b"a", b"", b"baab"[1:]}
        for key in probes:
            for neg in (0, -1, -5, -8, -300, -(1 << 41)):
                assert search_block(raw, len(raw), key, neg, "t", 0) == model_search(entries, key, neg), (key, neg, pairs)
    assert fast >= 20  # most blocks took the fixed-width path
