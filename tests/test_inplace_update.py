"""``Options.inplace_update_support``: an overwrite keeps in the memtable only the versions a live
snapshot or iterator can see (``MemTable.add_batch_pruning``).  It must change nothing a reader
can observe: a database with the option reads exactly as one without it, through snapshots
taken before the overwrites, iterators opened before them, reads a writer overtakes, flushes and
reopening from the WAL."""

from __future__ import annotations

import random

import pytest

import antkv

KEYS = [b"k%03d" % i for i in range(40)]


def _open(path, inplace: bool, **extra) -> antkv.DB:
    return antkv.open(str(path), inplace_update_support=inplace, max_background_jobs=0,
                      merge_operator=antkv.AppendOperator(), min_blob_size=48, **extra)


def test_a_key_rewritten_again_and_again_keeps_one_version(tmp_path):
    db = _open(tmp_path / "db", True)
    for round_ in range(50):
        db.write(antkv.WriteBatch().update({k: b"v%d" % round_ for k in KEYS}))
    mem = db._mem
    assert mem.num_entries == len(KEYS)  # one version a key, not 50
    assert mem.memory < 2 * len(KEYS) * 300  # the memory of one version a key, not of 50
    assert all(db.get(k) == b"v49" for k in KEYS)
    db.close()


def test_a_snapshot_keeps_the_version_it_sees_and_only_that_one(tmp_path):
    db = _open(tmp_path / "db", True)
    db.write(antkv.WriteBatch().update({k: b"base" for k in KEYS}))
    snap = db.snapshot()
    for round_ in range(20):
        db.write(antkv.WriteBatch().update({k: b"v%d" % round_ for k in KEYS}))
    assert all(snap.get(k) == b"base" for k in KEYS)
    assert dict(snap.items()) == {k: b"base" for k in KEYS}
    assert db._mem.num_entries == 2 * len(KEYS)  # the snapshot's version and the newest
    snap.release()
    db.write(antkv.WriteBatch().update({k: b"last" for k in KEYS}))
    assert db._mem.num_entries == len(KEYS)  # no snapshot: replaced in place, the older one dropped
    assert all(db.get(k) == b"last" for k in KEYS)
    db.close()


def test_an_iterator_opened_before_overwrites_reads_the_state_it_was_opened_on(tmp_path):
    db = _open(tmp_path / "db", True)
    db.write(antkv.WriteBatch().update({k: b"before" for k in KEYS}))
    items = db.items()  # a plain scan (no snapshot given): its view is pinned while it lives
    cursor = db.iterator()
    cursor.seek_to_first()
    for round_ in range(5):
        db.write(antkv.WriteBatch().update({k: b"after%d" % round_ for k in KEYS}))
    assert dict(items) == {k: b"before" for k in KEYS}
    seen = {}
    while cursor.valid():
        seen[cursor.key()] = cursor.value()
        cursor.next()
    assert seen == {k: b"before" for k in KEYS}
    cursor.close()
    del items, cursor
    db.write(antkv.WriteBatch().update({k: b"end" for k in KEYS}))
    assert db._mem.num_entries == len(KEYS)  # the views are gone: nothing keeps older versions
    db.close()


class _OverwriteOnFirstLook:
    """A database's super version that runs ``overwrite`` the first time a read looks at it: the
    write lands after the read took its sequence number and before it searches, the race a
    writer thread meets only now and then, here on every run."""

    def __init__(self, sv, overwrite):
        self._sv, self._overwrite = sv, overwrite

    def __getattr__(self, name):
        if self._overwrite is not None:
            overwrite, self._overwrite = self._overwrite, None
            overwrite()
        return getattr(self._sv, name)


@pytest.mark.parametrize("read", ["get", "key_may_exist"])
def test_a_read_overtaken_by_an_overwrite_reads_again_and_never_misses_the_key(tmp_path, read):
    """A read without a snapshot meets a version newer than its read sequence, the one below it
    replaced in place: it must read again, not fall through to the tables (which hold an older
    value, or nothing)."""
    db = _open(tmp_path / "db", True)
    db.put(KEYS[7], b"0")
    db.flush()  # the tables hold "0" for KEYS[7] and nothing for KEYS[9]
    db.write(antkv.WriteBatch().update({KEYS[7]: b"1", KEYS[9]: b"1"}))
    key = KEYS[7] if read == "get" else KEYS[9]
    sv = db._sv
    db._sv = _OverwriteOnFirstLook(sv, lambda: db.put(key, b"2"))
    try:
        got = db.get(key) if read == "get" else db.key_may_exist(key)
    finally:
        db._sv = sv
    assert got == (b"2" if read == "get" else True)
    db.close()


def _random_ops(seed: int, n: int):
    r = random.Random(seed)
    for i in range(n):
        x = r.random()
        k = r.choice(KEYS)
        if x < 0.45:
            yield ("put", k, b"v%d-" % i + b"x" * r.choice((0, 0, 60)))  # some values go to the value log
        elif x < 0.6:
            yield ("delete", k)
        elif x < 0.65:
            yield ("merge", k, b"m%d" % i)
        elif x < 0.68:
            a, b = sorted(r.sample(KEYS, 2))
            yield ("delete_range", a, b)
        elif x < 0.75:
            yield ("batch", [(r.choice(KEYS), b"b%d" % j if r.random() < 0.8 else None) for j in range(5)])
        elif x < 0.79:
            yield ("snapshot",)
        elif x < 0.82:
            yield ("release", r.random())
        elif x < 0.86:
            yield ("open_iterator",)
        elif x < 0.88:
            yield ("drop_iterator", r.random())
        elif x < 0.89:
            yield ("flush",)
        elif x < 0.895:
            yield ("reopen",)
        else:
            yield ("get", k)


def test_a_database_with_the_option_reads_as_one_without_it(tmp_path):
    """The same random writes, snapshots, scans left open, flushes and reopenings (from the
    WAL) on two databases, with and without the option: every read, through the newest state,
    every live snapshot and every scan opened earlier, gives the same answer on both."""
    for seed in range(6):
        dbs = [_open(tmp_path / f"{seed}-{inplace}", inplace, write_buffer_size=4096) for inplace in (True, False)]
        snaps = [[], []]
        scans = [[], []]
        for op in _random_ops(seed, 1500):
            for side, db in enumerate(dbs):
                kind = op[0]
                if kind == "put":
                    db.put(op[1], op[2])
                elif kind == "delete":
                    db.delete(op[1])
                elif kind == "merge":
                    db.merge(op[1], op[2])
                elif kind == "delete_range":
                    db.delete_range(op[1], op[2])
                elif kind == "batch":
                    b = antkv.WriteBatch()
                    for k, v in op[1]:
                        b.delete(k) if v is None else b.put(k, v)
                    db.write(b)
                elif kind == "snapshot":
                    snaps[side].append(db.snapshot())
                elif kind == "release" and snaps[side]:
                    snaps[side].pop(int(op[1] * len(snaps[side]))).release()
                elif kind == "open_iterator":
                    scans[side].append(db.items())
                elif kind == "drop_iterator" and scans[side]:
                    scans[side].pop(int(op[1] * len(scans[side])))
                elif kind == "flush":
                    db.flush()
                elif kind == "reopen":
                    for s in snaps[side]:
                        s.release()
                    snaps[side], scans[side] = [], []
                    path = db.path
                    db.close()
                    dbs[side] = db = _open(path, side == 0, write_buffer_size=4096)
            if op[0] == "get":
                assert dbs[0].get(op[1]) == dbs[1].get(op[1]), (seed, op)
            key = op[1] if op[0] in ("put", "delete", "merge", "get") else KEYS[0]
            for a, b in zip(snaps[0][-2:], snaps[1][-2:]):
                assert a.get(key) == b.get(key), (seed, op)
        assert dict(dbs[0].items()) == dict(dbs[1].items()), seed
        for a, b in zip(snaps[0], snaps[1]):
            assert dict(a.items()) == dict(b.items()), seed
        for a, b in zip(scans[0], scans[1]):
            assert list(a) == list(b), seed
        for side, db in enumerate(dbs):
            for s in snaps[side]:
                s.release()
            path = db.path
            db.close()
            dbs[side] = _open(path, side == 0)  # recovery (the last writes are in the WAL)
        assert dict(dbs[0].items()) == dict(dbs[1].items()), seed
        for db in dbs:
            db.close()


def test_the_option_is_a_bool():
    import pytest

    with pytest.raises(antkv.InvalidArgumentError, match="inplace_update_support"):
        antkv.Options(inplace_update_support=1)


def test_the_write_buffer_manager_gets_back_at_the_flush_what_it_was_told(tmp_path):
    """Overwrites that free memory (shorter values, versions dropped) must not leave the
    manager counting memory no flush will give back."""
    wbm = antkv.WriteBufferManager(1 << 30)
    db = _open(tmp_path / "db", True, write_buffer_manager=wbm)
    snap = db.snapshot()
    for round_ in range(30):
        db.write(antkv.WriteBatch().update({k: b"v" * (300 - 10 * round_) for k in KEYS}))
        if round_ == 10:
            snap.release()  # the next overwrites drop the versions it kept
    assert wbm.memory_usage > 0
    db.flush()
    assert wbm.memory_usage == 0
    db.close()
