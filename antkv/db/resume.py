"""``db.resume()``: leave the read-only state a background error put the database in, once its
cause is gone (RocksDB's ``DB::Resume``).

A failed write, flush, compaction or value-log append (a full disk, an I/O error) sets the
background error: every later write raises ``BackgroundError`` and nothing more is written, so
nothing half-written is built upon.  ``resume()`` -- after the operator freed space -- makes
the files safe to continue, then clears the error:

1. the WAL and the active value-log file are cut back to the bytes whose appends succeeded (a
   failed append may have left a partial record) and synced;
2. the value-log file, whose writer refuses appends after a failure, is sealed in the MANIFEST
   at that length and a new one started;
3. a new MANIFEST is started (a failed edit may have left a partial record in the old one);
4. the error is cleared and the memtable flushed, in the background or inline -- if the cause
   is still there, that fails and sets the error again, which ``resume()`` raises.

A ``CorruptionError`` is never resumed from: the database must be closed and repaired.
"""

from __future__ import annotations

from ..errors import BackgroundError, CorruptionError, DBClosedError, ReadOnlyError
from ..manifest.version_edit import VersionEdit
from .write_path import WritePath


class Resume(WritePath):
    """Part of :class:`~antkv.db.DB`: ``resume()`` (calls :class:`~antkv.db.write_path.WritePath`)."""

    def resume(self) -> None:
        """Clear a background error whose cause is gone; a no-op without one."""
        from ..vlog.writer import ValueLogWriter

        if self._closed:
            raise DBClosedError(f"database {self.path} is closed")
        if self.options.read_only:
            raise ReadOnlyError(f"database {self.path} is open read-only (read_only=True): it writes nothing")
        with self._write_lock:
            err = self._bg_error
            if err is None:
                return
            if isinstance(err, CorruptionError):
                raise BackgroundError(
                    f"cannot resume after damage was found: {err}; close the database and run antkv.repair",
                    None, self.path,
                ) from err
            fs = self._fs
            with self._mutex:
                vs = self._versions
                wal = self._wal
                _cut_back(fs, wal.file.path, wal.size)
                wal.sync()
                vlog = self._vlog
                if vlog is not None:
                    _cut_back(fs, vlog.path, vlog.size)
                    vlog.sync()
                    number = vs.new_file_number()
                    new = ValueLogWriter.create_in(fs, self.path, number, compression=self.options.blob_compression)
                    fs.sync_dir(self.path)
                    vlog.close()
                    self._stats["vlog_bytes_written"] += vlog.size
                    self._vlog = new
                    self._vlog_dirty = False
                    edit = VersionEdit(new_vlogs=[number], sealed_vlogs=[(vlog.file_number, vlog.record_bytes)])
                else:
                    edit = VersionEdit()
                vs.start_new_manifest()
                vs.log_and_apply(edit)
                self._bg_error = None
                self._write_blocked = False
                self._bg_cv.notify_all()
        self._event("resume", f"after {type(err).__name__}: {err}")
        if self._bg_thread is None:
            self._run_inline_work()  # the memtables the error held back (no thread would flush them)
        self._flush(wait=True)


def _cut_back(fs, path: str, good: int) -> None:
    """Truncate ``path`` to ``good`` bytes if a failed append left more."""
    if fs.size(path) > good:
        fs.truncate(path, good)
