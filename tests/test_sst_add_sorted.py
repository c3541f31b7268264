"""``TableBuilder.add_sorted`` (the flush fast path) writes byte-for-byte the table that adding
the same entries one by one writes, and rejects what ``add`` rejects."""

from __future__ import annotations

import random

import pytest

import antkv
from antkv.fs.memory import MemoryFileSystem
from antkv.sst.builder import TableBuilder
from antkv.sst.reader import TableReader


def _build(entries, block_size, columns: bool) -> bytes:
    fs = MemoryFileSystem()
    f = fs.create("t.sst")
    b = TableBuilder(f, file_number=1, block_size=block_size, bloom_bits_per_key=10)
    if columns:
        b.add_sorted([e[0] for e in entries], [e[1] for e in entries], [e[2] for e in entries], [e[3] for e in entries])
    else:
        for e in entries:
            b.add(*e)
    b.finish(blob_refs={})
    return fs.read_all("t.sst")


@pytest.mark.parametrize("block_size", [1, 64, 4096, 1 << 20])
def test_same_bytes_as_adding_one_by_one(block_size):
    rng = random.Random(block_size)
    keys = sorted({bytes(rng.randrange(256) for _ in range(rng.randrange(0, 12))) for _ in range(2000)})
    entries = [(k, rng.randrange(1, 1 << 40), rng.choice([0, 1, 1, 1, 3]), bytes(rng.randrange(0, 200))) for k in keys]
    one_by_one = _build(entries, block_size, columns=False)
    assert _build(entries, block_size, columns=True) == one_by_one
    fs = MemoryFileSystem()
    fs.write_all("t.sst", one_by_one)
    r = TableReader.open(fs, "t.sst", 1)
    assert [(k, -n, kind, v) for k, n, kind, v in r.iter_forward()] == entries
    r.close()


def test_rejects_unsorted_and_wrong_types():
    fs = MemoryFileSystem()
    b = TableBuilder(fs.create("t.sst"), file_number=1)
    with pytest.raises(antkv.InvalidArgumentError):
        b.add_sorted([b"b", b"a"], [1, 2], [1, 1], [b"", b""])
    with pytest.raises(antkv.InvalidArgumentError):
        b.add_sorted([b"a", b"a"], [2, 1], [1, 1], [b"", b""])  # duplicate keys: use add()
    with pytest.raises(TypeError):
        b.add_sorted(["a"], [1], [1], [b""])
    b.add(b"m", 5, 1, b"x")
    with pytest.raises(antkv.InvalidArgumentError):
        b.add_sorted([b"n"], [1], [1], [b""])  # the current block is not empty
