"""Named extreme antkv option sets and seeded random ones.

Each named set is the BASE (a 64 KiB memtable, so streams of a few thousand operations flush
and compact; ``max_background_jobs=0`` so flush and compaction run inline and a seed replays
exactly) plus the extreme it is named for.  ``random-N`` draws every field from seed N, so
``--option-set random-17`` is as reproducible as a named set.

A block cache is written ``CacheSpec(capacity, num_shard_bits, strict, policy)`` and built only when
the set is used (``antkv.Cache`` may land after this module).  ``file_system`` is never set:
the differential fuzzer runs on the real file system.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

KiB = 1024
MiB = 1024 * KiB


@dataclass(frozen=True)
class CacheSpec:
    capacity: int
    num_shard_bits: int = -1
    strict: bool = False
    policy: str = "lru"


BASE = {"write_buffer_size": 64 * KiB, "max_background_jobs": 0}

# The merge operator of the sets that have one: the built-in append with a "," between
# operands.  The RocksDB side (rocksdict has no merge operator) applies a merge as the read of
# the current value and the write of the appended one (fuzz/oracle.py), the model every merge
# is checked against.  Sets without one skip the merge operations on both sides, so the paths
# a merge operator turns off (the columnar compaction, the flush shortcut) stay covered.
MERGE_OPERATOR = "append:2c"
MERGE_DELIMITER = b","
_MERGE = {"merge_operator": MERGE_OPERATOR}

NAMED: dict[str, dict] = {
    "default": {},
    "merge-append": {**_MERGE},
    "tiny-memtable": {"write_buffer_size": 4 * KiB, "max_write_buffer_number": 1},
    "block-size-1": {"block_size": 1},
    "cache-1-byte": {"block_cache": CacheSpec(1)},
    "one-shard": {"block_cache": CacheSpec(256 * KiB, num_shard_bits=0)},
    "64-shards": {"block_cache": CacheSpec(256 * KiB, num_shard_bits=6)},
    # the clock policy (a database's own cache uses it): lock-free hits under constant eviction
    "clock-tiny": {"block_cache": CacheSpec(16 * KiB, num_shard_bits=0, policy="clock")},
    "clock-strict": {"block_cache": CacheSpec(4 * MiB, num_shard_bits=1, strict=True, policy="clock")},
    # Strict, but large enough for every block a reader pins at once (a block holding one
    # inline value of min_blob_size bytes at most), so no read may fail with MemoryLimitError.
    "strict-cache": {"block_cache": CacheSpec(4 * MiB, num_shard_bits=1, strict=True)},
    # the index and filters charged to the cache and pinned (off by default): over a one-byte
    # cache, a shard starved by them, and a strict cache that must still hold them
    "index-in-cache-1-byte": {"block_cache": CacheSpec(1), "cache_index_and_filter_blocks": True},
    "index-in-clock-tiny": {"block_cache": CacheSpec(16 * KiB, num_shard_bits=0, policy="clock"),
                            "cache_index_and_filter_blocks": True},
    "index-in-strict-cache": {"block_cache": CacheSpec(4 * MiB, num_shard_bits=1, strict=True, policy="clock"),
                              "cache_index_and_filter_blocks": True},
    "blob-all": {"min_blob_size": 0, **_MERGE},
    "blob-100": {"min_blob_size": 100, "blob_file_size": 64 * KiB},
    "blob-never": {"min_blob_size": 1 << 62},
    "blob-off": {"enable_blob_files": False},
    "gc-0.01": {"min_blob_size": 32, "blob_gc_threshold": 0.01, "blob_file_size": 32 * KiB, **_MERGE},
    "gc-1.0": {"min_blob_size": 32, "blob_gc_threshold": 1.0, "blob_file_size": 32 * KiB},
    "l0-trigger-1": {"level0_file_num_compaction_trigger": 1, **_MERGE},
    "tiny-target-file": {
        "target_file_size_base": 1 * KiB,
        "max_bytes_for_level_base": 4 * KiB,
        "max_bytes_for_level_multiplier": 2.0,
        "level0_file_num_compaction_trigger": 2,
    },
    "tiny-manifest": {"max_manifest_file_size": 1},
    "zstd": {"compression": "zstd", "blob_compression": "zstd", "min_blob_size": 200},
    "no-compression": {"compression": None, "blob_compression": None},
    "no-bloom": {"bloom_bits_per_key": 0},
    "two-levels": {"num_levels": 2, "level0_file_num_compaction_trigger": 2, **_MERGE},
    "range-del-limit": {"memtable_max_range_deletions": 1, **_MERGE},
    "background-jobs": {"max_background_jobs": 2, "write_buffer_size": 16 * KiB, **_MERGE},
    # versions no snapshot or iterator sees dropped from the memtable (the RocksDB side keeps
    # its default: RocksDB's in-place update gives up the snapshot reads the fuzzer checks)
    "inplace-update": {"inplace_update_support": True, **_MERGE},
    "inplace-update-blob-100": {"inplace_update_support": True, "min_blob_size": 100, "blob_file_size": 64 * KiB},
}


def random_overrides(seed: int) -> dict:
    """Every tunable drawn from ``seed`` (extremes are likely)."""
    r = random.Random(seed ^ 0x5EED)
    o = {
        "write_buffer_size": r.choice((1 * KiB, 4 * KiB, 32 * KiB, 256 * KiB, 4 * MiB)),
        "max_write_buffer_number": r.choice((1, 2, 4)),
        "block_size": r.choice((1, 64, 1 * KiB, 4 * KiB, 64 * KiB)),
        "bloom_bits_per_key": r.choice((0, 1, 10, 20)),
        "compression": r.choice((None, "zstd")),
        "level0_file_num_compaction_trigger": r.choice((1, 2, 4, 8)),
        "target_file_size_base": r.choice((1 * KiB, 16 * KiB, 1 * MiB)),
        "max_bytes_for_level_base": r.choice((4 * KiB, 64 * KiB, 10 * MiB)),
        "max_bytes_for_level_multiplier": r.choice((2.0, 10.0)),
        "num_levels": r.choice((2, 3, 7)),
        "max_manifest_file_size": r.choice((1, 4 * KiB, 1 << 30)),
        "memtable_max_range_deletions": r.choice((0, 0, 1, 5)),
        "enable_blob_files": r.random() < 0.8,
        "min_blob_size": r.choice((0, 1, 100, 4 * KiB, 1 << 62)),
        "blob_file_size": r.choice((1 * KiB, 64 * KiB, 256 * MiB)),
        "blob_compression": r.choice((None, "zstd")),
        "blob_gc_threshold": r.choice((0.01, 0.25, 0.5, 1.0)),
        "blob_readahead": r.choice((0, 1, 8)),
        "max_background_jobs": 0,
    }
    if r.random() < 0.5:
        strict = r.random() < 0.3
        o["block_cache"] = CacheSpec(
            4 * MiB if strict else r.choice((1, 4 * KiB, 1 * MiB)),
            num_shard_bits=r.choice((-1, 0, 6)),
            strict=strict,
            # drawn apart, so that the other fields of a seed stay what they were
            policy=random.Random(seed ^ 0xC10C).choice(("lru", "clock")),
        )
    if r.random() < 0.5:
        o["merge_operator"] = MERGE_OPERATOR
    # drawn apart too: the index and filters charged to the cache, or held by the tables
    o["cache_index_and_filter_blocks"] = random.Random(seed ^ 0x1DF).random() < 0.5
    o["inplace_update_support"] = random.Random(seed ^ 0x1A9).random() < 0.5
    return o


def overrides(name: str) -> dict:
    """The Options fields of set ``name`` (a NAMED key or ``random-<seed>``)."""
    if name in NAMED:
        return {**BASE, **NAMED[name]}
    if name.startswith("random-") and name[7:].isdigit():
        return random_overrides(int(name[7:]))
    raise KeyError(f"unknown option set {name!r}; named sets: {', '.join(NAMED)}, or random-N")


def build(name: str):
    """``antkv.Options`` of set ``name`` (each call builds its own cache)."""
    import antkv

    fields = {}
    for k, v in overrides(name).items():
        if isinstance(v, CacheSpec):
            v = antkv.Cache(v.capacity, num_shard_bits=v.num_shard_bits,
                            strict_capacity_limit=v.strict, policy=v.policy)
        fields[k] = v
    return antkv.Options(**fields)


def rotation(i: int) -> str:
    """The i-th option set of a long run: the named sets in turn, every third one random."""
    names = list(NAMED)
    if i % 3 == 2:
        return f"random-{i}"
    return names[(i - i // 3) % len(names)]
