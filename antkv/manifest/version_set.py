"""Versions: which tables and value-log files make up the database, and the MANIFEST.

A :class:`Version` is an immutable list of tables per level.  Level 0 holds tables flushed
from memtables; they may overlap and are kept newest first (by largest sequence number).
Levels 1 and above are *sorted runs*: tables ordered by key, never overlapping.

The :class:`VersionSet` owns the current version, the counters (next file number, last
sequence number, log number) and the state of every value-log file (total and garbage bytes).
Every change goes through :meth:`VersionSet.log_and_apply`, which appends the edit to the
MANIFEST and syncs it *before* the new version becomes current.  ``CURRENT`` names the live
MANIFEST and is replaced atomically (write ``CURRENT.tmp``, sync, rename, sync the directory).
A MANIFEST larger than ``Options.max_manifest_file_size`` is rolled: a new one starts with a
full snapshot of the state.

REQUIRES: callers of ``log_and_apply`` hold the DB's version lock (one writer at a time).
"""

from __future__ import annotations

import os
from bisect import bisect_left
from dataclasses import dataclass

from ..base.filenames import (
    CURRENT_TMP,
    MANIFEST,
    TABLE,
    VLOG,
    current_file_name,
    manifest_file_name,
    manifest_name,
    parse_file_name,
)
from ..errors import CorruptionError, InvalidArgumentError
from ..record.log_format import LogReader, LogWriter
from .version_edit import FileMetaData, VersionEdit


@dataclass
class VlogFileState:
    number: int
    total: int = 0  # record bytes; known once sealed
    garbage: int = 0
    sealed: bool = False

    @property
    def garbage_ratio(self) -> float:
        return self.garbage / self.total if self.sealed and self.total else 0.0


class Version:
    """Tables per level; immutable once built.

    ``l0_tables`` is ``levels[0]`` as a tuple.  ``sorted_levels`` lists ``(level, files, largest_keys)`` for every non-empty level >= 1,
    with ``largest_keys`` ready for a C-level ``bisect`` (the point-read path uses them).
    ``l0_ranges_apart`` is False when the key ranges of the L0 tables all overlap (they share a
    key, as flushes of keys written in random order do): a point read then skips checking a key
    against each L0 table's range, a check that would almost never rule a table out (the
    table's filter, or the search of its block, does the same anyway).
    """

    __slots__ = ("levels", "l0_tables", "sorted_levels", "l0_ranges_apart", "tables_by_vlog", "__weakref__")

    def __init__(self, levels: list[list[FileMetaData]]):
        self.levels = levels
        l0 = levels[0] if levels else ()
        self.l0_tables = tuple(l0)  # a point read's first candidates, a tuple it adds to
        # intervals that overlap pairwise share a point (and the reverse): the largest smallest
        # key is at most the smallest largest key
        self.l0_ranges_apart = bool(l0) and max(f.smallest for f in l0) > min(f.largest for f in l0)
        self.sorted_levels = [
            (level, files, [f.largest for f in files]) for level, files in enumerate(levels) if level and files
        ]
        # the reverse map value-log file -> [(level, table)] pointing into it (GC picks by it)
        by_vlog: dict[int, list[tuple[int, FileMetaData]]] = {}
        for level, files in enumerate(levels):
            for f in files:
                for vnum in f.blob_refs:
                    by_vlog.setdefault(vnum, []).append((level, f))
        self.tables_by_vlog = by_vlog

    @property
    def num_levels(self) -> int:
        return len(self.levels)

    def all_files(self):
        for level, files in enumerate(self.levels):
            for f in files:
                yield level, f

    def level_bytes(self, level: int) -> int:
        return sum(f.size for f in self.levels[level])

    def num_files(self, level: int) -> int:
        return len(self.levels[level])

    def overlapping(self, level: int, lo: bytes | None, hi: bytes | None) -> list[FileMetaData]:
        return [f for f in self.levels[level] if f.overlaps(lo, hi)]

    def file_for_key(self, level: int, key: bytes) -> FileMetaData | None:
        """The table of sorted level >= 1 that may hold ``key``."""
        files = self.levels[level]
        return find_file(files, [f.largest for f in files], key)

    def file_index_at_or_after(self, level: int, key: bytes) -> int:
        files = self.levels[level]
        return bisect_left([f.largest for f in files], key)

    def _check(self) -> None:
        """Sorted levels never overlap; an L1 table overlapping an L0 table holds only older
        data than it.  (Flushes and compactions keep all of L1 older than all of L0; an ingested
        table may sit in L1 beside L0 tables it does not overlap, newer than they are.)"""
        if self.levels[0] and len(self.levels) > 1 and self.levels[1]:
            for f in self.levels[0]:
                for g in self.levels[1]:
                    if g.overlaps(f.smallest, f.largest):
                        assert g.largest_seq < f.smallest_seq, f"L1 seq {g.largest_seq} >= L0 seq {f.smallest_seq}"
        for level in range(1, len(self.levels)):
            files = self.levels[level]
            for a, b in zip(files, files[1:]):
                assert a.largest < b.smallest or (a.largest_exclusive and a.largest <= b.smallest), (
                    f"L{level} overlap {a.number} {b.number}"
                )


def find_file(files: list[FileMetaData], largest: list[bytes], key: bytes) -> FileMetaData | None:
    """The first file whose range may hold ``key`` (largest >= key; > key when exclusive)."""
    i = bisect_left(largest, key)
    n = len(files)
    if i < n:
        f = files[i]
        if f.largest_exclusive and f.largest == key:
            i += 1
            if i == n:
                return None
            f = files[i]
        if f.smallest <= key:
            return f
    return None


class VersionSet:
    def __init__(self, fs, dbname: str, num_levels: int, max_manifest_file_size: int):
        self.fs = fs
        self.dbname = dbname
        self.num_levels = num_levels
        self.max_manifest_file_size = max_manifest_file_size
        self.current = Version([[] for _ in range(num_levels)])
        self.next_file_number = 2
        self.last_sequence = 0
        self.log_number = 0
        self.manifest_number = 0
        self.vlogs: dict[int, VlogFileState] = {}
        self._manifest: LogWriter | None = None
        self.manifest_bytes_written = 0
        # (kind, number) of the tables and value-log files the recovered MANIFEST records as
        # deleted: a file still on disk was being deleted when the process stopped
        self.recovered_deletions: set[tuple[str, int]] = set()
        # where the recovered MANIFEST's torn last record starts (None: it ended cleanly)
        self.recovered_torn_tail: int | None = None
        # called with every file number handed out, before any file of that number exists:
        # the database records it in its info LOG, the evidence that it wrote such a file
        self.announce = None

    # --- counters ---

    def new_file_number(self) -> int:
        n = self.next_file_number
        self.next_file_number += 1
        if self.announce is not None:
            self.announce(n)
        return n

    def mark_file_number_used(self, number: int) -> None:
        if self.next_file_number <= number:
            self.next_file_number = number + 1

    # --- applying edits ---

    def apply(self, edit: VersionEdit, version: Version) -> Version:
        """The version ``edit`` makes of ``version``; the counters and value-log states take
        the edit in.  Nothing is written: :meth:`log_and_apply` logs, then applies."""
        if edit.log_number is not None:
            self.log_number = max(self.log_number, edit.log_number)
        if edit.next_file_number is not None:
            self.mark_file_number_used(edit.next_file_number - 1)
        if edit.last_sequence is not None:
            self.last_sequence = max(self.last_sequence, edit.last_sequence)
        for number in edit.new_vlogs:
            self.vlogs.setdefault(number, VlogFileState(number))
            self.mark_file_number_used(number)
        for number, total in edit.sealed_vlogs:
            st = self.vlogs.setdefault(number, VlogFileState(number))
            st.total, st.sealed = total, True
        for number, garbage in edit.vlog_garbage:
            st = self.vlogs.get(number)
            if st is not None:
                st.garbage += garbage
        for number in edit.deleted_vlogs:
            self.vlogs.pop(number, None)
        if not edit.new_tables and not edit.deleted_tables:
            return version
        levels = [list(files) for files in version.levels]
        if edit.deleted_tables:
            dead = set(edit.deleted_tables)
            levels = [[f for f in files if (lvl, f.number) not in dead] for lvl, files in enumerate(levels)]
        for level, meta in edit.new_tables:
            if level >= len(levels):
                # a checksummed record naming a level this configuration lacks: the database was
                # written with more levels (not damage; nothing else in the file is wrong)
                raise InvalidArgumentError(
                    f"the database has table {meta.number:06d}.sst at level {level}; "
                    f"Options.num_levels={len(levels)} is too small (open it with num_levels >= {level + 1})"
                )
            levels[level].append(meta)
            self.mark_file_number_used(meta.number)
        levels[0].sort(key=lambda f: (f.largest_seq, f.number), reverse=True)
        for files in levels[1:]:
            files.sort(key=lambda f: f.smallest)
        return Version(levels)

    def log_and_apply(self, edit: VersionEdit) -> None:
        """Make ``edit`` durable in the MANIFEST, then install the new current version."""
        if edit.next_file_number is None:
            edit.next_file_number = self.next_file_number
        if edit.last_sequence is None:
            edit.last_sequence = self.last_sequence
        saved = (self.log_number, self.next_file_number, self.last_sequence,
                 {n: VlogFileState(s.number, s.total, s.garbage, s.sealed) for n, s in self.vlogs.items()})
        try:
            new_version = self.apply(edit, self.current)
            if self._manifest is None or self._manifest.size >= self.max_manifest_file_size:
                self._roll_manifest(new_version)
            else:
                payload = edit.encode()
                self._manifest.add_record(payload)
                self._manifest.sync()
                self.manifest_bytes_written += len(payload) + 16
        except BaseException:
            self.log_number, self.next_file_number, self.last_sequence, self.vlogs = saved
            raise
        self.current = new_version

    def snapshot_edit(self, version: Version) -> VersionEdit:
        edit = VersionEdit(
            log_number=self.log_number,
            next_file_number=self.next_file_number,
            last_sequence=self.last_sequence,
        )
        for level, f in version.all_files():
            edit.new_tables.append((level, f))
        for number in sorted(self.vlogs):
            st = self.vlogs[number]
            edit.new_vlogs.append(number)
            if st.sealed:
                edit.sealed_vlogs.append((number, st.total))
            if st.garbage:
                edit.vlog_garbage.append((number, st.garbage))
        return edit

    def _roll_manifest(self, version: Version) -> None:
        """Start a new MANIFEST holding a snapshot of ``version``; point CURRENT at it."""
        fs = self.fs
        number = self.new_file_number()
        path = manifest_file_name(self.dbname, number)
        writer = LogWriter(fs.create(path))
        try:
            edit = self.snapshot_edit(version)
            edit.next_file_number = self.next_file_number
            payload = edit.encode()
            writer.add_record(payload)
            writer.sync()
            self.manifest_bytes_written += len(payload) + 16
            set_current_file(fs, self.dbname, number)
        except BaseException:
            writer.close()
            raise
        old, self._manifest = self._manifest, writer
        old_number, self.manifest_number = self.manifest_number, number
        if old is not None:
            old.close()
            try:
                fs.remove(manifest_file_name(self.dbname, old_number))
            except Exception:
                pass  # an unneeded old MANIFEST; it is removed on the next open

    # --- recovery ---

    def recover(self, progress: "ManifestProgress | None" = None) -> "ManifestProgress":
        """Rebuild the state from CURRENT and its MANIFEST; returns how far it read.

        ``progress``, what an earlier call returned: when ``CURRENT`` still names the MANIFEST
        it read, the state starts from that call's and only the edits appended since are read
        (a MANIFEST only grows until a roll names a new one).  A read-only open beside a live
        writer tries again with it, so each retry reads only the writer's newest edits, not the
        whole history (db/read_only.py)."""
        fs = self.fs
        number, manifest_path = read_current_file(fs, self.dbname)
        if not fs.exists(manifest_path):
            raise CorruptionError(
                f"CURRENT names {os.path.basename(manifest_path)}, which does not exist", current_file_name(self.dbname), 0
            )
        start, version, records = 0, self.current, 0
        if progress is not None and progress.number == number:
            f = fs.open_random(manifest_path)
            try:
                size = f.size()
                if size >= progress.offset:
                    start, version, records = progress.offset, progress.version, progress.records
                    progress.restore_counters(self)
                    data = f.read(start, size - start)
            finally:
                f.close()
        if start == 0:
            data = fs.read_all(manifest_path)
        reader = LogReader(data, manifest_path)
        for offset, payload in reader:
            edit = VersionEdit.decode(payload, manifest_path, start + offset)
            version = self.apply(edit, version)
            self.recovered_deletions.update((TABLE, number) for _, number in edit.deleted_tables)
            self.recovered_deletions.update((VLOG, number) for number in edit.deleted_vlogs)
            records += 1
        if records == 0:
            raise CorruptionError("MANIFEST holds no complete record", manifest_path, 0)
        torn = reader.torn_tail_offset
        self.recovered_torn_tail = None if torn is None else start + torn
        self.current = version
        self.manifest_number = number
        self.mark_file_number_used(number)
        return ManifestProgress.of(self, start + reader.valid_length, records)

    def start_new_manifest(self) -> None:
        """Continue in a fresh MANIFEST holding a snapshot of the current state (after a failed
        edit, which may have left a partial record in the old one)."""
        self._roll_manifest(self.current)

    def open_manifest_for_append(self) -> None:
        """After recovery: continue in a fresh MANIFEST (never append to a recovered one)."""
        self._roll_manifest(self.current)

    def close(self) -> None:
        if self._manifest is not None:
            self._manifest.close()
            self._manifest = None


@dataclass
class ManifestProgress:
    """How far :meth:`VersionSet.recover` read MANIFEST ``number``: the state after its first
    ``records`` records, which end at byte ``offset``.  Holds copies: the version set that
    made it may go on changing."""

    number: int
    offset: int
    records: int
    version: Version
    counters: tuple[int, int, int]  # next file number, last sequence, log number
    vlogs: dict[int, VlogFileState]
    deletions: frozenset

    @classmethod
    def of(cls, vs: "VersionSet", offset: int, records: int) -> "ManifestProgress":
        return cls(vs.manifest_number, offset, records, vs.current,
                   (vs.next_file_number, vs.last_sequence, vs.log_number), _copy_vlogs(vs.vlogs),
                   frozenset(vs.recovered_deletions))

    def restore_counters(self, vs: "VersionSet") -> None:
        """Give ``vs`` this state's counters, value-log states and recorded deletions."""
        vs.next_file_number, vs.last_sequence, vs.log_number = self.counters
        vs.vlogs = _copy_vlogs(self.vlogs)
        vs.recovered_deletions = set(self.deletions)


def _copy_vlogs(vlogs: dict[int, VlogFileState]) -> dict[int, VlogFileState]:
    return {n: VlogFileState(s.number, s.total, s.garbage, s.sealed) for n, s in vlogs.items()}


def set_current_file(fs, dbname: str, manifest_number: int) -> None:
    """Point ``CURRENT`` at MANIFEST ``manifest_number``, atomically (write ``CURRENT.tmp``,
    sync, rename, sync the directory)."""
    tmp = os.path.join(dbname, CURRENT_TMP)
    fs.write_all(tmp, f"{manifest_name(manifest_number)}\n".encode(), sync=True)
    fs.rename(tmp, current_file_name(dbname))
    fs.sync_dir(dbname)


def read_current_file(fs, dbname: str) -> tuple[int, str]:
    """``(number, path)`` of the MANIFEST that ``CURRENT`` names; CorruptionError when it
    names none (its content is one MANIFEST name and a newline)."""
    current = current_file_name(dbname)
    raw = fs.read_all(current)
    name = raw.decode("ascii", "replace").strip()
    parsed = parse_file_name(name)
    if not raw.endswith(b"\n") or parsed is None or parsed[0] != MANIFEST:
        raise CorruptionError(f"CURRENT does not name a MANIFEST: {raw[:64]!r}", current, 0)
    return parsed[1], os.path.join(dbname, name)
