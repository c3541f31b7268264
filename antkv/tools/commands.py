"""The commands of ``antkv`` (:mod:`antkv.tools.cli` parses the command line and calls them).

Each ``cmd_*`` takes the parsed arguments and an :class:`Output`, prints its result (text, or
one JSON document with ``--json``) and returns the exit status.  Commands that only read open
the database with ``read_only=True``; the others open it with ``max_background_jobs=0``, so
flushes and compactions run in the command itself and nothing is left half done.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Iterable, Iterator

from .. import errors
from ..base.filenames import current_file_name, parse_file_name
from .byte_encoding import Codec, UsageError
from .dumps import dump_manifest, dump_wal
from .progress_bars import progress, step_bar

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_DAMAGE = 4

LOAD_BATCH = 1000  # pairs per write batch of ``load``


class Output:
    """Writes bytes to a binary stream (stdout's buffer); text is encoded as UTF-8."""

    def __init__(self, stream):
        self.stream = stream

    def line(self, text: str | bytes = b"") -> None:
        if isinstance(text, str):
            text = text.encode("utf-8", "backslashreplace")
        self.stream.write(text + b"\n")

    def json(self, doc) -> None:
        self.line(json.dumps(doc, indent=2, sort_keys=True, default=str))


# --------------------------------------------------------------------------- opening


def _parse_option_value(text: str):
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text


def options_from(args, **fixed):
    """The :class:`antkv.Options` of ``-o NAME=VALUE`` arguments, then ``fixed``."""
    from ..options import Options

    from ..db.files import options_file

    fields = {}
    db = getattr(args, "db", None)
    if db is not None and fs().is_dir(db):
        fields.update(options_file.load(fs(), db) or {})  # the options the database last ran with
    fields["max_background_jobs"] = 0
    for item in args.option or []:
        name, eq, value = item.partition("=")
        if not eq or not name:
            raise UsageError(f"-o expects NAME=VALUE, got {item!r}")
        if name in ("file_system", "block_cache", "write_buffer_manager", "read_only"):
            raise UsageError(f"-o {name} cannot be set from the command line")
        fields[name] = _parse_option_value(value)
    fields.update(fixed)
    try:
        return Options(**fields)
    except TypeError as e:  # an unknown field name
        raise UsageError(f"-o: {e}") from None


def open_db(args, *, read_only: bool = False, create_if_missing: bool = False):
    from ..db import open as open_db_

    path = args.db
    if not create_if_missing and not fs().exists(current_file_name(path)) and not _has_antkv_files(path):
        # checked before opening: a missing database is the user's mistake, not damage
        what = "does not exist" if not fs().exists(path) else "has no CURRENT file"
        raise errors.InvalidArgumentError(f"no antkv database at {path}: it {what}{_state_hint(path)}")
    kwargs = {"read_only": True} if read_only else {"create_if_missing": create_if_missing}
    return open_db_(path, options_from(args, **kwargs))


def _state_hint(path: str) -> str:
    """A pointer to the ``state-*`` commands when ``path`` is a Spark checkpoint location."""
    try:
        from antkv.spark.tools.state_reader import is_state_location
    except ImportError:  # the spark extra is not installed: no location to recognise
        return ""
    if not is_state_location(path):
        return ""
    return (f"; it is a Spark pipeline's checkpoint location: try 'antkv state-info {path}', "
            f"and 'antkv state-export' to turn a version into a database")


def _has_antkv_files(path: str) -> bool:
    return fs().is_dir(path) and any(parse_file_name(n) is not None for n in fs().listdir(path))


def fs():
    from ..fs import default_file_system

    return default_file_system()


def arg_codec(args) -> Codec:
    """How the command reads keys and values from its arguments (text, --hex or --escape)."""
    return Codec(args.format)


def json_codec(args) -> Codec:
    """JSON output shows bytes with ``--hex`` as hex, else escaped (always exact)."""
    return Codec("hex" if args.format == "hex" else "escape")


def _value_arg(args, codec: Codec) -> bytes:
    """The value of ``put``: the VALUE argument, or the bytes of ``--value-file`` (``-``: stdin),
    taken exactly as they are (no decoding, no newline stripped)."""
    if args.value_file is not None:
        if args.value is not None:
            raise UsageError("give VALUE or --value-file, not both")
        if args.value_file == "-":
            return sys.stdin.buffer.read()
        try:
            with open(args.value_file, "rb") as f:
                return f.read()
        except OSError as e:
            raise UsageError(f"cannot read --value-file {args.value_file}: {e.strerror}") from None
    if args.value is None:
        raise UsageError("VALUE is missing (or use --value-file FILE, - for stdin)")
    return codec.parse(args.value)


# --------------------------------------------------------------------------- point commands


def cmd_get(args, out: Output) -> int:
    codec = arg_codec(args)
    key = codec.parse(args.key)
    with open_db(args, read_only=True) as db:
        value = db.get(key)
    if args.json:
        jc = json_codec(args)
        out.json({"key": jc.show(key).decode(), "found": value is not None, "value": None if value is None else jc.show(value).decode()})
        return EXIT_OK if value is not None else EXIT_NOT_FOUND
    if value is None:
        sys.stderr.write(f"antkv: key not found: {codec.show(key).decode('utf-8', 'backslashreplace')}\n")
        return EXIT_NOT_FOUND
    out.line(codec.show(value))
    return EXIT_OK


def done(args, out: Output, doc: dict, text: str) -> int:
    if args.json:
        out.json(doc)
    elif text:
        out.line(text)
    return EXIT_OK


def cmd_put(args, out: Output) -> int:
    codec = arg_codec(args)
    key = codec.parse(args.key)
    value = _value_arg(args, codec)
    with open_db(args, create_if_missing=args.create_if_missing) as db:
        db.put(key, value, sync=True)
    return done(args, out, {"put": len(value)}, "")


def cmd_delete(args, out: Output) -> int:
    key = arg_codec(args).parse(args.key)
    with open_db(args) as db:
        db.delete(key, sync=True)
    return done(args, out, {"deleted": True}, "")


def cmd_delete_range(args, out: Output) -> int:
    codec = arg_codec(args)
    begin, end = codec.parse(args.begin), codec.parse(args.end)
    if begin > end:
        raise UsageError("BEGIN must not be greater than END (the range is [BEGIN, END))")
    with open_db(args) as db:
        db.delete_range(begin, end, sync=True)
    return done(args, out, {"deleted_range": True}, "")


# --------------------------------------------------------------------------- scans, load, dump


def _range_args(args, codec: Codec):
    start = None if args.start is None else codec.parse(args.start)
    stop = None if args.stop is None else codec.parse(args.stop)
    prefix = None if args.prefix is None else codec.parse(args.prefix)
    if args.limit is not None and args.limit < 0:
        raise UsageError("--limit must be >= 0")
    return start, stop, prefix


def _limited(items: Iterable, limit: int | None) -> Iterator:
    for n, item in enumerate(items):
        if limit is not None and n >= limit:
            return
        yield item


def cmd_scan(args, out: Output) -> int:
    codec = json_codec(args) if args.json else arg_codec(args)
    start, stop, prefix = _range_args(args, codec)
    with open_db(args, read_only=True) as db:
        items = _limited(db.items(start, stop, prefix=prefix, reverse=args.reverse), args.limit)
        for key, value in items:
            if args.json:
                doc = {"key": codec.show(key).decode()}
                if not args.keys_only:
                    doc["value"] = codec.show(value).decode()
                out.line(json.dumps(doc))
            elif args.keys_only:
                out.line(codec.show(key))
            else:
                out.line(codec.show(key) + b"\t" + codec.show(value))
    return EXIT_OK


def _pair_line(fmt: str, codec: Codec, key: bytes, value: bytes) -> bytes:
    if fmt == "json":
        return json.dumps({"key": codec.show(key).decode(), "value": codec.show(value).decode()}).encode()
    return codec.show(key) + b"\t" + codec.show(value)


def _parse_pair(fmt: str, codec: Codec, line: str, where: str) -> tuple[bytes, bytes]:
    if fmt == "json":
        try:
            doc = json.loads(line)
        except ValueError as e:
            raise UsageError(f"{where}: not a JSON object: {e}") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("key"), str) or not isinstance(doc.get("value"), str):
            raise UsageError(f'{where}: expected {{"key": "...", "value": "..."}}')
        key, value = doc["key"], doc["value"]
    else:
        parts = line.split("\t")
        if len(parts) != 2:
            raise UsageError(f"{where}: expected KEY<TAB>VALUE, found {len(parts) - 1} tabs")
        key, value = parts
    try:
        return codec.parse(key), codec.parse(value)
    except UsageError as e:
        raise UsageError(f"{where}: {e}") from None


def _load_codec(args) -> Codec:
    return Codec("hex" if args.format == "hex" else "escape")


def read_pairs(args) -> list[tuple[bytes, bytes]]:
    """The pairs of ``load``'s input (``args.file``, ``-``: stdin; ``args.input_format``), every
    line parsed before anything is written: bad input is a UsageError naming its line."""
    codec = _load_codec(args)
    stream = sys.stdin if args.file == "-" else None
    try:
        f = stream or open(args.file, encoding="utf-8")
    except OSError as e:
        raise UsageError(f"cannot read {args.file}: {e.strerror}") from None
    pairs = []
    with f if stream is None else _nullcontext():
        for n, raw in enumerate(f, 1):
            line = raw.rstrip("\n").rstrip("\r")
            if line:
                pairs.append(_parse_pair(args.input_format, codec, line, f"{args.file} line {n}"))
    return pairs


def cmd_load(args, out: Output) -> int:
    from ..record.batch import WriteBatch

    pairs = read_pairs(args)  # bad input writes nothing
    with open_db(args, create_if_missing=args.create_if_missing) as db:
        batch = WriteBatch()
        for key, value in progress(pairs, "load", "keys", total=len(pairs), disabled=args.no_progress):
            batch.put(key, value)
            if len(batch) >= LOAD_BATCH:
                db.write(batch)
                batch = WriteBatch()
        db.write(batch, sync=True)
    return done(args, out, {"loaded": len(pairs)}, f"loaded {len(pairs)} pairs into {args.db}")


class _nullcontext:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def cmd_dump(args, out: Output) -> int:
    codec = _load_codec(args)
    with open_db(args, read_only=True) as db:
        target = None if args.file == "-" else _create_output(args.file)
        try:
            write = out.line if target is None else (lambda data: target.write(data + b"\n"))
            n = 0
            for key, value in progress(db.items(), "dump", "keys", disabled=args.no_progress):
                write(_pair_line(args.output_format, codec, key, value))
                n += 1
        finally:
            if target is not None:
                target.close()
    if target is not None:
        return done(args, out, {"dumped": n}, f"dumped {n} pairs to {args.file}")
    return EXIT_OK


def _create_output(path: str):
    try:
        return open(path, "xb")
    except FileExistsError:
        raise UsageError(f"{path} exists: dump never overwrites a file") from None
    except OSError as e:
        raise UsageError(f"cannot create {path}: {e.strerror}") from None


# --------------------------------------------------------------------------- figures


def cmd_stats(args, out: Output) -> int:
    with open_db(args, read_only=True) as db:
        if args.json:
            out.json(db.stats())
        else:
            out.line(db.property("antkv.stats") or "")
    return EXIT_OK


def cmd_get_property(args, out: Output) -> int:
    with open_db(args, read_only=True) as db:
        value = db.property(args.name)
    if value is None:
        from ..db.stats import PROPERTY_NAMES, closest_property

        close = closest_property(args.name)
        hint = f"did you mean {close!r}? " if close else ""
        if args.json:
            out.json({"property": args.name, "value": None, "did_you_mean": close, "known": list(PROPERTY_NAMES)})
        sys.stderr.write(f"antkv: no property {args.name!r}; {hint}the properties: {', '.join(PROPERTY_NAMES)} "
                         f"(N: a level; rocksdb.NAME is antkv.NAME)\n")
        return EXIT_NOT_FOUND
    return done(args, out, {"property": args.name, "value": value}, value)


def cmd_list_files(args, out: Output) -> int:
    """The live files, from the MANIFEST that CURRENT names (read only, no lock)."""
    from ..base.filenames import vlog_file_name, wal_file_name
    from ..manifest.version_set import VersionSet

    with open_db(args, read_only=True):  # refuses a missing or damaged database the usual way
        pass
    vs = VersionSet(fs(), args.db, 64, 1 << 62)
    vs.recover()
    wals = sorted(p[1] for p in map(parse_file_name, fs().listdir(args.db)) if p and p[0] == "log" and p[1] >= vs.log_number)
    doc = {
        "tables": [
            {"level": level, "file": f"{f.number:06d}.sst", "bytes": f.size, "entries": f.num_entries,
             "smallest": f.smallest.hex(), "largest": f.largest.hex(), "seq": [f.smallest_seq, f.largest_seq]}
            for level, f in vs.current.all_files()
        ],
        "vlog_files": [
            {"file": os.path.basename(vlog_file_name(args.db, n)), "bytes": fs().size(vlog_file_name(args.db, n)),
             "sealed": st.sealed, "garbage_bytes": st.garbage}
            for n, st in sorted(vs.vlogs.items())
        ],
        "wals": [{"file": os.path.basename(wal_file_name(args.db, n)), "bytes": fs().size(wal_file_name(args.db, n))} for n in wals],
    }
    if args.json:
        out.json(doc)
        return EXIT_OK
    for t in doc["tables"]:
        out.line(f"L{t['level']} {t['file']} {t['bytes']} B {t['entries']} entries seq {t['seq'][0]}..{t['seq'][1]} "
                 f"keys [{t['smallest']} .. {t['largest']}] (hex)")
    for v in doc["vlog_files"]:
        state = "sealed" if v["sealed"] else "active"
        out.line(f"value log {v['file']} {v['bytes']} B {state}, garbage {v['garbage_bytes']} B")
    for w in doc["wals"]:
        out.line(f"WAL {w['file']} {w['bytes']} B")
    return EXIT_OK


# --------------------------------------------------------------------------- maintenance


def cmd_verify(args, out: Output) -> int:
    with open_db(args, read_only=True) as db, step_bar("verify", "files", args.no_progress) as bar:
        r = db.verify(progress=bar)
        dropped = db.stats()["recovery_dropped"]
    r = dict(r, recovery_would_drop=dropped)
    text = (
        f"{'DAMAGED' if dropped else 'OK'}: {r['tables']} tables ({r['table_entries']} entries), "
        f"{r['vlog_files']} value-log files ({r['vlog_records']} records), "
        f"{r['wal_files']} WALs ({r['wal_records']} records, {r['wal_entries']} entries; "
        f"{r['memtable_entries']} entries in memtables, not yet in tables): every checksum matches"
    )
    if dropped:
        text += "".join(f"\n  recovery would drop: {d}" for d in dropped)
    done(args, out, r, text)
    return EXIT_DAMAGE if dropped else EXIT_OK


def cmd_checkpoint(args, out: Output) -> int:
    with open_db(args) as db, step_bar("checkpoint", "files", args.no_progress) as bar:
        db.checkpoint(args.dir, progress=bar)
    return done(args, out, {"checkpoint": args.dir}, f"checkpoint of {args.db} written to {args.dir}")


def cmd_compact(args, out: Output) -> int:
    codec = arg_codec(args)
    begin = None if args.begin is None else codec.parse(args.begin)
    end = None if args.end is None else codec.parse(args.end)
    if begin is not None and end is not None and begin > end:
        raise UsageError("--from must not be greater than --to (the range is [FROM, TO], as compact_range's)")
    with open_db(args) as db, step_bar("compact", "levels", args.no_progress) as bar:
        db.compact_range(begin, end, progress=bar)
        levels = db.stats()["levels"]
    shape = ", ".join(f"L{lv['level']}: {lv['files']} tables {lv['bytes']} B" for lv in levels if lv["files"])
    return done(args, out, {"levels": levels}, f"compacted {args.db}: {shape or 'no tables'}")


def cmd_gc(args, out: Output) -> int:
    with open_db(args) as db, step_bar("gc", "files", args.no_progress) as bar:
        r = db.gc_value_log(progress=bar)
    return done(args, out, r, "value-log GC: " + ", ".join(f"{k} {v}" for k, v in sorted(r.items())))


def cmd_empty_lost(args, out: Output) -> int:
    with open_db(args) as db:
        r = db.empty_lost()
    return done(args, out, r, f"deleted {r['files']} files ({r['bytes']} bytes) from {args.db}/lost")


def cmd_repair(args, out: Output) -> int:
    from ..repair import repair

    if not fs().is_dir(args.db):
        raise errors.InvalidArgumentError(f"no antkv database at {args.db}: it does not exist")
    report = repair(args.db, options_from(args))
    done(args, out, report.to_dict(), "\n".join(report.lines()))
    return EXIT_DAMAGE if report.lost_anything else EXIT_OK


# --------------------------------------------------------------------------- file dumps


def _file_lines(args, out: Output, lines: Iterable[str]) -> int:
    lines = list(lines)  # a damaged file raises before anything is printed
    if args.json:
        out.json({"file": getattr(args, "file", None) or args.path, "lines": lines})
    else:
        for line in lines:
            out.line(line)
    return EXIT_OK


def cmd_dump_sst(args, out: Output) -> int:
    from ..sst.reader import dump_table

    return _file_lines(args, out, dump_table(fs(), args.file))


def cmd_dump_vlog(args, out: Output) -> int:
    from ..vlog.reader import dump_vlog

    return _file_lines(args, out, dump_vlog(fs(), args.file))


def cmd_dump_wal(args, out: Output) -> int:
    return _file_lines(args, out, dump_wal(fs(), args.file))


def cmd_dump_manifest(args, out: Output) -> int:
    return _file_lines(args, out, dump_manifest(fs(), args.path))
