"""The ``antkv state-*`` commands: a Spark pipeline's checkpoint location, read from the shell.

A location holds objects, not a database directory (:mod:`antkv.spark.tools.state_reader`), so these
commands take ``LOCATION`` (a path or any ``pyarrow.fs`` URI) and an operator::

    antkv state-info LOCATION [--operator OP] [--version V]    versions, partitions, keys, bytes
    antkv state-show LOCATION OPERATOR [--version V] [--limit N]   the decoded state, per key
    antkv state-export LOCATION OPERATOR DIR [--version V]     a version as an antkv database
    antkv state-verify LOCATION [--operator OP] [--version V]  every object a version names verifies
    antkv state-report LOCATION OPERATOR [--metrics FILE] [--output PNG]   the batches over time

They need the ``spark`` extra (``pyarrow``) but no Spark; they never write to the location.
"""

from __future__ import annotations

import json
import os
import sys

from .. import errors
from .byte_encoding import UsageError
from .commands import EXIT_ERROR, EXIT_OK, Output, done
from .progress_bars import step_bar


def existing_location(uri: str):
    """The :class:`antkv.spark.Location` at ``uri``, refused with a clear error when nothing is
    there (a missing path reads as a location with no operators, which hides the typo)."""
    import pyarrow.fs as pafs

    from ..spark import Location

    loc = Location(uri)
    try:
        info = loc.fs.get_file_info(loc.root)
    except OSError as e:
        raise errors.IOError(f"cannot reach location {uri}: {e}", e, uri) from e
    if info.type == pafs.FileType.NotFound:
        raise errors.InvalidArgumentError(
            f"no checkpoint location at {uri}: it does not exist (a pipeline creates it at its first commit)")
    if loc.exists("CURRENT"):
        raise errors.InvalidArgumentError(
            f"{uri} is an antkv database, not a pipeline's checkpoint location: try 'antkv stats {uri}'")
    return loc


def cmd_state_info(args, out: Output) -> int:
    from antkv.spark.tools.state_reader import describe_location

    ops = describe_location(existing_location(args.location), args.operator, args.version)
    if args.json:
        out.json(ops)
        return EXIT_OK
    for op in ops:
        v = op["versions"]
        out.line(f"operator {op['operator']} in {op['location']}")
        out.line(f"  published versions: {v[0]}..{v[-1]} ({len(v)} retained); showing version {op['version']}"
                 f" (query {op['query_id']})")
        if op["key_groups"] is not None:
            out.line(f"  key groups: {op['key_groups']}, key columns: {', '.join(op['key'])}")
        out.line(f"  {op['keys']} keys in {len(op['partitions'])} partitions:")
        for p in op["partitions"]:
            out.line(f"    p{p['partition']}: {p['keys']} keys, {p['snapshot_files']} snapshot files "
                     f"({p['snapshot_bytes']} B), {p['changelogs']} changelogs ({p['changelog_bytes']} B)")
    return EXIT_OK


def _plain(value):
    """A decoded state value as JSON can show it (bytes as text where they decode)."""
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return "0x" + value.hex()
    if isinstance(value, dict):
        return [[_plain(k), _plain(v)] for k, v in value.items()]
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def cmd_state_show(args, out: Output) -> int:
    from antkv.spark.tools.state_reader import decoded_state

    state = decoded_state(existing_location(args.location), args.operator, args.version)
    shown = 0
    for name in sorted(state):
        for key, value in sorted(state[name].items()):
            if args.limit is not None and shown >= args.limit:
                return EXIT_OK
            line = {"state": name, "key": _plain(key), "value": _plain(value)}
            out.line(json.dumps(line, default=str) if args.json else
                     f"{name}\t{json.dumps(line['key'], default=str)}\t{json.dumps(line['value'], default=str)}")
            shown += 1
    return EXIT_OK


def cmd_state_export(args, out: Output) -> int:
    from antkv.spark.tools.state_reader import export_state

    with step_bar("export", "keys", args.no_progress) as bar:
        n = export_state(existing_location(args.location), args.operator, args.dir, args.version, progress=bar)
    return done(args, out, {"keys": n, "database": args.dir},
                 f"exported {n} keys of {args.operator} to {args.dir}: read it with 'antkv scan {args.dir} --escape'")


def cmd_state_verify(args, out: Output) -> int:
    from .state_verify import verify_location

    report = verify_location(existing_location(args.location), args.operator, args.version)
    damaged = [op for op in report if op["problems"]]
    if args.json:
        out.json(report)
    for op in [] if args.json else report:
        v = op["versions"]
        span = f"{v[0]}..{v[-1]}" if len(v) > 1 else str(v[0])
        what = (f"{op['manifests']} manifests, {op['objects']} objects ({op['bytes']} B) for versions {span} "
                f"({len(v)} retained)")
        if not op["problems"]:
            out.line(f"OK: operator {op['operator']}: {what}: every object exists and verifies")
        else:
            intact = ", ".join(map(str, op["intact_versions"])) or "none"
            out.line(f"DAMAGED: operator {op['operator']}: {what}: {len(op['problems'])} objects missing or "
                     f"damaged; versions that load: {intact}")
            for p in op["problems"]:
                out.line(f"  {p['object']}: {p['problem']} (breaks versions {', '.join(map(str, p['versions']))})")
        uploads = op["incomplete_uploads"]
        if uploads:
            out.line(f"NOTE: operator {op['operator']}: {len(uploads)} incomplete multipart uploads (left by "
                     "killed writers; they break no version; a batch's cleanup aborts those of published "
                     "versions, the bucket's lifecycle rule the rest):")
            for u in uploads:
                out.line(f"  {u['object']}: started {u['initiated']}")
    if damaged:
        sys.stderr.write(f"antkv state-verify: {args.location}: objects missing or damaged in "
                         f"{', '.join(op['operator'] for op in damaged)}\n")
        return EXIT_ERROR
    return EXIT_OK


def cmd_state_report(args, out: Output) -> int:
    from antkv.spark.tools.state_reader import published_versions
    from antkv.spark.tools.batch_report import draw, read_batches, table_lines

    loc = existing_location(args.location)
    if not published_versions(loc, args.operator):
        raise errors.InvalidArgumentError(f"{loc.uri}: operator {args.operator!r} has no published version")
    metrics = find_metrics(loc.root if loc.fs.type_name == "local" else None, args.operator, args.metrics)
    rows = read_batches(metrics)
    png = None
    if not args.no_png:
        png = args.output or os.path.join(os.path.dirname(os.path.abspath(metrics)), f"{args.operator}-report.png")
        draw(rows, args.operator, png)
    if args.json:
        out.json({"operator": args.operator, "metrics": metrics, "png": png, "batches": rows})
        return EXIT_OK
    out.line(f"operator {args.operator} in {loc.uri}: {len(rows)} batches, from {metrics}")
    for line in table_lines(rows):
        out.line(line)
    out.line("times in seconds along each batch's slowest task (load, process, commit), then publish; "
             "spark: the rest of the batch")
    if png is not None:
        out.line(f"picture: {png}")
    return EXIT_OK


def add_state_commands(add, quiet) -> None:
    """Register the commands with ``add`` (the parser builder of :mod:`antkv.tools.cli`)."""
    p = add("state-info", cmd_state_info, "describe a Spark checkpoint location: operators, versions, "
            "partitions, keys, bytes", db=False)
    p.add_argument("location", metavar="LOCATION", help="a path or pyarrow.fs URI (file://, s3://, ...)")
    p.add_argument("--operator", help="only this operator")
    p.add_argument("--version", type=int, help="this published version (default: the newest)")
    p = add("state-show", cmd_state_show, "print the decoded state of an operator: state, key, value "
            "per line (reads it all: for inspection)", db=False)
    p.add_argument("location", metavar="LOCATION")
    p.add_argument("operator", metavar="OPERATOR")
    p.add_argument("--version", type=int, help="default: the newest published version")
    p.add_argument("--limit", type=int, help="print at most LIMIT lines")
    p = add("state-export", cmd_state_export, "write a published version of an operator, every "
            "partition, into a new antkv database DIR", quiet, db=False)
    p.add_argument("location", metavar="LOCATION")
    p.add_argument("operator", metavar="OPERATOR")
    p.add_argument("dir", metavar="DIR", help="must not exist")
    p.add_argument("--version", type=int, help="default: the newest published version")
    p = add("state-verify", cmd_state_verify, "check that every object each retained version names exists and has "
            "the size and hash its manifest records (read-only; exit 1 if any is missing or damaged)", db=False)
    p.add_argument("location", metavar="LOCATION")
    p.add_argument("--operator", help="only this operator")
    p.add_argument("--version", type=int, help="only this published version (default: every retained one)")
    p = add("state-report", cmd_state_report, "print a pipeline's batches over time (time split, keys, bytes "
            "uploaded and reused, cache hit ratio, rescales) and draw them as a PNG", db=False)
    p.add_argument("location", metavar="LOCATION")
    p.add_argument("operator", metavar="OPERATOR")
    p.add_argument("--metrics", metavar="FILE", help="the pipeline's metrics_path (default: metrics.jsonl in "
                   "LOCATION/OPERATOR, LOCATION or beside LOCATION)")
    p.add_argument("--output", metavar="PNG", help="where to draw (default: OPERATOR-report.png beside the metrics)")
    p.add_argument("--no-png", action="store_true", help="print the table only (no matplotlib needed)")


def find_metrics(location_root: str | None, operator: str, given: str | None) -> str:
    """The metrics file: ``given``, else the first ``metrics.jsonl`` found where a pipeline's is
    kept (:mod:`antkv.spark.tools.batch_report`); a UsageError saying where it looked."""
    from antkv.spark.tools.batch_report import METRICS_FILE

    if given is not None:
        if not os.path.isfile(given):
            raise UsageError(f"--metrics {given}: no such file")
        return given
    places = []
    if location_root is not None:
        places = [os.path.join(location_root, operator, METRICS_FILE), os.path.join(location_root, METRICS_FILE),
                  os.path.join(os.path.dirname(location_root.rstrip("/")), METRICS_FILE)]
        for p in places:
            if os.path.isfile(p):
                return p
    where = f" (looked for {', '.join(places)})" if places else " (the location is not local)"
    raise UsageError(f"no metrics file found{where}: pass --metrics FILE, the pipeline's metrics_path")
