"""Inspecting a checkpoint location from outside Spark: what the ``antkv state-*`` commands show.

A pipeline's state lives in its checkpoint location as objects (:mod:`antkv.spark.store.location`),
not as an antkv database directory, so the database commands (``antkv scan DIR``) do not open
it.  These functions read it without Spark and without changing it:

* :func:`describe_location` -- per operator: ``K`` and the key columns, the published versions
  and, for the newest (or a given) one, each partition's key count and the bytes its manifest
  references (snapshot files and changelogs);
* :func:`decoded_state` -- the keyed state of a version, decoded (state variable, grouping key,
  value) by :mod:`antkv.spark.tools.state_records`, as the ``antkv-state`` data source reads it;
* :func:`export_state` -- a version's keys and values, every partition's, written into a new
  antkv database directory that every ``antkv`` database command then reads.

Each opens partitions read-only (``open_store`` then ``abort``): nothing is written to the
location.
"""

from __future__ import annotations

import dataclasses
import os

import antkv

from antkv.spark.store.commit_protocol import CommitCoordinator
from antkv.spark.store.location import MARKER_DIR, as_location, check_operator, parse_marker_name
from antkv.spark.store.keygroups import METADATA_PREFIX
from antkv.spark.store.pipeline_record import read_pipeline_record
from antkv.spark.tools.state_records import fold_records, partition_records
from antkv.spark.store.opening import open_store
from antkv.spark.store.published import read_manifest
from antkv.spark.store.store_options import StoreOptions

_EXPORT_BATCH = 4096  # keys per write batch of an export


def is_state_location(path: str) -> bool:
    """Whether the local directory ``path`` looks like a checkpoint location (an operator
    directory with a ``_batches`` directory), or one operator's directory, or a partition's."""
    def has_batches(d: str) -> bool:
        return os.path.isdir(os.path.join(d, MARKER_DIR))

    if not os.path.isdir(path):
        return False
    if has_batches(path) or has_batches(os.path.dirname(os.path.abspath(path))):
        return True
    return any(has_batches(os.path.join(path, d)) for d in os.listdir(path))


def operators(location) -> list[str]:
    """The operators with at least one published version in ``location``."""
    loc = as_location(location)
    return sorted(op for op in loc.list_subdirs("")
                  if any(parse_marker_name(n) is not None for n in loc.list_dir(f"{op}/{MARKER_DIR}")))


def published_versions(location, operator: str) -> list[int]:
    loc, operator = as_location(location), check_operator(operator)
    return sorted(v for v in (parse_marker_name(n) for n in loc.list_dir(f"{operator}/{MARKER_DIR}"))
                  if v is not None)


def describe_location(location, operator: str | None = None, version: int | None = None) -> list[dict]:
    """One dict per operator (or only ``operator``): see the module docstring."""
    loc = as_location(location)
    names = operators(loc) if operator is None else [check_operator(operator)]
    if not names:
        raise antkv.InvalidArgumentError(
            f"{loc.uri}: no operator has a published version here (not a pipeline's checkpoint location?)")
    out = []
    for op in names:
        versions, v, marker = _published(loc, op, version)
        pipeline = read_pipeline_record(loc, op)
        partitions = []
        for p, name in enumerate(marker.manifests):
            m = read_manifest(loc, name)
            partitions.append({
                "partition": p, "keys": m.num_keys,
                "snapshot_files": 0 if m.snapshot is None else len(m.snapshot.files),
                "snapshot_bytes": 0 if m.snapshot is None else m.snapshot.bytes,
                "changelogs": len(m.changelogs), "changelog_bytes": sum(c.size for c in m.changelogs),
            })
        out.append({
            "operator": op, "location": loc.uri, "versions": versions, "version": v,
            "query_id": marker.query_id, "keys": marker.num_keys, "partitions": partitions,
            "key_groups": None if pipeline is None else pipeline.get("key_groups"),
            "key": None if pipeline is None else pipeline.get("key"),
        })
    return out


def published_version(location, operator: str, version: int | None) -> tuple[int, list[str]]:
    """``(version, its manifest per partition)`` of published ``version``, or of the newest
    (InvalidArgumentError naming the published ones when it is not published)."""
    loc, operator = as_location(location), check_operator(operator)
    _, v, marker = _published(loc, operator, version)
    return v, list(marker.manifests)


def key_columns(location, operator: str) -> list[str] | None:
    """The key column names the operator's pipeline recorded (None when it recorded none)."""
    loc, operator = as_location(location), check_operator(operator)
    record = read_pipeline_record(loc, operator)
    return None if record is None else record.get("key")


def _published(loc, operator: str, version: int | None):
    """``(every published version, the one wanted, its marker)``: ``version``, or the newest."""
    versions = published_versions(loc, operator)
    if not versions:
        raise antkv.InvalidArgumentError(f"{loc.uri}: operator {operator!r} has no published version")
    v = versions[-1] if version is None else version
    if v not in versions:
        span = f"{versions[0]}..{versions[-1]}" if len(versions) > 1 else str(versions[0])
        raise antkv.InvalidArgumentError(
            f"{loc.uri}: operator {operator!r} has no published version {v} (published: {span})")
    return versions, v, CommitCoordinator(loc, operator, 1, query_id="inspect").marker(v)


def reading_options(options: StoreOptions | None) -> StoreOptions:
    """``options`` for a reader: one that opens a partition only to read it and abort never
    claims a copy parked on the machine (claiming takes it; the abort would throw it away, and
    the query's next batch would rebuild the partition)."""
    return dataclasses.replace(options or StoreOptions(), park_copies=False)


def _stores(location, operator: str, version: int | None, options: StoreOptions | None):
    """``(partition, store)`` for each partition of ``version`` (default: the newest); each
    store is aborted after its turn."""
    loc, operator = as_location(location), check_operator(operator)
    _, v, marker = _published(loc, operator, version)
    options = reading_options(options)
    for p, manifest in enumerate(marker.manifests):
        store = open_store(loc, operator, p, v, manifest=manifest, options=options)
        try:
            yield p, store
        finally:
            store.abort()


def decoded_state(location, operator: str, version: int | None = None,
                  options: StoreOptions | None = None) -> dict:
    """``{state name: {grouping key: state}}`` of ``version``, every partition's
    (:func:`antkv.spark.tools.state_records.fold_records`)."""
    out: dict = {}
    for p, store in _stores(location, operator, version, options):
        fold_records(partition_records(store, p), out)
    return out


def read_state(location, operator: str, version: int | None = None,
               options: StoreOptions | None = None) -> dict:
    """The whole state of published ``version`` (default: the newest) of a pipeline's
    operator, as :func:`decoded_state`; ``{}`` for version 0 or an operator that has published
    nothing yet.  Runs on the driver; reads everything: for checks and small states."""
    if version == 0 or (version is None and not published_versions(location, operator)):
        return {}
    return decoded_state(location, operator, version, options)


def export_state(location, operator: str, dest: str, version: int | None = None,
                 options: StoreOptions | None = None, progress=None) -> int:
    """Write every key and value of ``version`` into a new antkv database at ``dest`` (which
    must not exist); returns the number of keys it holds.  Partitions own disjoint key groups;
    the metadata area (state names, ``METADATA_PREFIX``) is in every partition and must agree,
    so it is written once.  ``progress(done, total)`` counts keys read."""
    if os.path.exists(dest):
        raise antkv.InvalidArgumentError(f"{dest} already exists: export writes a new database")
    stores = list(describe_location(location, operator, version)[0]["partitions"])
    total = sum(p["keys"] for p in stores)
    done = 0
    if progress is not None:
        progress(0, total)
    written = 0
    with antkv.open(dest, create_if_missing=True, error_if_exists=True) as db:
        for p, store in _stores(location, operator, version, options):
            batch = antkv.WriteBatch()
            for key, value in store.items():
                done += 1
                if p > 0 and key >= METADATA_PREFIX:
                    first = db.get(key)
                    if first == value:
                        continue
                    if first is not None:
                        raise antkv.CorruptionError(
                            f"partitions 0 and {p} of {operator!r} disagree on metadata key {key!r}")
                batch.put(key, value)
                written += 1
                if len(batch) >= _EXPORT_BATCH:
                    db.write(batch)
                    batch = antkv.WriteBatch()
                    if progress is not None:
                        progress(min(done, total), max(total, done))
            if len(batch):
                db.write(batch)
        db.flush()
    if progress is not None:
        progress(done, max(total, done))
    return written
