r"""A working copy: one partition's state as an open antkv database in the executor-local cache.

A working copy is built from a manifest (``objects.Manifest``): its snapshot files are
hard-linked from the local cache (downloaded into it if absent), the engine's small metadata
files are written from the manifest, the database is opened, and the manifest's changelogs are
applied in order.  It then *is* that version; the store writes the next batch into it.

``file_map`` maps the engine's file names (``000012.sst``) to the objects holding them in the
location.  Invariant: every entry names an object a retained version references, with the
exact bytes of the local file of that name.  It holds because an engine file is immutable and
its number is never reused within one database's life, and because the map starts from the
loaded snapshot and only gains

* files this copy uploaded itself, and
* files it ingested from another version's snapshot (:meth:`WorkingCopy.ingest_version`)
  that are *the same file* (same device and inode, hence the same bytes) as a snapshot file
  of that version linked from the local cache, whose object a retained version (that one)
  references, and whose bytes the cache vouches for (its invariant: size and xxh3 checked
  when downloaded, hashed when uploaded).  The identity is checked while the temporary directory holding those
  links still exists, so the inode cannot have been reused; the size is checked too.  No
  hash is computed again: identity is a stronger proof, and a value-log file the ingest
  links may be much larger than the part of it brought in.

A snapshot commit therefore uploads exactly the engine files missing from the map.

In remote mode (``StoreOptions(tables="remote")``) nothing of the snapshot is linked: the
copy's engine file system (:mod:`~antkv.spark.store.remote_tables`) names each snapshot file
as a remote file of the database directory, read from the location through the block cache.
Every remote file is in the map (it is an object by construction), and a snapshot commit
hands the files it uploaded over to the location, so the local directory holds only the
engine's metadata and the files written since the last snapshot.

Lifecycle (who moves a copy between states: :mod:`~antkv.spark.store.opening`,
:class:`~antkv.spark.store.state_store.StateStore`, :mod:`~antkv.spark.store.idle_copies`,
:mod:`~antkv.spark.store.parked_copies`)::

    building --load / open_empty--> open --commit--> committed --give back--> idle (this process)
       ^                             ^  \                |                      |  take: same version
       |                             |   abort/error     park (a checkpoint)   |  (reused), or older
       |                             |   -> destroyed    v                      |  and extendable
       |                             |             parked (the machine's)       |  (caught up)
       |                             +---- claim, check, adopt (reopened) ------+
       +-- rebuild: nothing on the machine holds the version (or what did was stale or damaged)

* *open*: one :class:`StateStore` reads and writes it; nothing else touches it.
* *idle*: kept by the process that committed it, unchanged; parking may still run in a thread
  (:meth:`start_parking`), and taking it back waits for that (:meth:`finish_parking`).
* *parked*: a checkpoint of a committed copy, owned by no process until one claims it; the
  copy it was taken from goes on independently (its files are shared by hard link, never
  written again).
* *destroyed*: database closed, work directory removed; a process that dies leaves its
  directories to :meth:`LocalCache.sweep` and its half-parked entries to
  :meth:`ParkedCopies.sweep`.
"""

from __future__ import annotations

import bisect
import dataclasses
import logging
import os
import shutil
import threading
import uuid

import antkv
import xxhash

from antkv.fs import default_file_system
from antkv.record.batch import batch_of_changes
from antkv.spark.store.block_cache import BlockCache
from antkv.spark.store.local_cache import LocalCache, os_errors
from antkv.spark.store.location import Location, partition_dir, snapshot_file_name
from antkv.spark.store.parked_copies import ParkedCopies, ParkedRecord
from antkv.spark.store.remote_tables import RemoteTables
from antkv.spark.store.row_cache import RowCache
from antkv.spark.store.objects import (
    FileRef,
    Manifest,
    Snapshot,
    decode_changelog,
    file_digest,
    merge_ranges,
)

log = logging.getLogger(__name__)
_SNAPSHOT_SUFFIXES = (".sst", ".vlog")  # immutable engine files, uploaded as objects
_APPLY_CHUNK = 4096  # changelog records per engine write batch
_MERGE_BYTES = 64 << 20  # changelog bytes of a chain merged in memory before they are written
_DEBT_FACTOR = 1.25  # stored entries per live key a snapshot may carry before it is compacted
_DEBT_SLACK = 1024  # ... plus these (a small state's tombstones are not worth a compaction)
_READ_FACTOR = 8  # whole_state reads at most one key in 8 from the database, not from memory
_NO_WAL = antkv.WriteOptions(disable_wal=True)  # a working copy's writes: it is never recovered from its WAL
_DEFERRED_ENTRY = 64  # bytes a deferred write holds beyond its key and value (its dict slot)
_CARRY_BYTES = 16 << 20  # deferred writes an idle copy that is not parked keeps out of its database
_WHOLE_FACTOR = 16  # changelogs (compressed) of 1/16 of the snapshot's bytes: read the snapshot whole


class WorkingCopy:
    def __init__(self, cache: LocalCache, engine_options: antkv.Options, rows: RowCache,
                 blocks: BlockCache | None = None):
        self.cache = cache
        self.rows = rows  # the store's row cache; changes to the database go through the store
        self.work = cache.new_work_dir()
        self._db: antkv.DB | None = None
        # Writes the database lacks, key -> value (None: deleted): a store's settled writes
        # wait here until something reads the database beyond one key (write_deferred), or
        # until parking, which usually replaces the database instead (rewrite_stacked); a copy
        # that is not parked carries them into its next batch (carry_deferred).
        # Invariant: the database plus these, applied in order, is the copy's state; so
        # ``db`` writes them before it hands the database out.  The dict object is never
        # replaced (a store keeps a reference to it for its point reads).
        self.deferred: dict[bytes, bytes | None] = {}
        # at least what the deferred writes hold: every write's key and value bytes plus
        # _DEFERRED_ENTRY, an overwrite counted again
        self.deferred_bytes = 0
        # remote mode (blocks given): snapshot files stay in the location (remote_tables.py)
        self.remote: RemoteTables | None = None
        if blocks is not None:
            self.remote = RemoteTables(default_file_system(), blocks)
            engine_options = dataclasses.replace(engine_options, file_system=self.remote)
        self.engine_options = engine_options
        self.manifest_name: str | None = None  # the manifest of the version this copy holds
        self.manifest: Manifest | None = None
        self.file_map: dict[str, FileRef] = {}
        # Facts derived from the database's contents, kept across batches for whoever derived
        # them (the timers' floors, antkv.spark.processor.timers).  Invariant: each still holds for the
        # contents as the store's own writes change them; anything else that changes them
        # (an ingest, a catch-up) empties it.
        self.memo: dict = {}
        self._parking: threading.Thread | None = None  # a parking in progress (start_parking)
        self._parked_ok = True

    @property
    def db(self) -> antkv.DB | None:
        """The database, holding the copy's whole state: the deferred writes are written first."""
        if self.deferred:
            self.write_deferred()
        return self._db

    @db.setter
    def db(self, db: antkv.DB | None) -> None:
        self._db = db

    @property
    def db_without_deferred(self) -> antkv.DB | None:
        """The database as it is: without the :attr:`deferred` writes, which its reader
        consults first (a store's point reads) or writes first (``write_deferred``)."""
        return self._db

    def defer(self, changes: dict, size: int) -> None:
        """Take ``changes`` (key -> value, or None: deleted; bytes, newer than every write
        before them; ``size``: their keys' and values' bytes) as writes the database lacks,
        written when :attr:`db` is next asked for (or dropped by :meth:`rewrite`, which
        replaces the database by the whole state)."""
        self.deferred.update(changes)
        self.deferred_bytes += size + _DEFERRED_ENTRY * len(changes)

    def carry_deferred(self) -> None:
        """After a commit, when this copy is kept open but not parked: keep the deferred
        writes for the next batch, whose point reads consult them, if they hold at most
        :data:`_CARRY_BYTES`; else write them now.  A stream that rewrites the same keys each
        batch then writes them into the database once per snapshot (whose checkpoint writes
        them), not once per batch."""
        if self.deferred_bytes > _CARRY_BYTES:
            self.write_deferred()

    def write(self, changes: dict, size: int) -> None:
        """Write ``changes`` (as :meth:`defer` takes them; ``size``: their keys' and values'
        bytes) into the database now, after the deferred writes."""
        self.db.write(batch_of_changes(changes, size), write_options=_NO_WAL)

    def write_deferred(self) -> None:
        """Write the deferred writes into the database, as one batch without the WAL (a copy
        is never recovered from its own files)."""
        deferred = self.deferred
        if deferred:
            size = sum(map(len, deferred)) + sum(map(len, filter(None, deferred.values())))
            self._db.write(batch_of_changes(deferred, size), write_options=_NO_WAL)
            deferred.clear()
        self.deferred_bytes = 0

    @property
    def version(self) -> int:
        return 0 if self.manifest is None else self.manifest.version

    def open_empty(self) -> None:
        self.db = antkv.open(self.work.db_path, self.engine_options)

    def load(self, location: Location, name: str, manifest: Manifest) -> None:
        """Materialise ``manifest`` (read from object ``name``)."""
        snap = manifest.snapshot
        if snap is not None:
            for ref in snap.files:
                self._place(location, ref, self.work.db_path)
                self.file_map[ref.local] = ref
            for meta_name, data in snap.meta.items():
                self.work.write_file(meta_name, data)
            self.cache.evict()
        self.db = antkv.open(self.work.db_path, self.engine_options)
        if snap is None:
            if manifest.key_counts is not None and self.rows.can_hold_whole(manifest.num_keys):
                # the database is empty and the changelogs below bring every key, each into the
                # cache too (an eviction un-marks its prefix): the state's prefixes are held whole
                self.rows.complete.update(manifest.key_counts)
        elif manifest.changelogs and self._worth_reading_whole(manifest):
            self.rows.fill(self.db.items())  # the changelogs below keep every prefix whole
        self.apply_changelogs(location, manifest.changelogs)
        self.manifest_name, self.manifest = name, manifest

    def _place(self, location: Location, ref: FileRef, directory: str) -> None:
        """Put snapshot file ``ref`` into ``directory`` under its engine name: named as a
        remote file in remote mode, else linked from the local cache (downloaded if absent)."""
        if self.remote is not None:
            self.remote.add(directory, ref.local, location, ref)
        else:
            self.cache.link_into(location, ref, os.path.join(directory, ref.local))

    def catch_up(self, location: Location, name: str, manifest: Manifest, changelogs) -> None:
        """Become ``manifest`` (read from object ``name``), a later version of the same
        snapshot whose chain begins with this copy's: apply the ``changelogs`` it adds.  An
        error leaves the copy half-way: the caller destroys it."""
        self.memo.clear()  # keys arrive that no store write made
        self.apply_changelogs(location, changelogs)
        self.manifest_name, self.manifest = name, manifest

    def _worth_reading_whole(self, manifest: Manifest) -> bool:
        """Whether to read the snapshot whole into the row cache at load: when the changelogs
        since it are at least 1/16 of its bytes, compressed (the batches touch most keys: one ordered
        scan beats a point read per key) and the row cache can hold its keys."""
        changed = sum(ref.size for ref in manifest.changelogs)
        return changed * _WHOLE_FACTOR >= manifest.snapshot.bytes and self.rows.can_hold_whole(manifest.num_keys)

    def apply_changelogs(self, location: Location, refs, begin: bytes | None = None,
                         end: bytes | None = None) -> None:
        """Apply changelogs ``refs``, in order, to the database and the row cache; with
        ``begin`` and ``end``, only their records inside ``[begin, end)`` (range deletions
        clipped to it).

        The chain is applied as one: every range deletion, then each key's last change.  That
        is the chain's effect because a change kept is newer than every range covering it (a
        range drops the earlier changes it covers from the merge).  Batches that rewrote the
        same keys thus cost one engine write per key, not one per batch.  The merge is written
        out whenever it holds :data:`_MERGE_BYTES` of changes after a changelog."""
        ranges: list[tuple[bytes, bytes]] = []
        points: dict[bytes, bytes | None] = {}
        held = 0
        for ref in refs:
            path = location.path(ref.object)
            data = _checked_changelog(location, ref, path)
            self.cache.changelog_bytes += len(data)
            log_ranges, keys, values, size = decode_changelog(data, path)
            changes = zip(keys, values)
            if begin is not None:
                log_ranges = [(max(b, begin), min(e, end)) for b, e in log_ranges]
                log_ranges = [(b, e) for b, e in log_ranges if b < e]
                changes = [(k, v) for k, v in changes if begin <= k < end]
            if log_ranges:  # a changelog's ranges come before its points, and are older
                _drop_covered(points, log_ranges)
                ranges += log_ranges
            points.update(changes)
            held += size
            if held >= _MERGE_BYTES:
                self._write_changes(ranges, points)
                ranges, points, held = [], {}, 0
        self._write_changes(ranges, points)

    def _write_changes(self, ranges, points: dict) -> None:
        """Range deletions, then point changes, into the database (in write batches, without
        the WAL: a copy is never recovered from it) and the row cache.  A deletion of a key the
        row cache knows is absent (cached as absent, or in a key group held whole) changes
        nothing and is not written: a chain that registers a timer and later deletes it leaves
        no tombstone."""
        rows = self.rows  # warmed with the records: the keys written last are the likeliest read next
        batch, n = antkv.WriteBatch(), 0
        for b, e in ranges:
            batch.delete_range(b, e)
            rows.drop_range(b, e)
        for key, value in points.items():
            if value is None:
                if rows.lookup(key) is None:
                    continue  # absent already
                batch.delete(key)
            else:
                batch.put(key, value)
            n += 1
            if n == _APPLY_CHUNK:
                self.db.write(batch, disable_wal=True)
                batch, n = antkv.WriteBatch(), 0
        self.db.write(batch, disable_wal=True)
        rows.write_many(points.items())

    def ingest_version(self, location: Location, manifest: Manifest, begin: bytes, end: bytes) -> None:
        """Replace ``[begin, end)`` of this copy's database by what the committed version
        ``manifest`` (typically another partition's) holds there, without opening it.

        A snapshot in the location is a checkpoint as uploaded: its files are hard-linked from
        the local cache (downloaded if absent) into a temporary directory of this copy's work
        area, its metadata files written beside them, and the range is ingested from there
        with ``antkv.DB.ingest_database`` (no snapshot: the range is deleted).  Then the
        records of the version's changelogs inside the range are applied, in order.  The
        temporary directory is removed whatever happens.  Snapshot files ingested unchanged
        join :attr:`file_map` under their new names (the module docstring says why that keeps
        its invariant), so a snapshot commit names those objects instead of uploading them."""
        self.memo.clear()  # keys arrive that no store write made
        tmp = os.path.join(self.work.path, f"ingest-{uuid.uuid4().hex}")
        try:
            snap = manifest.snapshot
            if snap is None:
                self.db.delete_range(begin, end)
            else:
                with os_errors(tmp):
                    os.makedirs(tmp)
                    shared = {}  # (device, inode) of a linked snapshot file -> its object
                    for ref in snap.files:
                        self._place(location, ref, tmp)
                        if self.remote is None:
                            st = os.stat(os.path.join(tmp, ref.local))
                            shared[(st.st_dev, st.st_ino)] = ref
                    for meta_name, data in snap.meta.items():
                        with open(os.path.join(tmp, meta_name), "wb") as f:
                            f.write(data)
                self.db.ingest_database(tmp, begin, end)
                self._name_shared_files(shared)
            self.apply_changelogs(location, manifest.changelogs, begin, end)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
            if self.remote is not None:
                self.remote.forget_dir(tmp)
            self.cache.evict()

    def _name_shared_files(self, shared: dict) -> None:
        """Add to :attr:`file_map` every engine file not in it that is one of ``shared``
        (``(device, inode) -> FileRef``; REQUIRES: those files still linked elsewhere, so that
        their inodes are not reused) with the object's size.  In remote mode the ingested
        snapshot files are remote files, each naming its object: those are added."""
        if self.remote is not None:
            for name, ref in self.remote.remote_files(self.work.db_path).items():
                if name not in self.file_map:
                    self.file_map[name] = FileRef(ref.object, ref.size, ref.xxh3, local=name)
            return
        with os_errors(self.work.db_path):
            for name in os.listdir(self.work.db_path):
                if not name.endswith(_SNAPSHOT_SUFFIXES) or name in self.file_map:
                    continue
                try:
                    st = os.stat(os.path.join(self.work.db_path, name))
                except FileNotFoundError:
                    continue  # removed meanwhile (a compaction): nothing to name
                ref = shared.get((st.st_dev, st.st_ino))
                if ref is not None and st.st_size == ref.size:
                    self.file_map[name] = FileRef(ref.object, ref.size, ref.xxh3, local=name)

    def rewrite(self, keys: list, values: list) -> None:
        """Replace the database by one holding exactly ``keys[i] -> values[i]`` -- the copy's
        whole state, keys in order -- in one table, before a snapshot commit.

        A checkpoint of the database as it is uploads a new level-0 table holding the batches
        since the last snapshot (when they rewrote the state, every key again), and each such
        table stays in the copy, and in the snapshots that name it, until a compaction merges
        them: work that competes with the batches for the process.  The rewritten database is
        the live state once, so its snapshot is that state once, a copy rebuilt from it reads
        one table, and nothing in it is left to compact.  The old database is closed without
        flushing its memtable (its contents are all in ``keys``) and removed with its
        directory, which only this copy uses.  An error leaves the copy unusable: the caller
        destroys it."""
        table = os.path.join(self.work.path, "rewrite.sst")
        if keys:
            with antkv.SstFileWriter(table, self.engine_options) as writer:
                writer.put_sorted(keys, values)
        db, self._db = self._db, None
        self.deferred.clear()  # (written in the table: the whole state)
        self.deferred_bytes = 0
        db.close()
        old = self.work.db_path + ".old"
        with os_errors(self.work.path):
            os.rename(self.work.db_path, old)
            os.makedirs(self.work.db_path)
            shutil.rmtree(old)
        if self.remote is not None:
            self.remote.forget_dir(self.work.db_path)
        self.db = antkv.open(self.work.db_path, self.engine_options)
        if keys:  # (written a moment ago: its blocks are checked when read, not read whole first)
            self.db.ingest([table], move=True, verify_checksums=False)
        self.file_map = {}  # no engine file of the new database is in the location yet

    def whole_state(self, num_keys: int, changes: dict | None = None) -> tuple[list, list] | None:
        """``(keys, values)``: the live state of ``num_keys`` keys in key order, if the row
        cache, with ``changes`` (a batch's change set: key -> newest value, None if deleted),
        holds all of it but at most one key in :data:`_READ_FACTOR`, which are read from the
        database (its keys scanned for the ones neither holds: records a batch never rewrites,
        keys a row cache of bounded size could not keep); else None.  The cache's live entries
        and the change set's are live keys with their newest values (the cache's invariant),
        so as many of them as there are keys are all of them."""
        whole = self.rows.whole_state(num_keys)
        if whole is not None or not changes:
            return whole
        state = {k: v for k, v in self.rows.rows.items() if v is not None}
        state.update(changes)
        live = len(state) - list(state.values()).count(None)
        if live == num_keys:
            keys = sorted(k for k, v in state.items() if v is not None)
            return keys, list(map(state.__getitem__, keys))
        if not 0 < (num_keys - live) * _READ_FACTOR <= num_keys:
            return None
        keys = list(self.db.keys())  # the live keys now, in order
        if len(keys) != num_keys:
            return None
        get = self.db.get
        return keys, [get(k) if v is None else v for k, v in zip(keys, map(state.get, keys))]

    def settle_debt(self, live_keys: int) -> bool:
        """Before a snapshot: compact the database to one sorted run when its tables hold more
        than :data:`_DEBT_FACTOR` entries per live key (older versions of keys, tombstones:
        runs stacked by batches that rewrote the same keys), so that the snapshot holds the
        state about once and a copy rebuilt from it reads its key groups in time that follows
        the live state.  Returns whether it compacted.  In remote mode it never does: the
        compaction would read the whole state from the location and hold it on local disk
        until the snapshot is uploaded."""
        if not self._in_debt(live_keys):
            return False
        self.db.compact_range()
        return True

    def _in_debt(self, live_keys: int) -> bool:
        """Whether this copy keeps its state on local disk and its tables and memtable hold more
        than :data:`_DEBT_FACTOR` entries per live key (``live_keys``)."""
        if self.remote is not None:
            return False
        entries = int(self._db.property("antkv.estimate-num-keys") or 0) + len(self.deferred)
        return entries > _DEBT_FACTOR * live_keys + _DEBT_SLACK

    def rewrite_stacked(self, live_keys: int) -> bool:
        """Before a committed version is parked: :meth:`rewrite` the database as the live state
        in one table when its tables and memtable hold more than :data:`_DEBT_FACTOR` entries
        per live key (``live_keys``: the version's key count) and the row cache holds that
        state whole; returns whether it did.

        Each changelog commit's batch stays in the memtable until the parking checkpoint
        flushes it as one more level-0 table.  A process that claims the parked copy would
        merge every stacked table to read its key groups, and the engine would compact them
        inside that process's task once enough stack up.  Rewritten here -- after the commit
        returned, in the parking thread of a reused worker -- the copy parks as one table, and
        this process's idle copy is one table too.  The rewrite costs what a snapshot commit's
        rewrite costs, and that snapshot would find the debt and rewrite or compact the
        state anyway: the objects the file map loses would not have been named again.  Never
        in remote mode (the state would move to local disk).  REQUIRES: no store uses this
        copy (the row cache is read while held active, so no other cache's growth evicts
        from it meanwhile)."""
        if not self._in_debt(live_keys):
            return False
        self.rows.activate()
        try:
            whole = self.rows.whole_state(live_keys)
        finally:
            self.rows.deactivate()
        if whole is None:
            return False
        self.rewrite(*whole)
        return True

    def checkpoint(self) -> str:
        """A checkpoint of the database (``antkv.DB.checkpoint``: the memtable flushed, every
        file linked) in a new directory of this copy's work area; returns its path.  The
        caller owns it: it is uploaded, parked or removed."""
        path = os.path.join(self.work.path, f"checkpoint-{uuid.uuid4().hex}")
        self.db.checkpoint(path)
        return path

    def local_bytes(self) -> int:
        """Bytes of the engine files of the database on local disk (in remote mode, those
        written since the last snapshot)."""
        total = 0
        remote = set() if self.remote is None else set(self.remote.remote_files(self.work.db_path))
        with os_errors(self.work.db_path):
            for e in os.scandir(self.work.db_path):
                if e.name.endswith(_SNAPSHOT_SUFFIXES) and e.name not in remote:
                    try:
                        total += e.stat().st_size
                    except FileNotFoundError:
                        pass
        return total

    def drop_checkpoint(self, checkpoint: str) -> None:
        """Remove ``checkpoint`` (:meth:`checkpoint`), not parked."""
        shutil.rmtree(checkpoint, ignore_errors=True)
        if self.remote is not None:
            self.remote.forget_dir(checkpoint)

    def write_snapshot(self, location: Location, operator: str, partition: int, version: int,
                       attempt: str, checkpoint: str) -> tuple[Snapshot, int, int]:
        """Upload the engine files of ``checkpoint`` (:meth:`checkpoint`) the location lacks.

        Returns ``(snapshot, bytes uploaded, objects uploaded)``."""
        with os_errors(checkpoint):
            try:
                result = self._upload_checkpoint(location, checkpoint, operator, partition, version, attempt)
                self.cache.drop_superseded(location, partition_dir(operator, partition),
                                           [ref.object for ref in result[0].files])
                if self.remote is not None:
                    self.remote.hand_over(self.work.db_path, location, self.file_map)
                return result
            finally:
                self.cache.evict()

    def park(self, parked: ParkedCopies, location: Location, operator: str, partition: int,
             checkpoint: str | None) -> None:
        """Leave the committed version this copy holds on the machine for any process
        (:mod:`antkv.spark.store.parked_copies`): ``checkpoint`` (taken after the version's
        last write; None: taken now) becomes a parked entry.  This copy stays open as it is."""
        if checkpoint is None:  # a changelog commit's version: the batch is in the memtable
            self.rewrite_stacked(self.manifest.num_keys)
            checkpoint = self.checkpoint()
        file_map = self.file_map
        if self.remote is not None:
            file_map = self.remote.strip(checkpoint, self.file_map)
        try:
            entry = parked.park(location, operator, partition, checkpoint, self.manifest_name, self.manifest,
                                file_map)
        finally:
            shutil.rmtree(checkpoint, ignore_errors=True)  # gone already unless parking failed
        snap = self.manifest.snapshot
        if snap is not None:  # the older entries parking removed held the older snapshots' files
            self.cache.drop_superseded(location, partition_dir(operator, partition), [f.object for f in snap.files])
        parked.upkeep(self.cache.disk_budget, self.cache.usage(), keep=entry)

    def start_parking(self, park) -> None:
        """Run ``park()`` (which parks this copy) in a thread; :meth:`finish_parking` waits for it."""
        def run():
            try:
                self._parked_ok = bool(park())
            except BaseException as e:  # noqa: BLE001 -- reported by finish_parking's caller
                log.warning("antkv.spark: parking a working copy failed: %s", e)
                self._parked_ok = False

        self._parked_ok = False
        self._parking = threading.Thread(target=run, name="antkv-park", daemon=True)
        self._parking.start()

    def finish_parking(self) -> bool:
        """Wait for a parking started by :meth:`start_parking`; False if it failed (the copy
        may then be unusable: its caller closes it)."""
        thread, self._parking = self._parking, None
        if thread is None:
            return True
        thread.join()
        return self._parked_ok

    def adopt(self, location: Location, record: ParkedRecord) -> None:
        """Open the parked copy of ``record`` claimed into this copy's work area
        (:meth:`ParkedCopies.claim`): this copy then holds the version it names.  In remote
        mode the files of its file map that the entry does not hold are remote files."""
        if self.remote is not None:
            for name, ref in record.file_map.items():
                if name not in record.files:
                    self.remote.add(self.work.db_path, name, location, ref)
        self.db = antkv.open(self.work.db_path, self.engine_options)
        self.manifest_name, self.manifest = record.manifest_name, record.decoded_manifest()
        self.file_map = dict(record.file_map)

    def _upload_checkpoint(self, location: Location, tmp: str, operator: str, partition: int,
                           version: int, attempt: str) -> tuple[Snapshot, int, int]:
        files, meta = [], {}
        uploaded = nbytes = 0
        names = os.listdir(tmp) if self.remote is None else self.remote.listdir(tmp)
        for name in sorted(names):
            p = os.path.join(tmp, name)
            if not name.endswith(_SNAPSHOT_SUFFIXES):
                with open(p, "rb") as f:
                    meta[name] = f.read()
                continue
            ref = self.file_map.get(name)
            if ref is None and self.remote is not None and name in self.remote.remote_files(tmp):
                raise antkv.CorruptionError("a remote file of the working copy is not in its file map", p)
            if ref is None:
                obj = snapshot_file_name(operator, partition, version, attempt, name)
                size, digest = file_digest(p)
                location.upload(obj, p)
                if self.remote is None:  # remote mode: the file becomes remote (RemoteTables.hand_over)
                    self.cache.adopt(location, obj, p)
                ref = FileRef(obj, size, digest, local=name)
                uploaded += 1
                nbytes += size
            files.append(ref)
        self.file_map = {f.local: f for f in files}
        return Snapshot(version, tuple(files), meta), nbytes, uploaded

    def advance(self, name: str, manifest: Manifest) -> None:
        """This copy now holds the version ``manifest`` describes (after a commit)."""
        self.manifest_name, self.manifest = name, manifest

    def destroy(self) -> None:
        """Close the database and remove the working directory (nothing in it is needed).
        REQUIRES: no parking in progress (:meth:`finish_parking`)."""
        self.rows.close()
        self.deferred.clear()
        self.deferred_bytes = 0
        try:
            if self._db is not None:
                self._db.close()
        except antkv.Error:
            pass  # the copy is being thrown away; the location holds the truth
        finally:
            self._db = None
            self.work.remove()
            if self.remote is not None:
                self.remote.forget_dir(self.work.path)


def _checked_changelog(location: Location, ref: FileRef, path: str) -> bytes:
    """Changelog ``ref``'s bytes, checked against its manifest's size and hash."""
    data = location.read(ref.object)
    if len(data) != ref.size:
        raise antkv.CorruptionError(f"changelog is {len(data)} bytes, its manifest says {ref.size}", path)
    if xxhash.xxh3_128_hexdigest(data) != ref.xxh3:
        raise antkv.CorruptionError("changelog does not match the hash in its manifest", path)
    return data


def _drop_covered(points: dict, ranges) -> None:
    """Remove from ``points`` the keys inside any of ``ranges`` (``[begin, end)`` pairs)."""
    merged = merge_ranges(ranges)
    begins = [b for b, _ in merged]
    for key in [k for k in points if (i := bisect.bisect_right(begins, k) - 1) >= 0 and k < merged[i][1]]:
        del points[key]
