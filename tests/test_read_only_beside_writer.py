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
