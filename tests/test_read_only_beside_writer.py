"""Read-only views beside a live writer (``docs/operations.md``, "Read-only views").

* the two-process run of :mod:`fuzz.beside_writer`: a writer flushing, compacting and
  collecting the value log; read-only opens, scans, ``verify``, ``antkv verify`` and
  ``antkv scan`` beside it, and the writer's own read-only views: no failure at all;
* a view keeps reading the files it started from after the writer deleted them;
* an open whose MANIFEST state the writer moved past (its tables deleted) opens again, from the
  new state.
"""

from __future__ import annotations

import os

import antkv
from antkv.db import read_only
from antkv.fs.fault import FaultInjectionFileSystem
from antkv.fs.memory import MemoryFileSystem
from fuzz import beside_writer

OPTS = dict(max_background_jobs=0, write_buffer_size=4096, min_blob_size=64, blob_file_size=8192,
            blob_gc_threshold=0.1, level0_file_num_compaction_trigger=2)


def test_two_processes_read_only_work_beside_a_writer_never_fails(tmp_path):
    results = beside_writer.run(6.0, ["small-buffers", "gc"], workdir=str(tmp_path), seed=11)
    for r in results:
        assert r["failures"] == 0, r
        assert r["opens"] >= 3 and r["commands"] >= 1 and r["writes"] >= 1000, r


def _fill(db, rounds: int) -> dict:
    model = {}
    for i in range(rounds):
        k = b"k%04d" % (i % 300)
        v = beside_writer.make_value(k, i, 10 if i % 3 else 200)
        db.put(k, v)
        model[k] = v
    db.flush()
    return model


def test_a_view_keeps_reading_files_the_writer_deleted(tmp_path):
    path = str(tmp_path / "db")
    with antkv.open(path, **OPTS) as writer:
        model = _fill(writer, 1500)
        with antkv.open(path, read_only=True) as view:
            it = view.items()
            first = [next(it) for _ in range(10)]
            before = set(n for n in os.listdir(path) if n.endswith((".sst", ".vlog")))
            _fill(writer, 3000)  # overwrites everything: compaction and GC delete the old files
            writer.compact_range()
            writer.gc_value_log()
            writer.compact_range()
            after = set(n for n in os.listdir(path) if n.endswith((".sst", ".vlog")))
            assert before - after, "the writer deleted none of the files the view started from"
            seen = dict(first)
            seen.update(it)
            assert seen == model  # the state of the open, read from files deleted since
            assert view.verify()["tables"] >= 1


class _FileSystemWithHook(MemoryFileSystem):
    """The shared in-memory file system; ``after_manifest_read``, when set, runs once right
    after the next read of a MANIFEST (the writer moving on at the worst moment)."""

    after_manifest_read = None

    def read_all(self, path):
        data = super().read_all(path)
        action, self.after_manifest_read = self.after_manifest_read, None
        if action is not None and "MANIFEST-" in path:
            action()
        elif action is not None:
            self.after_manifest_read = action
        return data


def test_an_open_the_writer_moved_past_is_tried_again():
    fs = _FileSystemWithHook()
    fired = []
    with antkv.open("/db", file_system=fs, **OPTS) as writer:
        _fill(writer, 1500)
        model = _fill(writer, 1500)

        def compact():
            fired.append(sorted(n for n in fs.listdir("/db") if n.endswith(".sst")))
            writer.compact_range()
            writer.gc_value_log()
            assert not set(fired[0]) & set(fs.listdir("/db"))  # every table the view read of is gone

        fs.after_manifest_read = compact
        with antkv.open("/db", file_system=fs, read_only=True) as view:
            assert fired
            assert dict(view.items()) == model


class _FileSystemWithListingHook(MemoryFileSystem):
    """The shared in-memory file system; ``after_listing``, when set, runs once right after the
    next directory listing (the writer moving on between a listing and the reads after it)."""

    after_listing = None

    def listdir(self, path):
        names = super().listdir(path)
        action, self.after_listing = self.after_listing, None
        if action is not None:
            action()
        return names


def test_verify_on_a_view_skips_a_wal_the_writer_deleted_after_the_listing():
    fs = _FileSystemWithListingHook()
    with antkv.open("/db", file_system=fs, **OPTS) as writer:
        _fill(writer, 300)
        with antkv.open("/db", file_system=fs, read_only=True) as view:
            writer.put(b"late", b"x")  # in the writer's current WAL, which the listing will name
            gone = []

            def flush():
                wals = {n for n in fs.listdir("/db") if n.endswith(".log")}
                writer.flush()  # a new WAL; the one listed is deleted
                gone.extend(wals - set(fs.listdir("/db")))

            fs.after_listing = flush
            counts = view.verify()
            assert gone, "the writer deleted no WAL between the listing and the reads"
            assert counts["tables"] >= 1


# --------------------------------------------------------------------------- the writer at every step


class _ReaderFileSystem(FaultInjectionFileSystem):
    """The reader's way to the file system the writer uses: ``at_step(n)`` runs before the
    reader's n-th call (every call: open, read, list, stat, exists), ``after_read(path, nbytes)``
    after each read, so a test can make the writer move on at any moment of the reader's work."""

    def __init__(self, inner, at_step=None, after_read=None):
        super().__init__(inner)
        self.at_step = at_step or (lambda n: None)
        self.after_read = after_read or (lambda path, n: None)

    def _hook(self, op, path, data=None, inner_file=None):
        super()._hook(op, path, data, inner_file)
        self.at_step(self.calls)

    def exists(self, path):
        self._hook("exists", path)
        return super().exists(path)

    def is_dir(self, path):
        self._hook("is_dir", path)
        return super().is_dir(path)

    def is_locked(self, path):
        self._hook("is_locked", path)
        return super().is_locked(path)

    def read_all(self, path):
        data = super().read_all(path)
        self.after_read(path, len(data))
        return data

    def open_random(self, path):
        return _ReportedReads(super().open_random(path), self)


class _ReportedReads:
    def __init__(self, handle, fs):
        self._handle, self._fs, self.path = handle, fs, handle.path

    def read(self, offset, n):
        data = self._handle.read(offset, n)
        self._fs.after_read(self.path, len(data))
        return data

    def size(self):
        return self._handle.size()

    def close(self):
        self._handle.close()


MOVING_OPTS = dict(OPTS, max_manifest_file_size=1 << 30)  # the MANIFEST keeps every edit: it grows


class _MovingWriter:
    """A writer on ``fs`` whose :meth:`move_on` rewrites every key, deletes some, flushes,
    compacts and collects the value log: the tables, WALs and value-log files of the state
    before are all deleted.  ``states`` lists every state it has been in."""

    def __init__(self, fs, rounds: int = 4):
        self.db = antkv.open("/db", file_system=fs, **MOVING_OPTS)
        self.round = 0
        self.states = [{}]
        for _ in range(rounds):
            self.move_on()

    def move_on(self):
        self.round += 1
        model = dict(self.states[-1])
        for i in range(120):
            k = b"k%04d" % (i % 60)
            model[k] = beside_writer.make_value(k, self.round * 1000 + i, 10 if i % 3 else 200)
            self.db.put(k, model[k])
        for k in sorted(model)[self.round % 7::7]:
            self.db.delete(k)
            del model[k]
        self.db.flush()
        self.db.compact_range()
        self.db.gc_value_log()
        self.db.compact_range()
        self.states.append(model)


def _read_view(fs) -> tuple[dict, dict]:
    """Open read-only through ``fs``; the first reads: a get of every key, then a scan."""
    with antkv.open("/db", file_system=fs, read_only=True) as view:
        got = {b"k%04d" % i: view.get(b"k%04d" % i) for i in range(60)}
        return got, dict(view.items())


def test_the_writer_deleting_files_at_any_step_of_an_open_and_its_first_reads():
    """For every step n of a read-only open and its first reads, the writer moves on right
    before the reader's n-th file-system call (deleting every table, WAL and value-log file
    of the state before); the view is always one whole state of the writer's."""
    n = 1
    while True:
        mem = MemoryFileSystem()
        writer = _MovingWriter(mem)
        fired = []

        def at_step(call, n=n, writer=writer, fired=fired):
            if call == n:
                fired.append(call)
                writer.move_on()

        try:
            got, items = _read_view(_ReaderFileSystem(mem, at_step))
        finally:
            writer.db.close()
        assert items in writer.states[-2:], f"step {n}: the view is no state of the writer's"
        assert got == {b"k%04d" % i: items.get(b"k%04d" % i) for i in range(60)}, f"step {n}"
        if not fired:
            break  # the open and its reads took fewer than n calls: every step was covered
        n += 1
    assert n > 40, n


def test_a_writer_that_moves_on_during_every_long_manifest_read_is_caught_up_with(monkeypatch):
    """Decoding a long MANIFEST takes a while, and a busy writer moves on meanwhile: here it
    moves on whenever the reader has read more than 4 KiB of a MANIFEST.  An open that read the
    whole MANIFEST again at each attempt would never catch up (each attempt would find a table
    of the state it read deleted); retries read only the edits appended since."""
    monkeypatch.setattr(read_only, "RETRY_SECONDS", 3.0)
    mem = MemoryFileSystem()
    writer = _MovingWriter(mem, rounds=12)
    manifest = next(n for n in mem.listdir("/db") if n.startswith("MANIFEST-"))
    assert mem.size("/db/" + manifest) > 8192, "the MANIFEST is not long enough for this test"
    moves = []

    def after_read(path, nbytes):
        if "MANIFEST-" in path and nbytes > 4096:
            moves.append(nbytes)
            writer.move_on()

    try:
        got, items = _read_view(_ReaderFileSystem(mem, after_read=after_read))
    finally:
        writer.db.close()
    assert moves, "the writer never moved on"
    assert items == writer.states[-1]
    assert got == {b"k%04d" % i: items.get(b"k%04d" % i) for i in range(60)}
