"""The commands RocksDB users know from ``ldb`` and ``sst_dump``::

    antkv idump DB [--from K] [--to K] [--limit N]     every internal entry: key, sequence, kind
    antkv approxsize DB [--from K] [--to K]            estimated bytes on disk of [FROM, TO)
    antkv ingest DB FILE... [--move]                   add external tables (db.ingest)
    antkv write-sst FILE [INPUT|-] [--input-format tsv|json]   an external table from load's input
    antkv dump-sst FILE --from K --to K                the table's entries in [FROM, TO)

(``compact --from/--to`` is :func:`antkv.tools.commands.cmd_compact`.)  Ranges are
``[FROM, TO)`` as ``sst_dump``'s, keys in the command's encoding (text, ``--hex``,
``--escape``).  ``idump`` shows what ``scan`` hides: older versions, deletions, range
deletions, value pointers into the value log, expiry times and merge operands, each with the
memtable or table that holds it (``db.key_versions()``).  ``idump`` and ``approxsize`` open
read-only.
"""

from __future__ import annotations

import json
import os
from typing import Iterable

from ..base.dbformat import VALUE_POINTER
from .byte_encoding import Codec, UsageError
from .commands import EXIT_OK, Output, arg_codec, json_codec, cmd_dump_sst as cmd_dump_sst_blocks, done, fs
from .commands import open_db, options_from, read_pairs


def _range(args, codec: Codec) -> tuple[bytes | None, bytes | None]:
    lo = None if args.start is None else codec.parse(args.start)
    hi = None if args.stop is None else codec.parse(args.stop)
    if lo is not None and hi is not None and lo > hi:
        raise UsageError("--from must not be greater than --to (the range is [FROM, TO))")
    if getattr(args, "limit", None) is not None and args.limit < 0:
        raise UsageError("--limit must be >= 0")
    return lo, hi


# --------------------------------------------------------------------------- entries


def entry_doc(v, codec: Codec) -> dict:
    """One :class:`antkv.read.key_versions.KeyVersion` as a JSON-ready dict (keys and values
    in ``codec``; a value pointer and an expiry decoded)."""
    from ..base.expiry import decode_expiring
    from ..vlog.pointer import decode_pointer

    doc = {"key": codec.show(v.key).decode(), "seq": v.sequence, "kind": v.kind, "source": v.source}
    kind, value = v.kind, v.value
    if kind == "PUT_TTL":
        expiry, inner, value = decode_expiring(value)
        doc["expires_ms"] = expiry
        kind = "PUT_BLOB" if inner == VALUE_POINTER else "PUT"
    if kind == "PUT_BLOB":
        fnum, offset, size = decode_pointer(value, v.source)
        doc["value_log"] = {"file": f"{fnum:06d}.vlog", "offset": offset, "size": size}
    elif kind == "RANGE_DELETE":
        doc["end"] = codec.show(value).decode()
    elif kind != "DELETE":
        doc["value"] = codec.show(value).decode()
    return doc


def entry_line(doc: dict) -> str:
    """The text form of :func:`entry_doc`: ``KEY @SEQ KIND [=> VALUE] (SOURCE)``, as ldb prints."""
    parts = [doc["key"], f"@{doc['seq']}", doc["kind"]]
    if "end" in doc:
        parts.append(f"=> [{doc['key']}, {doc['end']})")
    elif "value_log" in doc:
        v = doc["value_log"]
        parts.append(f"=> value log {v['file']} offset {v['offset']} size {v['size']}")
    elif "value" in doc:
        parts.append(f"=> {doc['value']}")
    if "expires_ms" in doc:
        parts.append(f"expires at {doc['expires_ms']} ms")
    parts.append(f"({doc['source']})")
    return " ".join(parts)


def _print_entries(args, out: Output, entries: Iterable[tuple]) -> None:
    """One line per entry (a JSON line with ``--json``); keys and values hex with ``--hex``,
    else escaped: exact, and one entry per line whatever the bytes."""
    codec = json_codec(args)
    for n, entry in enumerate(entries):
        if args.limit is not None and n >= args.limit:
            return
        doc = entry_doc(entry, codec)
        out.line(json.dumps(doc) if args.json else entry_line(doc))


def cmd_idump(args, out: Output) -> int:
    codec = arg_codec(args)
    lo, hi = _range(args, codec)
    with open_db(args, read_only=True) as db:
        _print_entries(args, out, db.key_versions(lo, hi))
    return EXIT_OK


def cmd_dump_sst(args, out: Output) -> int:
    """``dump-sst FILE``: every block and entry; with ``--from``/``--to``: the entries in range."""
    if args.start is None and args.stop is None:
        return cmd_dump_sst_blocks(args, out)
    from ..read.key_versions import table_versions
    from ..sst.reader import TableReader

    lo, hi = _range(args, arg_codec(args))
    reader = TableReader.open(fs(), args.file, 0)
    try:
        entries = list(table_versions(os.path.basename(args.file), reader, lo, hi))
        _print_entries(args, out, entries)  # a damaged block raises before anything is printed
    finally:
        reader.close()
    return EXIT_OK


# --------------------------------------------------------------------------- sizes, tables


def cmd_approxsize(args, out: Output) -> int:
    codec = arg_codec(args)
    lo, hi = _range(args, codec)
    with open_db(args, read_only=True) as db:
        size = db.approximate_size(lo, hi)
    jc = json_codec(args)
    doc = {"from": None if lo is None else jc.show(lo).decode(), "to": None if hi is None else jc.show(hi).decode(),
           "bytes": size}
    return done(args, out, doc, str(size))


def cmd_ingest(args, out: Output) -> int:
    for path in args.files:
        if not os.path.isfile(path):
            raise UsageError(f"{path}: no such file (ingest takes tables written by 'antkv write-sst' or SstFileWriter)")
    with open_db(args) as db:
        r = db.ingest(args.files, move=args.move)
    tables = ", ".join(f"L{level} {number:06d}.sst" for level, number in r["tables"])
    return done(args, out, r, f"ingested {len(r['tables'])} tables into {args.db} ({tables}); "
                              f"last sequence {r['sequence']}")


def cmd_write_sst(args, out: Output) -> int:
    from ..db.sst_file_writer import SstFileWriter

    if os.path.lexists(args.output):
        raise UsageError(f"{args.output} exists: write-sst never overwrites a file")
    pairs = dict(read_pairs(args))  # a key given twice: the last line wins, as with load
    if not pairs:
        raise UsageError(f"{args.file}: no KEY<TAB>VALUE lines: an external table cannot be empty")
    with SstFileWriter(args.output, options_from(args)) as w:  # an error abandons the file
        for key in sorted(pairs):
            w.put(key, pairs[key])
        info = w.finish()
    doc = {k: v.hex() if isinstance(v, bytes) else v for k, v in info.items()}
    vlog = f" and {info['vlog_path']}" if info.get("vlog_path") else ""
    return done(args, out, doc, f"wrote {info['entries']} entries to {args.output}{vlog}: "
                                f"ingest with 'antkv ingest DB {args.output}'")


def add_ldb_commands(add, opening, coded, quiet) -> None:
    """Register the commands with ``add`` (the parser builder of :mod:`antkv.tools.cli`)."""
    def ranged(p, what: str):
        p.add_argument("--from", dest="start", metavar="K", help=f"first key {what} (inclusive)")
        p.add_argument("--to", dest="stop", metavar="K", help=f"end key {what} (exclusive)")

    p = add("idump", cmd_idump, "print every internal entry (older versions, deletions, range deletions, "
            "value pointers) with its sequence number, kind and where it lives, as ldb idump", opening, coded)
    ranged(p, "of the entries")
    p.add_argument("--limit", type=int, help="print at most LIMIT entries")
    p = add("approxsize", cmd_approxsize, "estimated bytes on disk of the keys in [FROM, TO): tables and the "
            "value-log records they point to (memtables not counted)", opening, coded)
    ranged(p, "of the range")
    p = add("ingest", cmd_ingest, "add external tables (from 'antkv write-sst' or SstFileWriter) atomically, "
            "newer than everything in DB, without rewriting them", opening)
    p.add_argument("files", metavar="FILE", nargs="+")
    p.add_argument("--move", action="store_true", help="remove the input files once ingested")
    p = add("write-sst", cmd_write_sst, "write an external table FILE from load's input (KEY<TAB>VALUE or JSON "
            "lines, any order; the last of a repeated key wins)", opening, coded, db=False)
    p.add_argument("output", metavar="FILE", help="the table to write (must not exist)")
    p.add_argument("file", metavar="INPUT", nargs="?", default="-", help="'-' (default): stdin")
    p.add_argument("--input-format", choices=("tsv", "json"), default="tsv")
    p = add("dump-sst", cmd_dump_sst, "print every block and entry of a table file; with --from/--to only "
            "the entries in [FROM, TO), as idump prints them", coded, db=False)
    p.add_argument("file", metavar="FILE")
    ranged(p, "of the entries")
    p.add_argument("--limit", type=int, help="with --from/--to: print at most LIMIT entries")


__all__ = ["add_ldb_commands", "entry_doc", "entry_line"]
