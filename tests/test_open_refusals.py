"""A read-write open that refuses leaves every file as it found it.

The database below needs every step of an open: a WAL to replay and flush, a value-log file
with a torn tail to cut back, a table and a WAL it has no record of writing (moved or copied to
``lost/``), a replayed WAL and the old MANIFEST to delete, an unfinished ``CURRENT`` swap, and
an L0 to compact (``max_background_jobs=0``).  For every file-system call n of that open, call
n fails: the open either raises an ``antkv.Error`` with every file and directory exactly as
before, or -- the failure came after its commit point (``antkv/db/recovery.py``) -- opens;
either way a later open without faults reads the whole state.  When every call from n on
fails, putting files back fails too: then the open still refuses only before its commit
point, and what it leaves opens with the whole state.  ``antkv/db/files/open_changes.py`` is what puts the files back.
"""

from __future__ import annotations

import errno
import os

import pytest

import antkv
from antkv.fs.fault import FaultInjectionFileSystem
from antkv.fs.memory import MemoryFileSystem

OPTS = dict(max_background_jobs=0, write_buffer_size=2048, min_blob_size=64, level0_file_num_compaction_trigger=2)


def _build() -> tuple[MemoryFileSystem, dict]:
    mem = MemoryFileSystem()
    db = antkv.open("/db", file_system=mem, **OPTS)
    model = {}
    for i in range(160):
        k = b"k%03d" % (i % 60)
        model[k] = (b"v%d-" % i) * (1 if i % 2 else 30)  # every other value goes to the value log
        db.put(k, model[k])
    db.flush()
    for i in range(30):
        k = b"k%03d" % i
        model[k] = (b"w%d-" % i) * (1 if i % 2 else 30)
        db.put(k, model[k])
    names = mem.listdir("/db")
    wal, vlog, table = (max(n for n in names if n.endswith(ext)) for ext in (".log", ".vlog", ".sst"))
    mem.crash("kill")  # the process died: the WAL is replayed at the next open
    mem.write_all("/db/" + vlog, mem.read_all("/db/" + vlog) + b"\x07torn", sync=True)  # a torn record
    mem.write_all("/db/000999.sst", mem.read_all("/db/" + table), sync=True)  # copied in by hand
    mem.write_all("/db/000998.log", mem.read_all("/db/" + wal), sync=True)  # records that do not continue
    mem.write_all("/db/CURRENT.tmp", b"MANIFEST-0000", sync=True)  # an unfinished CURRENT swap (the roll reuses it)
    return mem, model


@pytest.fixture(scope="module")
def built():
    return _build()


def _everything(fs) -> dict:
    """Every directory and every file's bytes under /db."""
    out = {}
    todo = ["/db"]
    while todo:
        d = todo.pop()
        out[d] = "dir"
        for name in fs.listdir(d):
            p = os.path.join(d, name)
            if fs.is_dir(p):
                todo.append(p)
            else:
                out[p] = fs.read_all(p)
    return out


def _open_calls(mem) -> tuple[int, int]:
    """How many file-system calls an open without faults makes, and which of them is its
    commit point (the directory sync after the rename that swaps ``CURRENT``)."""
    fs = FaultInjectionFileSystem(mem.clone())
    fs.record_trace = True
    antkv.open("/db", file_system=fs, **OPTS).close()
    swap = next(n for n, op, path in fs.trace if op == "rename" and path.endswith("CURRENT.tmp"))
    assert fs.trace[swap][1] == "sync_dir"  # trace[swap] is call swap + 1
    return fs.calls, swap + 1


def test_the_database_needs_every_step_of_an_open(built):
    mem, model = built
    fs = mem.clone()
    with antkv.open("/db", file_system=fs, **OPTS) as db:
        removed = "\n".join(db.stats()["files_removed_at_open"])
        assert dict(db.items()) == model
        assert db.stats()["recovery_dropped"], "no torn value-log tail was cut back"
    for what in ("000998.log", "000999.sst", "moved to /db/lost", "old MANIFEST", "replayed and flushed"):
        assert what in removed, (what, removed)
    assert sorted(fs.listdir("/db/lost")) == ["000998.log", "000999.sst"]


@pytest.mark.parametrize("persistent", [False, True])
def test_a_refused_open_changes_nothing_at_any_call(built, quiet_recovery, persistent):
    mem, model = built
    found = _everything(mem)
    calls, commit = _open_calls(mem)
    assert 20 < commit < calls
    refused = opened = 0
    for n in range(1, calls + 1):
        inner = mem.clone()
        fs = FaultInjectionFileSystem(inner)
        fs.fail_at(n, persistent)
        try:
            db = antkv.open("/db", file_system=fs, **OPTS)
        except antkv.Error as e:
            refused += 1
            if not persistent:  # (a file system failing every call from n on fails the undo too)
                assert _everything(inner) == found, f"call {n} ({e}): the refused open changed files"
            assert n <= commit, f"call {n} ({e}): the open refused after its commit point (call {commit})"
        else:
            opened += 1
            try:
                db.close()
            except antkv.Error:
                pass  # the failing file system may fail the close too; the state must still be whole
        fs.disarm()
        with antkv.open("/db", file_system=inner, **OPTS) as db:
            assert dict(db.items()) == model, f"call {n}"
    assert refused >= commit // 2 and opened >= calls - commit, (refused, opened, commit, calls)


class _LostRefusesRenames(MemoryFileSystem):
    """A directory that refuses to let files be moved into ``lost/`` (permission denied)."""

    def rename(self, src, dst):
        if "/lost/" in dst:
            e = OSError(errno.EACCES, os.strerror(errno.EACCES), dst)
            raise antkv.IOError(f"rename failed: {e.strerror}", e, dst)
        super().rename(src, dst)


def test_an_open_that_cannot_move_a_file_aside_refuses_before_changing_anything(built):
    """The reported case: the file the database cannot account for cannot be moved to
    ``lost/``; the open raised, but had already replayed the WAL into a new table, written a
    new MANIFEST and switched CURRENT."""
    mem, model = built
    fs = _LostRefusesRenames()
    for p, data in _everything(mem).items():
        if data == "dir":
            fs.mkdirs(p)
        else:
            fs.write_all(p, data)
    found = _everything(fs)
    with pytest.raises(antkv.IOError, match="Permission denied"):
        antkv.open("/db", file_system=fs, **OPTS)
    assert _everything(fs) == found
