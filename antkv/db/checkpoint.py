"""Checkpoints: a consistent, openable copy of a database, sharing immutable files.

``db.checkpoint(dir)``:

1. flushes the memtable (so every acknowledged write is in a table), then, under the write
   lock, seals the active value-log file and starts a new one (a sealed file never changes
   again, so it can be shared);
2. pins the current super version (no table it lists can be deleted meanwhile);
3. hard-links (or copies, across file systems) every table of the pinned state and every
   value-log file its tables point into (not the ones only an open iterator keeps alive: they
   may go while the checkpoint runs) into a staging directory of a name no one else uses,
   ``dir + ".antkv-checkpoint-<random>"``;
4. writes a fresh MANIFEST describing exactly that state, with a log number past every WAL of
   the source and an empty WAL of that number (recovery requires the WAL the MANIFEST names;
   the copy replays nothing), and ``CURRENT``; syncs everything;
5. renames the staging directory to ``dir`` and syncs the parent directory.

A crash at any step leaves either no ``dir`` or a complete one (and maybe the staging
directory, which the operator may remove).  A checkpoint that fails with an error removes what
it created in its staging directory, and nothing else: it never touches a file it did not
create (a directory ``dir + ".tmp"`` of the user's stays as it is).  Checkpoints of one
database run one at a time (``_checkpoint_lock``): a second one into the same directory then
finds it and raises InvalidArgumentError.
"""

from __future__ import annotations

import os
import uuid

from ..base.filenames import manifest_file_name, table_file_name, vlog_file_name, wal_file_name
from ..base.progress import progress_callback
from ..errors import InvalidArgumentError
from ..manifest.version_set import VersionSet, set_current_file
from ..record.log_format import LogWriter
from ..record.wal import write_empty_wal
from .write_path import WritePath


class Checkpoints(WritePath):
    """Part of :class:`~antkv.db.DB`: consistent copies (calls :class:`~antkv.db.write_path.WritePath`)."""

    def _create_checkpoint(self, directory: str, progress=None) -> None:
        report = progress_callback(progress)
        with self._checkpoint_lock:
            self._create_checkpoint_locked(directory, report)

    def _create_checkpoint_locked(self, directory: str, report) -> None:
        """A step of ``report``: one table or value-log file linked (or copied)."""
        fs = self._fs
        directory = os.path.normpath(directory)
        if fs.exists(directory):
            raise InvalidArgumentError(f"checkpoint directory {directory} already exists")
        tmp = f"{directory}.antkv-checkpoint-{uuid.uuid4().hex[:16]}"
        self._flush(wait=True)
        with self._write_lock:
            self._check_writable()
            if self._vlog is not None and self._vlog.num_records > 0:
                self._rotate_vlog()
            with self._mutex:
                sv = self._sv  # pinned: its files stay until we drop it
                vs = self._versions
                referenced = {n for _, f in sv.version.all_files() for n in f.blob_refs}
                # every file a table points into is sealed: the flush above put every write in a
                # table, and the rotation sealed the file those writes went to
                vlogs = {n: (st.total, st.garbage) for n, st in vs.vlogs.items() if n in referenced}
                last_sequence = self._last_seq  # >= every sequence number in the pinned tables
                next_file = vs.next_file_number
        fs.mkdirs(tmp)
        try:
            self._stage_checkpoint(fs, tmp, sv, vlogs, last_sequence, next_file, report)
        except Exception:
            _remove_staging(fs, tmp)  # only what this checkpoint created is in it
            raise
        fs.rename(tmp, directory)
        fs.sync_dir(os.path.dirname(directory) or ".")
        del sv

    def _stage_checkpoint(self, fs, tmp: str, sv, vlogs, last_sequence: int, next_file: int, report) -> None:
        tables = [f.number for _, f in sv.version.all_files()]
        total = len(tables) + len(vlogs)
        report(0, total)
        for i, number in enumerate(tables, 1):
            fs.link_or_copy(table_file_name(self.path, number), table_file_name(tmp, number))
            report(i, total)
        for i, n in enumerate(vlogs, len(tables) + 1):
            fs.link_or_copy(vlog_file_name(self.path, n), vlog_file_name(tmp, n))
            report(i, total)
        # a MANIFEST for exactly this state
        cvs = VersionSet(fs, tmp, len(sv.version.levels), self.options.max_manifest_file_size)
        cvs.current = sv.version
        cvs.next_file_number = next_file + 2
        cvs.log_number = next_file  # an empty WAL of this number is written below: recovery wants it
        cvs.last_sequence = last_sequence
        from ..manifest.version_set import VlogFileState

        cvs.vlogs = {n: VlogFileState(n, total, garbage, True) for n, (total, garbage) in vlogs.items()}
        edit = cvs.snapshot_edit(sv.version)
        manifest_number = next_file + 1
        writer = LogWriter(fs.create(manifest_file_name(tmp, manifest_number)))
        try:
            writer.add_record(edit.encode())
            writer.sync()
        finally:
            writer.close()
        # the MANIFEST names log number ``next_file``: an empty WAL of that number says "nothing
        # to replay" (recovery treats a missing named WAL as lost MANIFEST edits)
        write_empty_wal(fs, wal_file_name(tmp, next_file), last_sequence + 1)
        set_current_file(fs, tmp, manifest_number)  # syncs tmp


def _remove_staging(fs, tmp: str) -> None:
    """Remove a failed checkpoint's staging directory (a name only it used), best effort."""
    try:
        for name in fs.listdir(tmp):
            fs.remove(os.path.join(tmp, name))
        fs.rmdir(tmp)
    except Exception:  # noqa: BLE001 - the error that failed the checkpoint is the one to report
        pass
