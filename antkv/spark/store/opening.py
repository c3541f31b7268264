"""Opening a version of a partition's state (:func:`open_store`): the working copy this process
holds for the partition is reused when it holds that version; else a copy parked on this
machine by any process (:mod:`antkv.spark.store.parked_copies`) is claimed and reopened when
it holds that version; else an idle or parked copy of an older version is caught up by the
changelogs it lacks when the version extends it (:func:`_catch_up`); otherwise the copy is
rebuilt from the location and the local cache.  In every case the location must still hold
every object of the version.  ``StateStore.copy_fate`` says which path was taken."""

from __future__ import annotations

import logging

import antkv
from antkv.spark.store.idle_copies import blocks_for, cache_for, held
from antkv.spark.store.location import Location, as_location, check_operator, check_partition, check_version
from antkv.spark.store.memory import worker_row_budget
from antkv.spark.store.objects import Manifest
from antkv.spark.store.parked_copies import ParkedCopies
from antkv.spark.store.presence import Listing, needed_objects
from antkv.spark.store.row_cache import RowCache
from antkv.spark.store.state_store import StateStore
from antkv.spark.store.published import read_manifest, read_marker
from antkv.spark.store.store_options import StoreOptions
from antkv.spark.store.working_copy import WorkingCopy

log = logging.getLogger(__name__)
_UNSET = object()
# What became of the partition's copy when a store opened (StateStore.copy_fate, the batch metrics)
NEW = "new"  # the empty state: nothing to load
REUSED = "reused"  # this process's idle copy held the version
REOPENED = "reopened"  # a parked copy on this machine held it: claimed and opened
CAUGHT_UP = "caught_up"  # an idle or parked copy of an older version, brought here by changelogs
REBUILT = "rebuilt"  # built from the location and the local cache


def open_store(location, operator: str, partition: int, version: int, *, manifest=_UNSET,
               options: StoreOptions | None = None, rescale_from: int | None = None,
               empty: bool = False) -> "StateStore":
    """Open the state of ``version`` of ``(location, operator, partition)``.

    ``manifest`` is the object name the published marker of ``version`` gives for this
    partition (the driver hands it to tasks: ``CommitCoordinator.base_manifests``); without
    it, the marker is read.  Version 0 is the empty state (``manifest=None``).

    ``rescale_from=q`` opens, as partition ``partition``, the state of *old* partition ``q``
    of ``version`` (``manifest`` is then q's manifest, required): the start of a rescale
    (``antkv.spark.store.rescale``).  The version this store commits references q's files by name
    and names q's manifest as its base; nothing of q's is copied or changed.

    ``empty=True`` opens the empty state *as* ``version`` (no manifest; nothing is read): the
    start of an operator whose first version is ``version + 1``, e.g. a state migrated from a
    query that ran ``version + 1`` batches elsewhere (``antkv.spark.tools.migrate``).
    """
    loc = as_location(location)
    operator = check_operator(operator)
    partition = check_partition(partition)
    version = check_version(version)
    if options is None:
        options = StoreOptions()
    elif not isinstance(options, StoreOptions):
        raise TypeError(f"options must be a StoreOptions, not {type(options).__name__}")
    source = partition if rescale_from is None else check_partition(rescale_from)
    if rescale_from is not None and (manifest is _UNSET or manifest is None):
        raise antkv.InvalidArgumentError("a rescale opens a published version: give the old partition's manifest")
    if empty:
        if manifest not in (_UNSET, None) or rescale_from is not None:
            raise antkv.InvalidArgumentError("an empty store has no manifest and no rescale source")
        store = StateStore(loc, operator, partition, _build(loc, operator, partition, 0, None, options), options)
        store.version = version  # its commit makes version + 1, built on no base
        store.copy_fate = NEW
        return store
    if manifest is _UNSET:
        if version == 0:
            manifest = None
        else:
            marker = read_marker(loc, operator, version)
            if partition >= len(marker.manifests):
                raise antkv.InvalidArgumentError(
                    f"partition {partition} is not in version {version} ({len(marker.manifests)} partitions)")
            manifest = marker.manifests[partition]
    if (manifest is None) != (version == 0):
        raise antkv.InvalidArgumentError(f"version {version} needs {'no' if version == 0 else 'a'} manifest")
    if manifest is not None and not isinstance(manifest, str):
        raise TypeError(f"manifest must be an object name (str), not {type(manifest).__name__}")
    if manifest is None:
        copy, fate = _build(loc, operator, source, version, None, options), NEW
    else:
        copy, fate = _find_copy(loc, operator, source, version, manifest, options)
        if copy is None:
            copy, fate = _build(loc, operator, source, version, manifest, options), REBUILT
        _check_present(loc, copy)
    store = StateStore(loc, operator, partition, copy, options)
    store.copy_fate = fate
    store.reused_working_copy = fate != REBUILT and fate != NEW
    store.caught_up_working_copy = fate == CAUGHT_UP
    return store


def _find_copy(loc, operator, partition, version, manifest, options) -> tuple[WorkingCopy | None, str]:
    """A copy already on this machine that holds, or can be brought to, ``manifest``, with its
    fate: this process's idle copy of exactly that version (:data:`REUSED`), a parked copy of
    it (:data:`REOPENED`), or either kind of copy of an older version that ``manifest``
    extends, brought to it by the changelogs it lacks (:data:`CAUGHT_UP`).  ``(None, None)``
    when there is none: the caller rebuilds."""
    idle = held.take(loc, operator, partition)
    if idle is not None and idle.manifest_name == manifest:
        return idle, REUSED
    if options.park_copies:
        parked = _claim_parked(loc, operator, partition, version, manifest, options,
                               newer_than=-1 if idle is None else idle.version)
        if parked is not None:
            if idle is not None:
                idle.destroy()  # an older version of a partition a parked copy holds now
            if parked.manifest_name == manifest:
                return parked, REOPENED
            if _catch_up(parked, loc, operator, partition, version, manifest):
                return parked, CAUGHT_UP
            parked.destroy()
    if idle is not None:
        if _catch_up(idle, loc, operator, partition, version, manifest):
            return idle, CAUGHT_UP
        idle.destroy()  # another version's copy that cannot be brought to this one
    return None, None


def _claim_parked(loc, operator, partition, version, manifest, options, newer_than: int) -> WorkingCopy | None:
    """Claim and open the best parked copy of the partition (:mod:`parked_copies`): the one
    holding ``manifest``, else the newest of the older versions above ``newer_than`` (the
    version of the idle copy this process has: an older parked one would be no better).  None
    if there is none that verifies and opens: the caller goes on without it."""

    def rank(record) -> int | None:
        if record.manifest_name == manifest:
            return 0
        held_version = record.version
        return version - held_version if newer_than < held_version < version else None

    copy = _new_copy(options)
    try:
        record = ParkedCopies(copy.cache).claim(loc, operator, partition, version, rank, copy.work)
        if record is None:
            copy.destroy()
            return None
        copy.adopt(loc, record)
        m = copy.manifest
        if (m.operator, m.partition) != (operator, partition):
            raise antkv.CorruptionError(f"a parked copy of {operator}/{partition} holds "
                                        f"{m.operator}/{m.partition}", copy.work.path)
        return copy
    except antkv.Error as e:
        log.warning("antkv.spark: a parked copy of %s/%d did not open (%s); building it another way",
                    operator, partition, e)
        copy.destroy()
        return None
    except BaseException:
        copy.destroy()
        raise


def _read_checked_manifest(loc, operator, partition, version, name) -> Manifest:
    m = read_manifest(loc, name)
    if (m.operator, m.partition, m.version) != (operator, partition, version):
        raise antkv.CorruptionError(
            f"manifest holds operator {m.operator!r} partition {m.partition} version {m.version}, "
            f"not {operator!r} {partition} {version}", loc.path(name))
    return m


def _catch_up(copy: WorkingCopy, loc, operator, partition, version, name) -> bool:
    """Bring an idle copy of an older version of this partition to manifest ``name`` by
    applying the changelogs it lacks; False (the copy untouched, or destroyed on an error)
    when ``name`` does not extend the copy's version: the same snapshot, and the copy's
    changelogs the first of its own.  Spark gives a partition's next task to whichever Python
    worker is free, so a worker often holds the partition a batch or two behind: catching up
    replays those batches' changelogs instead of loading the snapshot and the whole chain."""
    have = copy.manifest
    try:
        want = _read_checked_manifest(loc, operator, partition, version, name)
    except antkv.Error:
        return False  # the rebuild reports it
    have_chain = () if have is None else tuple(c.object for c in have.changelogs)
    want_chain = tuple(c.object for c in want.changelogs)
    if (copy.version >= version or _snapshot_objects(have) != _snapshot_objects(want)
            or want_chain[:len(have_chain)] != have_chain):
        return False
    try:
        copy.catch_up(loc, name, want, want.changelogs[len(have_chain):])
    except BaseException:
        copy.destroy()
        raise
    return True


def _check_present(loc: Location, copy: WorkingCopy) -> None:
    """Refuse a copy whose version names an object the location lacks, or holds at another
    size (one listing of each directory, no download: :mod:`antkv.spark.store.presence`).  A
    copy kept open, or built from files of the local cache, would otherwise carry the loss
    into the next version; the copy is destroyed, the version cannot be built on."""
    try:
        damaged = Listing(loc).damaged(needed_objects(copy.manifest))
    except BaseException:
        copy.destroy()  # the location failed mid-listing: nothing of this attempt stays
        raise
    if damaged:
        copy.destroy()
        raise antkv.CorruptionError(f"version {copy.version} cannot be loaded: the location lacks "
                                    f"{', '.join(damaged[:5])}", loc.path(copy.manifest_name))


def _snapshot_objects(manifest: Manifest | None) -> tuple:
    snap = None if manifest is None else manifest.snapshot
    return () if snap is None else tuple(sorted(f.object for f in snap.files))


def _new_copy(options: StoreOptions) -> WorkingCopy:
    return WorkingCopy(cache_for(options), options.engine_options(),
                       RowCache(worker_row_budget(options.memory_bytes, options.row_cache_budget())),
                       blocks_for(options) if options.remote_tables else None)


def _build(loc, operator, partition, version, name, options) -> WorkingCopy:
    copy = _new_copy(options)
    try:
        if name is None:
            copy.open_empty()
        else:
            copy.load(loc, name, _read_checked_manifest(loc, operator, partition, version, name))
        return copy
    except BaseException:
        copy.destroy()
        raise
