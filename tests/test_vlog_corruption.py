"""Value log under damage: byte-flip and truncation sweeps, torn tails after crashes.

The promise checked everywhere: a damaged file gives CorruptionError or the right answer --
never a wrong value, never another exception type.
"""

from __future__ import annotations

import random

import pytest

from antkv import CorruptionError, InvalidArgumentError
from antkv.fs.fault import FaultInjectionFileSystem, SimulatedCrash
from antkv.fs.memory import MemoryFileSystem
from antkv.vlog import (
    ValueLogReader,
    ValueLogScan,
    ValueLogWriter,
    decode_pointer,
    dump_vlog,
    iter_records,
    recover_file,
    verify_file,
    vlog_file_name,
)
from antkv.vlog import format as vf

DB = "/db"
PATH = vlog_file_name(DB, 3)
RECORDS = [(b"", b""), (b"alpha", b"A" * 40), (b"b", bytes(range(30))), (b"gamma", b"g" * 200), (b"d", b"xyz")]


def build(compression, seal):
    fs = MemoryFileSystem()
    fs.mkdirs(DB)
    w = ValueLogWriter(fs, PATH, 3, compression=compression)
    ptrs = [w.add(k, v) for k, v in RECORDS]
    w.seal() if seal else w.close()
    return fs, fs.read_all(PATH), ptrs


def record_ends(ptrs):
    return [off + size for _, off, size in map(decode_pointer, ptrs)]


def check_damaged(data: bytes, ptrs, expect_verify_error: bool) -> None:
    """Every read path over ``data``: CorruptionError or the right answer."""
    fs = MemoryFileSystem()
    fs.mkdirs(DB)
    fs.write_all(PATH, data)
    r = ValueLogReader(fs, DB)
    for (k, v), p in zip(RECORDS, ptrs):
        try:
            assert r.get_checked(p, k) == v
            assert r.get(p) == v
        except CorruptionError as e:
            assert e.path == PATH
    r.close()
    originals = {(off, size): kv for kv, (_, off, size) in zip(RECORDS, map(decode_pointer, ptrs))}
    try:
        for off, size, k, v in iter_records(fs, PATH):
            assert originals[(off, size)] == (k, v)
    except CorruptionError as e:
        assert e.path == PATH and e.offset is not None
    try:
        verify_file(fs, PATH)
        assert not expect_verify_error, "verify accepted a damaged file"
    except CorruptionError:
        pass  # the expected outcome for damage; a clean run is checked above
    try:
        n = recover_file(fs, PATH)
        assert fs.size(PATH) == n
        got = [(k, v) for _, _, k, v in iter_records(fs, PATH)]
        assert got == RECORDS[: len(got)]
    except CorruptionError:
        assert fs.read_all(PATH) == data  # a refused recovery changes nothing
    try:
        list(dump_vlog(fs, PATH))
    except CorruptionError:
        pass  # dump reports what it could read, then the damage


@pytest.mark.parametrize("compression", [None, "zstd"])
@pytest.mark.parametrize("seal", [True, False])
def test_byte_flip_sweep(compression, seal):
    fs, data, ptrs = build(compression, seal)
    assert len(data) < 600
    for i in range(len(data)):
        for mask in (0x01, 0x80, 0xFF):
            bad = bytearray(data)
            bad[i] ^= mask
            check_damaged(bytes(bad), ptrs, expect_verify_error=True)


@pytest.mark.parametrize("compression", [None, "zstd"])
@pytest.mark.parametrize("seal", [True, False])
def test_truncation_sweep(compression, seal):
    """A truncated file is a torn tail: never an error, and exactly the whole records survive."""
    _, data, ptrs = build(compression, seal)
    ends = record_ends(ptrs)
    for n in range(len(data) + 1):
        fs = MemoryFileSystem()
        fs.mkdirs(DB)
        fs.write_all(PATH, data[:n])
        whole = [kv for kv, end in zip(RECORDS, ends) if end <= n]
        assert [(k, v) for _, _, k, v in iter_records(fs, PATH)] == whole
        expect_len = 0 if n < vf.FILE_HEADER_SIZE else max([vf.FILE_HEADER_SIZE] + [e for e in ends if e <= n])
        if n == len(data):
            expect_len = n
        r = ValueLogReader(fs, DB)
        for (k, v), p, end in zip(RECORDS, ptrs, ends):
            if end <= n:
                assert r.get_checked(p, k) == v
            else:
                with pytest.raises(CorruptionError):
                    r.get(p)
        if n == len(data) or n == vf.FILE_HEADER_SIZE or n in ends:  # a clean (unsealed) prefix
            assert verify_file(fs, PATH) == (len(whole), max([vf.FILE_HEADER_SIZE] + ends[: len(whole)]) - vf.FILE_HEADER_SIZE)
        else:
            with pytest.raises(CorruptionError):
                verify_file(fs, PATH)
        assert recover_file(fs, PATH) == expect_len
        assert fs.size(PATH) == expect_len
        if expect_len:
            assert verify_file(fs, PATH)[0] == len(whole)


def test_zero_filled_tail_is_torn_but_garbage_is_not():
    fs, data, ptrs = build(None, False)
    for tail, torn in [(b"\0" * 100, True), (b"\0" * 10, True), (b"\x01" + b"\0" * 99, False)]:
        fs.write_all(PATH, data + tail)
        if torn:
            assert recover_file(fs, PATH) == len(data)
            assert verify_file(fs, PATH)[0] == len(RECORDS)
        else:
            with pytest.raises(CorruptionError) as e:
                recover_file(fs, PATH)
            assert e.value.offset == len(data)


def test_damage_before_intact_records_is_corruption():
    _, data, ptrs = build(None, False)
    _, off, size = decode_pointer(ptrs[1])
    bad = bytearray(data)
    bad[off + size - 1] ^= 0x10  # the value of record 1; records 2.. follow intact
    fs = MemoryFileSystem()
    fs.mkdirs(DB)
    fs.write_all(PATH, bytes(bad))
    with pytest.raises(CorruptionError) as e:
        recover_file(fs, PATH)
    assert (e.value.path, e.value.offset) == (PATH, off)
    assert "000003.vlog" in str(e.value) and str(off) in str(e.value)


def test_footer_rules():
    _, data, ptrs = build(None, True)
    footer_at = len(data) - vf.FOOTER_SIZE
    fs = MemoryFileSystem()
    fs.mkdirs(DB)
    # data after the footer
    fs.write_all(PATH, data + b"x")
    with pytest.raises(CorruptionError):
        list(iter_records(fs, PATH))
    # a torn seal (part of the footer) is a torn tail: the file is simply unsealed
    fs.write_all(PATH, data[: footer_at + 20])
    scan = ValueLogScan(fs, PATH).run()
    assert (scan.sealed, scan.num_records, scan.torn_tail_offset) == (False, len(RECORDS), footer_at)
    # a footer that disagrees with the records
    other = vf.encode_footer(3, len(RECORDS) - 1, footer_at - vf.FILE_HEADER_SIZE)
    fs.write_all(PATH, data[:footer_at] + other)
    with pytest.raises(CorruptionError) as e:
        ValueLogScan(fs, PATH).run()
    assert e.value.offset == footer_at


def test_value_that_looks_like_a_footer_is_just_a_value():
    fs = MemoryFileSystem()
    fs.mkdirs(DB)
    fake = vf.encode_footer(3, 0, 0)
    w = ValueLogWriter(fs, PATH, 3)
    p = w.add(b"k", fake)
    w.close()
    assert ValueLogScan(fs, PATH, strict=True).run().sealed is False
    assert ValueLogReader(fs, DB).get(p) == fake


def test_torn_header_after_a_crash_right_after_create():
    fs = MemoryFileSystem()
    fs.mkdirs(DB)
    w = ValueLogWriter(fs, PATH, 3)
    fs.sync_dir(DB)
    w.add(b"k", b"v")
    full = fs.read_all(PATH)
    for n in range(vf.FILE_HEADER_SIZE):
        fs.write_all(PATH, full[:n])
        assert recover_file(fs, PATH) == 0
    fs.write_all(PATH, b"NOTAVLOG" + full[8:])
    with pytest.raises(CorruptionError):
        recover_file(fs, PATH)
    fs.write_all(PATH, b"garbage")
    with pytest.raises(CorruptionError):
        recover_file(fs, PATH)


@pytest.mark.parametrize("seed", range(12))
def test_partial_power_loss_recovery(seed):
    """Synced records always survive; of the rest, a prefix survives and the torn tail is cut."""
    rng = random.Random(seed)
    fs = MemoryFileSystem()
    fs.mkdirs(DB)
    w = ValueLogWriter(fs, PATH, 3, compression="zstd" if seed % 2 else None)
    fs.sync_dir(DB)
    written = []
    synced = 0
    for i in range(rng.randint(1, 30)):
        k, v = b"k%d" % i, rng.randbytes(rng.randint(0, 700)) * rng.randint(1, 3)
        written.append((k, v, w.add(k, v)))
        if rng.random() < 0.3:
            w.sync()
            synced = len(written)
    fs.crash("partial", random.Random(seed + 1000))
    torn = fs.size(PATH)
    if seed % 3:
        valid = recover_file(fs, PATH)
    else:
        scan = ValueLogScan(fs, PATH).recover()
        valid = scan.valid_length
        assert (scan.file_size, scan.torn_tail_offset is not None) == (torn, valid < torn)
        assert scan.record_bytes == max(valid - vf.FILE_HEADER_SIZE, 0)
    assert fs.size(PATH) == valid
    got = [(k, v) for _, _, k, v in iter_records(fs, PATH)]
    assert synced <= len(got) <= len(written)
    assert got == [(k, v) for k, v, _ in written[: len(got)]]
    assert verify_file(fs, PATH)[0] == len(got)
    r = ValueLogReader(fs, DB)
    for i, (k, v, p) in enumerate(written):
        if i < len(got):
            assert r.get_checked(p, k) == v
        else:
            with pytest.raises(CorruptionError):
                r.get(p)


@pytest.mark.parametrize("seed", range(6))
def test_crash_inside_an_append(seed):
    """A crash in the middle of one append (a torn record) after a process kill."""
    inner = MemoryFileSystem()
    inner.mkdirs(DB)
    ffs = FaultInjectionFileSystem(inner, seed=seed)
    w = ValueLogWriter(ffs, PATH, 3)
    ptrs = [w.add(b"k%d" % i, b"%d" % i * 300) for i in range(5)]
    ffs.crash_at(ffs.calls + 1)
    with pytest.raises(SimulatedCrash):
        w.add(b"torn", b"t" * 5000)
    inner.crash("kill")
    assert recover_file(inner, PATH) == decode_pointer(ptrs[-1])[1] + decode_pointer(ptrs[-1])[2]
    r = ValueLogReader(inner, DB)
    assert [r.get(p) for p in ptrs] == [b"%d" % i * 300 for i in range(5)]


def test_crafted_records_with_valid_checksums_are_rejected():
    """Records a buggy or hostile writer could produce: every check passes but the contents lie."""
    import xxhash
    import zstandard

    def record(key, stored, raw_len, ctype):
        h = xxhash.xxh3_64_intdigest(key + stored)
        pre = vf.RECORD_PREFIX.pack(len(key), len(stored), raw_len, ctype, h)
        return pre + vf._CHECK.pack(vf.header_check(pre)) + key + stored

    frame = zstandard.ZstdCompressor().compress(b"v" * 1000)
    cases = [
        record(b"k", frame, 999, vf.COMPRESSION_ZSTD),  # raw length disagrees with the frame
        record(b"k", frame, 1 << 31, vf.COMPRESSION_ZSTD),  # would allocate 2 GiB
        record(b"k", b"not a zstd frame", 100, vf.COMPRESSION_ZSTD),
        record(b"k", b"plain", 6, vf.COMPRESSION_NONE),  # raw length != stored length
        record(b"k", b"plain", 5, 7),  # unknown compression
    ]
    for rec in cases:
        with pytest.raises(CorruptionError) as e:
            vf.decode_record(rec, PATH, 24)
        assert e.value.offset == 24
        fs = MemoryFileSystem()
        fs.mkdirs(DB)
        fs.write_all(PATH, vf.encode_file_header(3, 0) + rec)
        with pytest.raises(CorruptionError):
            list(iter_records(fs, PATH))
    assert vf.decode_record(record(b"k", frame, 1000, vf.COMPRESSION_ZSTD), PATH, 24) == (b"k", b"v" * 1000)


def test_verify_the_active_file_up_to_the_writers_size():
    """A record being appended while verify runs looks torn; ``length`` verifies what was acknowledged."""
    fs, data, ptrs = build(None, False)
    acknowledged = len(data)
    in_flight = vf.encode_record(b"late", b"L" * 500, 0)
    fs.write_all(PATH, data + in_flight[:100])
    with pytest.raises(CorruptionError):
        verify_file(fs, PATH)
    assert verify_file(fs, PATH, length=acknowledged) == (len(RECORDS), acknowledged - vf.FILE_HEADER_SIZE)
    with pytest.raises(CorruptionError):
        verify_file(fs, PATH, length=acknowledged - 1)  # a length inside a record: that record is torn
    with pytest.raises(CorruptionError):
        verify_file(fs, PATH, length=10)  # inside the file header
    assert verify_file(fs, PATH, length=vf.FILE_HEADER_SIZE) == (0, 0)
    with pytest.raises(InvalidArgumentError):
        ValueLogScan(fs, PATH, length=acknowledged).recover()
