"""The printers of ``antkv dump-wal`` and ``antkv dump-manifest`` (tables and value-log files
have theirs next to their readers: :func:`antkv.sst.reader.dump_table`,
:func:`antkv.vlog.reader.dump_vlog`).  Keys and values are printed as Python bytes literals."""

from __future__ import annotations

import os
from typing import Iterable

from .. import errors
from ..base.dbformat import DELETION, RANGE_DELETION, VALUE
from ..base.filenames import current_file_name
from ..manifest.version_edit import VersionEdit
from ..record.batch import decode_batch
from ..record.log_format import LogReader
from ..record.wal import is_header_record


def _show(data: bytes, limit: int = 64) -> str:
    if len(data) <= limit:
        return repr(data)
    return f"{data[:limit]!r}... ({len(data)} B)"


def dump_wal(fs, path: str) -> Iterable[str]:
    """Human-readable lines for every record of a WAL file (``antkv dump-wal``).

    The header record (:mod:`antkv.record.wal`) is shown as such and not counted.  The file
    is read with :class:`antkv.record.log_format.LogReader` (framing) and each payload
    decoded with :func:`antkv.record.batch.decode_batch`: a torn tail is reported, damage in the
    middle raises ``CorruptionError`` naming the file and offset.
    """
    from ..vlog.pointer import decode_pointer

    data = fs.read_all(path)
    yield f"WAL {path}: {len(data)} bytes"
    reader = LogReader(data, path)
    records = ops_total = 0
    first_seq = last_seq = None
    for offset, payload in reader:
        seq, ops = decode_batch(payload, path, offset)
        if is_header_record(offset, ops):
            yield f"@0 header record: the first write gets sequence {seq}"
            continue
        records += 1
        ops_total += len(ops)
        if ops:
            first_seq = seq if first_seq is None else first_seq
            last_seq = seq + len(ops) - 1
        yield f"@{offset} record of {len(payload)} B: batch seq {seq}, {len(ops)} op{'s' if len(ops) != 1 else ''}"
        for i, (kind, key, value) in enumerate(ops):
            if kind == VALUE:
                yield f"  @{seq + i} PUT {_show(key)} {_show(value)}"
            elif kind == DELETION:
                yield f"  @{seq + i} DELETE {_show(key)}"
            elif kind == RANGE_DELETION:
                yield f"  @{seq + i} DELETE_RANGE [{_show(key)}, {_show(value)})"
            else:
                fnum, voff, size = decode_pointer(value, f"{path} record at offset {offset}")
                yield f"  @{seq + i} PUT {_show(key)} -> value log {fnum:06d}.vlog offset {voff} size {size}"
    if not data:
        yield "empty: the header record every WAL begins with is gone, so the file was truncated"
    if records == 0 and data and not _starts_with_a_record_header(data):
        raise errors.CorruptionError("not a WAL: it does not start with a log record header", path, 0)
    seqs = f", sequence {first_seq}..{last_seq}" if first_seq is not None else ""
    yield f"{records} record{'s' if records != 1 else ''}, {ops_total} op{'s' if ops_total != 1 else ''}{seqs}"
    if reader.torn_tail_offset is not None:
        dropped = len(data) - reader.torn_tail_offset
        yield f"torn tail at offset {reader.torn_tail_offset} ({dropped} B a recovery would drop)"


def _starts_with_a_record_header(data: bytes) -> bool:
    """Whether ``data`` starts with a log record header whose length check holds (what even a
    torn first record keeps)."""
    from ..record.log_format import HEADER, HEADER_SIZE, length_check

    if len(data) < HEADER_SIZE:
        return not any(data)
    n, check, _ = HEADER.unpack_from(data, 0)
    return length_check(n) == check


def _manifest_path(fs, path: str) -> tuple[str, str]:
    """``(manifest file, how it was found)`` for a database directory or a MANIFEST file."""
    from ..manifest.version_set import read_current_file

    if not fs.is_dir(path):
        return path, "given"
    if not fs.exists(current_file_name(path)):
        raise errors.InvalidArgumentError(f"no antkv database at {path}: it has no CURRENT file")
    return read_current_file(fs, path)[1], "named by CURRENT"


def dump_manifest(fs, path: str) -> Iterable[str]:
    """Human-readable lines for every version edit of a MANIFEST (``antkv dump-manifest``),
    then the state they add up to.  ``path`` is a database directory (its CURRENT names the
    MANIFEST) or a MANIFEST file."""
    from ..manifest.version_set import Version, VersionSet

    manifest, how = _manifest_path(fs, path)
    data = fs.read_all(manifest)
    yield f"MANIFEST {manifest} ({how}): {len(data)} bytes"
    reader = LogReader(data, manifest)
    state = VersionSet(fs, os.path.dirname(manifest) or ".", 64, 1 << 62)  # never writes: only apply
    version = Version([[] for _ in range(64)])
    n = 0
    for offset, payload in reader:
        edit = VersionEdit.decode(payload, manifest, offset)
        version = state.apply(edit, version)
        n += 1
        yield f"@{offset} edit {n} ({len(payload)} B)"
        yield from (f"  {line}" for line in _edit_lines(edit))
    if n == 0:
        raise errors.CorruptionError("not a MANIFEST: it holds no intact version edit", manifest, 0)
    yield f"{n} edits"
    if reader.torn_tail_offset is not None:
        yield f"torn tail at offset {reader.torn_tail_offset} ({len(data) - reader.torn_tail_offset} B dropped)"
    yield (
        f"state: log_number {state.log_number}, next_file_number {state.next_file_number}, "
        f"last_sequence {state.last_sequence}"
    )
    for level, files in enumerate(version.levels):
        if files:
            total = sum(f.size for f in files)
            yield f"  L{level}: {len(files)} tables, {total} B: " + " ".join(f"{f.number:06d}" for f in files)
    for number, st in sorted(state.vlogs.items()):
        sealed = f"sealed, {st.total} B, garbage {st.garbage} B" if st.sealed else "active (unsealed)"
        yield f"  value log {number:06d}.vlog: {sealed}"


def _edit_lines(e: VersionEdit) -> Iterable[str]:
    for name in ("log_number", "next_file_number", "last_sequence"):
        v = getattr(e, name)
        if v is not None:
            yield f"{name} {v}"
    for level, f in e.new_tables:
        refs = ", ".join(f"{n:06d}.vlog {b} B" for n, b in sorted(f.blob_refs.items()))
        end = ")" if f.largest_exclusive else "]"
        yield (
            f"new table L{level} {f.number:06d}.sst: {f.size} B, {f.num_entries} entries, "
            f"seq {f.smallest_seq}..{f.largest_seq}, keys [{_show(f.smallest, 32)} .. {_show(f.largest, 32)}{end}"
            + (f", value-log refs {refs}" if refs else "")
        )
    for level, number in e.deleted_tables:
        yield f"deleted table L{level} {number:06d}.sst"
    for number in e.new_vlogs:
        yield f"new value log {number:06d}.vlog"
    for number, total in e.sealed_vlogs:
        yield f"sealed value log {number:06d}.vlog: {total} record bytes"
    for number, garbage in e.vlog_garbage:
        yield f"value-log garbage {number:06d}.vlog: +{garbage} B"
    for number in e.deleted_vlogs:
        yield f"deleted value log {number:06d}.vlog"
