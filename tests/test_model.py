"""A hypothesis state machine drives antkv and a plain Python model side by side and compares
every answer: put, delete, delete_range, write batches, snapshots, gets, scans, cursor
iterators, flush, compaction, value-log GC and reopen, under every option set of
``model_configs``."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import antkv
from antkv.fs.memory import MemoryFileSystem

from model_configs import CONFIGS

KEYS = st.sampled_from([b"", b"a", b"aa", b"ab", b"b", b"ba", b"c", b"cc", b"d", b"\xff", b"\xff\xff", b"k1", b"k2", b"k3"])
SMALL = st.binary(max_size=20)
VALUES = st.one_of(SMALL, st.binary(min_size=90, max_size=300), st.just(b"x" * 5000))


def model_items(model: dict, lo=None, hi=None, reverse=False):
    ks = sorted(k for k in model if (lo is None or k >= lo) and (hi is None or k < hi))
    if reverse:
        ks.reverse()
    return [(k, model[k]) for k in ks]


def make_machine(config: dict):
    class Machine(RuleBasedStateMachine):
        def __init__(self):
            super().__init__()
            self.fs = MemoryFileSystem()
            self.opts = dict(config, file_system=self.fs)
            self.db = antkv.open("db", **self.opts)
            self.model: dict[bytes, bytes] = {}
            self.snaps: list[tuple[antkv.Snapshot, dict]] = []

        def teardown(self):
            for s, _ in self.snaps:
                s.release()
            self.db.close()

        @rule(k=KEYS, v=VALUES)
        def put(self, k, v):
            self.db.put(k, v)
            self.model[k] = v

        @rule(k=KEYS)
        def delete(self, k):
            self.db.delete(k)
            self.model.pop(k, None)

        @rule(a=KEYS, b=KEYS)
        def delete_range(self, a, b):
            if a > b:
                a, b = b, a
            self.db.delete_range(a, b)
            for k in [k for k in self.model if a <= k < b]:
                del self.model[k]

        @rule(ops=st.lists(st.tuples(st.integers(0, 2), KEYS, KEYS, VALUES), max_size=6))
        def batch(self, ops):
            b = antkv.WriteBatch()
            for op, k1, k2, v in ops:
                if op == 0:
                    b.put(k1, v)
                    self.model[k1] = v
                elif op == 1:
                    b.delete(k1)
                    self.model.pop(k1, None)
                else:
                    lo, hi = min(k1, k2), max(k1, k2)
                    b.delete_range(lo, hi)
                    for k in [k for k in self.model if lo <= k < hi]:
                        del self.model[k]
            self.db.write(b)

        @rule(k=KEYS)
        def get(self, k):
            assert self.db.get(k) == self.model.get(k)

        @precondition(lambda self: len(self.snaps) < 4)
        @rule()
        def take_snapshot(self):
            self.snaps.append((self.db.snapshot(), dict(self.model)))

        @precondition(lambda self: self.snaps)
        @rule(i=st.integers(0, 3), k=KEYS, lo=st.one_of(st.none(), KEYS), rev=st.booleans())
        def read_snapshot(self, i, k, lo, rev):
            snap, m = self.snaps[i % len(self.snaps)]
            assert self.db.get(k, snapshot=snap) == m.get(k)
            assert list(self.db.items(start=lo, reverse=rev, snapshot=snap)) == model_items(m, lo, None, rev) if not rev else True
            if rev:
                assert list(self.db.items(stop=lo, reverse=True, snapshot=snap)) == model_items(m, None, lo, True)

        @precondition(lambda self: self.snaps)
        @rule(i=st.integers(0, 3))
        def release_snapshot(self, i):
            snap, _ = self.snaps.pop(i % len(self.snaps))
            snap.release()

        @rule(lo=st.one_of(st.none(), KEYS), hi=st.one_of(st.none(), KEYS), rev=st.booleans())
        def scan(self, lo, hi, rev):
            assert list(self.db.items(lo, hi, reverse=rev)) == model_items(self.model, lo, hi, rev)

        @rule(p=st.sampled_from([b"", b"a", b"k", b"\xff", b"c"]))
        def prefix_scan(self, p):
            want = [(k, v) for k, v in model_items(self.model) if k.startswith(p)]
            assert list(self.db.items(prefix=p)) == want

        @rule(
            lo=st.one_of(st.none(), KEYS),
            hi=st.one_of(st.none(), KEYS),
            tgt=KEYS,
            moves=st.lists(st.sampled_from(["next", "prev", "seek", "seek_for_prev", "first", "last"]), max_size=8),
        )
        def cursor(self, lo, hi, tgt, moves):
            keys = [k for k, _ in model_items(self.model, lo, hi)]
            it = self.db.iterator(lower_bound=lo, upper_bound=hi)
            pos = None  # index into keys, or None when invalid
            for mv in ["seek"] + moves:
                if mv in ("next", "prev") and pos is None:
                    continue
                if mv == "next":
                    it.next()
                    pos = pos + 1 if pos + 1 < len(keys) else None
                elif mv == "prev":
                    it.prev()
                    pos = pos - 1 if pos > 0 else None
                elif mv == "seek":
                    it.seek(tgt)
                    c = [i for i, k in enumerate(keys) if k >= tgt]
                    pos = c[0] if c else None
                elif mv == "seek_for_prev":
                    it.seek_for_prev(tgt)
                    c = [i for i, k in enumerate(keys) if k <= tgt]
                    pos = c[-1] if c else None
                elif mv == "first":
                    it.seek_to_first()
                    pos = 0 if keys else None
                else:
                    it.seek_to_last()
                    pos = len(keys) - 1 if keys else None
                assert it.valid() == (pos is not None), (mv, pos)
                if pos is not None:
                    assert it.key() == keys[pos]
                    assert it.value() == self.model[keys[pos]]
            it.close()

        @rule()
        def flush(self):
            self.db.flush()

        @rule(a=st.one_of(st.none(), KEYS), b=st.one_of(st.none(), KEYS))
        def compact(self, a, b):
            if a is not None and b is not None and a > b:
                a, b = b, a
            self.db.compact_range(a, b)

        @rule()
        def gc(self):
            self.db.gc_value_log()

        @rule()
        def reopen(self):
            for s, _ in self.snaps:
                s.release()
            self.snaps = []
            self.db.close()
            self.db = antkv.open("db", **self.opts)

        @invariant()
        def invariants(self):
            db = self.db
            db._mem._check()
            db._versions.current._check()

    return Machine


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_model(name):
    from hypothesis.stateful import run_state_machine_as_test

    run_state_machine_as_test(make_machine(CONFIGS[name]), settings=settings(max_examples=40, stateful_step_count=60))


def test_model_final_state_survives_verify():
    """After a long mixed run the database passes a full checksum verification."""
    fs = MemoryFileSystem()
    opts = dict(CONFIGS["all-blobs-gc"], file_system=fs)
    db = antkv.open("db", **opts)
    model = {}
    for i in range(3000):
        k = b"key%03d" % (i * 7919 % 400)
        v = bytes([i % 251]) * (i % 300)
        db.put(k, v)
        model[k] = v
        if i % 500 == 0:
            db.delete_range(b"key1", b"key15")
            for kk in [kk for kk in model if b"key1" <= kk < b"key15"]:
                del model[kk]
    db.compact_range()
    db.gc_value_log()
    assert dict(db.items()) == model
    report = db.verify()
    assert report["tables"] > 0
    db.close()
