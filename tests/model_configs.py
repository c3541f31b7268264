"""Option sets under which the model, crash and corruption tests run.

They are chosen to make every mechanism fire constantly: tiny memtables (flush every few
writes), tiny blocks and target files (many tables, many levels), L0 trigger 1 (compaction
after every flush), every value in the value log or none, and GC at a hair trigger.
"""

DEFAULT = dict(max_background_jobs=0)

CONFIGS = {
    "memtable-only": dict(max_background_jobs=0, write_buffer_size=1 << 30),
    "tiny-lsm": dict(
        max_background_jobs=0,
        write_buffer_size=2048,
        block_size=64,
        target_file_size_base=1024,
        max_bytes_for_level_base=4096,
        max_bytes_for_level_multiplier=2,
        level0_file_num_compaction_trigger=1,
        num_levels=4,
        max_manifest_file_size=2048,
        enable_blob_files=False,
    ),
    "all-blobs-gc": dict(
        max_background_jobs=0,
        write_buffer_size=4096,
        block_size=128,
        target_file_size_base=2048,
        level0_file_num_compaction_trigger=2,
        min_blob_size=0,
        blob_file_size=4096,
        blob_gc_threshold=0.01,
        compression="zstd",
        blob_compression="zstd",
    ),
    "mid-blobs": dict(
        max_background_jobs=0,
        write_buffer_size=8192,
        block_size=256,
        target_file_size_base=4096,
        level0_file_num_compaction_trigger=2,
        min_blob_size=100,
        blob_file_size=8192,
        blob_gc_threshold=0.3,
        memtable_max_range_deletions=3,
    ),
}
