"""The write buffer in front of output tables (antkv/fs/buffered.py): the file ends up with
exactly the bytes appended, ``sync`` makes all of them durable, and a flush hands a table of
many blocks to the OS in a few large appends."""

from __future__ import annotations

import os
import random

import pytest

import antkv
from antkv.fs.buffered import BufferedWritableFile
from antkv.fs.fault import FaultInjectionFileSystem
from antkv.fs.memory import MemoryFileSystem
from antkv.fs.os_file_system import OSFileSystem


def test_bytes_offsets_and_sync_on_a_real_file(tmp_path):
    rng = random.Random(7)
    path = str(tmp_path / "t")
    f = BufferedWritableFile(OSFileSystem().create(path), capacity=10_000)
    expected = b""
    while len(expected) < 100_000:
        piece = rng.randbytes(rng.randrange(0, 3_000))
        assert f.size == len(expected)  # the offset the piece lands at
        f.append(piece)
        expected += piece
        on_disk = os.path.getsize(path)
        assert on_disk <= len(expected) and len(expected) - on_disk < 10_000 + 3_000
    f.sync()
    assert os.path.getsize(path) == len(expected) == f.size
    f.append(b"tail")
    f.close()
    with open(path, "rb") as fh:
        assert fh.read() == expected + b"tail"


def test_sync_survives_a_power_loss_and_waiting_bytes_are_not_in_the_file():
    fs = MemoryFileSystem()
    fs.mkdirs("d")
    f = BufferedWritableFile(fs.create("d/t"), capacity=1 << 20)
    f.append(b"a" * 5000)
    f.append(b"b" * 5000)
    assert fs.read_all("d/t") == b""  # still waiting in the buffer
    f.sync()
    fs.sync_dir("d")
    f.append(b"c" * 10)  # after the sync: never handed to the file
    f.discard()
    fs.crash("power")
    assert fs.read_all("d/t") == b"a" * 5000 + b"b" * 5000


def test_a_failed_write_surfaces_as_an_io_error_and_discard_still_closes():
    inner = MemoryFileSystem()
    inner.mkdirs("d")
    fs = FaultInjectionFileSystem(inner)
    f = BufferedWritableFile(fs.create("d/t"), capacity=100)
    f.append(b"x" * 50)
    fs.fail_at(fs.calls + 1)  # the append that the buffer makes next
    with pytest.raises(antkv.IOError):
        f.append(b"y" * 60)
    f.discard()
    with pytest.raises(antkv.Error):
        f._file.append(b"z")  # closed


def test_a_flush_writes_its_table_in_few_large_appends():
    inner = MemoryFileSystem()
    fs = FaultInjectionFileSystem(inner)
    fs.record_trace = True
    rng = random.Random(3)
    db = antkv.open("db", file_system=fs, create_if_missing=True)
    try:
        for _ in range(20_000):
            db.put(rng.randbytes(16), rng.randbytes(100))
        db.flush()
        tables = [p for p in inner.listdir("db") if p.endswith(".sst")]
        assert len(tables) == 1
        size = inner.size("db/" + tables[0])
        assert size > 2_000_000  # ~500 blocks of 4 KiB
        appends = sum(1 for _, op, p in fs.trace if op == "append" and p.endswith(tables[0]))
        assert appends <= size // (256 * 1024) + 2
        assert len(list(db.items())) == 20_000
    finally:
        db.close()


def test_large_appends_on_a_real_file_start_writeback_and_keep_every_byte(tmp_path):
    """Every ``WRITEBACK_BYTES`` appended, an OS file asks the kernel to start writing its
    new bytes back (a hint); the bytes are the ones appended, in order."""
    import sys

    from antkv.fs import os_file_system

    rng = random.Random(11)
    path = str(tmp_path / "w")
    f = OSFileSystem().create(path)
    expected = []
    for _ in range(50):
        piece = rng.randbytes(64 * 1024 + rng.randrange(100))
        f.append(piece)
        expected.append(piece)
    f.sync()
    f.close()
    with open(path, "rb") as fh:
        assert fh.read() == b"".join(expected)
    assert f.size > 3 * os_file_system.WRITEBACK_BYTES
    if sys.platform.startswith("linux"):  # where the hint exists (and the benchmarks ran)
        assert os_file_system._sync_file_range is not None
