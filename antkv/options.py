"""``Options`` and ``WriteOptions``: every tunable of antkv, validated on construction.

Field names follow RocksDB's where the concept is the same.  An unknown field name is a
``TypeError`` (as for any dataclass) naming the closest field; a value of the wrong type or out
of range raises :class:`~antkv.errors.InvalidArgumentError` naming the field.
``docs/tuning.md`` explains every default.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import time
from dataclasses import dataclass, field
from typing import Any

from .errors import InvalidArgumentError

# Options.wal_recovery_mode: RocksDB's WALRecoveryMode names (antkv/db/files/wal_replay.py says what each keeps)
TOLERATE_CORRUPTED_TAIL = "tolerate_corrupted_tail_records"
ABSOLUTE_CONSISTENCY = "absolute_consistency"
POINT_IN_TIME = "point_in_time_recovery"
SKIP_ANY_CORRUPTED = "skip_any_corrupted_records"
WAL_RECOVERY_MODES = (TOLERATE_CORRUPTED_TAIL, ABSOLUTE_CONSISTENCY, POINT_IN_TIME, SKIP_ANY_CORRUPTED)

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB


@dataclass
class Options:
    """Options of one database, fixed when it is opened."""

    # --- opening ---
    create_if_missing: bool = True
    error_if_exists: bool = False
    paranoid_checks: bool = True
    read_only: bool = False  # replay the WAL in memory; write, delete and lock nothing
    wal_recovery_mode: str = TOLERATE_CORRUPTED_TAIL  # one of WAL_RECOVERY_MODES
    # close() drops the writes that skipped the WAL instead of flushing them (RocksDB's
    # option): for a database thrown away after use, whose last writes need not survive
    avoid_flush_during_shutdown: bool = False

    # --- memtables ---
    write_buffer_size: int = 64 * MiB
    max_write_buffer_number: int = 2
    write_buffer_manager: Any = None  # antkv.WriteBufferManager shared by many databases
    memtable_max_range_deletions: int = 0  # 0 = no limit
    # True: an overwrite (a put or delete of a key whose newest memtable version is a value or
    # a deletion) keeps in the memtable only the versions a live snapshot or iterator can see,
    # so a key rewritten again and again holds one or two versions, not one per write
    # (RocksDB's option; unlike RocksDB's, snapshots and iterators stay consistent)
    inplace_update_support: bool = False

    # --- tables ---
    block_cache: Any = None  # antkv.Cache; None = a private 32 MiB cache
    # True: each open table's index and filter are charged to the block cache (high priority,
    # pinned while the table is open), so the cache's capacity bounds them too; False
    # (RocksDB's default): the open table holds them, charged to no cache (docs/memory.md)
    cache_index_and_filter_blocks: bool = False
    block_size: int = 4 * KiB
    bloom_bits_per_key: int = 10  # 0 = no filter
    compression: str | None = None  # "zstd" or None

    # --- leveled compaction ---
    level0_file_num_compaction_trigger: int = 4
    level0_slowdown_writes_trigger: int = 20
    level0_stop_writes_trigger: int = 36
    max_bytes_for_level_base: int = 256 * MiB
    max_bytes_for_level_multiplier: float = 10.0
    target_file_size_base: int = 64 * MiB
    num_levels: int = 7
    max_manifest_file_size: int = 1 * GiB
    max_background_jobs: int = 2  # 0 = flush and compaction run inline, deterministically
    background_process: bool = True  # background jobs run in worker processes (OS file system only)
    max_subcompactions: int = 2  # a big compaction splits into up to this many parallel workers

    # --- value log (key-value separation) ---
    enable_blob_files: bool = True
    min_blob_size: int = 4 * KiB
    blob_file_size: int = 256 * MiB
    blob_compression: str | None = None  # "zstd" or None
    blob_gc_threshold: float = 0.5
    blob_readahead: int = 8  # values prefetched ahead of a scan; 0 = off

    # --- time to live ---
    clock: Any = field(default=time.time, repr=False)  # seconds since the epoch; TTL expiry reads it

    # --- merge (db.merge) ---
    # None, a built-in's name ("append", "append:<hex delimiter>") or an operator object
    # (antkv.AppendOperator or one of the user's: antkv/base/merge_operator.py); kept resolved
    merge_operator: Any = None

    # --- internals a user rarely changes ---
    file_system: Any = field(default=None, repr=False)  # antkv.fs.FileSystem; None = the OS

    def __post_init__(self) -> None:
        _validate(self)

    def replace(self, **changes: Any) -> "Options":
        """A copy with ``changes`` applied (validated)."""
        return dataclasses.replace(self, **changes)


def _refuse_unknown_names(cls) -> None:
    """Make ``cls(**fields)`` refuse an unknown name with a ``TypeError`` that names the closest
    field ("did you mean"), where the dataclass's own message names only the unknown one."""
    generated = cls.__init__
    names = tuple(f.name for f in dataclasses.fields(cls))

    def __init__(self, *args, **fields):
        unknown = [name for name in fields if name not in names]
        if unknown:
            raise TypeError(unknown_name_message(cls.__name__, unknown[0], names))
        generated(self, *args, **fields)

    __init__.__doc__ = generated.__doc__
    __init__.__signature__ = inspect.signature(generated)
    cls.__init__ = __init__


def unknown_name_message(kind: str, name: str, names) -> str:
    """``"<kind> has no field 'x'"`` with the closest known name, if one is close."""
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else f" (its fields: {', '.join(sorted(names))})"
    return f"{kind} has no field {name!r}{hint}"


_refuse_unknown_names(Options)


@dataclass(frozen=True)
class WriteOptions:
    """Per-write options.

    ``disable_wal=True`` skips the write-ahead log, as Flink and Spark configure RocksDB:
    UNSAFE -- such writes are lost on any crash until the memtable holding them is flushed.
    """

    sync: bool = False
    disable_wal: bool = False

    def __post_init__(self) -> None:
        for name in ("sync", "disable_wal"):
            if not isinstance(getattr(self, name), bool):
                raise InvalidArgumentError(f"WriteOptions.{name} must be a bool")


def resolve_write_flags(sync, disable_wal, write_options) -> tuple[bool, bool]:
    """``(sync, disable_wal)`` of a write call: from ``write_options`` when given, else the
    keywords."""
    if write_options is None:
        if not isinstance(sync, bool) or not isinstance(disable_wal, bool):
            raise TypeError("sync and disable_wal must be bools")
        return sync, disable_wal
    if not isinstance(write_options, WriteOptions):
        raise TypeError(f"write_options must be an antkv.WriteOptions, not {type(write_options).__name__}")
    return write_options.sync, write_options.disable_wal


def check_path(path: str) -> None:
    """InvalidArgumentError for a path no file system accepts (empty, or with a NUL byte)."""
    if not path:
        raise InvalidArgumentError("the database path is empty")
    if "\x00" in path:
        raise InvalidArgumentError(f"the database path {path!r} contains a NUL byte")


def resolve_open_args(path, options, overrides: dict) -> tuple[str, "Options"]:
    """``(path, options)`` of an ``open``-like call: ``path`` a str, bytes or PathLike;
    ``options`` an :class:`Options` or None, with keyword ``overrides`` applied."""
    import os

    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike, not {type(path).__name__}")
    path = os.fspath(path)
    check_path(path)
    if options is None:
        options = Options(**overrides)
    elif not isinstance(options, Options):
        raise TypeError(f"options must be an antkv.Options, not {type(options).__name__}")
    elif overrides:
        options = options.replace(**overrides)
    return path, options


_BOOLS = ("create_if_missing", "error_if_exists", "paranoid_checks", "read_only", "enable_blob_files",
          "background_process", "avoid_flush_during_shutdown", "cache_index_and_filter_blocks", "inplace_update_support")
# field -> smallest allowed value
_INTS = {
    "write_buffer_size": 1,
    "max_write_buffer_number": 1,
    "memtable_max_range_deletions": 0,
    "block_size": 1,
    "bloom_bits_per_key": 0,
    "level0_file_num_compaction_trigger": 1,
    "level0_slowdown_writes_trigger": 1,
    "level0_stop_writes_trigger": 1,
    "max_bytes_for_level_base": 1,
    "target_file_size_base": 1,
    "num_levels": 2,
    "max_manifest_file_size": 1,
    "max_background_jobs": 0,
    "max_subcompactions": 1,
    "min_blob_size": 0,
    "blob_file_size": 1,
    "blob_readahead": 0,
}
_COMPRESSIONS = (None, "zstd")


def _fail(name: str, why: str) -> None:
    raise InvalidArgumentError(f"Options.{name}: {why}")


def _validate(o: Options) -> None:
    for name in _BOOLS:
        if not isinstance(getattr(o, name), bool):
            _fail(name, f"must be a bool, not {type(getattr(o, name)).__name__}")
    for name, lowest in _INTS.items():
        v = getattr(o, name)
        if isinstance(v, bool) or not isinstance(v, int):
            _fail(name, f"must be an int, not {type(v).__name__}")
        if v < lowest:
            _fail(name, f"must be >= {lowest}, got {v}")
    if o.num_levels > 64:
        _fail("num_levels", f"must be <= 64, got {o.num_levels}")
    m = o.max_bytes_for_level_multiplier
    if isinstance(m, bool) or not isinstance(m, (int, float)) or not m >= 1:
        _fail("max_bytes_for_level_multiplier", f"must be a number >= 1, got {m!r}")
    g = o.blob_gc_threshold
    if isinstance(g, bool) or not isinstance(g, (int, float)) or not 0.0 < g <= 1.0:
        _fail("blob_gc_threshold", f"must be a number in (0, 1], got {g!r}")
    if o.wal_recovery_mode not in WAL_RECOVERY_MODES:
        _fail("wal_recovery_mode", f"must be one of {', '.join(WAL_RECOVERY_MODES)}; got {o.wal_recovery_mode!r}")
    for name in ("compression", "blob_compression"):
        if getattr(o, name) not in _COMPRESSIONS:
            _fail(name, f"must be 'zstd' or None, got {getattr(o, name)!r}")
    if o.block_cache is not None:
        from .memory.cache import Cache

        if not isinstance(o.block_cache, Cache):
            _fail("block_cache", "must be an antkv.Cache or None")
    if o.write_buffer_manager is not None:
        from .memory.write_buffer_manager import WriteBufferManager

        if not isinstance(o.write_buffer_manager, WriteBufferManager):
            _fail("write_buffer_manager", "must be an antkv.WriteBufferManager or None")
    if not callable(o.clock):
        _fail("clock", "must be a callable returning seconds since the epoch")
    if o.merge_operator is not None:
        from .base.merge_operator import resolve

        o.merge_operator = resolve(o.merge_operator)
    if o.file_system is not None:
        from .fs import FileSystem

        if not isinstance(o.file_system, FileSystem):
            _fail("file_system", "must be an antkv.fs.FileSystem or None")
