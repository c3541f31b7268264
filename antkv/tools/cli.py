"""The ``antkv`` command: inspect and operate a database from the shell (also ``python -m antkv``).

Commands (``antkv COMMAND --help`` describes each)::

    antkv get DB KEY                      print the value of KEY
    antkv put DB KEY VALUE                set KEY to VALUE
    antkv scan DB [--start K] [--stop K] [--prefix P] [--reverse] [--limit N]
    antkv stats DB [--json]               the figures of db.stats()
    antkv verify DB                       read every file, check every checksum
    antkv checkpoint DB DIR               write an openable copy of DB to DIR
    antkv compact DB                      compact the whole key range to the bottom level
    antkv dump-sst FILE | dump-vlog FILE | dump-wal FILE | dump-manifest DB|FILE

How keys and values are written and printed (``get``, ``put``, ``scan``):

* default (text): an argument is taken as the exact bytes the shell passed (UTF-8 for typical
  text; ``os.fsencode``); ``get`` prints the value's bytes exactly, then a newline; ``scan``
  prints ``KEY<TAB>VALUE<NEWLINE>`` with raw bytes -- ambiguous when keys or values contain a
  tab or a newline: use ``--escape`` or ``--hex`` to be exact;
* ``--hex``: arguments and output in hexadecimal (``6b6579``; an ``0x`` prefix is accepted
  on input, as RocksDB's ``ldb --hex`` prints it);
* ``--escape``: arguments and output with backslash escapes.  Output keeps printable ASCII
  except ``\\`` as is and writes ``\\\\``, ``\\t``, ``\\n``, ``\\r`` and ``\\xNN`` for every other
  byte; input accepts those same escapes (and ``\\0``).  Every byte string round-trips.

The ``dump-*`` commands print keys and values as Python bytes literals (``b'k\\x00'``), the
format of :func:`antkv.sst.reader.dump_table` and :func:`antkv.vlog.reader.dump_vlog`.

Exit status: 0 success; 1 an :class:`antkv.Error` (one line on stderr, e.g. a
``CorruptionError`` naming file and offset); 2 a usage error; 3 ``get`` of a missing key.

Opening: every command that opens ``DB`` first checks that ``DB/CURRENT`` exists and opens with
``create_if_missing=False``, so no command creates a database, except ``put
--create-if-missing``.  Opening is not read-only: recovery flushes the WAL into an L0 table and
starts a new MANIFEST, WAL and value-log file (docs/impl.md).  Flush and compaction run inline
(``max_background_jobs=0``).  ``-o NAME=VALUE`` passes any :class:`antkv.Options` field (e.g.
``-o num_levels=10`` for a database created with more levels than the default).
"""

from __future__ import annotations

import argparse
import binascii
import json
import os
import sys
from typing import Callable, Iterable, Sequence

from .. import errors
from ..base.dbformat import DELETION, RANGE_DELETION, VALUE, VALUE_POINTER
from ..base.filenames import current_file_name
from ..manifest.version_edit import VersionEdit
from ..record.batch import decode_batch
from ..record.log_format import LogReader

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3

_PRINTABLE = frozenset(range(0x20, 0x7F)) - {ord("\\")}
_ESCAPE_OUT = {ord("\\"): "\\\\", ord("\t"): "\\t", ord("\n"): "\\n", ord("\r"): "\\r"}
_ESCAPE_IN = {"\\": 0x5C, "t": 0x09, "n": 0x0A, "r": 0x0D, "0": 0x00}


class UsageError(Exception):
    """Bad command-line input that argparse cannot see (e.g. a malformed hex string)."""


# --------------------------------------------------------------------------- byte codecs


def escape(data: bytes) -> str:
    """``data`` with backslash escapes: printable ASCII (but ``\\``) as is, ``\\xNN`` otherwise."""
    out = []
    for b in data:
        if b in _PRINTABLE:
            out.append(chr(b))
        else:
            out.append(_ESCAPE_OUT.get(b) or f"\\x{b:02x}")
    return "".join(out)


def unescape(text: str) -> bytes:
    """The inverse of :func:`escape`; also accepts ``\\0``.  Non-ASCII characters are UTF-8."""
    out = bytearray()
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c != "\\":
            out += os.fsencode(c)
            i += 1
            continue
        if i + 1 >= n:
            raise UsageError(f"trailing backslash in {text!r}")
        e = text[i + 1]
        if e == "x":
            digits = text[i + 2 : i + 4]
            if len(digits) != 2 or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise UsageError(f"bad \\x escape at position {i} of {text!r} (two hex digits needed)")
            out.append(int(digits, 16))
            i += 4
        elif e in _ESCAPE_IN:
            out.append(_ESCAPE_IN[e])
            i += 2
        else:
            raise UsageError(f"unknown escape \\{e} in {text!r} (use \\\\, \\t, \\n, \\r, \\0 or \\xNN)")
    return bytes(out)


def parse_hex(text: str) -> bytes:
    s = text[2:] if text[:2] in ("0x", "0X") else text
    try:
        return binascii.unhexlify(s)
    except (binascii.Error, ValueError):
        raise UsageError(f"not a hex string: {text!r}") from None


class Codec:
    """How one command's keys and values are read from arguments and printed."""

    def __init__(self, mode: str):
        self.mode = mode  # "text", "hex" or "escape"

    def parse(self, arg: str) -> bytes:
        if self.mode == "hex":
            return parse_hex(arg)
        if self.mode == "escape":
            return unescape(arg)
        return os.fsencode(arg)

    def show(self, data: bytes) -> bytes:
        if self.mode == "hex":
            return data.hex().encode()
        if self.mode == "escape":
            return escape(data).encode()
        return data


# --------------------------------------------------------------------------- output


class Output:
    """Writes bytes to a binary stream (stdout's buffer); text is encoded as UTF-8."""

    def __init__(self, stream):
        self.stream = stream

    def raw(self, data: bytes) -> None:
        self.stream.write(data)

    def line(self, text: str | bytes = b"") -> None:
        if isinstance(text, str):
            text = text.encode("utf-8", "backslashreplace")
        self.stream.write(text + b"\n")


def _binary(stream):
    """The binary stream under a text stream (flushing the text layer first)."""
    buffer = getattr(stream, "buffer", None)
    if buffer is None:
        return stream
    stream.flush()
    return buffer


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


def _options(args, create_if_missing: bool, read_only: bool = False):
    from ..options import Options

    fields = {"max_background_jobs": 0, "read_only": read_only}
    for item in args.option or []:
        name, eq, value = item.partition("=")
        if not eq or not name:
            raise UsageError(f"-o expects NAME=VALUE, got {item!r}")
        if name in ("file_system", "block_cache", "write_buffer_manager"):
            raise UsageError(f"-o {name} cannot be set from the command line")
        fields[name] = _parse_option_value(value)
    fields["create_if_missing"] = create_if_missing
    try:
        return Options(**fields)
    except TypeError as e:  # an unknown field name
        raise UsageError(f"-o: {e}") from None


def _open(args, create_if_missing: bool = False, read_only: bool = False):
    from ..db import open as open_db

    path = args.db
    opts = _options(args, create_if_missing, read_only)
    fs = _fs()
    if not create_if_missing and not fs.exists(current_file_name(path)):
        # checked before opening: the engine would leave a LOCK file behind in the directory
        what = "does not exist" if not fs.exists(path) else "has no CURRENT file"
        raise errors.InvalidArgumentError(f"no antkv database at {path}: it {what}")
    return open_db(path, opts)


def _fs():
    from ..fs import default_file_system

    return default_file_system()


# --------------------------------------------------------------------------- commands


def cmd_get(args, out: Output) -> int:
    codec = Codec(args.format)
    key = codec.parse(args.key)
    with _open(args, read_only=True) as db:
        value = db.get(key)
    if value is None:
        sys.stderr.write(f"antkv: key not found: {codec.show(key).decode('utf-8', 'backslashreplace')}\n")
        return EXIT_NOT_FOUND
    out.line(codec.show(value))
    return EXIT_OK


def cmd_put(args, out: Output) -> int:
    codec = Codec(args.format)
    key, value = codec.parse(args.key), codec.parse(args.value)
    with _open(args, create_if_missing=args.create_if_missing) as db:
        db.put(key, value, sync=True)
    return EXIT_OK


def cmd_scan(args, out: Output) -> int:
    codec = Codec(args.format)
    start = None if args.start is None else codec.parse(args.start)
    stop = None if args.stop is None else codec.parse(args.stop)
    prefix = None if args.prefix is None else codec.parse(args.prefix)
    if args.limit is not None and args.limit < 0:
        raise UsageError("--limit must be >= 0")
    with _open(args, read_only=True) as db:
        n = 0
        for key, value in db.items(start, stop, prefix=prefix, reverse=args.reverse):
            if args.limit is not None and n >= args.limit:
                break
            if args.keys_only:
                out.line(codec.show(key))
            else:
                out.line(codec.show(key) + b"\t" + codec.show(value))
            n += 1
    return EXIT_OK


def cmd_stats(args, out: Output) -> int:
    with _open(args, read_only=True) as db:
        if args.json:
            out.line(json.dumps(db.stats(), indent=2, sort_keys=True, default=str))
        else:
            out.line(db.property("antkv.stats") or "")
    return EXIT_OK


def cmd_verify(args, out: Output) -> int:
    with _open(args, read_only=True) as db:
        r = db.verify()
    out.line(
        f"OK: {r['tables']} tables ({r['table_entries']} entries), "
        f"{r['vlog_files']} value-log files ({r['vlog_records']} records): every checksum matches"
    )
    return EXIT_OK


def cmd_checkpoint(args, out: Output) -> int:
    with _open(args) as db:
        db.checkpoint(args.dir)
    out.line(f"checkpoint of {args.db} written to {args.dir}")
    return EXIT_OK


def cmd_compact(args, out: Output) -> int:
    with _open(args) as db:
        db.compact_range()
        levels = db.stats()["levels"]
    shape = ", ".join(f"L{lv['level']}: {lv['files']} tables {lv['bytes']} B" for lv in levels if lv["files"])
    out.line(f"compacted {args.db}: {shape or 'no tables'}")
    return EXIT_OK


def cmd_dump_sst(args, out: Output) -> int:
    from ..sst.reader import dump_table

    _emit_lines(out, dump_table(_fs(), args.file))
    return EXIT_OK


def cmd_dump_vlog(args, out: Output) -> int:
    from ..vlog.reader import dump_vlog

    _emit_lines(out, dump_vlog(_fs(), args.file))
    return EXIT_OK


def cmd_dump_wal(args, out: Output) -> int:
    _emit_lines(out, dump_wal(_fs(), args.file))
    return EXIT_OK


def cmd_dump_manifest(args, out: Output) -> int:
    _emit_lines(out, dump_manifest(_fs(), args.path))
    return EXIT_OK


def _emit_lines(out: Output, lines: Iterable[str]) -> None:
    for line in lines:
        out.line(line)


# --------------------------------------------------------------------------- dump printers


def _show(data: bytes, limit: int = 64) -> str:
    if len(data) <= limit:
        return repr(data)
    return f"{data[:limit]!r}... ({len(data)} B)"


def dump_wal(fs, path: str) -> Iterable[str]:
    """Human-readable lines for every record of a WAL file (``antkv dump-wal``).

    The file is read with :class:`antkv.record.log_format.LogReader` (framing) and each payload
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
    seqs = f", sequence {first_seq}..{last_seq}" if first_seq is not None else ""
    yield f"{records} record{'s' if records != 1 else ''}, {ops_total} op{'s' if ops_total != 1 else ''}{seqs}"
    if reader.torn_tail_offset is not None:
        dropped = len(data) - reader.torn_tail_offset
        yield f"torn tail at offset {reader.torn_tail_offset} ({dropped} B a recovery would drop)"


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


# --------------------------------------------------------------------------- argument parsing


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="antkv",
        description="Inspect and operate an antkv database.",
        epilog="Exit status: 0 ok, 1 antkv error (one line on stderr), 2 usage error, 3 get: key not found. "
        "Keys and values are text by default; --hex and --escape give exact bytes (see 'antkv get --help').",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    opening = argparse.ArgumentParser(add_help=False)
    opening.add_argument(
        "-o", "--option", action="append", metavar="NAME=VALUE",
        help="an antkv.Options field for opening DB (repeatable), e.g. -o num_levels=10",
    )
    coded = argparse.ArgumentParser(add_help=False)
    fmt = coded.add_mutually_exclusive_group()
    fmt.add_argument(
        "--hex", dest="format", action="store_const", const="hex",
        help="keys and values in hexadecimal (input may start with 0x)",
    )
    fmt.add_argument(
        "--escape", dest="format", action="store_const", const="escape",
        help="keys and values with backslash escapes (\\\\ \\t \\n \\r \\0 \\xNN)",
    )
    coded.set_defaults(format="text")

    def add(name: str, fn: Callable, help: str, parents=()) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help, parents=list(parents))
        p.set_defaults(func=fn)
        return p

    p = add("get", cmd_get, "print the value of KEY (exit 3 if absent)", (opening, coded))
    p.add_argument("db", metavar="DB")
    p.add_argument("key", metavar="KEY")

    p = add("put", cmd_put, "set KEY to VALUE (synced)", (opening, coded))
    p.add_argument("db", metavar="DB")
    p.add_argument("key", metavar="KEY")
    p.add_argument("value", metavar="VALUE")
    p.add_argument("--create-if-missing", action="store_true", help="create DB if it does not exist")

    p = add("scan", cmd_scan, "print KEY<TAB>VALUE lines in key order", (opening, coded))
    p.add_argument("db", metavar="DB")
    p.add_argument("--start", help="first key (inclusive)")
    p.add_argument("--stop", help="end key (exclusive)")
    p.add_argument("--prefix", help="only keys starting with PREFIX")
    p.add_argument("--reverse", action="store_true", help="descending key order")
    p.add_argument("--limit", type=int, help="print at most LIMIT entries")
    p.add_argument("--keys-only", action="store_true", help="print keys only")

    p = add("stats", cmd_stats, "print the database's figures (db.stats())", (opening,))
    p.add_argument("db", metavar="DB")
    p.add_argument("--json", action="store_true", help="every figure, as JSON")

    p = add("verify", cmd_verify, "read every table and value-log file, check every checksum", (opening,))
    p.add_argument("db", metavar="DB")

    p = add("checkpoint", cmd_checkpoint, "write a consistent, openable copy of DB to DIR", (opening,))
    p.add_argument("db", metavar="DB")
    p.add_argument("dir", metavar="DIR", help="must not exist")

    p = add("compact", cmd_compact, "compact every table down to the bottom level", (opening,))
    p.add_argument("db", metavar="DB")

    p = add("dump-sst", cmd_dump_sst, "print every block and entry of a table file")
    p.add_argument("file", metavar="FILE")
    p = add("dump-vlog", cmd_dump_vlog, "print every record of a value-log file")
    p.add_argument("file", metavar="FILE")
    p = add("dump-wal", cmd_dump_wal, "print every write batch of a WAL file")
    p.add_argument("file", metavar="FILE")
    p = add("dump-manifest", cmd_dump_manifest, "print every version edit of a MANIFEST, then the live state")
    p.add_argument("path", metavar="DB|FILE", help="a database directory (uses CURRENT) or a MANIFEST file")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse: --help (0) or a usage error (2), already printed
        return e.code if isinstance(e.code, int) else EXIT_USAGE
    out = Output(_binary(sys.stdout))
    try:
        code = args.func(args, out)
        out.stream.flush()
        return code
    except UsageError as e:
        sys.stderr.write(f"antkv {args.command}: error: {e} (see 'antkv {args.command} --help')\n")
        return EXIT_USAGE
    except errors.Error as e:
        sys.stderr.write(f"antkv {args.command}: {type(e).__name__}: {e}\n")
        return EXIT_ERROR
    except BrokenPipeError:
        # the reader went away (``antkv scan DB | head``): not an error of ours
        _silence_stdout()
        return EXIT_OK
    except KeyboardInterrupt:
        sys.stderr.write("antkv: interrupted\n")
        return 130


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not fail again."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


if __name__ == "__main__":  # pragma: no cover - python -m antkv goes through __main__.py
    sys.exit(main())
