"""Deleting obsolete files: tables, WALs and value-log files nothing can read any more.

A table goes when no live super version (running read, open iterator, checkpoint in progress)
holds a version listing it; a WAL once its memtable is flushed; a value-log file when it is
sealed, 100% garbage, referenced by no table of any live version and older than every live
memtable (a MANIFEST edit records its deletion first).  Called after every flush and
compaction, at open and at close.  At close no reader is left (iterators and scans of a closed
database raise DBClosedError), so what only they kept alive goes too instead of being left for
the next open.
"""

from __future__ import annotations

from ..base.filenames import table_file_name, vlog_file_name, wal_file_name
from ..manifest.version_edit import VersionEdit
from .state import DBState


def _remove(fs, path: str) -> None:
    if fs.exists(path):
        fs.remove(path)


class ObsoleteFiles(DBState):
    """Part of :class:`~antkv.db.DB`: deleting obsolete files (calls only :class:`~antkv.db.state.DBState`)."""

    def _delete_obsolete_files(self, closing: bool = False) -> None:
        """Delete tables, WALs and value-log files nothing can read any more (``closing``: the
        database is closed, so open iterators no longer count as readers)."""
        fs = self._fs
        with self._mutex:
            vs = self._versions
            live_views = [] if closing else list(self._live_views)
            live_tables = {f.number for _, f in vs.current.all_files()}
            live_refs: set[int] = set()
            oldest_mem = None
            for _, f in vs.current.all_files():
                live_refs.update(f.blob_refs)
            for sv in live_views:
                for _, f in sv.version.all_files():
                    live_tables.add(f.number)
                    live_refs.update(f.blob_refs)
                for m in sv.memtables:
                    if m.first_vlog is not None and not m.is_empty() and (oldest_mem is None or m.first_vlog < oldest_mem):
                        oldest_mem = m.first_vlog
            # an empty memtable pins nothing: what it will hold points into the active file or later
            for m in (self._mem, *self._imms):
                if m.first_vlog is not None and not m.is_empty() and (oldest_mem is None or m.first_vlog < oldest_mem):
                    oldest_mem = m.first_vlog
            dead_tables = [n for n in self._table_files if n not in live_tables]
            for n in dead_tables:
                self._table_files.discard(n)
            active_vlog = self._vlog.file_number if self._vlog is not None else None
            dead_vlogs = [
                n
                for n, st in vs.vlogs.items()
                if st.sealed
                and st.garbage >= st.total
                and n != active_vlog
                and n not in live_refs
                and (oldest_mem is None or n < oldest_mem)
            ]
            if dead_vlogs:
                vs.log_and_apply(VersionEdit(deleted_vlogs=sorted(dead_vlogs)))
            dead_wals = [n for n in self._wal_files if n < vs.log_number]
            for n in dead_wals:
                self._wal_files.discard(n)
        for n in dead_tables:
            self._table_cache.evict(n)
            _remove(fs, table_file_name(self.path, n))
        for n in dead_vlogs:
            self._vlog_reader.evict(n)
            _remove(fs, vlog_file_name(self.path, n))
            self._stats["vlog_files_deleted"] += 1
        for n in dead_wals:
            _remove(fs, wal_file_name(self.path, n))
