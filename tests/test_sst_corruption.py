"""Damaged tables: every flipped byte and every truncation is a CorruptionError, never a wrong
answer or another exception; undecodable bytes at each decode boundary are CorruptionErrors."""

from __future__ import annotations

import random

import pytest

import antkv
from antkv.memory.cache import Cache
from antkv.base.dbformat import DELETION, MAX_SEQUENCE, VALUE, VALUE_POINTER
from antkv.fs.memory import MemoryFileSystem
from antkv.sst import TableBuilder, TableReader
from antkv.sst.block import decode_block, encode_entries
from antkv.sst.bloom import decode_filter
from antkv.sst.format import FOOTER_SIZE, decode_footer, read_block
from antkv.sst.properties import decode_properties

ENTRIES = sorted(
    [
        (b"", -30, VALUE, b"empty key"),
        (b"apple", -12, VALUE, b"red" * 10),
        (b"apple", -4, DELETION, b""),
        (b"applesauce", -21, VALUE_POINTER, b"\x01\x02\x03pointer"),
        (b"banana", -8, VALUE, b""),
        (b"cherry", -40, VALUE, b"c" * 60),
        (b"cherry", -2, VALUE, b"old"),
    ]
)
TOMBSTONES = [(b"b", b"bz", 25), (b"a", b"c", 3)]


def build_small(fs, path, compression):
    f = fs.create(path)
    b = TableBuilder(f, file_number=3, block_size=48, compression=compression)
    for key, neg, kind, value in ENTRIES:
        b.add(key, -neg, kind, value)
    for t in TOMBSTONES:
        b.add_range_tombstone(*t)
    b.finish({9: 123})
    f.close()
    return fs.read_all(path)


def read_everything(fs, path, cache=None, verify=True):
    """Everything a reader can return, or the CorruptionError it raised."""
    try:
        reader = TableReader.open(fs, path, 3, cache=cache, verify_checksums=verify)
        try:
            got = (
                list(reader.iter_forward()),
                list(reader.iter_backward()),
                [reader.get(k, s) for k in (b"", b"apple", b"applesauce", b"banana", b"cherry", b"zzz") for s in (3, 10, MAX_SEQUENCE)],
                reader.range_tombstones,
                reader.properties.blob_refs,
                reader.verify(),
            )
        finally:
            reader.close()
        return got
    except antkv.CorruptionError as e:
        assert e.path == path
        return e


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_every_flipped_byte_is_detected(compression):
    fs = MemoryFileSystem()
    good = build_small(fs, "good.sst", compression)
    expected = read_everything(fs, "good.sst")
    assert not isinstance(expected, Exception) and expected[0] == ENTRIES
    rng = random.Random(11)
    cache = Cache(1 << 20)
    for i in range(len(good)):
        bad = bytearray(good)
        bad[i] ^= 1 << rng.randrange(8)
        fs.write_all("bad.sst", bytes(bad))
        got = read_everything(fs, "bad.sst", cache=cache if i % 2 else None)
        assert isinstance(got, antkv.CorruptionError), f"flip at offset {i} of {len(good)} went unnoticed"
        assert got.offset is None or 0 <= got.offset < len(good)


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_every_truncation_is_detected(compression):
    fs = MemoryFileSystem()
    good = build_small(fs, "good.sst", compression)
    for n in range(len(good)):
        fs.write_all("short.sst", good[:n])
        got = read_everything(fs, "short.sst")
        assert isinstance(got, antkv.CorruptionError), f"truncation to {n} bytes went unnoticed"


def test_unverified_damage_in_data_blocks_never_escapes_as_another_error():
    """With verify_checksums=False a damaged data block may decode to some data, but decoding
    must never raise anything but CorruptionError."""
    fs = MemoryFileSystem()
    good = build_small(fs, "good.sst", None)
    data_end = TableReader.open(fs, "good.sst", 1).properties.data_size
    rng = random.Random(2)
    for i in range(data_end):
        for _ in range(3):
            bad = bytearray(good)
            bad[i] = rng.randrange(256)
            fs.write_all("bad.sst", bytes(bad))
            read_everything(fs, "bad.sst", verify=False)


def test_decoders_reject_garbage_with_corruption_error():
    rng = random.Random(4)
    block = encode_entries([(b"key%d" % i, i, VALUE, b"v" * i) for i in range(40)])
    samples = [rng.randbytes(rng.randint(0, 80)) for _ in range(300)]
    for _ in range(300):
        b = bytearray(block)
        for _ in range(rng.randint(1, 4)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        samples.append(bytes(b))
    samples += [block[:n] for n in range(len(block))]
    decoders = (decode_block, decode_filter, decode_properties)
    for s in samples:
        for decode in decoders:
            try:
                decode(s, len(s), "x.sst", 0)
            except antkv.CorruptionError:
                pass
        try:
            decode_footer(s, 100, "x.sst")
        except antkv.CorruptionError:
            pass


def test_footer_errors_name_what_is_wrong():
    fs = MemoryFileSystem()
    good = build_small(fs, "good.sst", None)
    footer = good[-FOOTER_SIZE:]
    off = len(good) - FOOTER_SIZE
    with pytest.raises(antkv.CorruptionError, match="magic"):
        decode_footer(footer[:-1] + b"X", off, "t.sst")
    with pytest.raises(antkv.CorruptionError, match="checksum"):
        decode_footer(b"\x01" + footer[1:], off, "t.sst")
    fs.write_all("tiny.sst", b"abc")
    with pytest.raises(antkv.CorruptionError, match="too short") as e:
        TableReader.open(fs, "tiny.sst", 1)
    assert (e.value.path, e.value.offset) == ("tiny.sst", 0)


def test_a_table_of_another_format_version_is_refused():
    """Format version 1 (the per-key double-hashing bloom filter) is not readable any more:
    opening such a table names the version instead of misreading its filter."""
    from antkv.sst.format import _CHECKSUM, _FOOTER_CHECKED, FORMAT_VERSION, checksum

    fs = MemoryFileSystem()
    good = build_small(fs, "good.sst", None)
    off = len(good) - FOOTER_SIZE
    assert FORMAT_VERSION == 2 and good[off + 48 : off + 52] == b"\x02\x00\x00\x00"
    for version in (1, 3):
        head = good[off : off + 48] + version.to_bytes(4, "little")
        assert len(head) == _FOOTER_CHECKED
        fs.write_all("old.sst", good[:off] + head + _CHECKSUM.pack(checksum(head)) + good[-8:])
        with pytest.raises(antkv.CorruptionError, match=f"unsupported table format version {version}") as e:
            TableReader.open(fs, "old.sst", 1)
        assert e.value.offset == off + 48


def test_zstd_garbage_with_valid_checksum_is_corruption():
    """A block whose trailer is right but whose zstd frame is not (a writer bug, say)."""
    from antkv.base.compression import COMPRESSION_ZSTD as ZSTD_COMPRESSION
    from antkv.sst.format import _CHECKSUM, checksum

    fs = MemoryFileSystem()
    for payload in (b"not a zstd frame", b"\x28\xb5\x2f\xfd\x00\x00garbage", b""):
        tail = bytes((ZSTD_COMPRESSION,))
        fs.write_all("z.sst", payload + tail + _CHECKSUM.pack(checksum(payload + tail)))
        with pytest.raises(antkv.CorruptionError):
            read_block(fs.open_random("z.sst"), 0, len(payload), True, "z.sst")
