"""Open a partition's state across a change of the number of partitions (a rescale).

After ``N`` partitions published version ``v``, a batch run with ``N'`` partitions builds
version ``v + 1`` from the plan of :func:`antkv.spark.store.keygroups.plan_rescale`.  New partition
``p`` (a task):

1. opens its **base** -- the old partition overlapping its key-group range most -- as its own
   state (``open_store(..., rescale_from=base)``): the working copy is the base's files, linked
   from the local cache or downloaded, nothing rewritten;
2. **clips** the base's key groups it does not own: at most two ``delete_range`` calls (a head
   and a tail), no key read;
3. **brings in** the rest of its range from each other overlapping old partition by adding
   that partition's files (:meth:`StateStore.ingest_version`), without opening that
   partition's database: its version ``v``'s snapshot files are hard-linked from the local
   cache (downloaded if absent) into a temporary directory of the new partition's work area
   -- a snapshot is a checkpoint as uploaded -- and the key range is ingested from there with
   ``antkv.DB.ingest_database``: tables wholly inside the range and the value-log files they
   point into are hard-linked; only tables straddling a bound of the range are rewritten
   (their entries inside it).  Then the records of the source's changelogs that fall in the
   range are applied (what a load of the source would replay).  The temporary directory is
   removed whatever happens; the source's objects are only read;
4. runs the batch and commits a **snapshot** (ingested keys are in no changelog).  Files
   ingested unchanged are the very objects the source partition uploaded: the working copy
   maps them to those objects (its ``file_map``), so the commit uploads only what is new --
   the flushed clip tombstones, the ingest's tombstone table, rewritten boundary tables and
   the batch's own writes.

Invariants: every key of version ``v`` whose key group ``p`` owns under ``N'`` is in ``p``'s
state, and no other key is (the plan's invariants, tested with hypothesis, plus the clip and
the ingest's replacement of exactly each brought-in range); the key count is exact, read from
the manifests' key counts per key group (:mod:`antkv.spark.store.key_counts`) without reading a key.
Old partitions' objects stay referenced by the new manifests that name them, so cleanup keeps
them as long as a retained version needs them.  Until the driver publishes ``v + 1``, version
``v`` is the state: on any error the store is aborted (working copy and temporary
directories removed) and what the attempt uploaded is unreferenced, collected by cleanup.

Costs (measured by ``bench/bench_spark_rescale.py``; ``docs/spark-design.md``, "Rescale"):

* kept state: never rewritten and never read;
* dropped state: two range tombstones, no key read.  Later, compaction drops the tables lying
  wholly inside them unread, and the value-log records of clipped keys become garbage when
  compaction drops their pointers: a value-log file holding only clipped key groups is then
  whole-file garbage, deleted without a rewrite; a mixed file is relocated by value-log GC
  once its garbage passes ``blob_gc_threshold`` (a rewrite of its live, kept records, in the
  background), and below the threshold its garbage stays as space until more accrues;
* brought-in state: links, plus the rewrite of the boundary tables (at most two per level of
  the source).  With values in the value log those hold keys and pointers only; with small
  values stored in the tables, a table larger than the range brought in means a rewrite of
  about the bytes brought in (a smaller ``target_file_size_base`` bounds it).  A brought-in
  value-log file also holds the source's other records, counted as garbage at once: GC
  relocates the brought-in records when that garbage passes ``blob_gc_threshold``;
* the ingest waits for a compaction running in the new partition's database (it takes the
  engine's compaction lock): a base published with compaction due pays it in the rescale
  batch, as its next batch would.
"""

from __future__ import annotations

from antkv.spark.store.keygroups import PartitionRescale, clip_to_key_groups
from antkv.spark.store.opening import open_store
from antkv.spark.store.state_store import StateStore
from antkv.spark.store.store_options import StoreOptions


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
            store.ingest_version(old_manifests[source_partition], *groups.key_bounds())
    except BaseException:
        store.abort()
        raise
    return store
