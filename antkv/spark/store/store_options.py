"""``StoreOptions``: how the state stores of a process use memory, local disk and the location."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field, fields

import antkv
from antkv.spark.store.memory import worker_memory

MiB = 1 << 20
_COPY_WRITE_BUFFER = 256 * MiB  # a working copy's memtable limit (engine_options)
# a working copy's data block size (engine_options): state values are often 100 B - 4 KiB, a
# 4 KiB block then holds a handful of entries, and a batch that rewrites its state pays the
# per-block work (index entry, filter, checksum, write) per handful when it flushes and when a
# rebuilt copy reads its key groups whole.  Point reads come from the row cache first.
_COPY_BLOCK_SIZE = 16 * 1024
# where a working copy's snapshot files are read from (StoreOptions.tables): "local" downloads them
# whole into the local cache (the default: for a state that fits the disk a batch then reads
# local files only); "remote" reads them by ranges from the location through the block cache
TABLE_MODES = ("local", "remote")


@dataclass(frozen=True)
class StoreOptions:
    """How state stores use memory, local disk and the location (every field has a default)."""

    memory_bytes: int = 1024 * MiB  # the process's one antkv.shared_memory() budget (memory.py, docs/spark-design.md "Memory")
    cache_dir: str | None = None  # None: $ANTKV_SPARK_CACHE_DIR or <tmp>/antkv-spark-cache
    cache_disk_bytes: int = 8 << 30  # disk budget of the local cache's downloaded files
    max_changelog_chain: int = 8  # changelogs on top of a snapshot before the next snapshot
    snapshot_ratio: float = 2.0  # ... or changelog bytes beyond this multiple of the snapshot's
    max_changelog_bytes: int = 64 * MiB  # a batch changing more commits a snapshot instead
    max_idle_stores: int = 16  # committed working copies kept open per process for reuse
    park_copies: bool = True  # leave each committed copy on the machine for any process (parked_copies.py)
    row_cache_bytes: int | None = None  # the row caches of the process's working copies, together (None: memory_bytes // 4)
    engine: dict = field(default_factory=dict)  # antkv.Options overrides for the stores' databases
    tables: str = "local"  # "local": snapshot files downloaded whole; "remote": read by ranges through the block cache (remote_tables.py)
    location_timeout_s: float = 30.0  # remote mode: a read of a range of the location taking longer fails the task (location.py ObjectRanges)

    def __post_init__(self):
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name == "cache_dir":
                if v is not None and not isinstance(v, (str, os.PathLike)):
                    raise TypeError("cache_dir must be a str path or None")
            elif f.name == "engine":
                if not isinstance(v, dict):
                    raise TypeError("engine must be a dict of antkv.Options fields")
            elif f.name == "tables":
                if not isinstance(v, str):
                    raise TypeError(f"tables must be a str, not {type(v).__name__}")
                if v not in TABLE_MODES:
                    raise antkv.InvalidArgumentError(f"tables must be one of {', '.join(TABLE_MODES)}, got {v!r}")
            elif f.name == "row_cache_bytes" and v is None:
                continue
            elif f.name == "park_copies":
                if not isinstance(v, bool):
                    raise TypeError(f"park_copies must be a bool, not {type(v).__name__}")
            elif f.name == "location_timeout_s":
                if isinstance(v, bool) or not isinstance(v, (int, float)):
                    raise TypeError("location_timeout_s must be a number")
                if not v > 0:
                    raise antkv.InvalidArgumentError(f"location_timeout_s must be > 0, got {v}")
            elif f.name == "snapshot_ratio":
                if isinstance(v, bool) or not isinstance(v, (int, float)):
                    raise TypeError("snapshot_ratio must be a number")
                if not v > 0:
                    raise antkv.InvalidArgumentError(f"snapshot_ratio must be > 0, got {v}")
            else:
                if isinstance(v, bool) or not isinstance(v, int):
                    raise TypeError(f"{f.name} must be an int, not {type(v).__name__}")
                if v < 1:
                    raise antkv.InvalidArgumentError(f"{f.name} must be >= 1, got {v}")

    @property
    def remote_tables(self) -> bool:
        return self.tables == "remote"

    def resolved_cache_dir(self) -> str:
        if self.cache_dir is not None:
            return os.fspath(self.cache_dir)
        return os.environ.get("ANTKV_SPARK_CACHE_DIR") or os.path.join(tempfile.gettempdir(), "antkv-spark-cache")

    def row_cache_budget(self) -> int:
        """The bytes the process's row caches may hold together: ``row_cache_bytes``, or a
        quarter of ``memory_bytes`` -- room for a worker's hot state, leaving the rest of the
        budget to table blocks and memtables."""
        return self.memory_bytes // 4 if self.row_cache_bytes is None else self.row_cache_bytes

    def engine_options(self) -> antkv.Options:
        cache, wbm = worker_memory(self.memory_bytes)
        # a working copy's database is closed only to be thrown away (WorkingCopy.destroy):
        # flushing its memtable first would be wasted work.  The process's write buffer manager
        # bounds every copy's memtables together; a smaller limit per copy would only flush
        # sooner, before a batch's overwrites collapse (docs/spark-design.md, "Memory").  The
        # tables' index and filter blocks are charged to the process's cache, so that its one
        # budget bounds them too, however many copies the process has open.  A batch rewrites
        # the same keys batch after batch and reads no old version but its base's: the memtable
        # keeps one or two versions of a key, not one per batch (inplace_update_support)
        base = dict(block_cache=cache, write_buffer_manager=wbm, background_process=False,
                    avoid_flush_during_shutdown=True, write_buffer_size=_COPY_WRITE_BUFFER,
                    block_size=_COPY_BLOCK_SIZE, cache_index_and_filter_blocks=True,
                    inplace_update_support=True)
        base.update(self.engine)
        return antkv.Options(**base)
