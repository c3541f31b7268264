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
        b.add_sorted([e[0] for e in entries], [e[1:] for e in entries])
    else:
        for e in entries:
            b.add(*e)
    b.finish(blob_refs={})
    return fs.read_all("t.sst")


@pytest.mark.parametrize("block_size, max_value", [(1, 200), (64, 200), (4096, 200), (4096, 2000), (1 << 20, 200)])
def test_same_bytes_as_adding_one_by_one(block_size, max_value):
    rng = random.Random(block_size)
    keys = sorted({bytes(rng.randrange(256) for _ in range(rng.randrange(0, 12))) for _ in range(2000)})
    entries = [(k, rng.randrange(1, 1 << 40), rng.choice([0, 1, 1, 1, 3]), bytes(rng.randrange(0, max_value))) for k in keys]
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
        b.add_sorted([b"b", b"a"], [(1, 1, b""), (2, 1, b"")])
    with pytest.raises(antkv.InvalidArgumentError):
        b.add_sorted([b"a", b"a"], [(2, 1, b""), (1, 1, b"")])  # duplicate keys: use add()
    with pytest.raises(TypeError):
        b.add_sorted(["a"], [(1, 1, b"")])
    with pytest.raises(TypeError):
        b.add_sorted([b"a"], [(1, b"")])  # a row is (seq, kind, value)
    with pytest.raises(TypeError):
        b.add_sorted([b"a"], [None])
    with pytest.raises(antkv.InvalidArgumentError):
        b.add_sorted([b"a", b"b"], [(1, 1, b"")])
    b.add(b"m", 5, 1, b"x")
    with pytest.raises(antkv.InvalidArgumentError):
        b.add_sorted([b"n"], [(1, 1, b"")])  # the current block is not empty


@pytest.mark.parametrize("block_size", [1, 300, 4096])
def test_add_after_add_sorted_counts_each_entry_once(block_size):
    """add_sorted accounts its whole batch up front, including the tail it leaves in the open
    block; entries added after it into that block are accounted when the block is written."""
    rng = random.Random(block_size + 1)
    keys = sorted({rng.randbytes(rng.randrange(1, 10)) for _ in range(600)})
    entries = [(k, rng.randrange(1, 1 << 30), rng.choice([0, 1, 3]), rng.randbytes(rng.randrange(0, 50))) for k in keys]
    split = 400
    fs = MemoryFileSystem()
    f = fs.create("t.sst")
    b = TableBuilder(f, file_number=1, block_size=block_size)
    head = entries[:split]
    b.add_sorted([e[0] for e in head], [e[1:] for e in head])
    for e in entries[split:]:
        b.add(*e)
    props = b.finish()
    assert fs.read_all("t.sst") == _build(entries, block_size, columns=False)
    assert props.num_entries == len(entries)
    assert props.num_deletions == sum(e[2] == 0 for e in entries)
    assert props.num_value_pointers == sum(e[2] == 3 for e in entries)
    assert props.raw_key_size == sum(len(e[0]) for e in entries)
    assert props.raw_value_size == sum(len(e[3]) for e in entries)
    assert (props.smallest_seq, props.largest_seq) == (min(e[1] for e in entries), max(e[1] for e in entries))


def test_add_sorted_refuses_bad_kinds_seqs_and_order_in_any_block():
    """Checks run block by block: a bad entry in a later block is refused as well as in the
    first (blocks before it may have been written; the caller abandons the builder)."""
    rng = random.Random(3)
    for bad_at in (0, 1, 57, 99):
        for bad in ("kind", "seq", "order", "type"):
            keys = [b"k%04d" % i for i in range(100)]
            seqs, kinds, values = list(range(1, 101)), [1] * 100, [rng.randbytes(5) for _ in range(100)]
            if bad == "kind":
                kinds[bad_at] = 2
            elif bad == "seq":
                seqs[bad_at] = 1 << 56
            elif bad == "order":
                keys[bad_at] = keys[bad_at - 1] if bad_at else b"k0001"
            else:
                values[bad_at] = "str"
            b = TableBuilder(MemoryFileSystem().create("t.sst"), file_number=1, block_size=64)
            with pytest.raises(TypeError if bad == "type" else antkv.InvalidArgumentError):
                b.add_sorted(keys, list(zip(seqs, kinds, values)))
            b.abandon()
