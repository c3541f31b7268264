"""Progress reports of the long maintenance calls (antkv.base.progress): ``verify``,
``compact_range``, ``gc_value_log`` and ``checkpoint`` report ``(done, total)`` from ``(0, total)``
to ``(total, total)`` with ``done`` never going back; a non-callable is a TypeError; a callback
that raises ends the call between two steps and loses nothing."""

from __future__ import annotations

import os

import pytest

import antkv

OPTS = dict(max_background_jobs=0, min_blob_size=64, write_buffer_size=16 * 1024, blob_gc_threshold=0.25)


def _fill(path: str) -> dict[bytes, bytes]:
    """Several tables on more than one level and value-log files with garbage past the threshold."""
    model = {}
    with antkv.open(path, **OPTS) as db:
        for round_ in range(3):
            for i in range(300):
                key, value = b"k%04d" % i, os.urandom(80 + round_)
                db.put(key, value)
                model[key] = value
            db.flush()
    return model


def _recorder():
    calls: list[tuple[int, int]] = []
    return calls, lambda done, total: calls.append((done, total))


def _check(calls: list[tuple[int, int]], at_least: int) -> None:
    assert calls[0][0] == 0, calls
    assert calls[-1][0] == calls[-1][1] >= at_least, calls
    done = [d for d, _ in calls]
    assert done == sorted(done), calls
    assert all(0 <= d <= t for d, t in calls), calls


def test_each_long_call_reports_from_zero_to_its_total(tmp_path):
    path = str(tmp_path / "db")
    model = _fill(path)
    with antkv.open(path, **OPTS) as db:
        tables = sum(lv["files"] for lv in db.stats()["levels"])
        vlogs = len(db.stats()["vlog_files"])
        assert tables > 1 and vlogs > 1

        calls, report = _recorder()
        r = db.verify(progress=report)
        _check(calls, r["tables"] + r["vlog_files"])
        assert calls[-1][1] == r["tables"] + r["vlog_files"] and r["tables"] == tables
        assert r["vlog_files"] == vlogs

        calls, report = _recorder()
        db.compact_range(progress=report)
        _check(calls, 1)
        assert calls[-1][1] == len(db.stats()["levels"])  # a step per level

        calls, report = _recorder()
        g = db.gc_value_log(progress=report)
        assert g["bytes_relocated"] > 0 or g["files_deleted"] > 0  # the fill left garbage to collect
        _check(calls, 1)

        calls, report = _recorder()
        db.checkpoint(str(tmp_path / "cp"), progress=report)
        _check(calls, 1)
    with antkv.open(str(tmp_path / "cp"), **OPTS) as cp:
        assert dict(cp.items()) == model


def test_a_progress_that_is_not_callable_is_a_type_error(tmp_path):
    path = str(tmp_path / "db")
    _fill(path)
    with antkv.open(path, **OPTS) as db:
        for call in (lambda: db.verify(progress=1), lambda: db.compact_range(progress="x"),
                     lambda: db.gc_value_log(progress=[]), lambda: db.checkpoint(str(tmp_path / "cp"), progress=3)):
            with pytest.raises(TypeError, match="progress"):
                call()
        assert not (tmp_path / "cp").exists()


def test_a_callback_that_raises_ends_the_call_and_loses_nothing(tmp_path):
    path = str(tmp_path / "db")
    model = _fill(path)

    class Stop(Exception):
        pass

    def stop_after_first_step(done, total):
        if done >= 1:
            raise Stop

    with antkv.open(path, **OPTS) as db:
        for call in (lambda: db.verify(progress=stop_after_first_step),
                     lambda: db.checkpoint(str(tmp_path / "cp"), progress=stop_after_first_step),
                     lambda: db.compact_range(progress=stop_after_first_step)):
            with pytest.raises(Stop):
                call()
        assert dict(db.items()) == model
        db.checkpoint(str(tmp_path / "cp"))  # the interrupted checkpoint's leftovers are no obstacle
    with antkv.open(path, **OPTS) as db:
        assert dict(db.items()) == model
    with antkv.open(str(tmp_path / "cp"), **OPTS) as cp:
        assert dict(cp.items()) == model
