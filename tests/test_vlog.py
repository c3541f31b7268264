"""Value log: round trips, pointers, writer states, the reader's handle cache and threads."""

from __future__ import annotations

import os
import random
import threading

import pytest

from antkv import CorruptionError, DBClosedError, InvalidArgumentError
from antkv.fs.fault import FaultInjectionFileSystem
from antkv.fs.memory import MemoryFileSystem
from antkv.fs.os_file_system import OSFileSystem
from antkv.errors import IOError as AntIOError
from antkv.vlog import (
    POINTER_SIZE,
    ValueLogReader,
    ValueLogScan,
    ValueLogWriter,
    decode_pointer,
    dump_vlog,
    encode_pointer,
    iter_records,
    parse_vlog_file_name,
    recover_file,
    verify_file,
    vlog_file_name,
)
from antkv.vlog import format as vf

DB = "/db"


@pytest.fixture
def fs():
    m = MemoryFileSystem()
    m.mkdirs(DB)
    return m


def sample_records(seed: int, n: int) -> list[tuple[bytes, bytes]]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        key = b"key%05d" % i + rng.randbytes(rng.randint(0, 8))
        kind = rng.random()
        if kind < 0.2:
            value = b""
        elif kind < 0.6:
            value = bytes([i % 251]) * rng.randint(1, 5000)  # compressible
        else:
            value = rng.randbytes(rng.randint(1, 3000))  # incompressible: stored raw
        out.append((key, value))
    return out


def write_file(fs, number, records, *, compression=None, seal=True):
    w = ValueLogWriter(fs, vlog_file_name(DB, number), number, compression=compression)
    ptrs = [w.add(k, v) for k, v in records]
    if seal:
        w.seal()
    else:
        w.sync()
        w.close()
    return w, ptrs


# --- pointers --------------------------------------------------------------------------


def test_pointer_round_trip_and_size():
    for fn, off, size in [(0, 0, 0), (1, 24, 25), ((1 << 64) - 1, (1 << 64) - 1, (1 << 32) - 1)]:
        p = encode_pointer(fn, off, size)
        assert len(p) == POINTER_SIZE == 25
        assert decode_pointer(p) == (fn, off, size)


def test_pointer_out_of_range_and_wrong_types():
    with pytest.raises(InvalidArgumentError):
        encode_pointer(1, 0, 1 << 32)
    with pytest.raises(InvalidArgumentError):
        encode_pointer(-1, 0, 0)
    with pytest.raises(TypeError):
        encode_pointer(1, "0", 5)


def test_every_damaged_pointer_is_detected():
    p = encode_pointer(12, 4096, 16409)
    for i in range(len(p)):
        for bit in range(8):
            bad = bytearray(p)
            bad[i] ^= 1 << bit
            with pytest.raises(CorruptionError):
                decode_pointer(bytes(bad), "table 000009.sst")
    for bad in (b"", p[:-1], p + b"\0", bytearray(p[1:])):
        with pytest.raises(CorruptionError):
            decode_pointer(bad)
    for bad in (None, "x" * 25, 25):
        with pytest.raises(TypeError):
            decode_pointer(bad)
    assert decode_pointer(memoryview(p)) == decode_pointer(bytearray(p)) == (12, 4096, 16409)
    with pytest.raises(CorruptionError) as e:
        decode_pointer(p[:-1], "table 000009.sst")
    assert "000009.sst" in str(e.value)


# --- round trips -----------------------------------------------------------------------


@pytest.mark.parametrize("compression", [None, "zstd"])
@pytest.mark.parametrize("seal", [True, False])
def test_round_trip(fs, compression, seal):
    records = sample_records(1, 60)
    w, ptrs = write_file(fs, 5, records, compression=compression, seal=seal)
    path = vlog_file_name(DB, 5)
    assert w.num_records == 60
    assert fs.size(path) == w.size == vf.FILE_HEADER_SIZE + w.record_bytes + (vf.FOOTER_SIZE if seal else 0)
    assert sum(decode_pointer(p)[2] for p in ptrs) == w.record_bytes
    r = ValueLogReader(fs, DB)
    for (k, v), p in zip(records, ptrs):
        assert r.get(p) == v
        assert r.get_checked(p, k) == v
        assert r.get_record(p) == (k, v)
    got = list(iter_records(fs, path))
    assert [(k, v) for _, _, k, v in got] == records
    assert [(o, s) for o, s, _, _ in got] == [decode_pointer(p)[1:] for p in ptrs]
    assert verify_file(fs, path) == (60, w.record_bytes)
    scan = ValueLogScan(fs, path).run()
    assert (scan.sealed, scan.file_number, scan.compression) == (seal, 5, compression)
    assert scan.torn_tail_offset is None and scan.valid_length == fs.size(path)
    assert recover_file(fs, path) == fs.size(path)
    r.close()


def test_compression_shrinks_compressible_values_only(fs):
    big = b"abc" * 10000
    noise = random.Random(3).randbytes(10000)
    w, (p1, p2) = write_file(fs, 1, [(b"a", big), (b"b", noise)], compression="zstd")
    assert decode_pointer(p1)[2] < 1000  # stored compressed
    assert decode_pointer(p2)[2] == vf.RECORD_HEADER_SIZE + 1 + len(noise)  # zstd did not help: raw
    lines = list(dump_vlog(fs, vlog_file_name(DB, 1)))
    assert "zstd" in lines[1] and "uncompressed" in lines[2] and "sealed" in lines[-1]


def test_empty_and_huge_values(fs):
    huge = random.Random(9).randbytes(6 << 20) + b"\0" * (2 << 20)
    records = [(b"", b""), (b"k", b""), (b"", b"v"), (b"huge", huge)]
    for compression in (None, "zstd"):
        n = 2 if compression else 1
        _, ptrs = write_file(fs, n, records, compression=compression)
        r = ValueLogReader(fs, DB)
        assert [r.get_record(p) for p in ptrs] == records
        assert verify_file(fs, vlog_file_name(DB, n))[0] == 4


def test_bytes_like_inputs_and_type_errors(fs):
    w = ValueLogWriter(fs, vlog_file_name(DB, 1), 1)
    p = w.add(bytearray(b"key"), memoryview(b"value"))
    assert ValueLogReader(fs, DB).get_record(p) == (b"key", b"value")
    with pytest.raises(TypeError):
        w.add("key", b"v")
    with pytest.raises(TypeError):
        w.add(b"k", 5)
    with pytest.raises(InvalidArgumentError):
        ValueLogWriter(fs, vlog_file_name(DB, 2), 2, compression="lz4")
    with pytest.raises(TypeError):
        ValueLogWriter(fs, vlog_file_name(DB, 3), "3")


def test_file_names():
    assert vlog_file_name("/x/db", 42) == "/x/db/000042.vlog"
    assert parse_vlog_file_name("/x/db/000042.vlog") == 42
    assert parse_vlog_file_name("1234567.vlog") == 1234567
    for bad in ("000042.sst", "abc.vlog", ".vlog", "00４2.vlog"):
        assert parse_vlog_file_name(bad) is None


# --- writer states ---------------------------------------------------------------------


def test_sealed_and_closed_writers_refuse_records(fs):
    w, _ = write_file(fs, 1, [(b"a", b"1")])
    assert w.sealed
    with pytest.raises(InvalidArgumentError):
        w.add(b"b", b"2")
    with pytest.raises(InvalidArgumentError):
        w.seal()
    w2, _ = write_file(fs, 2, [(b"a", b"1")], seal=False)
    w2.close()  # idempotent
    with pytest.raises(InvalidArgumentError):
        w2.add(b"b", b"2")


def test_failed_append_stops_the_writer(fs):
    ffs = FaultInjectionFileSystem(fs)
    w = ValueLogWriter(ffs, vlog_file_name(DB, 1), 1)
    p = w.add(b"a", b"1" * 100)
    ffs.fail_at(ffs.calls + 1)
    with pytest.raises(AntIOError):
        w.add(b"b", b"2" * 100)
    ffs.disarm()
    with pytest.raises(AntIOError):  # a record after a failed one could land after a partial one
        w.add(b"c", b"3")
    with pytest.raises(AntIOError):
        w.seal()
    w.close()
    assert ValueLogReader(fs, DB).get(p) == b"1" * 100
    assert verify_file(fs, vlog_file_name(DB, 1)) == (1, decode_pointer(p)[2])


def test_concurrent_writers_share_the_active_file(fs):
    w = ValueLogWriter(fs, vlog_file_name(DB, 1), 1, compression="zstd")
    results: dict[bytes, tuple[bytes, bytes]] = {}

    def work(t: int) -> None:
        rng = random.Random(t)
        for i in range(200):
            k = b"t%d-%d" % (t, i)
            v = rng.randbytes(rng.randint(0, 300)) * rng.randint(1, 3)
            results[k] = (v, w.add(k, v))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    w.seal()
    r = ValueLogReader(fs, DB)
    for k, (v, p) in results.items():
        assert r.get_checked(p, k) == v
    assert verify_file(fs, vlog_file_name(DB, 1)) == (800, w.record_bytes)


# --- reader ----------------------------------------------------------------------------


def test_reader_detects_misdirected_pointers(fs):
    _, ptrs = write_file(fs, 1, [(b"a", b"x" * 50), (b"b", b"y" * 50), (b"c", b"z" * 60)])
    r = ValueLogReader(fs, DB)
    fn, off, size = decode_pointer(ptrs[0])
    for bad in [(fn, off + 1, size), (fn, off, size - 1), (fn, off, size + 1), (fn, 10**6, size), (fn, off, 0)]:
        with pytest.raises(CorruptionError) as e:
            r.get(encode_pointer(*bad))
        assert "000001.vlog" in str(e.value)
    # a swapped pointer to an intact record of another key: only get_checked can tell
    assert r.get(ptrs[1]) == b"y" * 50
    with pytest.raises(CorruptionError):
        r.get_checked(ptrs[1], b"a")
    with pytest.raises(CorruptionError) as e:
        r.get(encode_pointer(99, 24, size))
    assert "000099.vlog" in str(e.value)


def test_reader_cache_evict_and_close(fs):
    ptrs = {n: write_file(fs, n, [(b"k%d" % n, b"v%d" % n)])[1][0] for n in range(1, 6)}
    r = ValueLogReader(fs, DB, max_open_files=2)
    for n, p in ptrs.items():
        assert r.get(p) == b"v%d" % n
        assert r.num_open_files <= 2
    r.evict(5)
    r.evict(5)
    r.evict(77)
    assert r.num_open_files == 1
    assert r.get(ptrs[5]) == b"v5"
    fs.remove(vlog_file_name(DB, 1))
    r.evict(1)
    with pytest.raises(CorruptionError):
        r.get(ptrs[1])
    r.close()
    r.close()
    with pytest.raises(DBClosedError):
        r.get(ptrs[2])
    with pytest.raises(InvalidArgumentError):
        ValueLogReader(fs, DB, max_open_files=0)


def test_get_from_8_threads_with_eviction(tmp_path):
    """Real preads on the OS file system, a cache smaller than the working set, and evictions."""
    osfs = OSFileSystem.instance()
    d = str(tmp_path)
    rng = random.Random(7)
    expect = []
    for n in range(1, 7):
        w = ValueLogWriter(osfs, vlog_file_name(d, n), n, compression="zstd" if n % 2 else None)
        for i in range(40):
            k, v = b"%d/%d" % (n, i), rng.randbytes(rng.randint(0, 4000)) * rng.randint(1, 4)
            expect.append((k, v, w.add(k, v)))
        w.seal() if n % 3 else w.close()
    fds_before = len(os.listdir("/proc/self/fd"))
    r = ValueLogReader(osfs, d, max_open_files=3)
    errors: list[BaseException] = []
    stop = threading.Event()

    def reader(seed: int) -> None:
        order = list(expect)
        random.Random(seed).shuffle(order)
        try:
            for _ in range(3):
                for k, v, p in order:
                    if r.get_checked(p, k) != v:
                        raise AssertionError(f"wrong value for {k!r}")
        except BaseException as e:  # collected and re-raised in the main thread
            errors.append(e)

    def evicter() -> None:
        i = 0
        while not stop.is_set():
            r.evict(1 + i % 6)
            i += 1

    threads = [threading.Thread(target=reader, args=(s,)) for s in range(8)]
    ev = threading.Thread(target=evicter)
    ev.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    ev.join()
    r.close()
    assert not errors, errors[0]
    assert len(os.listdir(d)) == 6
    assert len(os.listdir("/proc/self/fd")) == fds_before  # every evicted handle was closed
