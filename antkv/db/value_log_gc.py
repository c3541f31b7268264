"""Value-log garbage collection on request: ``db.gc_value_log()``.

Background compactions collect value-log garbage as they go (``Options.blob_gc_threshold``,
:mod:`antkv.compaction.picker`); an explicit GC flushes the memtable, seals the active value-log
file when it is itself over the threshold, then rewrites the live records of every sealed file
over the threshold through GC compactions until none is left (one at a time:
``_compaction_lock``), and deletes the emptied files.
"""

from __future__ import annotations

from ..base.progress import progress_callback
from ..compaction import picker
from .write_path import WritePath


class ValueLogGC(WritePath):
    """Part of :class:`~antkv.db.DB`: value-log GC on request (calls :class:`~antkv.db.write_path.WritePath`)."""

    def _collect_value_log(self, progress=None) -> dict:
        """Collect every sealed value-log file at or over the GC threshold now (a step of
        ``progress``: a file no longer needing collection; the total grows if more files pass
        the threshold meanwhile)."""
        report = progress_callback(progress)
        self._flush(wait=True)
        before = dict(self._stats)
        self._seal_active_vlog_if_due()
        seen: set[int] = set()  # every file found over the threshold so far
        with self._compaction_lock:
            while True:
                with self._mutex:
                    self._stop_if_closing()
                    vs = self._versions
                    active = self._vlog.file_number if self._vlog is not None else None
                    gc = picker.gc_candidate_files(vs.vlogs, active, self.options.blob_gc_threshold)
                    c = picker.gc_compaction(vs.current, gc) if gc else None
                seen |= gc
                report(len(seen) if c is None else len(seen - gc), len(seen))
                if c is None:
                    break
                self._run_picked(c)
        self._delete_obsolete_files()
        result = {
            "bytes_relocated": self._stats["gc_bytes_relocated"] - before["gc_bytes_relocated"],
            "files_deleted": self._stats["vlog_files_deleted"] - before["vlog_files_deleted"],
        }
        self._event("value-log-gc", f"relocated {result['bytes_relocated']} B, deleted {result['files_deleted']} files")
        return result

    def _seal_active_vlog_if_due(self) -> None:
        """An explicit GC also collects the active value-log file when it reached the threshold:
        it is sealed first (and a new one started), since only sealed files are collected."""
        with self._write_lock:
            vlog = self._vlog
            if vlog is None or not vlog.record_bytes:
                return
            st = self._versions.vlogs.get(vlog.file_number)
            if st is not None and st.garbage / vlog.record_bytes >= self.options.blob_gc_threshold:
                self._rotate_vlog()
