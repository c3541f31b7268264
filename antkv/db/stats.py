"""``db.stats()``, ``db.property(name)`` and ``db.verify()``: what the engine reports.

The figures of SPEC section 6.  Write amplification is (bytes written to WAL + tables by
flush and compaction + value log + MANIFEST) / user bytes written; space amplification is bytes
of live files on disk / live user data estimated from the newest version's tables and the
value log's non-garbage bytes.
"""

from __future__ import annotations

from .files import stats_file

import os

from ..base.filenames import CURRENT, parse_file_name, table_file_name, vlog_file_name
from ..base.progress import progress_callback
from ..errors import IOError as AntIOError
from .files.unaccounted import lost_usage
from .state import DBState


# The names ``db.property`` knows (``rocksdb.`` may stand for ``antkv.``); any other is None,
# as in RocksDB's bindings.  ``N`` is a level number.
PROPERTY_NAMES = (
    "antkv.stats",
    "antkv.num-files-at-levelN",
    "antkv.num-immutable-mem-table",
    "antkv.cur-size-active-mem-table",
    "antkv.cur-size-all-mem-tables",
    "antkv.estimate-num-keys",
    "antkv.num-snapshots",
    "antkv.total-sst-files-size",
    "antkv.live-blob-file-size",
    "antkv.num-blob-files",
    "antkv.last-sequence",
    "antkv.estimate-table-readers-mem",
)
ROCKSDB_PREFIX = "rocksdb."


def closest_property(name: str) -> str | None:
    """The known property name closest to an unknown ``name`` (for a "did you mean" hint)."""
    import difflib

    if name.startswith(ROCKSDB_PREFIX):
        name = "antkv." + name[len(ROCKSDB_PREFIX):]
    close = difflib.get_close_matches(name, PROPERTY_NAMES, n=1, cutoff=0.6)
    return close[0] if close else None


def format_stats(s: dict) -> str:
    lines = ["** antkv stats **"]
    lines.append(f"user bytes written: {s['user_bytes_written']}")
    lines.append(
        "bytes written: wal {wal_bytes_written}, flush {flush_bytes_written}, compaction "
        "{compaction_bytes_written}, vlog {vlog_bytes_written}, manifest {manifest_bytes_written}".format(**s)
    )
    lines.append(
        f"write amplification: {s['write_amplification']:.3f} (this process), "
        f"{s['lifetime']['write_amplification']:.3f} (the database's life, {s['lifetime']['user_bytes_written']} user bytes)"
    )
    lines.append(f"bytes on disk: {s['bytes_on_disk']}  space amplification: {s['space_amplification']:.3f}")
    for lv in s["levels"]:
        if lv["files"]:
            lines.append(f"L{lv['level']}: {lv['files']} tables, {lv['bytes']} bytes")
    lines.append(f"value-log files: {len(s['vlog_files'])}, total {s['vlog_total_bytes']}, garbage {s['vlog_garbage_bytes']}")
    bc = s["block_cache"]
    lines.append(f"block cache: usage {bc.get('usage')} / {bc.get('capacity')}, hits {bc.get('hits')}, misses {bc.get('misses')}")
    lines.append(f"memtable: {s['memtable_bytes']} bytes, {s['immutable_memtables']} immutable")
    lines.append(f"stalls: {s['stalls']}, slowdowns: {s['slowdowns']}, pending compaction bytes: {s['pending_compaction_bytes']}")
    lines.append(f"flushes: {s['flushes']}, compactions: {s['compactions']}, trivial moves: {s['trivial_moves']}")
    lines.append(f"live snapshots: {s['live_snapshots']}")
    lost = s["lost"]
    lines.append(f"lost/: {lost['files']} files, {lost['bytes']} bytes"
                 + (" (files the database could not account for; `antkv empty-lost` deletes them)" if lost["files"] else ""))
    return "\n".join(lines)


class Statistics(DBState):
    """Part of :class:`~antkv.db.DB`: statistics, properties, verification (calls only :class:`~antkv.db.state.DBState`)."""

    def _collect_stats(self) -> dict:
        s = dict(self._stats)
        s["user_bytes_written"] = self._user_bytes
        vs = self._versions
        with self._mutex:  # the version, the value-log files and the memtables, as one state
            version = vs.current
            vlog_states = sorted(vs.vlogs.items())
            active = self._vlog
            mem, imms = self._mem, list(self._imms)
        s["wal_bytes_written"] = self._wal_bytes_total()
        s["manifest_bytes_written"] = vs.manifest_bytes_written
        vlog_written = s["vlog_bytes_written"] + (active.size if active is not None else 0)
        s["vlog_bytes_written"] = vlog_written
        disk_written = (
            s["wal_bytes_written"] + s["flush_bytes_written"] + s["compaction_bytes_written"] + vlog_written + s["manifest_bytes_written"]
        )
        user = s["user_bytes_written"]
        s["bytes_written_total"] = disk_written
        s["write_amplification"] = disk_written / user if user else 0.0
        levels = []
        for level, files in enumerate(version.levels):
            levels.append({"level": level, "files": len(files), "bytes": sum(f.size for f in files)})
        s["levels"] = levels
        vlogs = []
        for n, st in vlog_states:
            total = st.total if st.sealed else (active.record_bytes if active is not None and active.file_number == n else st.total)
            vlogs.append({"file": n, "total_bytes": total, "garbage_bytes": st.garbage, "sealed": st.sealed})
        s["vlog_files"] = vlogs
        s["vlog_total_bytes"] = sum(v["total_bytes"] for v in vlogs)
        s["vlog_garbage_bytes"] = sum(v["garbage_bytes"] for v in vlogs)
        disk = self._bytes_on_disk()
        s["bytes_on_disk"] = disk
        live_estimate = sum(f.size for _, f in version.all_files()) + s["vlog_total_bytes"] - s["vlog_garbage_bytes"]
        mem_bytes = mem.data_bytes + sum(m.data_bytes for m in imms)
        s["space_amplification"] = disk / (live_estimate + mem_bytes) if (live_estimate + mem_bytes) else 0.0
        cache = self._cache
        cs = cache.stats()
        s["block_cache"] = {k: cs[k] for k in ("capacity", "usage", "pinned_usage", "hits", "misses") if k in cs}
        s["memtable_bytes"] = mem.memory
        s["immutable_memtables"] = len(imms)
        s["immutable_memtable_bytes"] = sum(m.memory for m in imms)
        wbm = self._wbm
        s["write_buffer_manager"] = (
            None
            if wbm is None
            else {"buffer_size": wbm.buffer_size, "memory_usage": wbm.memory_usage, "mutable_memory_usage": wbm.mutable_memory_usage}
        )
        s["pending_compaction_bytes"] = self._pending_compaction_bytes(version)
        s["live_snapshots"] = len(self._snapshots)
        s["last_sequence"] = self._last_seq
        s["lifetime"] = stats_file.figures(self._lifetime_base, s)
        s["files_removed_at_open"] = list(s["files_removed_at_open"])
        s["recovery_dropped"] = list(s["recovery_dropped"])
        files, size = lost_usage(self._fs, self.path)
        s["lost"] = {"files": files, "bytes": size}
        s["options_changed"] = list(s["options_changed"])
        return s

    def _bytes_on_disk(self) -> int:
        fs = self._fs
        total = 0
        for name in fs.listdir(self.path):
            if parse_file_name(name) is not None or name == CURRENT:
                try:
                    total += fs.size(os.path.join(self.path, name))
                except AntIOError:  # a file deleted by the background thread meanwhile
                    continue
        return total

    def _pending_compaction_bytes(self, version) -> int:
        """Bytes above the level targets (RocksDB's estimate, simplified)."""
        from ..compaction.picker import level_target

        opts = self.options
        pending = 0
        if len(version.levels[0]) >= opts.level0_file_num_compaction_trigger:
            pending += version.level_bytes(0)
        for level in range(1, len(version.levels) - 1):
            excess = version.level_bytes(level) - level_target(opts, level)
            if excess > 0:
                pending += int(excess)
        return pending

    def _property_value(self, name: str) -> str | None:
        if name.startswith(ROCKSDB_PREFIX):  # RocksDB's spelling of the same property
            name = "antkv." + name[len(ROCKSDB_PREFIX):]
        version = self._versions.current
        if name == "antkv.stats":
            return format_stats(self._collect_stats())
        prefix = "antkv.num-files-at-level"
        if name.startswith(prefix):
            rest = name[len(prefix):]
            if rest.isdigit() and int(rest) < len(version.levels):
                return str(len(version.levels[int(rest)]))
            return None
        simple = {
            "antkv.num-immutable-mem-table": lambda: str(len(self._imms)),
            "antkv.cur-size-active-mem-table": lambda: str(self._mem.memory),
            "antkv.cur-size-all-mem-tables": lambda: str(self._mem.memory + sum(m.memory for m in self._imms)),
            "antkv.estimate-num-keys": lambda: str(sum(f.num_entries for _, f in version.all_files()) + self._mem.num_entries),
            "antkv.num-snapshots": lambda: str(len(self._snapshots)),
            "antkv.total-sst-files-size": lambda: str(sum(f.size for _, f in version.all_files())),
            "antkv.live-blob-file-size": lambda: str(sum(st.total - st.garbage for st in self._versions.vlogs.values())),
            "antkv.num-blob-files": lambda: str(len(self._versions.vlogs)),
            "antkv.last-sequence": lambda: str(self._last_seq),
            "antkv.estimate-table-readers-mem": lambda: str(self._table_cache.memory_outside_cache()),
            "antkv.lost-files": lambda: str(lost_usage(self._fs, self.path)[0]),
            "antkv.lost-bytes": lambda: str(lost_usage(self._fs, self.path)[1]),
        }
        fn = simple.get(name)
        if fn is None:
            return None
        with self._mutex:  # value-log files come and go under it (rotation, GC)
            return fn()

    def _verify_files(self, progress=None) -> dict:
        """Read every table and value-log file, checking every checksum (a step: one file)."""
        from ..sst.reader import TableReader
        from ..vlog.reader import verify_file

        report = progress_callback(progress)
        fs = self._fs
        sv = self._sv
        files = list(sv.version.all_files())
        with self._mutex:
            total = len(files) + len(self._versions.vlogs)
        report(0, total)
        tables = entries = 0
        for _, f in files:
            self._stop_if_closing()
            r = TableReader.open(fs, table_file_name(self.path, f.number), f.number, cache=None, verify_checksums=True)
            try:
                entries += r.verify()
            finally:
                r.close()
            tables += 1
            report(tables, total)
        # which files there are and how long the active one is, read together: a rotation in
        # between would check the old active file against the new one's length
        with self._write_lock, self._mutex:
            listed = sorted(self._versions.vlogs)
            active = self._vlog.file_number if self._vlog is not None else None
            active_size = self._vlog.size if self._vlog is not None else None
        total = tables + len(listed)
        vlogs = records = 0
        for i, n in enumerate(listed, 1):
            self._stop_if_closing()
            try:
                # read-only: an unsealed file is checked up to the length measured at open (a
                # live writer may be appending; a torn tail is reported by the open)
                length = active_size if n == active else self._recovered_vlog_lengths.get(n)
                nrec, _ = verify_file(fs, vlog_file_name(self.path, n), length=length)
            except AntIOError:
                with self._mutex:
                    if n not in self._versions.vlogs:
                        continue  # collected since (100% garbage): nothing left to verify
                raise
            records += nrec
            vlogs += 1
            report(tables + i, total)
        wal = self._verify_wals()
        report(total, total)
        return {"tables": tables, "table_entries": entries, "vlog_files": vlogs, "vlog_records": records,
                **wal, "memtable_entries": sum(m.num_entries for m in sv.memtables)}

    def _verify_wals(self) -> dict:
        """Read the live WALs (those not yet flushed to tables), checking every record's checksum
        and decoding its batch: ``{"wal_files", "wal_records", "wal_entries"}`` (records are the
        write batches, not counting each WAL's header record).  A torn last
        record (a write in flight, or what a crash left for recovery to drop) is not counted;
        damage before intact records is a CorruptionError.  A WAL deleted after the listing is
        skipped when it was flushed: by this database (its number is now below the log number:
        the writes are in a table), or by the writer beside a read-only view (in no state the
        view holds)."""
        from ..base.filenames import wal_file_name
        from ..record.batch import decode_batch
        from ..record.log_format import LogReader
        from ..record.wal import is_header_record

        with self._mutex:
            log_number = self._versions.log_number
        numbers = sorted(n for kind, n in filter(None, map(parse_file_name, self._fs.listdir(self.path)))
                         if kind == "log" and n >= log_number)
        records = ops = files = 0
        for n in numbers:
            self._stop_if_closing()
            path = wal_file_name(self.path, n)
            try:
                data = self._fs.read_all(path)
            except AntIOError:
                if not self._fs.exists(path):
                    if self.options.read_only:
                        continue  # the writer beside this view flushed and deleted it since the listing
                    with self._mutex:
                        if n < self._versions.log_number:
                            continue  # flushed and deleted since the listing
                raise
            for offset, payload in LogReader(data, path):
                batch_ops = decode_batch(payload, path, offset)[1]
                ops += len(batch_ops)
                records += not is_header_record(offset, batch_ops)
            files += 1
        return {"wal_files": files, "wal_records": records, "wal_entries": ops}
