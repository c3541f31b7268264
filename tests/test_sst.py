"""TableBuilder + TableReader round trips, checked against a plain sorted-list model."""

from __future__ import annotations

import bisect
import random

import pytest

import antkv
from antkv.base.dbformat import DELETION, MAX_SEQUENCE, VALUE, VALUE_POINTER
from antkv.fs.memory import MemoryFileSystem
from antkv.sst import TableBuilder, TableReader, dump_table
from antkv.sst.builder import separator

from antkv.memory.cache import Cache
from antkv.fs.fault import FaultInjectionFileSystem

CACHE_MODES = ["nocache", "cache"]


def make_cache(mode):
    return Cache(1 << 20, num_shard_bits=2) if mode == "cache" else None


def random_entries(rng: random.Random, n_keys: int, max_versions: int = 4, huge: bool = False):
    """Sorted entry tuples (user_key, -seq, kind, value) with unique seqs; includes b''."""
    keys = {b""}
    while len(keys) < n_keys:
        keys.add(rng.randbytes(rng.randint(0, 12)) if rng.random() < 0.3 else b"k%06d" % rng.randrange(10**6))
    seqs = rng.sample(range(1, 50 * n_keys * max_versions), n_keys * max_versions)
    entries = []
    for key in keys:
        for _ in range(rng.randint(1, max_versions)):
            kind = rng.choice((VALUE, VALUE, VALUE, DELETION, VALUE_POINTER))
            size = rng.choice((0, 1, 5, 30, 100, 300))
            if huge and rng.random() < 0.02:
                size = 300_000
            value = b"" if kind == DELETION else rng.randbytes(size)
            entries.append((key, -seqs.pop(), kind, value))
    entries.sort()
    return entries


def build(fs, path, entries, tombstones=(), blob_refs=None, **opts):
    f = fs.create(path)
    b = TableBuilder(f, file_number=7, **opts)
    for key, neg, kind, value in entries:
        b.add(key, -neg, kind, value)
    for begin, end, seq in tombstones:
        b.add_range_tombstone(begin, end, seq)
    assert b.num_entries == len(entries)
    props = b.finish(blob_refs)
    f.close()
    assert props.file_size == fs.size(path)
    return props


def model_get(entries, key, read_seq):
    i = bisect.bisect_left(entries, (key, -read_seq))
    if i < len(entries) and entries[i][0] == key:
        k, neg, kind, value = entries[i]
        return -neg, kind, value
    return None


def model_forward(entries, start):
    return entries if start is None else entries[bisect.bisect_left(entries, (start,)) :]


def model_backward(entries, start):
    if start is None:
        return entries[::-1]
    i = bisect.bisect_left(entries, (start + b"\x00",))  # first entry with user key > start
    return entries[:i][::-1]


def probe_keys(entries, rng):
    keys = sorted({e[0] for e in entries})
    probes = set(keys)
    for k in keys[:: max(1, len(keys) // 40)]:
        probes |= {k + b"\x00", k + b"\xff", k[:-1]}
    probes |= {rng.randbytes(rng.randint(0, 10)) for _ in range(20)}
    probes |= {b"\xff" * 20}
    return sorted(probes)


def check_table(reader, entries, rng, exhaustive_seqs=False):
    assert list(reader.iter_forward()) == entries
    assert list(reader.iter_backward()) == entries[::-1]
    probes = probe_keys(entries, rng)
    for start in probes:
        assert list(reader.iter_forward(start)) == model_forward(entries, start), start
        assert list(reader.iter_backward(start)) == model_backward(entries, start), start
    seqs = sorted({-e[1] for e in entries})
    read_seqs = {0, 1, MAX_SEQUENCE}
    if exhaustive_seqs:
        read_seqs |= set(seqs) | {s - 1 for s in seqs} | {s + 1 for s in seqs}
    else:
        read_seqs |= set(rng.sample(seqs, min(20, len(seqs))))
    for key in probes:
        for rs in read_seqs:
            assert reader.get(key, rs) == model_get(entries, key, rs), (key, rs)
    assert reader.verify() == len(entries)


@pytest.mark.parametrize("cache_mode", CACHE_MODES)
@pytest.mark.parametrize("compression", [None, "zstd"])
@pytest.mark.parametrize("block_size", [1, 64, 4096])
def test_round_trip_random(block_size, compression, cache_mode):
    rng = random.Random(block_size * 31 + (compression is not None))
    fs = MemoryFileSystem()
    entries = random_entries(rng, 150)
    props = build(fs, "t.sst", entries, block_size=block_size, compression=compression)
    reader = TableReader.open(fs, "t.sst", 7, cache=make_cache(cache_mode))
    try:
        check_table(reader, entries, rng)
        assert reader.properties == props
        assert reader.file_size == props.file_size
        if block_size == 1:
            assert props.num_data_blocks == len(entries)
    finally:
        reader.close()


@pytest.mark.parametrize("cache_mode", CACHE_MODES)
@pytest.mark.parametrize("block_size", [1, 50, 700])
def test_many_versions_of_one_key_span_blocks(block_size, cache_mode):
    rng = random.Random(block_size)
    fs = MemoryFileSystem()
    seqs = sorted(rng.sample(range(1, 10_000), 300), reverse=True)
    entries = [(b"a", -1, VALUE, b"first")]
    entries += [(b"hot", -s, rng.choice((VALUE, DELETION)), b"v%d" % s) for s in seqs]
    entries += [(b"z", -5, VALUE, b"last")]
    entries.sort()
    props = build(fs, "t.sst", entries, block_size=block_size, bloom_bits_per_key=10)
    assert props.num_data_blocks > 1
    reader = TableReader.open(fs, "t.sst", 1, cache=make_cache(cache_mode))
    check_table(reader, entries, rng, exhaustive_seqs=True)


def test_huge_values_and_compression():
    rng = random.Random(5)
    fs = MemoryFileSystem()
    entries = random_entries(rng, 60, huge=True)
    entries.append((b"\xff\xff", -3, VALUE, b"x" * 2_000_000))  # compresses very well
    plain = build(fs, "plain.sst", entries, block_size=4096)
    packed = build(fs, "packed.sst", entries, block_size=4096, compression="zstd")
    assert packed.file_size < plain.file_size - 1_900_000
    assert packed.compression == "zstd" and plain.compression is None
    for path in ("plain.sst", "packed.sst"):
        reader = TableReader.open(fs, path, 1)
        check_table(reader, entries, rng)


def test_empty_table_and_tombstone_only_table():
    fs = MemoryFileSystem()
    props = build(fs, "empty.sst", [])
    assert props.num_entries == 0 and props.smallest_key is None and props.num_data_blocks == 0
    reader = TableReader.open(fs, "empty.sst", 1)
    assert list(reader.iter_forward()) == [] and list(reader.iter_backward(b"x")) == []
    assert reader.get(b"", MAX_SEQUENCE) is None
    assert reader.verify() == 0 and reader.range_tombstones == []

    tombs = [(b"m", b"q", 9), (b"c", b"d", 4), (b"c", b"z", 12), (b"c", b"e", 4)]
    props = build(fs, "rd.sst", [], tombstones=tombs)
    reader = TableReader.open(fs, "rd.sst", 2)
    assert reader.range_tombstones == [(b"c", b"z", 12), (b"c", b"d", 4), (b"c", b"e", 4), (b"m", b"q", 9)]
    assert (props.smallest_key, props.largest_key, props.largest_is_exclusive) == (b"c", b"z", True)
    assert (props.smallest_seq, props.largest_seq, props.num_range_deletions) == (4, 12, 4)
    assert reader.get(b"c", MAX_SEQUENCE) is None


def test_properties_count_everything():
    fs = MemoryFileSystem()
    entries = [
        (b"b", -10, VALUE, b"12345"),
        (b"b", -3, DELETION, b""),
        (b"c", -7, VALUE_POINTER, b"ptr-bytes"),
        (b"d", -8, VALUE, b""),
    ]
    props = build(fs, "t.sst", entries, tombstones=[(b"a", b"c", 20), (b"c", b"d", 2)], blob_refs={4: 900, 2: 10})
    assert props.num_entries == 4 and props.num_deletions == 1 and props.num_value_pointers == 1
    assert props.num_range_deletions == 2
    assert (props.smallest_key, props.largest_key, props.largest_is_exclusive) == (b"a", b"d", False)
    assert (props.smallest_seq, props.largest_seq) == (2, 20)
    assert props.raw_key_size == 4 and props.raw_value_size == 14
    assert props.blob_refs == {2: 10, 4: 900}
    reader = TableReader.open(fs, "t.sst", 1)
    assert reader.properties == props
    assert props.data_size + props.index_size + props.filter_size < props.file_size


def test_builder_rejects_bad_input():
    fs = MemoryFileSystem()
    b = TableBuilder(fs.create("t.sst"), file_number=1)
    b.add(b"b", 5, VALUE, b"x")
    for key, seq in ((b"a", 9), (b"b", 5), (b"b", 6)):
        with pytest.raises(antkv.InvalidArgumentError):
            b.add(key, seq, VALUE, b"")
    # kinds and sequence ranges are checked per block: at the latest by finish()
    for kind, seq in ((2, 1), (6, 1), (VALUE, MAX_SEQUENCE + 1), (VALUE, -1)):
        bad = TableBuilder(fs.create("bad.sst"), file_number=1, block_size=1 << 20)
        bad.add(b"a", 3, VALUE, b"")
        bad.add(b"b", seq, kind, b"")
        with pytest.raises(antkv.InvalidArgumentError):
            bad.finish()
    with pytest.raises(TypeError):
        b.add("c", 1, VALUE, b"")
    with pytest.raises(antkv.InvalidArgumentError):
        b.add_range_tombstone(b"x", b"x", 3)
    b.add(bytearray(b"c"), 4, VALUE, memoryview(b"v"))  # bytes-like is accepted
    b.finish()
    with pytest.raises(antkv.InvalidArgumentError):
        b.add(b"d", 1, VALUE, b"")
    with pytest.raises(antkv.InvalidArgumentError):
        TableBuilder(fs.create("u.sst"), file_number=2, compression="lz4")
    with pytest.raises(antkv.InvalidArgumentError):
        TableBuilder(fs.create("v.sst"), file_number=2, block_size=0)


def test_estimated_file_size_grows_and_abandon():
    fs = MemoryFileSystem()
    f = fs.create("t.sst")
    b = TableBuilder(f, file_number=1, block_size=256)
    sizes = []
    for i in range(200):
        b.add(b"key%04d" % i, 1, VALUE, b"v" * 50)
        sizes.append(b.estimated_file_size())
    assert sizes == sorted(sizes) and sizes[-1] >= 200 * 50
    b.abandon()
    with pytest.raises(antkv.InvalidArgumentError):
        b.finish()


def test_separator_is_between_blocks():
    assert separator(b"abcdef", 5, b"abzzz") == (b"abd", MAX_SEQUENCE)
    assert separator(b"abc", 5, b"abd") == (b"abc", 5)  # nothing shorter
    assert separator(b"ab", 5, b"abc") == (b"ab", 5)  # a prefix
    assert separator(b"same", 5, b"same") == (b"same", 5)
    assert separator(b"a\xff\xff", 5, b"b") == (b"a\xff\xff", 5)


def test_reader_after_close_and_dump():
    fs = MemoryFileSystem()
    build(fs, "t.sst", [(b"k", -1, VALUE, b"v")], tombstones=[(b"a", b"b", 2)])
    lines = list(dump_table(fs, "t.sst"))
    assert any("b'k' @1 PUT b'v'" in line for line in lines)
    assert any("[b'a', b'b') @2" in line for line in lines)
    reader = TableReader.open(fs, "t.sst", 1)
    reader.close()
    with pytest.raises(antkv.DBClosedError):
        reader.get(b"k", 5)
    with pytest.raises(antkv.DBClosedError):
        list(reader.iter_forward())


def test_cache_serves_blocks_and_index():
    fs = FaultInjectionFileSystem(MemoryFileSystem())
    fs.record_trace = True
    rng = random.Random(3)
    entries = random_entries(rng, 300)
    # fewer blocks than a scan reads through the cache (longer scans: the read-ahead test)
    props = build(fs, "t.sst", entries, block_size=1024)
    assert props.num_data_blocks < 64
    cache = Cache(1 << 22, num_shard_bits=0)
    reader = TableReader.open(fs, "t.sst", 1, cache=cache)
    assert list(reader.iter_forward()) == entries
    reads = [t for t in fs.trace if t[1] == "read"]
    assert len(reads) == 5 + props.num_data_blocks  # footer + 4 meta blocks + each data block once
    used = cache.usage
    assert list(reader.iter_backward()) == entries[::-1]
    for key, neg, kind, value in entries[::7]:
        assert reader.get(key, -neg) == (-neg, kind, value)
    assert [t for t in fs.trace if t[1] == "read"] == reads and cache.usage == used
    # without a cache every data block is read again
    plain = TableReader.open(fs, "t.sst", 1)
    n = len(fs.trace)
    assert list(plain.iter_forward()) == entries
    assert len([t for t in fs.trace[n:] if t[1] == "read"]) == props.num_data_blocks
    # a tiny cache: blocks come and go, the index and filter charged to it stay pinned until close
    small = Cache(1, num_shard_bits=0)
    build(fs, "u.sst", entries, block_size=256)
    reader = TableReader.open(fs, "u.sst", 2, cache=small, cache_index_and_filter_blocks=True)
    check_table(reader, entries, rng)
    assert small.pinned_usage > 0
    reader.close()
    assert small.pinned_usage == 0


@pytest.mark.parametrize("cache_mode", ["cache", "none"])
def test_long_scans_read_ahead_past_the_cached_blocks(cache_mode):
    """Beyond its first SCAN_CACHED_BLOCKS blocks a scan reads runs of blocks per call and
    leaves the cache alone: same blocks, either direction, from any start; the cache holds at
    most the first blocks afterwards; a damaged block in a read-ahead run is still caught."""
    from antkv.sst import reader as reader_mod

    rng = random.Random(11)
    fs = MemoryFileSystem()
    entries = random_entries(rng, 2500, max_versions=2)
    build(fs, "t.sst", entries, block_size=128)
    cache = make_cache(cache_mode)
    r = TableReader.open(fs, "t.sst", 7, cache=cache)
    nblocks = len(r.index()[0])
    assert nblocks > 4 * reader_mod.SCAN_CACHED_BLOCKS
    usage_before = cache.usage if cache else 0
    flat = lambda blocks: [e for b in blocks for e in zip(*b)]  # noqa: E731
    assert flat(r.blocks_forward()) == entries
    if cache is not None:
        # only the first blocks were inserted (decoded blocks are charged ~size + 120/entry)
        assert cache.usage - usage_before < (reader_mod.SCAN_CACHED_BLOCKS + 1) * (128 + 200 + 120 * 40)
    for start in [entries[0][0], entries[len(entries) // 2][0], b"k5", b"\xff"]:
        assert flat(r.blocks_forward(start)) == model_forward(entries, start)
        got = [e for b in r.blocks_backward(start) for e in reversed(list(zip(*b)))]
        assert got == model_backward(entries, start)
    off = r.index()[2][nblocks - 5]
    r.close()
    # flip one byte in a block far past the cached ones: the scan raises, naming the offset
    data = bytearray(fs.read_all("t.sst"))
    data[off + 3] ^= 0x40
    fs.write_all("t.sst", bytes(data))
    r = TableReader.open(fs, "t.sst", 7, cache=make_cache(cache_mode))
    with pytest.raises(antkv.CorruptionError) as e:
        for _ in r.blocks_forward():
            pass
    assert e.value.offset == off
    r.close()
