"""``antkv.repair(path)``: rebuild a database from the files that verify (RocksDB's ``RepairDB``).

What it does, in order, holding the database's ``LOCK``:

1. **Tables.** Every ``NNNNNN.sst`` is opened and read whole, every checksum checked
   (``TableReader.verify``).  A table that verifies is kept, its metadata rebuilt from its
   properties.  One that does not is moved to ``lost/``; if its footer, index and properties
   still read, every data block that passes its own checksum (in order with the blocks kept
   before it) and its range tombstones are first written to a new table under a new number
   (LevelDB's ``RepairTable``), and the report counts the blocks and entries left behind.
2. **Value-log files.** Every ``NNNNNN.vlog`` is scanned record by record.  An intact file is
   kept (sealed if its footer is intact); a file damaged or torn after some intact records is
   copied to ``lost/`` and cut back to its intact prefix; a file with no intact header is moved
   to ``lost/``.
   A table brought in by ingestion keeps the sequence numbers and value-log file numbers of the
   database that wrote it; its *translation* into this database's numbers lives only in the
   MANIFEST (:mod:`antkv.manifest.translated_table`).  Repair reads every old MANIFEST, newest
   first, up to its first damaged record, and gives each kept table the translation found
   there.  An ingested table whose translation no readable MANIFEST holds cannot be told from
   a table this database wrote; it is kept as one (its entries keep their file's numbers), and
   the report says how many tables no readable MANIFEST named.
3. **MANIFEST.** Every old ``MANIFEST-*`` and ``CURRENT`` is moved to ``lost/`` and a new
   MANIFEST lists the kept tables (all in L0), the kept value-log files, the WALs (the lowest
   WAL number as log number), a next file number above every file on disk and a last sequence
   number above every table's.
4. **Open** with ``wal_recovery_mode="skip_any_corrupted_records"``: every WAL record that
   verifies is replayed (damaged ones and ones whose large value was lost are skipped) and
   flushed.
5. **Settle.** ``compact_range()`` merges the L0 tables by sequence number (what a newer entry
   hides stays hidden); then every key is read, and a key whose value cannot be read any more
   (it lived in a lost part of the value log) is deleted and reported; ``verify()`` closes.

Nothing is deleted: what repair cannot use is in ``lost/``.  The :class:`RepairReport` lists
every file moved or cut, every WAL record skipped, every key whose value was lost, and every
table, value-log file and WAL the last MANIFEST named that is not on disk (with the table's key
range): the writes they held are gone, and older versions of their keys may show again.
``antkv repair`` exits 4 when anything was lost.  A
repaired database holds every entry that was readable; an entry whose newer version was lost
with a damaged table shows its older version (the MANIFEST levels that ordered them are gone).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field

from .base.filenames import CURRENT, MANIFEST, TABLE, VLOG, WAL, lock_file_name, parse_file_name, table_file_name, vlog_file_name, wal_file_name
from .errors import CorruptionError, InvalidArgumentError
from .errors import IOError as AntIOError
from .db.files.unaccounted import antkv_evidence, check_is_antkv, keep_copy, move_aside
from .manifest.version_edit import FileMetaData, VersionEdit
from .manifest.version_set import VersionSet
from .record.log_format import LogReader
from .record.wal import write_empty_wal
from .options import SKIP_ANY_CORRUPTED, Options, resolve_open_args
from .base.dbformat import VALUE_POINTER
from .base.expiry import pointer_in
from .sst.builder import TableBuilder
from .sst.reader import TableReader
from .vlog.pointer import decode_pointer
from .vlog.format import FILE_HEADER_SIZE
from .vlog.reader import ValueLogScan


@dataclass
class RepairReport:
    """What a repair kept and lost (``antkv repair --json`` prints it)."""

    path: str
    tables_kept: int = 0
    table_entries_kept: int = 0
    vlog_files_kept: int = 0
    wal_files: int = 0
    manifests_replaced: list[str] = field(default_factory=list)  # old MANIFESTs, moved to lost/
    moved_to_lost: list[str] = field(default_factory=list)  # "name: why", damaged files
    cut_back: list[str] = field(default_factory=list)  # value-log files cut to their intact prefix
    wal_records_dropped: list[str] = field(default_factory=list)
    keys_lost: list[str] = field(default_factory=list)  # hex of each key whose value was lost
    tables_salvaged: list[str] = field(default_factory=list)  # "name -> new name: kept/lost counts"
    tables_translated: int = 0  # ingested tables given their translation from an old MANIFEST
    tables_unnamed: int = 0  # kept tables no readable old MANIFEST named
    # files the last MANIFEST named that are not on disk: "name (what, key range): why"
    files_missing: list[str] = field(default_factory=list)

    @property
    def lost_anything(self) -> bool:
        return bool(self.moved_to_lost or self.cut_back or self.wal_records_dropped or self.keys_lost
                    or self.files_missing)

    def to_dict(self) -> dict:
        return asdict(self)

    def lines(self) -> list[str]:
        out = [
            f"repaired {self.path}: kept {self.tables_kept} tables ({self.table_entries_kept} entries), "
            f"{self.vlog_files_kept} value-log files, {self.wal_files} WALs"
        ]
        if self.tables_translated:
            out.append(f"ingested tables given their translation from the old MANIFEST: {self.tables_translated}")
        if self.tables_unnamed:
            out.append(f"tables no readable MANIFEST named (kept as written by this database): {self.tables_unnamed}")
        if self.manifests_replaced:
            out.append(f"replaced (moved to lost/): {', '.join(self.manifests_replaced)}")
        out += [f"missing: {m}" for m in self.files_missing]
        out += [f"moved to lost/: {m}" for m in self.moved_to_lost]
        out += [f"salvaged: {t}" for t in self.tables_salvaged]
        out += [f"cut back: {c}" for c in self.cut_back]
        out += [f"WAL: {w}" for w in self.wal_records_dropped]
        out += [f"value lost, key deleted: {k}" for k in self.keys_lost]
        if not self.lost_anything:
            out.append("nothing was lost")
        return out


def repair(path, options: Options | None = None, **overrides) -> RepairReport:
    """Rebuild the database in ``path`` from what verifies; returns what was kept and lost."""
    from .db import DB
    from .fs import default_file_system

    path, options = resolve_open_args(path, options, overrides)
    options = options.replace(
        read_only=False, create_if_missing=False, error_if_exists=False, max_background_jobs=0,
        wal_recovery_mode=SKIP_ANY_CORRUPTED,
    )
    fs = options.file_system or default_file_system()
    if not fs.is_dir(path):
        raise InvalidArgumentError(f"no database directory at {path}")
    if antkv_evidence(fs, path) is None:
        check_is_antkv(fs, path, "repair")  # another engine's files: refused, nothing changed
        raise InvalidArgumentError(f"no antkv database at {path}: nothing to repair")
    report = RepairReport(path)
    lock = fs.lock(lock_file_name(path))
    try:
        _rebuild_manifest(fs, path, options, report)
    finally:
        fs.unlock(lock)
    db = DB(path, options)
    try:
        stats = db.stats()
        report.wal_records_dropped += stats["recovery_dropped"]
        report.moved_to_lost += [r for r in stats["files_removed_at_open"] if "moved to" in r]
        db.compact_range()
        lost = []
        for key in db.keys():
            try:
                db.get(key)
            except CorruptionError:
                lost.append(key)
        for key in lost:
            db.delete(key)
            report.keys_lost.append(key.hex())
        if lost:
            db.compact_range()
        db.verify()
    finally:
        db.close()
    return report


def _rebuild_manifest(fs, path: str, options: Options, report: RepairReport) -> None:
    files: dict[str, list[tuple[int, str]]] = {TABLE: [], VLOG: [], WAL: [], MANIFEST: []}
    highest = 1
    for name in sorted(fs.listdir(path)):
        parsed = parse_file_name(name)
        if parsed is not None:
            files[parsed[0]].append((parsed[1], name))
            highest = max(highest, parsed[1])
    vs = VersionSet(fs, path, options.num_levels, options.max_manifest_file_size)
    vs.mark_file_number_used(highest)
    edit = VersionEdit()
    named, translations = _old_manifest_tables(fs, path, files[MANIFEST])
    report.files_missing += _missing_from_last_state(fs, path, options, files)
    for number, name in files[TABLE]:
        meta = _check_table(fs, path, number, name, report)
        if meta is None:  # damaged: what reads goes to a new table, the file to lost/
            meta = _salvage_table(fs, path, number, name, vs.new_file_number, options, report)
            move_aside(fs, path, name)
        if meta is None:
            continue
        if number not in named:
            report.tables_unnamed += 1
        if number in translations:  # a salvaged copy keeps its file's numbers: same translation
            _translate(meta, *translations[number])
            report.tables_translated += 1
        edit.new_tables.append((0, meta))
    last_seq = max((m.largest_seq for _, m in edit.new_tables), default=0)
    for number, name in files[VLOG]:
        _check_vlog(fs, path, number, name, edit, report)
    for _, name in files[MANIFEST]:
        move_aside(fs, path, name)
        report.manifests_replaced.append(name)
    if fs.exists(os.path.join(path, CURRENT)):
        move_aside(fs, path, CURRENT)
    report.wal_files = len(files[WAL])
    if files[WAL]:
        edit.log_number = files[WAL][0][0]
    else:  # the MANIFEST's log number must name a WAL that exists: an empty one
        edit.log_number = vs.new_file_number()
        write_empty_wal(fs, wal_file_name(path, edit.log_number), last_seq + 1)
        fs.sync_dir(path)
    edit.last_sequence = last_seq
    try:
        vs.log_and_apply(edit)  # no MANIFEST yet: writes a new one and points CURRENT at it
    finally:
        vs.close()


def _missing_from_last_state(fs, path: str, options: Options, files) -> list[str]:
    """What the last MANIFEST state (the one ``CURRENT`` names, else the newest readable
    MANIFEST) lists that is not on disk: its tables (with their key ranges), value-log files
    still holding live values, and the WAL it names."""
    on_disk = {(kind, number) for kind, entries in files.items() for number, _ in entries}
    vs = VersionSet(fs, path, max(options.num_levels, 64), options.max_manifest_file_size)
    try:
        vs.recover()
        source = f"MANIFEST-{vs.manifest_number:06d}"
    except (CorruptionError, AntIOError, InvalidArgumentError):
        source = None
        for number, name in sorted(files[MANIFEST], reverse=True):
            vs = VersionSet(fs, path, max(options.num_levels, 64), options.max_manifest_file_size)
            version = vs.current
            p = os.path.join(path, name)
            try:
                for offset, payload in LogReader(fs.read_all(p), p):
                    version = vs.apply(VersionEdit.decode(payload, p, offset), version)
                    source = name
            except (CorruptionError, AntIOError, InvalidArgumentError):
                pass  # what decoded before the damage counts
            if source is not None:
                vs.current = version
                break
        if source is None:
            return []
    finally:
        vs.close()
    missing = []
    for level, f in vs.current.all_files():
        if (TABLE, f.number) not in on_disk:
            missing.append(f"{f.number:06d}.sst (L{level}, keys {f.smallest!r}..{f.largest!r}, sequence numbers "
                           f"{f.smallest_seq}..{f.largest_seq}): listed by {source}, not on disk")
    for number, st in sorted(vs.vlogs.items()):
        if (VLOG, number) not in on_disk and not (st.sealed and st.garbage >= st.total):
            missing.append(f"{number:06d}.vlog ({st.total - st.garbage if st.sealed else 'unknown'} live bytes): "
                           f"listed by {source}, not on disk")
    if vs.log_number and (WAL, vs.log_number) not in on_disk:
        missing.append(f"{vs.log_number:06d}.log (the WAL holding the newest writes): named by {source}, not on disk")
    return missing


def _old_manifest_tables(fs, path: str, manifests: list[tuple[int, str]]):
    """``(table numbers named, {number: (seq_offset, vlog_map)})`` read from the old MANIFESTs,
    newest first, each up to its first damaged record.  A table number is never reused, so
    any record of a table's translation is the one it was ingested with."""
    named: set[int] = set()
    translations: dict[int, tuple[int, dict[int, int]]] = {}
    for _, name in sorted(manifests, reverse=True):
        p = os.path.join(path, name)
        try:
            data = fs.read_all(p)
            for offset, payload in LogReader(data, p):
                for _, meta in VersionEdit.decode(payload, p, offset).new_tables:
                    named.add(meta.number)
                    if (meta.seq_offset or meta.vlog_map) and meta.number not in translations:
                        translations[meta.number] = (meta.seq_offset, dict(meta.vlog_map))
        except (CorruptionError, AntIOError):
            continue  # what was read before the damage counts
    return named, translations


def _translate(meta: FileMetaData, seq_offset: int, vlog_map: dict[int, int]) -> None:
    """``meta`` (from the table's properties: its file's numbers) in this database's numbers."""
    meta.smallest_seq += seq_offset
    meta.largest_seq += seq_offset
    meta.seq_offset, meta.vlog_map = seq_offset, vlog_map
    meta.blob_refs = {vlog_map.get(v, v): n for v, n in meta.blob_refs.items()}


def _check_table(fs, path: str, number: int, name: str, report: RepairReport) -> FileMetaData | None:
    """The metadata of table ``number`` if it verifies whole; None (the damage reported) if not."""
    p = table_file_name(path, number)
    try:
        r = TableReader.open(fs, p, number, cache=None, verify_checksums=True)
        try:
            entries = r.verify()
            meta = FileMetaData.from_properties(number, r.properties)
        finally:
            r.close()
    except CorruptionError as e:
        report.moved_to_lost.append(f"{name}: {e}")
        return None
    report.tables_kept += 1
    report.table_entries_kept += entries
    return meta


def _salvage_table(fs, path: str, number: int, name: str, new_number, options: Options,
                   report: RepairReport) -> FileMetaData | None:
    """Write the readable part of damaged table ``number`` (see step 1 of the module docstring)
    to a new table numbered ``new_number()``; its metadata, or None when nothing reads."""
    try:
        r = TableReader.open(fs, table_file_name(path, number), number, cache=None, verify_checksums=True)
    except CorruptionError:
        return None  # no footer, index or properties: no block can be found
    blocks, lost_blocks, prev = [], 0, None
    try:
        for _, block in r.readable_blocks():
            if isinstance(block, CorruptionError):
                lost_blocks += 1
                continue
            order = list(zip(block[0], block[1]))
            if not order or (prev is not None and not prev < order[0]) or order != sorted(set(order)):
                lost_blocks += 1  # out of order: not this table's block as written
                continue
            blocks.append(block)
            prev = order[-1]
        tombstones = list(r.range_tombstones)
        expected = r.properties.num_entries
    finally:
        r.close()
    kept = sum(len(b[0]) for b in blocks)
    if not kept and not tombstones:
        return None
    refs: dict[int, int] = {}
    number = new_number()
    new_name = os.path.basename(table_file_name(path, number))
    file = fs.create(table_file_name(path, number))
    try:
        builder = TableBuilder(file, file_number=number, block_size=options.block_size,
                               bloom_bits_per_key=options.bloom_bits_per_key, compression=options.compression)
        for keys, negs, kinds, values in blocks:
            for key, neg, kind, value in zip(keys, negs, kinds, values):
                builder.add(key, -neg, kind, value)
                pointer = pointer_in(kind, value) if kind >= VALUE_POINTER else None
                if pointer is not None:
                    vlog, _, size = decode_pointer(pointer, table_file_name(path, number))
                    refs[vlog] = refs.get(vlog, 0) + size
        for begin, end, seq in tombstones:
            builder.add_range_tombstone(begin, end, seq)
        props = builder.finish(blob_refs=refs)
        file.sync()
    finally:
        file.close()
    fs.sync_dir(path)
    report.tables_kept += 1
    report.table_entries_kept += kept
    report.tables_salvaged.append(
        f"{name} -> {new_name}: {kept} of {expected} entries and {len(tombstones)} range tombstones kept, "
        f"{lost_blocks} data blocks lost")
    return FileMetaData.from_properties(number, props)


def _check_vlog(fs, path: str, number: int, name: str, edit: VersionEdit, report: RepairReport) -> None:
    p = vlog_file_name(path, number)
    scan = ValueLogScan(fs, p)
    damage = None
    try:
        scan.run()
    except CorruptionError as e:
        damage = str(e)
    if scan.file_number is None or (damage is not None and scan.valid_length <= FILE_HEADER_SIZE):
        move_aside(fs, path, name)
        report.moved_to_lost.append(f"{name}: {damage or 'no intact file header'}")
        return
    size = fs.size(p)
    edit.new_vlogs.append(number)
    report.vlog_files_kept += 1
    if damage is None and scan.valid_length == size and scan.sealed:
        edit.sealed_vlogs.append((number, scan.record_bytes))
        return
    if scan.valid_length < size:
        copy = keep_copy(fs, path, name)
        fs.truncate(p, scan.valid_length)
        fs.sync_file(p)
        why = damage or f"torn tail at offset {scan.valid_length}"
        report.cut_back.append(f"{name}: {size - scan.valid_length} bytes after offset {scan.valid_length} ({why}); the whole file is in {copy}")
    # left unsealed: the open that follows seals it at its (now intact) length
