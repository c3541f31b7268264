"""Small checksummed JSON files of a database directory (``OPTIONS``, ``STATS``).

Format, two lines of ASCII::

    {"kind": "OPTIONS", "version": 1, "body": {...}}
    xxh3_64 0123456789abcdef

The second line is the xxh3-64 of the first line's bytes (without its newline), so a damaged or
torn file is always detected.  A file is replaced atomically: written to ``NAME.tmp``, synced,
renamed over ``NAME``, and the directory synced.
"""

from __future__ import annotations

import json
import os

import xxhash

from ..errors import CorruptionError
from ..errors import IOError as AntIOError

VERSION = 1


def write_json_file(fs, path: str, kind: str, body: dict) -> None:
    """Replace ``path`` atomically with ``body`` (JSON-serialisable)."""
    first = json.dumps({"kind": kind, "version": VERSION, "body": body}, sort_keys=True, separators=(",", ":"))
    data = f"{first}\nxxh3_64 {xxhash.xxh3_64_hexdigest(first.encode())}\n".encode()
    tmp = path + ".tmp"
    fs.write_all(tmp, data, sync=True)
    fs.rename(tmp, path)
    fs.sync_dir(os.path.dirname(path) or ".")


def read_json_file(fs, path: str, kind: str) -> dict | None:
    """The body of ``path``; None when the file does not exist; CorruptionError when it is
    damaged, unreadable, of another kind or of an unknown version."""
    if not fs.exists(path):
        return None
    try:
        raw = fs.read_all(path)
    except AntIOError as e:  # unreadable (e.g. mode 000): as good as damaged
        raise CorruptionError(f"{kind} file cannot be read ({e})", path, 0) from None
    lines = raw.split(b"\n")
    if len(lines) != 3 or lines[2] != b"" or not lines[1].startswith(b"xxh3_64 "):
        raise CorruptionError(f"{kind} file is not two lines ending in a checksum", path, 0)
    if xxhash.xxh3_64_hexdigest(lines[0]).encode() != lines[1][8:]:
        raise CorruptionError(f"{kind} file checksum mismatch", path, 0)
    try:
        doc = json.loads(lines[0])
    except ValueError:
        raise CorruptionError(f"{kind} file is not JSON", path, 0) from None
    if not isinstance(doc, dict) or doc.get("kind") != kind or not isinstance(doc.get("body"), dict):
        raise CorruptionError(f"not a {kind} file", path, 0)
    if doc.get("version") != VERSION:
        raise CorruptionError(f"{kind} file version {doc.get('version')!r} is not {VERSION} (written by a newer antkv?)", path, 0)
    return doc["body"]
