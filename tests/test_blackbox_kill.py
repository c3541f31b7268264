"""Blackbox kill test (issue 7): a real child process on the real file system, SIGKILLed.

``python -m fuzz.blackbox_child DIR SEED`` writes random puts, deletes and batches (some with
``sync=True``; background flush and compaction on) and logs each write as ``pending`` before
and ``acked`` after.  The parent kills it at a random moment, reopens the directory and checks
that the state is exactly the acknowledged history, optionally plus the one write in flight
(applied whole: a batch is atomic).  A process kill keeps everything handed to the OS, so
unsynced acknowledged writes must survive too.  ``python -m fuzz.sweeps --only blackbox``
runs many more rounds.
"""

from __future__ import annotations

import signal

import pytest

import antkv
from fuzz.blackbox_child import CHILD_OPTIONS
from fuzz.sweeps import SweepFailure, check_after_kill, read_expected, run_blackbox, start_child




def test_kill_rounds():
    counts = run_blackbox(rounds=8, seed=7)
    assert sum(counts.values()) == 8, counts


def test_second_opener_gets_lock_error(tmp_path):
    proc = start_child(str(tmp_path), seed=1)
    try:
        with pytest.raises(antkv.LockError):
            antkv.open(str(tmp_path / "db"), **CHILD_OPTIONS)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
    # the kill released the lock; the directory opens holding every acknowledged write
    state, outcome = check_after_kill(str(tmp_path), 1, {}, "lock test")
    assert outcome.startswith(("old", "in-flight")) and proc.returncode == -signal.SIGKILL
    # and the check is not vacuous: a history with one more acknowledged key is refused
    with pytest.raises(SweepFailure, match="neither their acknowledged nor their in-flight"):
        check_after_kill(str(tmp_path), 1, {b"\xffnever-written": b"x"}, "wrong model")


def test_expected_log_parser(tmp_path):
    p = tmp_path / "expected-0.log"
    p.write_bytes(b"pending 6b31 7631\nacked\npending 6b32 - 6b33 7633\nacked\npending 6b31 7632\npend")
    acked, pending = read_expected(str(p))
    assert acked == [[(b"k1", b"v1")], [(b"k2", None), (b"k3", b"v3")]]
    assert pending == [(b"k1", b"v2")]


pytestmark = pytest.mark.usefixtures("quiet_recovery")
