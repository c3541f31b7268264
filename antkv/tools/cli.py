"""The ``antkv`` command: inspect and operate a database from the shell (also ``python -m antkv``).

Commands (``antkv COMMAND --help`` describes each; docs/operations.md is the operator's guide)::

    antkv get DB KEY                       print the value of KEY
    antkv put DB KEY [VALUE | --value-file FILE|-]   set KEY (the value's bytes exactly)
    antkv delete DB KEY                    remove KEY
    antkv delete-range DB BEGIN END        remove every key in [BEGIN, END)
    antkv scan DB [--start K] [--stop K] [--prefix P] [--reverse] [--limit N] [--keys-only]
    antkv load DB [FILE|-] [--input-format tsv|json]   write KEY<TAB>VALUE (or JSON) lines
    antkv dump DB [FILE|-] [--output-format tsv|json]  the reverse of load
    antkv stats DB                         the figures of db.stats()
    antkv get-property DB NAME             one property (antkv.stats, antkv.num-files-at-level0, ...)
    antkv list-files DB                    the live tables, value-log files and WALs
    antkv verify DB                        read every file, check every checksum
    antkv checkpoint DB DIR                write an openable copy of DB to DIR
    antkv compact DB [--from K] [--to K]   compact a key range (default: all) to the bottom level
    antkv gc DB                            run value-log garbage collection now
    antkv repair DB                        rebuild DB from what verifies; report what was lost
    antkv dump-sst FILE | dump-vlog FILE | dump-wal FILE | dump-manifest DB|FILE
    antkv idump DB | approxsize DB | ingest DB FILE... | write-sst FILE [INPUT] | dump-sst FILE --from K --to K
                                           what ldb and sst_dump do (ldb_commands.py)
    antkv state-info LOCATION | state-show LOCATION OP | state-export LOCATION OP DIR
    antkv state-verify LOCATION | state-report LOCATION OP
                                           a Spark pipeline's checkpoint location (state_commands.py)
    antkv --version

Every command takes ``--json`` (one JSON document on stdout; ``scan`` prints JSON lines).
Keys and values (``get``, ``put``, ``delete``, ``delete-range``, ``scan``) are text by default
(the exact bytes the shell passed), ``--hex`` or ``--escape`` for exact bytes
(:mod:`antkv.tools.byte_encoding`); ``load`` and ``dump`` use ``--escape`` unless ``--hex`` is given.

Exit status, for every command: 0 success; 1 an :class:`antkv.Error` (one line on stderr,
e.g. a ``CorruptionError`` naming file and offset; ``state-verify``: an object missing or
damaged); 2 a usage error; 3 not found (``get`` of a missing key, ``get-property`` of an
unknown name, with the closest known one); 4 damage found and tolerated (``verify``: recovery
would drop a torn WAL or value-log tail; ``repair``: something was lost); 130 interrupted.

Opening: a command that only reads (``get``, ``scan``, ``dump``, ``stats``, ``get-property``,
``list-files``, ``verify``, ``idump``, ``approxsize``) opens read-only: it takes no lock, writes and deletes nothing,
and works beside a live writer.  No command creates a database except ``put`` and ``load``
with ``--create-if-missing``.  Writing commands run flushes and compactions in the command
itself (``max_background_jobs=0``), so a session leaves no work behind.  ``-o NAME=VALUE``
passes any :class:`antkv.Options` field (e.g. ``-o num_levels=10``).
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from typing import Callable, Sequence

from .. import errors
from . import commands as c
from .byte_encoding import UsageError, escape, unescape  # noqa: F401 - the names tests and users import
from .ldb_commands import add_ldb_commands
from .state_commands import add_state_commands

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_NOT_FOUND, EXIT_DAMAGE = c.EXIT_OK, c.EXIT_ERROR, c.EXIT_USAGE, c.EXIT_NOT_FOUND, c.EXIT_DAMAGE


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="antkv",
        description="Inspect and operate an antkv database.",
        epilog="Exit status: 0 ok, 1 antkv error (one line on stderr), 2 usage error, 3 not found, "
        "4 damage found (verify, repair). Keys and values are text by default; --hex and --escape give "
        "exact bytes (see 'antkv get --help').",
    )
    parser.add_argument("--version", action="version", version=_version_line(),
                        help="print antkv's version (and Python's) and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print the result as JSON")
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
    quiet = argparse.ArgumentParser(add_help=False)
    quiet.add_argument("--no-progress", action="store_true", help="no progress bar, even on a terminal")

    def add(name: str, fn: Callable, help: str, *parents, db: bool = True) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help, parents=[common, *parents])
        p.set_defaults(func=fn)
        if db:
            p.add_argument("db", metavar="DB")
        return p

    p = add("get", c.cmd_get, "print the value of KEY (exit 3 if absent)", opening, coded)
    p.add_argument("key", metavar="KEY")

    p = add("put", c.cmd_put, "set KEY to VALUE (synced)", opening, coded)
    p.add_argument("key", metavar="KEY")
    p.add_argument("value", metavar="VALUE", nargs="?")
    p.add_argument("--value-file", metavar="FILE", help="take the value's bytes from FILE ('-': stdin), exactly")
    p.add_argument("--create-if-missing", action="store_true", help="create DB if it does not exist")

    p = add("delete", c.cmd_delete, "remove KEY (synced; no error if absent)", opening, coded)
    p.add_argument("key", metavar="KEY")

    p = add("delete-range", c.cmd_delete_range, "remove every key in [BEGIN, END) (synced)", opening, coded)
    p.add_argument("begin", metavar="BEGIN")
    p.add_argument("end", metavar="END")

    p = add("scan", c.cmd_scan, "print KEY<TAB>VALUE lines in key order", opening, coded)
    p.add_argument("--start", help="first key (inclusive)")
    p.add_argument("--stop", help="end key (exclusive)")
    p.add_argument("--prefix", help="only keys starting with PREFIX")
    p.add_argument("--reverse", action="store_true", help="descending key order")
    p.add_argument("--limit", type=int, help="print at most LIMIT entries")
    p.add_argument("--keys-only", action="store_true", help="print keys only")

    p = add("load", c.cmd_load, "write the KEY<TAB>VALUE (or JSON) lines of FILE or stdin; all lines are "
            "checked before anything is written", opening, coded, quiet)
    p.add_argument("file", metavar="FILE", nargs="?", default="-", help="'-' (default): stdin")
    p.add_argument("--input-format", choices=("tsv", "json"), default="tsv",
                   help='tsv: KEY<TAB>VALUE; json: {"key": K, "value": V} (escaped, or hex with --hex)')
    p.add_argument("--create-if-missing", action="store_true", help="create DB if it does not exist")

    p = add("dump", c.cmd_dump, "print every pair in the format load reads", opening, coded, quiet)
    p.add_argument("file", metavar="FILE", nargs="?", default="-", help="'-' (default): stdout; never overwritten")
    p.add_argument("--output-format", choices=("tsv", "json"), default="tsv")

    add("stats", c.cmd_stats, "print the database's figures (db.stats())", opening)
    p = add("get-property", c.cmd_get_property, "print one property (exit 3 if unknown)", opening)
    p.add_argument("name", metavar="NAME", help="e.g. antkv.stats, antkv.num-files-at-level0")
    add("list-files", c.cmd_list_files, "list the live tables, value-log files and WALs", opening)
    add("verify", c.cmd_verify, "read every table and value-log file, check every checksum (exit 4: a "
        "torn tail recovery would drop)", opening, quiet)
    p = add("checkpoint", c.cmd_checkpoint, "write a consistent, openable copy of DB to DIR", opening, quiet)
    p.add_argument("dir", metavar="DIR", help="must not exist")
    p = add("compact", c.cmd_compact, "compact the tables holding keys in [FROM, TO] (default: every table) "
            "down to the bottom level", opening, coded, quiet)
    p.add_argument("--from", dest="begin", metavar="K", help="first key (inclusive)")
    p.add_argument("--to", dest="end", metavar="K", help="last key (inclusive, as compact_range's)")
    add("gc", c.cmd_gc, "run value-log garbage collection now", opening, quiet)
    add("empty-lost", c.cmd_empty_lost, "delete the files the database moved to lost/ (it could not account for them)",
        opening)
    add("repair", c.cmd_repair, "rebuild DB from the files that verify; damaged files go to DB/lost/ "
        "(exit 4 if anything was lost)", opening)

    p = add("dump-vlog", c.cmd_dump_vlog, "print every record of a value-log file", db=False)
    p.add_argument("file", metavar="FILE")
    p = add("dump-wal", c.cmd_dump_wal, "print every write batch of a WAL file", db=False)
    p.add_argument("file", metavar="FILE")
    p = add("dump-manifest", c.cmd_dump_manifest, "print every version edit of a MANIFEST, then the live state", db=False)
    p.add_argument("path", metavar="DB|FILE", help="a database directory (uses CURRENT) or a MANIFEST file")
    add_ldb_commands(add, opening, coded, quiet)
    add_state_commands(add, quiet)
    return parser


def _version_line() -> str:
    import platform

    from .. import __version__

    return f"antkv {__version__} (Python {platform.python_version()})"


@functools.lru_cache(maxsize=1)
def _parser() -> argparse.ArgumentParser:
    """The parser, built once per process: parsing leaves it as it was, and building it (some
    250 arguments, each message looked up through ``gettext``) costs more than most commands
    when ``main`` is called in a loop."""
    return build_parser()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse: --help (0) or a usage error (2), already printed
        return e.code if isinstance(e.code, int) else EXIT_USAGE
    out = c.Output(_binary(sys.stdout))
    try:
        code = args.func(args, out)
        out.stream.flush()
        return code
    except UsageError as e:
        sys.stderr.write(f"antkv {args.command}: error: {e} (see 'antkv {args.command} --help')\n")
        return EXIT_USAGE
    except errors.Error as e:
        if args.json:
            out.json({"error": type(e).__name__, "message": str(e)})
            out.stream.flush()
        sys.stderr.write(f"antkv {args.command}: {type(e).__name__}: {e}\n")
        return EXIT_ERROR
    except BrokenPipeError:
        # the reader went away (``antkv scan DB | head``): not an error of ours
        _silence_stdout()
        return EXIT_OK
    except KeyboardInterrupt:
        sys.stderr.write("antkv: interrupted\n")
        return 130


def _binary(stream):
    """The binary stream under a text stream (flushing the text layer first)."""
    buffer = getattr(stream, "buffer", None)
    if buffer is None:
        return stream
    stream.flush()
    return buffer


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
