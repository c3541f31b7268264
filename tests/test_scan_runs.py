"""The batched forward scan (antkv/runs.py) against the general per-entry path.

Unit level: random sources (overwrites, deletions, value pointers, versions newer than the
read, runs of every length) merged by :func:`merge_runs` + :func:`visible_runs` must give
exactly what ``heapq.merge`` + :func:`visible_forward` give.  Database level: random workloads
spread over the memtable, L0 and L1 (tiny tables), with snapshots, range tombstones, blobs and
bounds; every scan mode and the cursor must agree with the general path and with a model.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

import antkv
from antkv.base.dbformat import DELETION, VALUE, VALUE_POINTER
from antkv.fs.memory import MemoryFileSystem
from antkv.read.iterators import merge_backward, merge_forward, visible_backward, visible_forward
from antkv.read.runs import (
    RUN_TARGET,
    entry_runs,
    entry_runs_backward,
    gather_runs,
    gather_runs_backward,
    merge_runs,
    merge_runs_backward,
    shaped,
    shaped_backward,
    triples,
    visible_runs,
    visible_runs_backward,
)

FEW_KEYS = [b"%03d" % i for i in range(40)]
MANY_KEYS = [b"%03d" % i for i in range(1000)]
KINDS = {"mixed": [VALUE, VALUE, VALUE, DELETION, VALUE_POINTER], "values": [VALUE]}


def _sources(data, nsources: int, seq_start: int, shape: str = "mixed"):
    """Sources newest first: lists of entry tuples in internal order (the LSM invariant holds:
    for one key, a newer source has newer versions).  ``shape`` "mixed": few keys, many
    versions, deletions and pointers; "values": many keys, VALUEs only (the plain merge)."""
    seq = seq_start
    sources = []
    keys, kinds = (FEW_KEYS, KINDS["mixed"]) if shape == "mixed" else (MANY_KEYS, KINDS["values"])
    for _ in range(nsources):
        seq -= 1000
        entries = []
        for key in data.draw(st.lists(st.sampled_from(keys), max_size=300 if shape == "values" else 60)):
            seq += 1
            kind = data.draw(st.sampled_from(kinds))
            entries.append((key, -seq, kind, b"v%d" % seq))
        sources.append(sorted(entries))
    return sources  # each source's versions are older than the one before's


# data, number of sources, read_seq, bound (upper or lower), value shape
_merge_cases = given(
    st.data(),
    st.integers(1, 4),
    st.integers(0, 5000),
    st.sampled_from([None, b"010", b"039", b"000", b"500"]),
    st.sampled_from(["mixed", "values"]),
)


def _blocks(entries: list, rng: random.Random):
    """``entries`` cut into decoded blocks (parallel lists) of random sizes."""
    i = 0
    while i < len(entries):
        n = rng.choice([1, 2, 7, 40, RUN_TARGET + 3])
        chunk = entries[i : i + n]
        i += n
        yield tuple(list(col) for col in zip(*chunk))


@_merge_cases
def test_runs_match_the_general_merge(data, nsources, read_seq, upper, shape):
    sources = _sources(data, nsources, 5000, shape)
    rng = random.Random(read_seq)
    expected = list(visible_forward(merge_forward([iter(s) for s in sources]), read_seq, None, upper))
    runs = []
    for i, s in enumerate(sources):
        if i == 0:  # a memtable-like source
            runs.append(entry_runs(iter(s), -read_seq))
        else:
            runs.append(gather_runs(_blocks(s, rng), -read_seq))
    got = list(triples(visible_runs(merge_runs(runs), upper)))
    assert got == expected


def _backward_triples(sources, read_seq, lower, rng):
    runs = []
    for i, s in enumerate(sources):
        if i == 0:
            runs.append(entry_runs_backward(iter(s[::-1]), -read_seq))
        else:
            blocks = list(_blocks(s, rng))[::-1]
            runs.append(gather_runs_backward(iter(blocks), -read_seq))
    visible = visible_runs_backward(merge_runs_backward(runs), lower)
    return list(shaped_backward(visible, "items", lambda rest: iter(list(rest))))


def _general_backward(sources, read_seq, lower):
    merged = merge_backward([iter(s[::-1]) for s in sources])
    return list(visible_backward(merged, read_seq, None, lower))


@_merge_cases
def test_backward_runs_match_the_general_merge(data, nsources, read_seq, lower, shape):
    sources = _sources(data, nsources, 5000, shape)
    expected = _general_backward(sources, read_seq, lower)
    got = _backward_triples(sources, read_seq, lower, random.Random(read_seq))
    # with no pointer the items come as (key, value); the handover yields triples
    assert [(e[0], e[-1]) for e in got] == [(k, v) for k, _, v in expected]


@pytest.mark.parametrize("seed", range(20))
def test_long_runs_match_the_general_merge(seed):
    """Long sources, mostly plain VALUEs of distinct keys, some overwritten in newer sources:
    whole blocks pass as runs, plain batches are merged by key, and the versions of one key
    fall on both sides of a batch boundary."""
    rng = random.Random(seed)
    keys = [b"%05d" % i for i in range(5000)]
    seq = 0
    sources = []
    for _ in range(rng.randint(2, 4)):  # oldest first
        entries = []
        for key in rng.sample(keys, rng.randint(100, 3000)):
            seq += 1
            kind = VALUE if rng.random() < 0.995 else rng.choice([DELETION, VALUE_POINTER])
            entries.append((key, -seq, kind, b"v%d" % seq))
        sources.append(sorted(entries))
    sources.reverse()
    read_seq = seq if seed % 3 else rng.randrange(seq)
    upper = None if seed % 4 else rng.choice(keys)
    expected = list(visible_forward(merge_forward([iter(s) for s in sources]), read_seq, None, upper))
    runs = [gather_runs(_blocks(s, rng), -read_seq) for s in sources]
    assert list(triples(visible_runs(merge_runs(runs), upper))) == expected
    got = _backward_triples(sources, read_seq, upper, rng)
    assert [(e[0], e[-1]) for e in got] == [(k, v) for k, _, v in _general_backward(sources, read_seq, upper)]


@given(st.data(), st.sampled_from(["items", "keys", "values"]))
def test_shaped_hands_over_at_the_first_pointer(data, mode):
    sources = _sources(data, 3, 5000)
    expected = list(visible_forward(merge_forward([iter(s) for s in sources]), 10**9, None, None))
    shape = {"items": lambda k, v: (k, v), "keys": lambda k, v: k, "values": lambda k, v: v}[mode]

    def on_pointer(rest):
        for key, kind, value in rest:
            yield shape(key, b"resolved " + value if kind == VALUE_POINTER else value)

    rng = random.Random(0)
    runs = [gather_runs(_blocks(s, rng), -(10**9)) for s in sources]
    got = list(shaped(visible_runs(merge_runs(runs), None), mode, on_pointer))
    want = [shape(k, b"resolved " + v if kind == VALUE_POINTER and mode != "keys" else v) for k, kind, v in expected]
    assert got == want


# --- database level ---

TINY = dict(
    max_background_jobs=0,
    write_buffer_size=4096,
    block_size=256,
    target_file_size_base=4096,
    level0_file_num_compaction_trigger=4,
)


def _general_items(db, lo, hi, snapshot):
    """The general per-entry path (heapq.merge + visible_forward), values resolved."""
    view = db._view(snapshot)
    frags, newer = view.sv.fragments(db._open_table, view.read_seq)
    merged = merge_forward(view._forward_sources(lo, newer))
    gen = visible_forward(merged, view.read_seq, frags, hi)
    return [(k, view.resolve(v) if kind == VALUE_POINTER else v) for k, kind, v in gen]


def _model_items(model, lo, hi):
    return sorted((k, v) for k, v in model.items() if (lo is None or k >= lo) and (hi is None or k < hi))


def _cursor_items(db, lo, hi, snapshot):
    it = db.iterator(lower_bound=lo, upper_bound=hi, snapshot=snapshot)
    it.seek_to_first()
    out = list(it)
    it.close()
    return out


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("blobs", [False, True])
def test_scans_agree_with_the_general_path_and_the_model(seed, blobs):
    rng = random.Random(seed)
    opts = dict(TINY, file_system=MemoryFileSystem(), enable_blob_files=blobs, min_blob_size=0 if blobs else 4096)
    db = antkv.open("db", **opts)
    model: dict[bytes, bytes] = {}
    snaps = []
    try:
        keys = [b"k%04d" % i for i in range(300)]
        for step in range(1500):
            r = rng.random()
            k = rng.choice(keys)
            if r < 0.7:
                v = b"%d-%d" % (step, rng.randrange(10**6)) * rng.randint(1, 4)
                db.put(k, v)
                model[k] = v
            elif r < 0.9:
                db.delete(k)
                model.pop(k, None)
            elif r < 0.93:
                snaps.append((db.snapshot(), dict(model)))
            elif r < 0.935 and seed % 2:
                # a range tombstone: scans at or after it take the general path, older
                # snapshots see none and keep the batched one
                a, b = sorted(rng.sample(keys, 2))
                db.delete_range(a, b)
                for key in [key for key in model if a <= key < b]:
                    del model[key]
            elif r < 0.95:
                db.flush()
            elif r < 0.955:
                db.compact_range()
        levels = [lv["files"] for lv in db.stats()["levels"]]
        assert sum(levels) > 1, levels
        bounds = [(None, None), (b"k0100", None), (None, b"k0200"), (b"k0050", b"k0060"), (b"k0299", b"k1")]
        for snap, smodel in [(None, model)] + snaps:
            for lo, hi in bounds:
                want = _model_items(smodel, lo, hi)
                assert _general_items(db, lo, hi, snap) == want
                assert list(db.items(lo, hi, snapshot=snap)) == want
                assert list(db.keys(lo, hi, snapshot=snap)) == [k for k, _ in want]
                assert list(db.values(lo, hi, snapshot=snap)) == [v for _, v in want]
                assert _cursor_items(db, lo, hi, snap) == want
                want.reverse()
                assert list(db.items(lo, hi, reverse=True, snapshot=snap)) == want
                assert list(db.keys(lo, hi, reverse=True, snapshot=snap)) == [k for k, _ in want]
                assert list(db.values(lo, hi, reverse=True, snapshot=snap)) == [v for _, v in want]
            assert list(db.items(prefix=b"k01", snapshot=snap)) == _model_items(smodel, b"k01", b"k02")
            assert list(db.items(prefix=b"k01", reverse=True, snapshot=snap)) == _model_items(smodel, b"k01", b"k02")[::-1]
    finally:
        for s, _ in snaps:
            s.release()
        db.close()


def test_scan_sees_nothing_written_after_it_started():
    db = antkv.open("db", **dict(TINY, file_system=MemoryFileSystem()))
    try:
        for i in range(2000):
            db.put(b"k%05d" % i, b"old")
        it = db.items()
        first = next(it)
        for i in range(2000):  # overwrite into the memtable while the scan is open
            db.put(b"k%05d" % i, b"new")
        db.put(b"zzz", b"new")
        rest = list(it)
        assert [first] + rest == [(b"k%05d" % i, b"old") for i in range(2000)]
    finally:
        db.close()
