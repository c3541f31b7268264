"""``db.resume()`` after a background error whose cause is gone (a full disk freed)."""

from __future__ import annotations

import pytest

import antkv
from antkv.fs.fault import FaultInjectionFileSystem
from antkv.fs.memory import MemoryFileSystem

OPTS = dict(max_background_jobs=0, min_blob_size=50, write_buffer_size=4096, level0_file_num_compaction_trigger=2)


def _fill(db, model, start, n):
    for i in range(start, start + n):
        k, v = b"k%04d" % (i % 300), (b"v%d-" % i) * (1 + i % 25)
        db.put(k, v)
        model[k] = v


@pytest.mark.parametrize("fail_after", [5, 40, 120, 300])
def test_resume_after_a_full_disk(fail_after):
    fs = FaultInjectionFileSystem(MemoryFileSystem())
    model: dict = {}
    db = antkv.open("/db", file_system=fs, **OPTS)
    _fill(db, model, 0, 200)
    fs.fail_at(fs.calls + fail_after, persistent=True)  # the disk is full from here on
    with pytest.raises(antkv.IOError):
        for i in range(200, 2000):
            k, v = b"k%04d" % (i % 300), (b"v%d-" % i) * (1 + i % 25)
            db.put(k, v)
            model[k] = v  # acknowledged
    with pytest.raises(antkv.BackgroundError, match="resume"):
        db.put(b"x", b"y")
    with pytest.raises(antkv.IOError):
        db.resume()  # the disk is still full: the error stays
    with pytest.raises(antkv.BackgroundError):
        db.put(b"x", b"y")
    fs.disarm()  # space freed
    db.resume()
    db.resume()  # no error: a no-op
    _fill(db, model, 3000, 400)
    db.compact_range()
    assert dict(db.items()) == model
    db.verify()
    db.close()
    with antkv.open("/db", file_system=fs, **OPTS) as db:
        assert dict(db.items()) == model
        db.verify()


def test_compact_range_that_hits_enospc_names_the_failure_and_resume(tmp_path):
    fs = FaultInjectionFileSystem(MemoryFileSystem())
    db = antkv.open("/db", file_system=fs, **OPTS)
    model: dict = {}
    _fill(db, model, 0, 300)
    fs.fail_at(fs.calls + 3, persistent=True)
    with pytest.raises(antkv.IOError) as e:
        db.compact_range()
    assert "injected" in str(e.value) or "No space" in str(e.value)
    fs.disarm()
    db.resume()
    db.compact_range()
    assert dict(db.items()) == model
    db.close()


def test_resume_refuses_read_only_and_closed(tmp_path):
    path = str(tmp_path / "db")
    with antkv.open(path, **OPTS) as db:
        db.put(b"k", b"v")
        db.resume()  # nothing to resume
    with antkv.open(path, read_only=True) as db:
        with pytest.raises(antkv.ReadOnlyError):
            db.resume()
    with pytest.raises(antkv.DBClosedError):
        db.resume()


@pytest.mark.parametrize("fail_after", [10, 60])
def test_resume_with_background_threads(fail_after):
    """The background threads (flushes, compactions, GC) hit the full disk; resume() waits for
    them, clears the error and they carry on: nothing acknowledged is lost."""
    fs = FaultInjectionFileSystem(MemoryFileSystem())
    opts = dict(OPTS, max_background_jobs=2)
    model: dict = {}
    db = antkv.open("/db", file_system=fs, **opts)
    _fill(db, model, 0, 200)
    db.flush()
    fs.fail_at(fs.calls + fail_after, persistent=True)
    with pytest.raises((antkv.IOError, antkv.BackgroundError)):
        for i in range(200, 5000):
            k, v = b"k%04d" % (i % 300), (b"v%d-" % i) * (1 + i % 25)
            db.put(k, v)
            model[k] = v  # acknowledged
        db.flush()  # the last writes' flush, in a background thread, hits the full disk
    fs.disarm()
    db.resume()
    _fill(db, model, 6000, 600)
    db.flush()
    db.compact_range()
    assert dict(db.items()) == model
    db.verify()
    db.close()
    with antkv.open("/db", file_system=fs, **opts) as db:
        assert dict(db.items()) == model
        db.verify()
