"""Block encoding (restart points, prefix compression, column widths) and the bloom filter."""

from __future__ import annotations

import random

import pytest

from antkv.dbformat import VALUE
from antkv.sst.block import (
    BLOCK_FOOTER,
    BLOCK_FOOTER_SIZE,
    decode_block,
    encode_block,
    encode_entries,
    group_prefix_lengths,
    search_block,
    shared_prefix_len,
)
from antkv.sst.bloom import build_filter, decode_filter, key_hash, may_contain, num_probes


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
    assert keys2 == keys and negs == [-i for i in range(40)] and kinds == [VALUE] * 40
    assert values == [b"v"] * 40


def model_search(entries, key, neg):
    for k, ng, kind, value in entries:
        if (k, ng) >= (key, neg):
            return (ng, kind, value) if k == key else None
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
        assert decoded == (keys, [-s for s in seqs], kinds, values)
        entries = list(zip(*decoded))
        probes = keys + [k + b"\x00" for k in keys] + [b"", b"\xff" * 8]
        for key in probes:
            for neg in {0, -1, -300, -(1 << 41), -(1 << 56), *(-s for s in seqs[:5])}:
                assert search_block(padded, len(raw), key, neg, "t", 0) == model_search(entries, key, neg)


def test_bloom_filter_false_positive_rate():
    rng = random.Random(7)
    keys = [rng.randbytes(16) for _ in range(20000)]
    raw = build_filter([key_hash(k) for k in keys], 10)
    filt = decode_filter(raw, len(raw), "t", 0)
    assert filt[1] == 200000 and filt[2] == num_probes(10) == 6
    assert all(may_contain(filt, k) for k in keys)  # never a false negative
    others = [b"other" + rng.randbytes(11) for _ in range(20000)]
    rate = sum(map(lambda k: may_contain(filt, k), others)) / len(others)
    assert 0.002 < rate < 0.02, rate  # about 1% at 10 bits per key


def test_bloom_bits_per_key_trade_off_and_no_filter():
    rng = random.Random(8)
    keys = [rng.randbytes(12) for _ in range(5000)]
    others = [rng.randbytes(13) for _ in range(5000)]
    rates = []
    for bits in (4, 10, 20):
        raw = build_filter([key_hash(k) for k in keys], bits)
        filt = decode_filter(raw, len(raw), "t", 0)
        assert all(may_contain(filt, k) for k in keys)
        rates.append(sum(may_contain(filt, k) for k in others))
    assert rates[0] > rates[1] > rates[2]
    for raw in (build_filter([key_hash(k) for k in keys], 0), build_filter([], 10)):
        filt = decode_filter(raw, len(raw), "t", 0)
        assert raw == b"\x00" and all(may_contain(filt, k) for k in others[:100])
