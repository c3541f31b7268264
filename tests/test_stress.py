"""A short run of the multi-threaded stress test (:mod:`fuzz.stress`) under a few of the named
extreme option sets; ``make fuzz`` runs it long, over every set.

Writers, readers, cursors, snapshots, flush, compaction, GC, checkpoints, ``property()``,
``verify()`` and close/reopen all run at once with background work on; every answer is checked
against the per-thread operation logs, and a run in which no operation completes for a minute
fails with every thread's stack."""

from __future__ import annotations

import pytest

from fuzz.stress import run_one


@pytest.mark.parametrize("option_set", ["default", "blob-100", "tiny-memtable", "gc-0.01"])
def test_threads_agree_with_their_operation_logs(tmp_path, option_set):
    actors = [(what,) for what in ("writes", "gets", "snapshot_reads", "scans", "reopens")]
    actors.append(("flush", "compact", "gc", "checkpoint", "property", "verify", "stats"))
    counts = run_one(option_set, seed=7, seconds=4.0, workdir=str(tmp_path), reopen_every=1.0, require=tuple(actors))
    # every kind of actor made progress (a stalled or starved actor would hide bugs); on a loaded
    # machine the run lasts until they did
    for group in actors:
        assert sum(counts.get(k, 0) for k in group) > 0, (group, counts)


def test_the_harness_catches_a_lost_write(tmp_path, monkeypatch):
    """The checks can fail: with deletions silently dropped, the run must report it."""
    import antkv
    from fuzz.stress import StressFailure

    monkeypatch.setattr(antkv.DB, "delete", lambda self, key, **kw: None)
    with pytest.raises(StressFailure):
        run_one("default", seed=3, seconds=2.0, workdir=str(tmp_path), reopen_every=10.0)


def test_a_snapshot_get_that_disagrees_with_its_scan_is_reported_with_both_answers(tmp_path, monkeypatch):
    """A get under a snapshot that answers differently from the scan under the same snapshot
    fails the run, and the report gives both answers, read twice, and what the history allows."""
    import random

    import antkv
    from fuzz.stress import Stress, StressFailure

    s = Stress(str(tmp_path / "db"), "default", seed=1, seconds=1.0)
    try:
        db = s.handle()
        first = random.Random(0).randrange(len(s.model.keys))  # where _snapshot_read's scan starts
        db.put(s.model.keys[first], b"v0")
        s.model.end([s.model.begin(first, b"v0")])
        real_get = antkv.DB.get
        monkeypatch.setattr(antkv.DB, "get", lambda self, key, default=None, *, snapshot=None:
                            b"bogus" if snapshot is not None else real_get(self, key, default))
        with pytest.raises(StressFailure, match=r"scan b'v0', get b'bogus'; read again: get b'bogus', "
                                                r"scan b'v0'.*allows \[b'v0'\]"):
            s._snapshot_read(db, random.Random(0))
    finally:
        monkeypatch.undo()
        s.handle().close()


def test_key_history_allows_exactly_the_overlapping_values():
    from fuzz.stress import KeyHistory

    h = KeyHistory([[1, 2, b"a"], [5, 8, b"b"], [10, None, b"c"]])
    assert h.allowed(3, 4) == [b"a"]  # after a was acknowledged, before b began
    assert set(h.allowed(6, 7)) == {b"a", b"b"}  # b in flight: either
    assert set(h.allowed(9, 12)) == {b"b", b"c"}  # c never acknowledged: b or c
    assert h.allowed(0, 0) == [None]  # before the first write


def test_a_write_the_run_stopped_before_trying_did_not_happen(tmp_path):
    """The run may end between a writer logging a write and trying it (or while every try met a
    database being reopened): that write did not happen, and the final check must not fail on it."""
    from fuzz.stress import Stress

    s = Stress(str(tmp_path / "db"), "default", seed=1, seconds=1.0)
    try:
        done = [s.model.begin(3, b"kept")]
        s._write(done, lambda db: db.put(s.model.keys[3], b"kept"))
        stopped = [s.model.begin(3, b"never"), s.model.begin(4, None)]
        s.stop.set()
        s._write(stopped, lambda db: db.put(s.model.keys[3], b"never"))
        assert s.model.final_state() == {s.model.keys[3]: b"kept"}
        assert dict(s.handle().items()) == s.model.final_state()
    finally:
        s.handle().close()
