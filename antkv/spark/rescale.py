"""Open a partition's state across a change of the number of partitions (a rescale).

After ``N`` partitions published version ``v``, a batch run with ``N'`` partitions builds
version ``v + 1`` from the plan of :func:`antkv.spark.keygroups.plan_rescale`.  New partition
``p`` (a task):

1. opens its **base** -- the old partition overlapping its key-group range most -- as its own
   state (``open_store(..., rescale_from=base)``): the working copy is the base's files, linked
   from the local cache or downloaded, nothing rewritten;
2. **clips** the base's key groups it does not own: at most two ``delete_range`` calls (a head
   and a tail), no key read.  The version it commits records them as range deletions in its
   changelog;
3. **brings in** the rest of its range from each other overlapping old partition: opens that
   partition's version ``v`` and copies the key range of the key groups it takes.

Invariants: every key of version ``v`` whose key group ``p`` owns under ``N'`` is in ``p``'s
state, and no other key is (the plan's invariants, tested with hypothesis, plus the clip);
the key count is exact (the store counts the keys a range deletion removes and the keys a
bring-in adds).  Old partitions' objects stay referenced by the new manifests that name them,
so cleanup keeps them as long as a retained version needs them.

Costs: the base is reused whole (its files are linked, not copied); the clip costs two range
tombstones whatever it drops, and the engine's compaction later drops tables lying wholly
inside them without reading them.  Value-log records of clipped keys become garbage when
compaction drops their pointers: a value-log file holding only clipped key groups becomes 100%
garbage and is deleted whole; a mixed one is relocated by value-log GC once its garbage passes
``blob_gc_threshold`` (a rewrite of its live records).  Bringing in copies the keys taken, key
by key (their bytes are written to the new partition's database and its changelog); the
engine's table ingest path would link the source's files instead.
"""

from __future__ import annotations

from .keygroups import PartitionRescale, clip_to_key_groups
from .store import StateStore, StoreOptions, open_store


def open_rescaled_store(location, operator: str, plan: PartitionRescale, version: int,
                        old_manifests: list[str], options: StoreOptions | None = None) -> StateStore:
    """New partition ``plan.partition``'s state at published ``version`` of the old partitions
    (their manifests ``old_manifests``), clipped and completed as the module docstring says.
    The store commits ``version + 1``; on any error nothing is kept."""
    store = open_store(location, operator, plan.partition, version, manifest=old_manifests[plan.base],
                       options=options, rescale_from=plan.base)
    try:
        clip_to_key_groups(store, plan)
        for source_partition, groups in plan.bring_in:
            begin, end = groups.key_bounds()
            source = open_store(location, operator, source_partition, version,
                                manifest=old_manifests[source_partition], options=options)
            try:
                store.ingest_range(source, begin, end)
            finally:
                source.abort()  # read only: nothing of the source's version changes
    except BaseException:
        store.abort()
        raise
    return store
