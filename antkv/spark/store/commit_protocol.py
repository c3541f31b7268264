"""The driver's side of exactly-once: publish a batch, then collect what no version needs.

One :class:`CommitCoordinator` per ``(location, operator)`` in the driver.  For batch ``v``
(built on version ``v - 1``, making version ``v``):

1. ``base_manifests(v - 1)`` gives each partition's manifest of version ``v - 1`` (read from
   marker ``v - 1``); tasks open their stores with it, so they never guess a version.
2. Each task attempt commits and returns a :class:`CommitMessage`.  Only the attempts Spark
   reports as the result of the job reach the driver; the others (failed, retried,
   speculative losers) leave objects no marker will ever name.
3. ``publish(v, messages)`` checks that there is exactly one message per partition, each for
   this operator and version and built on the expected base, and only then creates marker
   ``v`` -- one write-once object naming every partition's manifest and, when the messages
   name output files (a pipeline's tasks), those files and the output's schema.  The marker
   is the commit point:
   before it, version ``v`` does not exist; after it, it is exactly these manifests, and
   batch ``v - 1``'s output is exactly these files (``antkv.spark.runtime.output``).
4. ``cleanup(v)`` deletes the markers older than the ``min_versions_to_retain`` newest (none
   is older than an *origin*, a version built on the empty state: version 1, or the first
   version of a migrated operator), and
   every partition object written for a version ``<= v`` that no retained version references.
   Objects of versions ``> v`` belong to attempts of a later batch, possibly running now, and
   are never touched; neither is any object whose name this module did not make.  On S3 it also
   aborts the incomplete multipart uploads of partition objects and output files of versions
   ``<= v`` (:mod:`antkv.spark.store.multipart`): every attempt of those batches is over, so an
   upload still open there is a dead attempt's; one of a later version is left alone.

**Replays.**  If the driver fails after publishing marker ``v`` but before Spark's commit log
records batch ``v``, Spark reruns batch ``v`` from version ``v - 1``.  Its ``publish`` finds
marker ``v`` already written by an earlier run of the same query and keeps it (the first
publication wins; a deterministic batch computed the same state), reporting ``replayed``; the
rerun's objects are garbage for the next cleanup.

**One writer.**  Markers carry the query id (stable across restarts of one query) and the
run id (new at each start).  Publishing on top of, or over, a marker of another query raises
:class:`ConcurrentWriterError`: two queries writing one location are refused, whichever
publishes first.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import antkv

from antkv.spark.store.commit_message import CommitMessage
from antkv.spark.store.location import (
    MARKER_DIR,
    as_location,
    check_operator,
    check_version,
    marker_name,
    parse_marker_name,
    parse_object_name,
    parse_output_file_name,
    parse_temporary_name,
    partition_dir,
)
from antkv.spark.store.multipart import abort_uploads, incomplete_uploads
from antkv.spark.store.objects import Marker
from antkv.spark.store.presence import Listing, needed_objects
from antkv.spark.store.published import read_manifest, read_marker


class CommitError(antkv.Error):
    """The driver refused to publish a batch: a partition is missing, duplicated, or built on
    another base than the published one.  Nothing was published."""


class ConcurrentWriterError(CommitError):
    """Another query publishes batches to this checkpoint location."""


@dataclass(frozen=True)
class PublishResult:
    marker: Marker
    replayed: bool  # the marker existed from an earlier run of this query; the messages were not used


@dataclass(frozen=True)
class CleanupResult:
    deleted: int
    retained_versions: tuple[int, int]  # [first, last] versions still loadable
    aborted_uploads: int = 0  # incomplete multipart uploads of finished attempts aborted (S3)


class CommitCoordinator:
    def __init__(self, location, operator: str, num_partitions: int, *, query_id: str,
                 run_id: str | None = None, min_versions_to_retain: int = 2):
        self.location = as_location(location)
        self.operator = check_operator(operator)
        if isinstance(num_partitions, bool) or not isinstance(num_partitions, int):
            raise TypeError("num_partitions must be an int")
        if not 1 <= num_partitions <= 100000:
            raise antkv.InvalidArgumentError(f"num_partitions must be in [1, 100000], got {num_partitions}")
        if not isinstance(query_id, str) or not query_id:
            raise TypeError("query_id must be a non-empty str (stable across restarts of the query)")
        if run_id is not None and not isinstance(run_id, str):
            raise TypeError("run_id must be a str or None")
        if isinstance(min_versions_to_retain, bool) or not isinstance(min_versions_to_retain, int):
            raise TypeError("min_versions_to_retain must be an int")
        if min_versions_to_retain < 2:
            # a batch replayed after a driver failure rebuilds from the version before the newest
            raise antkv.InvalidArgumentError(f"min_versions_to_retain must be >= 2, got {min_versions_to_retain}")
        self.num_partitions = num_partitions
        self.query_id = query_id
        self.run_id = run_id or uuid.uuid4().hex
        self.min_versions_to_retain = min_versions_to_retain
        self._markers: dict[int, Marker] = {}  # published markers this driver has read or written
        self._manifest_objects: dict[str, dict[str, int]] = {}  # manifest name -> {object: size} it needs
        self._base_of: dict[str, str | None] = {}  # manifest name -> its base (None: the empty state)
        self._listing: tuple = (None, None)  # (version, Listing) taken by publish, reused by its cleanup

    # ------------------------------------------------------------------ reading

    def marker(self, version: int) -> Marker:
        version = check_version(version)
        m = self._markers.get(version)
        if m is None:
            m = read_marker(self.location, self.operator, version)
            self._markers[version] = m
        return m

    def published_manifests(self, version: int) -> list[str]:
        """The manifests of published ``version`` >= 1, one per partition *it* has (which may
        differ from this query's ``num_partitions``: the input of a rescale)."""
        if check_version(version) == 0:
            raise antkv.InvalidArgumentError("version 0 is the empty state: it has no manifests")
        m = self.marker(version)
        if m.query_id != self.query_id:
            raise ConcurrentWriterError(
                f"version {version} of {self.location.uri}/{self.operator} was published by query "
                f"{m.query_id!r}, not {self.query_id!r}")
        return list(m.manifests)

    def base_manifests(self, version: int) -> list[str | None]:
        """Each partition's manifest of published ``version`` (``None`` for version 0)."""
        if check_version(version) == 0:
            return [None] * self.num_partitions
        m = self.marker(version)
        self.published_manifests(version)
        if len(m.manifests) != self.num_partitions:
            raise antkv.InvalidArgumentError(
                f"version {version} has {len(m.manifests)} partitions, this query has {self.num_partitions}")
        return list(m.manifests)

    def latest_version(self) -> int:
        """The newest published version found by listing (0 if none); for restarts and tools."""
        versions = [parse_marker_name(n) for n in self.location.list_dir(f"{self.operator}/{MARKER_DIR}")]
        return max((v for v in versions if v is not None), default=0)

    # ------------------------------------------------------------------ publishing

    def publish(self, version: int, messages, *, bases=None, output_schema: str | None = None) -> PublishResult:
        """Publish version ``version`` from one commit message per partition (steps 3 above).

        ``output_schema`` (the output's DDL, when the messages name output files) is written
        in the marker with the files, so the marker alone is enough to read the batch's output.

        ``bases`` (one manifest name per partition of this query) is the base each partition
        must have built on when it differs from ``base_manifests(version - 1)``: after a change
        of the number of partitions, the old partition each new one started from (a rescale,
        ``antkv.spark.store.rescale``); every name must be a manifest of published ``version - 1``.
        Bases all None publish an *origin*: a version built on the empty state, allowed after
        version 1 only while the operator has no published version (a state migrated from a
        query that ran ``version - 1`` batches elsewhere: ``open_store(..., empty=True)``)."""
        version = check_version(version)
        if version < 1:
            raise antkv.InvalidArgumentError("the first version a batch makes is 1")
        if bases is None:
            bases = self.base_manifests(version - 1)
        else:
            bases = list(bases)
            if version > 1 and set(bases) == {None}:  # an operator's first version after 1
                if self.latest_version() != 0:
                    raise CommitError(f"{self.operator!r} version {version} is built on the empty state, "
                                      f"but the operator already has published versions")
                published = {None}
            else:
                published = set(self.published_manifests(version - 1)) if version > 1 else {None}
            if len(bases) != self.num_partitions or not set(bases) <= published:
                raise CommitError(f"{self.operator!r} version {version}: the bases given are not "
                                  f"{self.num_partitions} manifests of published version {version - 1}")
        chosen: list[str | None] = [None] * self.num_partitions
        outputs: list = [None] * self.num_partitions
        total = 0
        for msg in messages:
            if not isinstance(msg, CommitMessage):
                raise TypeError(f"expected CommitMessage, got {type(msg).__name__}")
            where = f"partition {msg.partition} of {self.operator!r} version {version}"
            if msg.operator != self.operator or msg.version != version:
                raise CommitError(f"{where}: message is for {msg.operator!r} version {msg.version}")
            if not 0 <= msg.partition < self.num_partitions:
                raise CommitError(f"{where}: no such partition (of {self.num_partitions})")
            if chosen[msg.partition] is not None:
                raise CommitError(f"{where}: two commit messages")
            pdir = f"{partition_dir(self.operator, msg.partition)}/"
            parsed = parse_object_name(msg.manifest[len(pdir):]) if msg.manifest.startswith(pdir) else None
            if parsed is None or parsed.kind != "manifest" or parsed.version != version:
                raise CommitError(f"{where}: {msg.manifest!r} is not a manifest of this partition and version")
            if msg.base != bases[msg.partition]:
                raise CommitError(f"{where}: built on {msg.base!r}, the published base is {bases[msg.partition]!r}")
            if msg.outputs is not None and any(parse_output_file_name(self.operator, o) != version
                                               for o in msg.outputs):
                raise CommitError(f"{where}: {list(msg.outputs)[:3]} are not output files of this version")
            chosen[msg.partition] = msg.manifest
            outputs[msg.partition] = msg.outputs
            total += msg.num_keys
        missing = [p for p, m in enumerate(chosen) if m is None]
        if missing:
            raise CommitError(f"{self.operator!r} version {version}: no commit message from partitions {missing[:20]}")
        if len({o is None for o in outputs}) > 1:
            raise CommitError(f"{self.operator!r} version {version}: some partitions name output files, others none")
        files = None if outputs[0] is None else tuple(f for part in outputs for f in part)
        if output_schema is not None and not isinstance(output_schema, str):
            raise TypeError(f"output_schema must be a DDL str, not {type(output_schema).__name__}")
        marker = Marker(self.operator, version, self.query_id, self.run_id, tuple(chosen), total, files,
                        None if files is None else output_schema)
        name = marker_name(self.operator, version)
        try:
            self._check_present(version, chosen)
        except CommitError:
            if not self.location.exists(name):
                raise
            present = False  # a replay's objects may be gone: the published marker is what counts
        else:
            present = True
        if present and self.location.create_exclusive(name, marker.encode()):
            self._markers[version] = marker
            return PublishResult(marker, False)
        existing = read_marker(self.location, self.operator, version)
        if existing.query_id != self.query_id:
            raise ConcurrentWriterError(
                f"version {version} of {self.location.uri}/{self.operator} was already published by query "
                f"{existing.query_id!r} (this is {self.query_id!r})")
        if existing.run_id == self.run_id and (existing.manifests, existing.outputs) != (marker.manifests, marker.outputs):
            raise CommitError(f"{self.operator!r} version {version} was already published by this run "
                              "with other manifests")
        self._markers[version] = existing
        return PublishResult(existing, existing.manifests != marker.manifests)

    def _check_present(self, version: int, manifests) -> None:
        """Refuse to publish manifests naming an object the location lacks or holds at another
        size: one listing per directory (kept for the cleanup that follows), no download."""
        listing = Listing(self.location)
        needed: dict[str, int | None] = {}
        for name in manifests:
            needed[name] = None
            try:
                needed.update(self._objects_of(name))
            except antkv.CorruptionError as e:
                raise CommitError(f"{self.operator!r} version {version}: manifest {name} cannot be read: {e}") from e
        damaged = listing.damaged(needed)
        if damaged:
            raise CommitError(f"{self.operator!r} version {version} would not load, nothing was published: "
                              f"the location lacks {', '.join(damaged[:5])}")
        self._listing = (version, listing)

    # ------------------------------------------------------------------ cleanup

    def cleanup(self, version: int) -> CleanupResult:
        """Delete what no retained version needs, once ``version`` is published (step 4).

        REQUIRES: ``version`` is the newest published version (the driver calls it right after
        ``publish``).  A late call with an older one acts for the newest marker the listing
        shows, so it never takes what a newer version references."""
        version = check_version(version)
        marker_dir = f"{self.operator}/{MARKER_DIR}"
        bases = self.location.list_dir(marker_dir)
        listed = {v: base for base in bases if (v := parse_marker_name(base)) is not None}
        version = max(version, max(listed, default=0))
        kept_version, listing = self._listing
        self._listing = (None, None)
        if kept_version != version:
            listing = Listing(self.location)
        first = max(1, version - self.min_versions_to_retain + 1)
        loads = self._newest_loadable(sorted(listed, reverse=True), listing)
        first = min(first, min(listed, default=first) if loads is None else loads)
        referenced: set[str] = set()
        for v in range(version, first - 1, -1):
            if v not in listed:
                continue  # lost: nothing to keep for it
            try:
                manifests = self.marker(v).manifests
            except antkv.CorruptionError:
                continue  # damaged: it cannot load, what it names is kept by its neighbours' rules
            origin = True
            for name in manifests:
                referenced.add(name)
                try:
                    referenced |= set(self._objects_of(name))
                except antkv.CorruptionError:
                    origin = False
                    continue  # an unreadable manifest: its version does not load
                origin = origin and self._base_of[name] is None
            if origin:  # built on the empty state: no older version exists for it
                first = v
                break
        deleted = 0
        for v, base in sorted(listed.items()):
            if v < first:
                self.location.delete(f"{marker_dir}/{base}")
                self._markers.pop(v, None)
                deleted += 1
        for base in bases:  # leftovers of interrupted local writes of published versions
            v = parse_marker_name(parse_temporary_name(base) or "")
            if v is not None and v <= version:
                self.location.delete(f"{marker_dir}/{base}")
                deleted += 1
        for sub in self.location.list_subdirs(self.operator):
            if not (len(sub) == 6 and sub[0] == "p" and sub[1:].isdigit()):
                continue
            for base in sorted(listing.directory(f"{self.operator}/{sub}")):
                parsed = parse_object_name(parse_temporary_name(base) or base)
                if parsed is None or parsed.version > version:
                    continue  # not ours, or an attempt of a later batch
                name = f"{self.operator}/{sub}/{base}"
                if name not in referenced:
                    self.location.delete(name)
                    deleted += 1
        self._manifest_objects = {k: v for k, v in self._manifest_objects.items() if k in referenced}
        self._base_of = {k: v for k, v in self._base_of.items() if k in referenced}
        aborted = abort_uploads(self.location, self.finished_uploads(version))
        return CleanupResult(deleted, (first, version), aborted)

    def finished_uploads(self, version: int) -> list:
        """The incomplete multipart uploads of this operator's partition objects and output files
        of versions ``<= version`` (attempts that are over, once ``version`` is published); an
        empty list where they cannot be seen (:mod:`antkv.spark.store.multipart`)."""
        uploads = incomplete_uploads(self.location, f"{self.operator}/") or ()
        return [u for u in uploads if (v := _upload_version(self.operator, u.name)) is not None and v <= version]

    def _newest_loadable(self, versions, listing: Listing) -> int | None:
        """The newest of ``versions`` (newest first) whose marker, manifests and objects are all
        in the location at their sizes, by ``listing`` (None: none is)."""
        for v in versions:
            try:
                manifests = self.marker(v).manifests
                needed: dict[str, int | None] = {}
                for name in manifests:
                    needed[name] = None
                    needed.update(self._objects_of(name))
            except antkv.CorruptionError:
                continue
            if not listing.damaged(needed):
                return v
        return None

    def _objects_of(self, manifest: str) -> dict[str, int]:
        """``{object: size}`` of what manifest ``manifest`` names (read once, then remembered)."""
        objs = self._manifest_objects.get(manifest)
        if objs is None:
            read = read_manifest(self.location, manifest)
            objs = needed_objects(read)
            self._manifest_objects[manifest] = objs
            self._base_of[manifest] = read.base
        return objs


def _upload_version(operator: str, name: str) -> int | None:
    """The version of a partition object or output file named ``name``, or None for any other name."""
    head, _, base = name.rpartition("/")
    _, _, sub = head.partition("/")
    if len(sub) == 6 and sub[0] == "p" and sub[1:].isdigit() and head == f"{operator}/{sub}":
        parsed = parse_object_name(base)
        return None if parsed is None else parsed.version
    return parse_output_file_name(operator, name)
