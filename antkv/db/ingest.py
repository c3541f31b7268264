"""Ingestion: adding whole tables to a database without rewriting their entries.

Two sources (``docs/api.md``, "Ingesting tables"):

* **external tables** (:class:`~antkv.db.sst_file_writer.SstFileWriter`), ``db.ingest(paths)``: every
  entry of a file has sequence number 0 in the file; the file is given ONE new sequence number
  of this database (later files of the list newer), RocksDB's *global sequence number*;
* **another antkv database** (a checkpoint directory, typically another Spark partition's),
  ``db.ingest_database(path, begin, end)``: its tables overlapping ``[begin, end)`` and the
  value-log files they point into.  The range's previous contents are replaced: the edit also
  adds a range tombstone ``[begin, end)`` older than everything brought in.  A table wholly
  inside the range is linked as is; a table straddling a bound is the only thing rewritten (its
  entries inside the range, into a new table with the same sequence numbers and pointers).
  Each source level gets its own band of new sequence numbers, deeper levels older, so every
  brought-in table is newer or older than another as a whole.

Nothing is rewritten to change sequence numbers or value-log file numbers: the MANIFEST records
a *translation* per table (:mod:`antkv.manifest.translated_table`).  Steps, under the write lock
(no write interleaves) and the compaction lock (nothing moves under the placement):

1. check every input before anything changes: tables fully verified; an external value-log file
   scanned; another database's value-log files checked by header, size and footer only
   (their records are checked when read), so bringing in a small range of a large file costs nothing
   per byte of it;
2. flush the memtables (an ingested table must be newer than everything in memory too);
3. allocate file numbers and log them (a MANIFEST edit of the counter alone), so that after a
   crash the numbers are never handed out again: a hard link is never opened for writing;
4. hard-link (copy across file systems) tables and value-log files into the directory, write
   the rewritten boundary tables and the tombstone table; sync them and the directory;
5. place each table, oldest first, at the lowest level where it overlaps nothing at that level
   or above (L0 when L0 overlaps) -- RocksDB's rule;
6. ONE MANIFEST edit adds every table (with its translation) and value-log file (sealed, its
   bytes no table points to already counted as garbage) and the new last sequence number; then
   the sequence number is published;
7. with ``move=True``, the input files are removed (only now).

A crash before step 6 leaves numbered files no MANIFEST names; the next open removes them (they
are links: the inputs are untouched).  After step 6 the ingest is complete.
"""

from __future__ import annotations

import os

from ..base.dbformat import MAX_SEQUENCE, MERGE, VALUE_POINTER
from ..base.merge_operator import missing_operator
from ..base.expiry import pointer_in
from ..base.filenames import external_vlog_path, table_file_name, vlog_file_name
from ..compaction.outputs import TableOptions
from ..errors import CorruptionError, InvalidArgumentError
from .sst_file_writer import EXTERNAL_SEQ, EXTERNAL_VLOG_NUMBER
from ..manifest.translated_table import open_table_reader
from ..manifest.version_edit import FileMetaData, VersionEdit
from ..manifest.version_set import VersionSet
from ..record.batch import as_bytes
from ..sst.builder import TableBuilder
from ..sst.reader import TableReader
from ..vlog.pointer import decode_pointer
from ..vlog.format import FILE_HEADER_SIZE, FOOTER_SIZE, decode_file_header, decode_footer
from ..vlog.reader import verify_file
from .write_path import WritePath

_SOURCE_LEVELS = 256  # a MANIFEST level is a u8: any source database's levels fit


def _overlap(a_lo: bytes, a_hi: bytes, a_excl: bool, b_lo: bytes, b_hi: bytes, b_excl: bool) -> bool:
    """Whether key ranges ``[a_lo, a_hi]`` and ``[b_lo, b_hi]`` (``_excl``: the end is
    exclusive) share a key."""
    if a_hi < b_lo or (a_excl and a_hi == b_lo):
        return False
    if b_hi < a_lo or (b_excl and b_hi == a_lo):
        return False
    return True


class _Incoming:
    """A table about to be added: where its file comes from and its translated metadata."""

    __slots__ = ("src", "meta", "level", "build")

    def __init__(self, src, meta: FileMetaData, build=None):
        self.src = src  # the path to link, or None when ``build(path)`` writes the file
        self.meta = meta
        self.build = build
        self.level = 0


class Ingestion(WritePath):
    """Part of :class:`~antkv.db.DB`: ingestion (calls :class:`~antkv.db.write_path.WritePath`)."""

    # ------------------------------------------------------------------ external tables

    def _ingest_external(self, paths: list[str], move: bool, verify: bool = True) -> dict:
        fs = self._fs
        checked = []  # (path, properties, vlog path or None, vlog record bytes)
        for path in paths:
            r = TableReader.open(fs, path, 0, cache=None, verify_checksums=True)
            try:
                if verify:
                    r.verify()
                props = r.properties
            finally:
                r.close()
            if props.smallest_seq != EXTERNAL_SEQ or props.largest_seq != EXTERNAL_SEQ:
                raise InvalidArgumentError(f"{path} is not an external table (sequence numbers "
                                           f"{props.smallest_seq}..{props.largest_seq}; use ingest_database)")
            vpath, vbytes = None, 0
            if props.blob_refs:
                if set(props.blob_refs) != {EXTERNAL_VLOG_NUMBER}:
                    raise CorruptionError(f"external table points into value-log files {sorted(props.blob_refs)}", path)
                vpath = external_vlog_path(path)
                if not fs.exists(vpath):
                    raise InvalidArgumentError(f"{path} has large values but {vpath} is missing")
                _, vbytes = verify_file(fs, vpath)
            checked.append((path, props, vpath, vbytes))

        def plan(last_seq: int, new_number) -> tuple[list, list, int]:
            tables, vlogs = [], []
            seq = last_seq
            for path, props, vpath, vbytes in checked:
                seq += 1  # later files of the list are newer
                vmap = {}
                if vpath is not None:
                    vnum = new_number()
                    vmap = {EXTERNAL_VLOG_NUMBER: vnum}
                    vlogs.append((vpath, vnum, vbytes, vbytes - props.blob_refs[EXTERNAL_VLOG_NUMBER]))
                meta = FileMetaData.from_properties(new_number(), props)
                tables.append(_Incoming(path, _translated(meta, seq - EXTERNAL_SEQ, vmap)))
            return tables, vlogs, seq

        result = self._ingest_planned(plan)
        if move:
            for path, _, vpath, _ in checked:
                for p in (path, vpath):
                    if p is not None and fs.exists(p):
                        fs.remove(p)
        return result

    # ------------------------------------------------------------------ another database

    def _ingest_database(self, src: str, lo: bytes | None, hi: bytes | None) -> dict:
        fs = self._fs
        svs = VersionSet(fs, src, _SOURCE_LEVELS, 1 << 62)
        svs.recover()  # reads CURRENT and the MANIFEST; writes nothing
        picked = []  # (source level, FileMetaData, fits wholly)
        for level, f in svs.current.all_files():
            if hi is not None and f.smallest >= hi:
                continue
            if lo is not None and (f.largest < lo or (f.largest == lo and f.largest_exclusive)):
                continue
            fits = (lo is None or f.smallest >= lo) and (
                hi is None or f.largest < hi or (f.largest_exclusive and f.largest <= hi)
            )
            picked.append((level, f, fits))
        # what the boundary tables keep, read now (the checks happen before anything changes)
        parts = {}
        for level, f, fits in picked:
            if not fits:
                parts[f.number] = _clip_table(fs, src, f, lo, hi)
        vrefs: dict[int, int] = {}
        for level, f, fits in picked:
            refs = f.blob_refs if fits else parts[f.number][2]
            for v, n in refs.items():
                vrefs[v] = vrefs.get(v, 0) + n
        vstates = {}
        for v in sorted(vrefs):
            st = svs.vlogs.get(v)
            if st is None or not st.sealed:
                raise InvalidArgumentError(
                    f"value-log file {v} of {src} is not sealed: ingest a checkpoint of that database"
                )
            vpath = vlog_file_name(src, v)
            check_sealed_file(fs, vpath, st.total)
            vstates[v] = (vpath, st.total)
        for level, f, fits in picked:
            if fits:
                r = TableReader.open(fs, table_file_name(src, f.number), f.number, cache=None, verify_checksums=True)
                try:
                    r.verify()
                    operands = r.properties.num_merges > 0
                finally:
                    r.close()
            else:
                operands = MERGE in parts[f.number][0][2]
            if operands and self.options.merge_operator is None:
                raise missing_operator(f"table {f.number:06d}.sst of {src}")
        topts = TableOptions.of(self.options)

        def plan(last_seq: int, new_number) -> tuple[list, list, int]:
            vmap = {v: new_number() for v in sorted(vstates)}
            vlogs = [(vstates[v][0], vmap[v], vstates[v][1], vstates[v][1] - vrefs[v]) for v in sorted(vstates)]
            tables = []
            seq = last_seq
            # the replaced range's tombstone: older than everything brought in
            if lo is not None or hi is not None or picked:
                seq += 1
                t_lo = lo if lo is not None else b""
                t_hi = hi if hi is not None else _past(self._largest_key(picked))
                if t_lo < t_hi:
                    number = new_number()
                    tables.append(_Incoming(None, None, _tombstone_builder(topts, number, t_lo, t_hi, seq)))
            # one band of sequence numbers per source level, deeper levels older
            for level in sorted({lvl for lvl, _, _ in picked}, reverse=True):
                band = [(f, fits) for lvl, f, fits in picked if lvl == level]
                lo_seq = min(f.smallest_seq for f, _ in band)
                hi_seq = max(f.largest_seq for f, _ in band)
                offset = seq + 1 - lo_seq
                seq = hi_seq + offset
                for f, fits in band:
                    number = new_number()
                    if fits:
                        meta = FileMetaData(number, f.size, f.smallest, f.largest, f.largest_exclusive,
                                            f.smallest_seq, f.largest_seq, f.num_entries, dict(f.blob_refs))
                        # a table the source itself ingested: the two translations compose
                        meta = _translated(meta, offset, vmap, f.seq_offset, f.vlog_map)
                        tables.append(_Incoming(table_file_name(src, f.number), meta))
                    else:
                        columns, tombs, refs = parts[f.number]
                        if columns[0] or tombs:
                            tables.append(_Incoming(None, None, _clipped_builder(topts, number, columns, tombs, refs, offset, vmap)))
            return tables, vlogs, seq

        return self._ingest_planned(plan)

    def _largest_key(self, picked) -> bytes:
        keys = [f.largest for _, f, _ in picked] + [f.largest for _, f in self._versions.current.all_files()]
        return max(keys) if keys else b""

    # ------------------------------------------------------------------ the common part

    def _ingest_planned(self, plan) -> dict:
        """Steps 2-6 of the module docstring; ``plan(last_seq, new_number)`` names the tables
        and value-log files and returns the new last sequence number."""
        fs = self._fs
        with self._write_lock:
            self._check_writable()
            if not self._mem.is_empty():
                self._switch_memtable()
            self._wait_for_background(lambda: not self._imms)
            with self._compaction_lock:
                with self._mutex:
                    vs = self._versions
                    tables, vlogs, new_last = plan(self._last_seq, vs.new_file_number)
                    if new_last > MAX_SEQUENCE:
                        raise InvalidArgumentError("ingest would exhaust the sequence numbers")
                    vs.log_and_apply(VersionEdit())  # the counter, past every number just taken
                written = []
                logging = False
                try:
                    for t in tables:
                        if t.src is not None:
                            path = table_file_name(self.path, t.meta.number)
                            fs.link_or_copy(t.src, path)
                        else:
                            t.meta = t.build(fs, self.path)
                            path = table_file_name(self.path, t.meta.number)
                        written.append(path)
                    for vpath, vnum, _total, _garbage in vlogs:
                        path = vlog_file_name(self.path, vnum)
                        fs.link_or_copy(vpath, path)
                        written.append(path)
                    fs.sync_dir(self.path)
                    logging = True  # from here a failure may or may not have reached the MANIFEST
                    with self._mutex:
                        edit = VersionEdit(last_sequence=new_last)
                        _place(self._versions.current, tables)
                        for t in tables:
                            edit.new_tables.append((t.level, t.meta))
                        for _vpath, vnum, total, garbage in vlogs:
                            edit.new_vlogs.append(vnum)
                            edit.sealed_vlogs.append((vnum, total))
                            if garbage:
                                edit.vlog_garbage.append((vnum, garbage))
                        self._apply_edit(edit)
                        self._last_seq = new_last
                        self._schedule_work()
                except BaseException as e:
                    if logging:  # the edit may be durable: keep its files; the database stops
                        self._set_bg_error(e)
                        raise
                    for path in written:
                        if fs.exists(path):
                            try:
                                fs.remove(path)
                            except Exception:  # noqa: BLE001 - the next open removes it
                                pass
                    raise
        if self._bg_thread is None:
            self._run_inline_work()
        self._delete_obsolete_files()
        return {
            "tables": [(t.level, t.meta.number) for t in tables],
            "vlog_files": [vnum for _, vnum, _, _ in vlogs],
            "sequence": new_last,
        }


def _translated(meta: FileMetaData, offset: int, vmap: dict[int, int], base_offset: int = 0,
                base_map: dict[int, int] | None = None) -> FileMetaData:
    """``meta`` (its sequence numbers and value-log numbers in the source's spaces) in this
    database's: sequence numbers shifted by ``offset``, value-log numbers renamed by ``vmap``.
    A table the source had itself ingested reads its file through ``(base_offset, base_map)``
    already; the result composes both, so the file is still read as written."""
    raw_to_source = base_map if base_map else {v: v for v in meta.blob_refs}
    meta.smallest_seq += offset
    meta.largest_seq += offset
    meta.seq_offset = base_offset + offset
    meta.vlog_map = {raw: vmap[v] for raw, v in raw_to_source.items()}
    meta.blob_refs = {vmap[v]: n for v, n in meta.blob_refs.items()}
    return meta


def check_sealed_file(fs, path: str, total: int) -> None:
    """Check that sealed value-log file ``path`` holds ``total`` record bytes (what its
    MANIFEST says), from its header and footer alone: two small reads, so bringing in part of
    a large file costs nothing per byte of it (each record is checked when it is read, as
    always).  A file sealed by recovery has no footer; then its size must be exact."""
    size = fs.size(path)
    f = fs.open_random(path)
    try:
        number, _ = decode_file_header(f.read(0, FILE_HEADER_SIZE), path)
        if size == FILE_HEADER_SIZE + total:
            return
        if size != FILE_HEADER_SIZE + total + FOOTER_SIZE:
            raise CorruptionError(f"value-log file of {size} bytes cannot hold the {total} record bytes its MANIFEST "
                                  "says", path, 0)
        footer = decode_footer(f.read(size - FOOTER_SIZE, FOOTER_SIZE), 0)
    finally:
        f.close()
    if footer is None or footer[0] != number or footer[2] != total:
        raise CorruptionError(f"value-log footer damaged or disagreeing with the file: {footer}", path, size - FOOTER_SIZE)


def _past(key: bytes) -> bytes:
    """The smallest key after ``key``."""
    return key + b"\x00"


def _clip_table(fs, src: str, f: FileMetaData, lo, hi):
    """``(columns, range tombstones, value-log refs)`` of table ``f``'s entries in ``[lo, hi)``."""
    r = open_table_reader(fs, src, f, cache=None, verify_checksums=True)  # in the source's spaces
    try:
        columns = r.columns(lo, hi)  # reads (and checks) only the blocks of the range
        tombs = []
        for b, e, s in r.range_tombstones:
            b2 = b if lo is None or b > lo else lo
            e2 = e if hi is None or e < hi else hi
            if b2 < e2:
                tombs.append((b2, e2, s))
    finally:
        r.close()
    refs: dict[int, int] = {}
    for kind, value in zip(columns[2], columns[3]):
        p = pointer_in(kind, value) if kind >= VALUE_POINTER else None
        if p is not None:
            v, _off, size = decode_pointer(p, r.path)
            refs[v] = refs.get(v, 0) + size
    return columns, tombs, refs


def _write_table(topts: TableOptions, number: int, fill, refs):
    """A builder function: writes table ``number`` with ``fill(builder)``, syncs it, returns
    its metadata (in the writer's spaces)."""

    def build(fs, dbname: str) -> FileMetaData:
        file = fs.create(table_file_name(dbname, number))
        try:
            b = TableBuilder(file, file_number=number, block_size=topts.block_size,
                             bloom_bits_per_key=topts.bloom_bits_per_key, compression=topts.compression)
            fill(b)
            props = b.finish(blob_refs=refs)
            file.sync()
        finally:
            file.close()
        return FileMetaData.from_properties(number, props)

    return build


def _tombstone_builder(topts, number: int, lo: bytes, hi: bytes, seq: int):
    return _write_table(topts, number, lambda b: b.add_range_tombstone(lo, hi, seq), {})


def _clipped_builder(topts, number: int, columns, tombs, refs, offset: int, vmap):
    def fill(b):
        for key, neg, kind, value in zip(*columns):
            b.add(key, -neg, kind, value)
        for begin, end, s in tombs:
            b.add_range_tombstone(begin, end, s)

    inner = _write_table(topts, number, fill, refs)

    def build(fs, dbname):
        return _translated(inner(fs, dbname), offset, vmap)

    return build


def _place(version, tables: list[_Incoming]) -> None:
    """Give each table its level, oldest first: the lowest level such that neither it nor any
    level above holds a table overlapping it (RocksDB's rule); L0 when L0 overlaps."""
    levels = [list(files) for files in version.levels]
    for t in sorted(tables, key=lambda t: t.meta.largest_seq):
        m = t.meta
        level = 0
        for lvl, files in enumerate(levels):
            if any(_overlap(m.smallest, m.largest, m.largest_exclusive, g.smallest, g.largest, g.largest_exclusive)
                   for g in files):
                break
            level = lvl
        t.level = level
        levels[level].append(m)
    return None


def check_range(begin, end) -> tuple[bytes | None, bytes | None]:
    """The ``[begin, end)`` of an ingest_database call (None = unbounded)."""
    lo = None if begin is None else as_bytes(begin, "begin")
    hi = None if end is None else as_bytes(end, "end")
    if lo is not None and hi is not None and lo > hi:
        raise InvalidArgumentError(f"ingest_database: begin {lo!r} > end {hi!r}")
    return lo, hi


def check_paths(paths) -> list[str]:
    """The list of paths of an ingest call: one path or a list of them, each existing."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    if not isinstance(paths, (list, tuple)):
        raise TypeError(f"paths must be a path or a list of paths, not {type(paths).__name__}")
    out = []
    for p in paths:
        if not isinstance(p, (str, os.PathLike)):
            raise TypeError(f"a path must be a str or os.PathLike, not {type(p).__name__}")
        out.append(os.fspath(p))
    if not out:
        raise InvalidArgumentError("ingest needs at least one file")
    if len(set(out)) != len(out):
        raise InvalidArgumentError("ingest: a file is named twice")
    return out
