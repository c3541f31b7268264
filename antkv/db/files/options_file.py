"""The ``OPTIONS`` file: the options of a database's last read-write open (RocksDB's
``OPTIONS-NNNNNN``), checked at the next open.

Every read-write open writes the options it ran with (``base/json_file.py`` format: checksummed,
replaced atomically), except the per-open ones (:data:`NOT_PERSISTED`: objects such as the cache and the clock,
and flags such as ``read_only``).  At the next open :func:`check` compares them with the options
given:

* an **incompatible** change is refused with an ``InvalidArgumentError`` naming the option, both
  values and the way out: ``num_levels`` lower than a level that holds tables (the tables would
  be unreachable), which the version check at open also enforces;
* a database written with a merge operator (``Options.merge_operator``, recorded by name) may
  hold merge operands only that operator can read: opening it with another operator or with
  none is refused;
* every other change is **compatible**: it is applied, reported in ``db.stats()
  ["options_changed"]`` and the info LOG, and written to ``OPTIONS``.

A missing ``OPTIONS`` file (a database from an older antkv) is not an error; a damaged one is
reported and rewritten -- the MANIFEST, not ``OPTIONS``, says what the database holds.  The
``antkv`` command opens a database with the options of its ``OPTIONS`` file, then the ``-o``
ones.
"""

from __future__ import annotations

import dataclasses
import logging

from ...base.filenames import OPTIONS, options_file_name
from ...base.json_file import read_json_file, write_json_file
from ...errors import CorruptionError, InvalidArgumentError

log = logging.getLogger("antkv")

NOT_PERSISTED = frozenset(
    {"file_system", "block_cache", "write_buffer_manager", "clock", "create_if_missing", "error_if_exists", "read_only"}
)


def persisted(options) -> dict:
    """The fields of ``options`` the OPTIONS file records."""
    out = {f.name: getattr(options, f.name) for f in dataclasses.fields(options) if f.name not in NOT_PERSISTED}
    op = out.get("merge_operator")
    if op is not None:
        out["merge_operator"] = op.name  # an object: recorded by its name
    return out


def load(fs, dbname: str) -> dict | None:
    """The recorded options (None when there is no usable OPTIONS file)."""
    try:
        return read_json_file(fs, options_file_name(dbname), OPTIONS)
    except CorruptionError as e:
        log.warning("%s; it is rewritten at the next read-write open", e)
        return None


def check(recorded: dict | None, options, used_levels: int) -> list[str]:
    """The compatible changes from ``recorded`` to ``options`` (``"name: old -> new"``);
    InvalidArgumentError for an incompatible one.  ``used_levels`` is one more than the
    deepest level holding a table."""
    if not recorded:
        return []
    now = persisted(options)
    changes = []
    for name, new in sorted(now.items()):
        if name not in recorded or recorded[name] == new:
            continue
        old = recorded[name]
        if name == "num_levels" and isinstance(new, int) and new < used_levels:
            raise InvalidArgumentError(
                f"Options.num_levels={new} is incompatible with this database: it was opened with num_levels={old} "
                f"and has tables at level {used_levels - 1}; open it with num_levels >= {used_levels}"
            )
        if name == "merge_operator" and old is not None:
            raise InvalidArgumentError(
                f"Options.merge_operator={new!r} is incompatible with this database: it was written with the merge "
                f"operator {old!r} and may hold merge operands only that one can read; open it with a merge "
                f"operator named {old!r}"
            )
        changes.append(f"{name}: {old!r} -> {new!r}")
    return changes


def save(fs, dbname: str, options) -> None:
    write_json_file(fs, options_file_name(dbname), OPTIONS, persisted(options))
