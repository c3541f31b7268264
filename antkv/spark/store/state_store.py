"""The state store: one versioned key-value store per (checkpoint location, operator, partition).

Spark's StateStore semantics::

    store = open_store(location, "agg", partition=3, version=7)   # the state of version 7
    store.get(k); store.put(k, v); store.delete(k); store.delete_range(a, b)
    store.items(prefix=...); store.keys(start, stop)
    msg = store.commit()      # version 8 is durable in the location; msg goes to the driver
    # or store.abort()        # nothing of this batch remains anywhere that matters

Version 8 becomes *the* version 8 only when the driver publishes the batch marker naming
``msg.manifest`` (``commit_protocol.py``); until then it is one candidate among the attempts.

**Writes** cost a dict store each: ``put``, ``append``, ``delete`` and ``put_decoded`` record
the key's newest value in the batch's *pending* writes, which every read consults first;
``append_decoded`` records the value appended, and the key's value is looked up and extended
when the writes settle (or when the batch reads the key first).  They
*settle* in bulk -- into the batch's net change set ``{key: value or None}`` (plus its list of
range deletions), the working copy's row cache (:mod:`antkv.spark.store.row_cache`) and its
*deferred* writes (``WorkingCopy.deferred``) -- when anything reads the database (a scan, a
range deletion, the key count, a commit) or when ``_SETTLE_EVERY`` of them (or
``_SETTLE_BYTES`` of values), at most a quarter of the change set's bound, gathered.  The
deferred writes reach the database, as one engine write batch, only when something reads it
beyond one key (a scan, a range deletion, warming a key group one of them falls in, an ingest, a
snapshot commit) or when the committed copy is parked -- where a batch that rewrote most of the
state usually replaces the database by the row cache's state in one table instead
(``WorkingCopy.rewrite_stacked``), so its writes never pass through the engine's memtable.  A
copy kept open but not parked carries them into its next batch, up to a bound
(``WorkingCopy.carry_deferred``); a batch that writes a key it learnt nothing about writes
them first, so that the database alone is the base its key count reads.  So
scans and prefix scans are the engine's own, and a point read is the pending writes', the row
cache's, the deferred writes' or the database's.
``put_decoded`` takes a Python value and its codec: the value is encoded when it settles (the
batch's values at once, ``codec.encode_many``, with the values ``append_decoded`` appended),
and kept decoded in the row cache, as
``get_decoded`` keeps what it decodes, so a value written or read in one batch is read in the
next without decoding.  The change set is bounded: each
changed key counts its bytes plus ``_ENTRY_BYTES`` (the Python objects that hold it) against
``max_changelog_bytes``.  A batch that outgrows it keeps no change set at all
(``_drop_changes``): from then on its writes settle into the database alone, it commits a
snapshot, and its keys are counted by one scan at commit.  So a partition's memory does not
grow with its input, however many keys one batch changes.

Those writes skip the working copy's WAL: a working copy is never recovered from its own
files (a process that dies leaves its copy to the sweep, and the state is rebuilt from the
location), and a commit checkpoints or closes the database, which flushes the memtable first.
An engine error (a full disk) therefore surfaces at the next read of the database or at the
commit, not at the write, and the batch fails with nothing published; or, after a changelog
commit (which the location alone makes durable), when the copy is parked, where it is logged
and the copy dropped: the next open rebuilds the version from the location.

**The exact key count** costs no read per write (:mod:`antkv.spark.store.key_counts`: the
base's count plus, per key the batch changed, ``live now - live in the base``, range
deletions by the counts per prefix).  Whether a key was live in the base is learned for free
when its first write settles and the row cache knows the key (or its key group whole), or
when the batch read it before writing it; otherwise it is read at commit from a snapshot
taken before the first write the batch learnt nothing about reaches the database (a point
read per such key, or one scan of the base when they are more than 1/8 of it).
``ingest_version`` (a rescale's bring-in) settles the count and restarts it from the state
after the ingest.

**Commit** writes, under names carrying the new version and a random attempt id:

* a *changelog* (the change set, zstd) and a manifest ``base snapshot + changelogs``, or
* a *snapshot* -- ``db.checkpoint()``, then every engine file the location lacks (the
  working copy knows which it already holds) -- and a manifest naming its files.  A snapshot
  carries no compaction debt: a database whose tables hold more than 1.25 entries per live
  key is first compacted to one run (``WorkingCopy.settle_debt``), unless the state was
  rewritten whole or ranges were ingested (their files are named, not uploaded again),

choosing a snapshot when the chain since the last snapshot would exceed
``max_changelog_chain`` changelogs, or their bytes ``snapshot_ratio`` times the snapshot's
(at least 1 MiB), or when the batch changed more than ``max_changelog_bytes``.  A batch that
changed nothing writes only the manifest.

**Working copies are reused**: after a commit the copy stays open in this process (up to
``max_idle_stores``) and is parked on the machine for any other process (``park_copies``,
:mod:`antkv.spark.store.parked_copies`; a copy whose batches stacked the state's keys in
several tables is first rewritten into one, ``WorkingCopy.rewrite_stacked``), for the next
open to continue from (:mod:`antkv.spark.store.opening`).
"""

from __future__ import annotations

import logging
from itertools import compress, filterfalse, repeat
from operator import is_, itemgetter, not_

import xxhash

import antkv
from antkv.record.batch import as_bytes

from antkv.spark.store.appends import APPENDED as _APPENDED, settle_appends
from antkv.spark.store.commit_message import CommitMessage
from antkv.spark.store.idle_copies import background_parking, held
from antkv.spark.store.location import Location, changelog_name, manifest_name, new_attempt_id
from antkv.spark.store.key_counts import add_counts, aligned, count_all, count_changes, in_range, scan_counts
from antkv.spark.store.row_cache import MISSING, PREFIX_LEN
from antkv.spark.store.parked_copies import ParkedCopies
from antkv.spark.store.published import read_manifest
from antkv.spark.store.read_ahead import hold_whole, prefix_runs
from antkv.spark.store.objects import (
    FileRef,
    Manifest,
    encode_changelog,
    merge_ranges,
)
from antkv.spark.store.store_options import MiB, StoreOptions
from antkv.spark.store.working_copy import WorkingCopy

_SCAN_FACTOR = 8  # blind-written keys beyond 1/8 of the base: scan the base instead of reading each
_LIVE = object()  # a changed key whose new value is not kept (the batch commits a snapshot)
_ENCODED_TYPES = frozenset((bytes, type(None)))  # a pending write's value that is not a decoded one
_ENTRY_BYTES = 160  # a change set entry's Python objects: its dict slot and two bytes headers
_SETTLE_EVERY = 65536  # pending writes gathered before they settle (into the change set, row cache, deferred writes) ...
_SETTLE_BYTES = 8 * MiB  # ... or bytes of the values put
log = logging.getLogger(__name__)
_PREFIX = itemgetter(slice(PREFIX_LEN))  # a key's row-cache prefix (its key group), in C
_WARM_FACTOR = 8  # warm a key group the batch touches at least 1/8 of (one read beats 8 scanned)


class StateStore:
    """One open version of one partition's state; see the module docstring."""

    def __init__(self, location: Location, operator: str, partition: int, copy: WorkingCopy,
                 options: StoreOptions):
        self.location = location
        self.operator = operator
        self.partition = partition
        self.options = options
        self._copy = copy
        # the batch's settled writes wait in the copy's deferred writes (WorkingCopy.defer) until
        # something reads the database beyond one key; in remote mode, and once the batch keeps
        # no change set (_untracked), they are written at once.  They may hold earlier batches'
        # writes too (WorkingCopy.carry_deferred): the base is the database plus those
        self._db = copy.db_without_deferred
        self._deferred = copy.deferred
        self._carried = bool(copy.deferred)  # the deferred writes hold earlier batches' (until written)
        self._defer = copy.remote is None
        self._base_unknown = False  # a settled write's key was not known live or absent in the base
        self._rows = copy.rows
        self._rows.activate()
        self.version = copy.version  # the version this store was opened at
        # the base's versions, for the keys the batch writes without learning whether the base
        # held them (and for its range deletions): taken before the first such write settles
        # (_pin_base), and not at all by a batch that learns every key it writes, so that its
        # writes keep one version of a key in the memtable, not two (inplace_update_support)
        self._base_snapshot = None
        self._changes: dict[bytes, object] = {}  # key -> new value, None (deleted) or _LIVE
        self._change_bytes = 0
        self._max_change_bytes = options.max_changelog_bytes
        self._overflow = False  # this batch commits a snapshot: changed values need not be kept
        self._untracked = False  # the batch outgrew its change set: none kept, counted by a scan
        self._ranges: list[tuple[bytes, bytes]] = []
        # the batch's newest writes not yet settled into _changes, the database and the row
        # cache: key -> bytes, None (deleted) or a value of _codec (put_decoded).  (A codec kept
        # apart, not in a tuple per entry: an entry holds no object the garbage collector tracks,
        # so the batch's writes do not turn into full collections.)
        self._pending: dict[bytes, object] = {}
        self._codec = None  # the codec of the decoded values in _pending (None: no put_decoded yet, it holds none)
        self._pending_bytes = 0  # bytes of the values put in _pending (not counting overwrites)
        # the values of _codec appended to keys whose pending write is _APPENDED (append_decoded):
        # key -> the one value, or a list of them in order (decoded values are never lists); a
        # key whose pending write is no longer _APPENDED was written since, and is ignored
        self._appends: dict[bytes, object] = {}
        self._appended = 0  # values in _appends beyond each key's first
        # pending writes settle at these counts: a quarter of the change set's bound at most
        self._settle_every = max(1, min(_SETTLE_EVERY, options.max_changelog_bytes // (4 * _ENTRY_BYTES)))
        self._settle_bytes = min(_SETTLE_BYTES, options.max_changelog_bytes // 4)
        self._base_live: dict[bytes, bool] = {}  # keys read before first written: live in the base?
        self._base_keys = 0 if copy.manifest is None else copy.manifest.num_keys  # keys at _base_snapshot
        self._base_counts = {} if copy.manifest is None else copy.manifest.key_counts  # ... per prefix
        self._ingested = False  # ranges were ingested: this batch commits a snapshot
        self._settle_hooks: list = []  # add_settle_hook
        self._done = False
        self.copy_fate = "rebuilt"  # how the copy was found: opening.NEW, REUSED, REOPENED, CAUGHT_UP, REBUILT
        self.reused_working_copy = False  # a copy on this machine was used (reused, reopened or caught up)
        self.caught_up_working_copy = False  # ... of an older version, brought here by its changelogs
        self.bytes_referenced = 0  # after commit: bytes of every object the new version names

    @property
    def memo(self) -> dict:
        """Facts a layer above derived from this partition's contents, kept with the working
        copy across batches (:attr:`WorkingCopy.memo`: each must keep holding as this store's
        writes change the contents; a copy rebuilt or ingested into starts with none)."""
        return self._copy.memo

    def engine_stats(self) -> dict:
        """The working copy's ``antkv.DB.stats()`` (write amplification, levels, value log)."""
        self._check_active()
        self._write_through()
        return self._db.stats()

    # ------------------------------------------------------------------ reads

    def get(self, key, default=None):
        if self._done:
            self._check_active()
        if type(key) is not bytes:
            key = as_bytes(key, "key")
        value = self._pending.get(key, MISSING)
        if value is not MISSING:
            if value is None:
                return default
            if type(value) is bytes:
                return value
            # decoded, or appended to, and not encoded yet
            return self._resolve_appends(key) if value is _APPENDED else self._codec.encode(value)
        value = self._rows.lookup(key)
        if value is MISSING:
            value = self._read_through(key)
        return default if value is None else value

    def _read_through(self, key: bytes):
        """``key``'s value (None: absent) read from the database, which holds every settled
        write, into the row cache; remembered for the key count if the key is still the base's."""
        deferred = self._deferred
        if deferred:
            value = deferred.get(key, MISSING)
            if value is not MISSING:  # written by the batch, and no longer in the row cache
                self._rows.put(key, value)
                return value
        value = self._db.get(key)
        self._rows.put(key, value)
        if not self._ranges and key not in self._changes and not self._untracked:
            if self._change_bytes < self._max_change_bytes:  # what the key count need not read again
                self._base_live[key] = value is not None
                self._change_bytes += _ENTRY_BYTES
        return value

    def get_decoded(self, key: bytes, codec):
        """``codec.decode`` of ``key``'s value, or None if it is absent: what :meth:`put_decoded`
        gave with the same ``codec`` if it wrote the key last, else decoded from the bytes and
        kept decoded in the row cache, so that the next read (in this batch or a later one) does
        not decode again.  ``codec`` has ``encode(value) -> bytes`` and ``decode(bytes) ->
        value``, each the other's inverse on the values it is given, which are immutable (the
        caller gets the very object the cache keeps), never bytes nor None, and may have
        ``encode_many(values: list) -> list`` (``encode`` of each, the batch's writes encoded in
        bulk when they settle) and ``decode_some(raws: list) -> list`` (``decode`` of each raw it
        decodes in bulk, None for the others: :meth:`warm`); a store's reads use one codec.
        REQUIRES: ``key`` is bytes."""
        if self._done:
            self._check_active()
        value = self._pending.get(key, MISSING)
        if value is not MISSING:
            if value is None:
                return None
            if value is _APPENDED:
                value = self._resolve_appends(key)
            if type(value) is bytes:
                return codec.decode(value)
            return value if codec is self._codec else codec.decode(self._codec.encode(value))
        rows = self._rows
        if rows.codec is codec:
            value = rows.decoded.get(key, MISSING)
            if value is not MISSING:
                return value
        raw = rows.lookup(key)
        if raw is MISSING:
            raw = self._read_through(key)
        if raw is None:
            return None
        value = codec.decode(raw)
        rows.keep_one_decoded(key, raw, value, codec)
        return value

    def items(self, start=None, stop=None, *, prefix=None, reverse=False):
        self._check_active()
        self._write_through()
        return self._db.items(start, stop, prefix=prefix, reverse=reverse)

    def keys(self, start=None, stop=None, *, prefix=None, reverse=False):
        self._check_active()
        self._write_through()
        return self._db.keys(start, stop, prefix=prefix, reverse=reverse)

    def values(self, start=None, stop=None, *, prefix=None, reverse=False):
        self._check_active()
        self._write_through()
        return self._db.values(start, stop, prefix=prefix, reverse=reverse)

    def __contains__(self, key) -> bool:
        """Whether ``key`` is live, answered from the batch's writes, the row cache or the
        database's entry for it: a value kept in the value log is not read."""
        if self._done:
            self._check_active()
        if type(key) is not bytes:
            key = as_bytes(key, "key")
        value = self._pending.get(key, MISSING)
        if value is not MISSING:
            return value is not None
        value = self._rows.lookup(key)
        if value is not MISSING:
            return value is not None
        if self._deferred:
            value = self._deferred.get(key, MISSING)
            if value is not MISSING:
                return value is not None
        return key in self._db

    # ------------------------------------------------------------------ writes

    def put(self, key, value) -> None:
        if self._done:
            self._check_active()
        if type(key) is not bytes:
            key = as_bytes(key, "key")
        if type(value) is not bytes:
            value = as_bytes(value, "value")
        pending = self._pending
        pending[key] = value
        self._pending_bytes += len(value)
        if len(pending) >= self._settle_every or self._pending_bytes >= self._settle_bytes:
            self._settle()

    def append(self, key: bytes, suffix: bytes) -> None:
        """``put(key, get(key, b"") + suffix)`` -- a list state's append -- with one lookup of
        the key's value.  REQUIRES: ``key`` and ``suffix`` are bytes."""
        if self._done:
            self._check_active()
        pending = self._pending
        old = pending.get(key, MISSING)
        if old is MISSING:
            rows = self._rows
            old = rows.rows.get(key, MISSING)  # (RowCache.lookup, inlined)
            if old is MISSING:
                old = None if key[:PREFIX_LEN] in rows.complete else self._read_through(key)
        elif old is not None and type(old) is not bytes:  # decoded, or appended to, and not encoded yet
            old = self._resolve_appends(key) if old is _APPENDED else self._codec.encode(old)
        value = suffix if old is None else old + suffix
        pending[key] = value
        self._pending_bytes += len(value)
        if len(pending) >= self._settle_every or self._pending_bytes >= self._settle_bytes:
            self._settle()

    def append_decoded(self, key: bytes, value, codec) -> None:
        """``append(key, codec.encode(value))`` -- a list state's element, given decoded -- with
        the encoding and the lookup of the key's value done when the write settles, in bulk
        with the batch's other appends (``codec.encode_many``).  ``codec`` and ``value`` meet
        :meth:`get_decoded`'s contract; the encodings of a key's values must concatenate to
        the encoding of a list (as the rows codec's do).  REQUIRES: ``key`` is bytes."""
        if self._done or codec is not self._codec:
            self._writing_codec(codec)
        pending = self._pending
        old = pending.get(key, MISSING)
        if old is MISSING:
            pending[key] = _APPENDED
            self._appends[key] = value
            if len(pending) >= self._settle_every:
                self._settle()
        elif old is _APPENDED:
            appends = self._appends
            earlier = appends[key]
            if type(earlier) is list:
                earlier.append(value)
            else:
                appends[key] = [earlier, value]
            self._appended += 1
            if self._appended >= self._settle_every:
                self._settle()
        else:  # the batch wrote the key: appended to what it wrote, now
            self.append(key, codec.encode(value))

    def _writing_codec(self, codec) -> None:
        """Before a write of a decoded value of ``codec``: the store is active, and the pending
        decoded values are all of ``codec`` (those of another settle first)."""
        self._check_active()
        if codec is not self._codec:
            self._settle()
            self._codec = codec

    def _resolve_appends(self, key: bytes) -> bytes:
        """The bytes of ``key``, whose pending write is :data:`_APPENDED`: its value before with
        the values appended encoded after it, made its pending write."""
        earlier = self._appends.pop(key)
        values = earlier if type(earlier) is list else [earlier]
        self._appended -= len(values) - 1
        base = self._rows.lookup(key)  # (its value before the batch's pending writes)
        if base is MISSING:
            base = self._read_through(key)
        value = b"".join([b"" if base is None else base, *map(self._codec.encode, values)])
        self._pending[key] = value
        self._pending_bytes += len(value)
        return value

    def put_decoded(self, key: bytes, value, codec) -> None:
        """Write ``codec.encode(value)`` at ``key``, encoded when the write settles, and keep
        ``value`` as the key's decoded value (:meth:`get_decoded`, whose contract ``codec`` and
        ``value`` meet).  REQUIRES: ``key`` is bytes."""
        if self._done or codec is not self._codec:
            self._writing_codec(codec)
        pending = self._pending
        pending[key] = value
        if len(pending) >= self._settle_every:
            self._settle()

    def delete(self, key) -> None:
        if self._done:
            self._check_active()
        if type(key) is not bytes:
            key = as_bytes(key, "key")
        pending = self._pending
        pending[key] = None
        if len(pending) >= self._settle_every:
            self._settle()

    def _settle(self) -> None:
        """Move the batch's pending writes -- after the settle hooks added theirs -- into the
        change set, the working copy's deferred writes (or, in remote mode and once the batch
        keeps no change set, its database) and its row cache, encoding the decoded values among
        them; see the module docstring."""
        if self._settle_hooks:
            for hook in self._settle_hooks:
                hook()
        appended_found = None  # (what the row cache held for each pending key, when all were appended to)
        if self._appends:
            appended_found = settle_appends(self._pending, self._appends, self._codec, self._rows, self._read_through)
            self._appends, self._appended = {}, 0  # (kept until here: a value that fails to encode leaves them)
        pending = self._pending
        if not pending:
            return
        keep = None  # the decoded values, kept in the row cache beside their bytes
        self._pending, self._pending_bytes = {}, 0
        types = () if self._codec is None else set(map(type, pending.values()))  # (in C)
        if not _ENCODED_TYPES.issuperset(types):  # decoded values among them
            codec = self._codec
            encode_many = getattr(codec, "encode_many", None)
            if _ENCODED_TYPES.isdisjoint(types):  # every value decoded: the bytes in a dict of their own
                keep = pending
                pending = dict(zip(keep, encode_many(list(keep.values())) if encode_many is not None
                                   else map(codec.encode, keep.values())))
            else:  # (sorted from the bytes and deletions -- a settle hook's few among many -- in C)
                is_decoded = list(map(not_, map(_ENCODED_TYPES.__contains__, map(type, pending.values()))))
                keep = dict(zip(compress(pending, is_decoded), compress(pending.values(), is_decoded)))
                pending.update(zip(keep, encode_many(list(keep.values())) if encode_many is not None
                                   else map(codec.encode, keep.values())))
        if self._untracked:
            self._write(pending, keep)
        else:
            changes = self._changes
            fresh = not changes  # every pending key is new to the change set (one settle a batch: all)
            new = pending if fresh else list(filterfalse(changes.__contains__, pending))  # (keys, in order)
            # what the row cache holds for them, before the writes: what the base holds, if anything
            found = appended_found if fresh and appended_found is not None else \
                list(map(self._rows.rows.get, new, repeat(MISSING, len(new))))
            if new and not self._ranges and not self._learn_base_live(new, found) and not self._base_unknown:
                # the base is read at commit (pinned before a write reaches the database), where
                # the database alone must hold it: earlier batches' writes carried in the
                # deferred ones are written first (this batch's there are all of keys it learnt)
                self._base_unknown = True
                if self._carried:
                    self._copy.write_deferred()
                    self._carried = False
            if fresh:
                old_bytes = 0
            elif self._overflow:  # (its values are None or _LIVE)
                old_bytes = sum([len(v) for v in map(changes.get, pending) if type(v) is bytes])
            else:  # (its values are bytes or None; filter drops None, and empty values, which add nothing)
                old_bytes = sum(map(len, filter(None, map(changes.get, pending))))
            value_bytes = sum(map(len, filter(None, pending.values())))
            added = sum(map(len, pending)) + value_bytes
            self._change_bytes += _ENTRY_BYTES * len(new) + added - old_bytes
            if self._overflow:
                changes.update({k: None if v is None else _LIVE for k, v in pending.items()})
            elif fresh:
                self._changes = pending  # (no copy: nothing changes pending from here on)
            else:
                changes.update(pending)
            # (found is what the cache held for each pending key, in order, when every one is new)
            self._write(pending, keep, found if len(new) == len(pending) else None, added, value_bytes)
            if self._change_bytes > self._max_change_bytes:
                self._drop_changes()

    def add_settle_hook(self, hook) -> None:
        """Call ``hook()`` first whenever the batch's writes settle -- before a commit, a scan,
        a key count, or when enough writes gathered -- for the rest of the batch: a layer
        that gathers writes of its own in memory (the processor's timer sets) writes them into
        the store then, so that every reader of the store sees them.  ``hook`` may write."""
        self._check_active()
        self._settle_hooks.append(hook)

    def _write(self, changes: dict, keep: dict | None = None, olds: list | None = None,
               size: int | None = None, value_bytes: int | None = None) -> None:
        """``changes`` (key -> value or None) into the database, as one batch, and the row
        cache, which keeps ``keep`` (key -> the decoded value of ``changes[key]``) too;
        ``olds``, if known: what the row cache held for each key (:meth:`RowCache.write_many`);
        ``size`` and ``value_bytes``, if known: the keys' and values' bytes, and the values'.  (The store's keys and values are
        bytes, or None for a deletion: ``put``, ``append`` and ``delete`` checked or require
        them, ``put_decoded`` requires its keys bytes, and its codec encodes to bytes.)"""
        if size is None:
            size = sum(map(len, changes)) + sum(map(len, filter(None, changes.values())))
        if self._defer and not self._untracked:
            self._copy.defer(changes, size)
        else:
            self._pin_base_if_unknown()
            self._copy.write(changes, size)
        self._rows.write_many(changes, keep, self._codec, olds, value_bytes)

    def _write_through(self) -> None:
        """Settle the pending writes and write the deferred ones into the database: before
        anything reads the database beyond one key (a scan, a range deletion, an ingest)."""
        self._settle()
        if self._deferred:
            self._pin_base_if_unknown()
            self._copy.write_deferred()

    def _pin_base_if_unknown(self) -> None:
        """Before a write reaches the database: pin the base for the key count if the batch
        wrote a key without learning whether the base held it.  (Until then the database is
        the base for every such key, and the count reads it there.)"""
        if self._base_unknown and self._base_snapshot is None:
            self._pin_base()

    def _pin_base(self) -> None:
        """Take the snapshot the key count reads the base at, before the batch writes a key it
        has not learned about (nor a range deletion): until then the database's state of every
        such key is the base's."""
        self._base_snapshot = self._db.snapshot()

    def _learn_base_live(self, keys, found: list) -> bool:
        """Before the first writes of ``keys`` in the batch settle: whether each is live in the
        base, for those the row cache knows (``found``: the cache's value of each, or
        ``MISSING``).  Whether every key of ``keys`` is now known."""
        complete, base_live = self._rows.complete, self._base_live
        missing = found.count(MISSING)
        if not missing and None not in found:  # all cached live (a rewrite of warm keys)
            learnt = dict.fromkeys(keys, True)
        elif missing == len(keys) and complete.issuperset(map(_PREFIX, keys)):  # all new in whole key groups
            learnt = dict.fromkeys(keys, False)
        elif not missing or (complete and complete.issuperset(
                map(_PREFIX, compress(keys, map(is_, found, repeat(MISSING, len(keys))))))):
            # a mix, each key cached or in a key group held whole (a timer moved): live when
            # cached with a value, so absent when uncached
            learnt = dict(zip(keys, map(is_, map(type, found), repeat(bytes, len(keys)))))
        else:
            learnt = {k: v is not None for k, v in zip(keys, found) if v is not MISSING}
        if len(learnt) < len(keys) and complete:
            learnt.update({k: False for k, v in zip(keys, found) if v is MISSING and k[:PREFIX_LEN] in complete})
        before = len(base_live)
        if before:
            base_live.update(learnt)  # (a key read before holds the same: the cache holds the base's value)
        else:
            self._base_live = base_live = learnt
        self._change_bytes += _ENTRY_BYTES * (len(base_live) - before)  # as a read's entry is
        return len(learnt) == len(keys) or all([k in base_live for k in keys])

    def warm(self, prefixes, codec=None) -> int:
        """Read every entry under each prefix of :data:`~antkv.spark.store.row_cache.PREFIX_LEN`
        bytes (a key group) in ``prefixes`` into the row cache, which then holds the prefix
        whole: a read of any key there, present or absent, needs no engine read, and the commit
        needs none to count keys written without being read.  For a batch that touches most
        keys of its key groups, one ordered scan replaces a point read per key.  A prefix whose
        entries do not all fit the cache stays partly cached, not whole.  With ``codec`` (the
        codec of the batch's ``get_decoded``, which has ``decode_some(raws) -> list``: the
        decoded value of each raw it decodes in bulk, None for the others), the entries it
        decodes are kept decoded too, so that their reads decode nothing.  Returns the entries read."""
        self._check_active()
        self._settle()  # (in bulk per call: cheaper than letting the batch's writes pile up)
        rows = self._rows
        wanted = set()
        for prefix in prefixes:
            if type(prefix) is not bytes or len(prefix) != PREFIX_LEN:
                raise antkv.InvalidArgumentError(f"warm: a prefix is {PREFIX_LEN} bytes, not {prefix!r}")
            if prefix not in rows.complete:
                wanted.add(prefix)
        if wanted and self._deferred and not wanted.isdisjoint(map(_PREFIX, self._deferred)):
            # a deferred write falls in a key group read here: the database must hold it first
            # (one that falls in none, as a batch's earlier frames' writes do, stays deferred;
            # a key group held whole already is not read: nothing need be written for it)
            self._write_through()
        return hold_whole(self._db, rows, wanted, codec)

    def warm_touched(self, touched: dict, codec=None) -> int:
        """:meth:`warm` the prefixes where the batch is dense: ``touched[prefix]`` grouping
        keys of the batch, times :data:`_WARM_FACTOR`, reach the prefix's stored keys (as the
        base version counts them), and the row cache can hold them all
        (:meth:`RowCache.can_hold_whole`), decoding with ``codec`` as :meth:`warm` does.
        Nothing when the base's counts are unknown (an empty base's are known: every prefix is
        empty, held whole by a scan that reads nothing)."""
        counts = self._base_counts
        if counts is None or self._ranges:
            return 0
        dense = [p for p, n in touched.items() if n * _WARM_FACTOR >= counts.get(p, 0)]
        entries = sum(counts.get(p, 0) for p in dense)
        if not dense or not self._rows.can_hold_whole(entries):
            self._prefetch_touched(touched)
            return 0
        dense_set = set(dense)
        self._prefetch_touched({p: n for p, n in touched.items() if p not in dense_set})
        return self.warm(sorted(dense), codec)

    def _prefetch_touched(self, touched: dict) -> None:
        """Remote mode: fetch in parallel the table blocks of the key groups ``touched`` names
        (prefix -> grouping keys of the batch) that the row cache does not hold whole, when
        they are no more bytes than one chunk per grouping key -- what reading the keys one by
        one on a cold cache would fetch anyway (:mod:`~antkv.spark.store.prefetch`)."""
        remote = self._copy.remote
        if remote is None:
            return
        touched = {p: n for p, n in touched.items() if p not in self._rows.complete}
        if not touched:
            return
        self._write_through()
        plan = self._db.data_blocks(ranges=prefix_runs(sorted(touched)))
        if sum(length for blocks in plan.values() for _, length in blocks) <= \
                sum(touched.values()) * remote.blocks.chunk_bytes:
            remote.prefetch(plan, self, self.options.memory_bytes // 4)

    def prefetch(self, keys) -> int:
        """In remote mode, fetch in parallel the table chunks that point reads of ``keys``
        will need and the block cache lacks (:mod:`~antkv.spark.store.prefetch`): a batch that
        knows its keys reads them with a few parallel requests instead of one request per key
        on a cold cache.  The chunks are held in memory until commit or abort, up to a quarter
        of ``memory_bytes``.  Keys the row cache holds are skipped.  Returns the bytes its
        requests fetched (not the index and filter blocks finding the chunks may read); in
        download mode does nothing and returns 0."""
        self._check_active()
        remote = self._copy.remote
        if remote is None:
            return 0
        self._write_through()
        rows = self._rows.rows
        keys = [k for k in keys if k not in rows]
        if not keys:
            return 0
        plan = self._db.data_blocks(keys)
        return remote.prefetch(plan, self, self.options.memory_bytes // 4)["bytes"]

    def delete_range(self, begin, end) -> None:
        self._check_active()
        self._write_through()
        if self._base_snapshot is None:
            self._pin_base()
        self._db.delete_range(begin, end)
        self._rows.drop_range(bytes(begin), bytes(end))
        begin, end = bytes(begin), bytes(end)
        if begin == end:
            return
        self._ranges.append((begin, end))
        self._change_bytes += len(begin) + len(end)
        for k in self._changes:
            if begin <= k < end:
                self._changes[k] = None  # newer than the range: replayed after it, still deleted

    def _drop_changes(self) -> None:
        """The batch outgrew its change set: write what waits, settle the key count by one scan
        at commit, and keep nothing per key from now on (a snapshot is committed)."""
        self._write_through()
        self._overflow = self._untracked = True
        self._changes, self._base_live = {}, {}

    # ------------------------------------------------------------------ key count

    def num_keys(self) -> int:
        """The exact number of keys now (the base version's count plus this batch's effect)."""
        self._check_active()
        return self._count()[0]

    def _count(self) -> tuple[int, dict | None]:
        """``(keys now, keys per prefix now or None)``: :func:`key_counts.count_changes`."""
        self._settle()
        if self._untracked:
            return count_all(self._db)
        # (a batch without range deletions that learnt every key it wrote, _base_unknown False,
        # knows whether each was live in the base: _settle learns the keys as they settle)
        return count_changes(self._db, self._base_snapshot, self._base_keys, self._base_counts, self._changes,
                             self._base_live, merge_ranges(self._ranges), _SCAN_FACTOR,
                             known_all=not self._base_unknown and not self._ranges)

    # ------------------------------------------------------------------ ingest

    def ingest_version(self, manifest: str, begin, end) -> int:
        """Replace this state's keys in ``[begin, end)`` by what committed version ``manifest``
        (an object name in this store's location and operator, typically another partition's
        published version) holds there, by adding that version's files, not by copying keys:
        :meth:`WorkingCopy.ingest_version` links its snapshot files from the local cache and
        ingests the range (tables wholly inside it and the value-log files they point into are
        hard-linked; only tables straddling a bound are rewritten), then applies the records of
        its changelogs inside the range.  That version is never opened as a database.  Returns
        the number of keys brought in.

        The ingested keys are in no changelog, so this batch commits a snapshot; its files
        ingested unchanged name that version's objects and are not uploaded again.

        The key count stays exact: it is settled first (the usual rule); the keys of ``[begin,
        end)`` here before, and brought in after, are read from the key counts per prefix when
        the range is aligned to prefixes (every key-group range is) and the counts are known
        -- nothing is read per key -- and are otherwise counted by one ordered scan of the
        range's keys here (a scan of live keys counts each key once).  The batch then counts
        from the state after the ingest, as from a new base."""
        self._check_active()
        if not isinstance(manifest, str):
            raise TypeError(f"manifest must be an object name (str), not {type(manifest).__name__}")
        for name, bound in (("begin", begin), ("end", end)):
            if not isinstance(bound, (bytes, bytearray, memoryview)):
                raise TypeError(f"{name} must be bytes, not {type(bound).__name__}")
        begin, end = bytes(begin), bytes(end)
        if begin > end:
            raise antkv.InvalidArgumentError(f"ingest_version: begin {begin!r} > end {end!r}")
        source = read_manifest(self.location, manifest)
        if source.operator != self.operator:
            raise antkv.InvalidArgumentError(
                f"manifest {manifest} is operator {source.operator!r}'s state, not {self.operator!r}'s")
        total, counts = self._count()
        self._write_through()
        by_counts = aligned(begin, end)
        replaced = (in_range(counts, begin, end) if by_counts and counts is not None
                    else scan_counts(self._db, begin, end))
        self._rows.clear()  # the range's keys change under the store: forget them all
        self._copy.ingest_version(self.location, source, begin, end)
        brought = (in_range(source.key_counts, begin, end) if by_counts and source.key_counts is not None
                   else scan_counts(self._db, begin, end))
        if self._base_snapshot is not None:
            self._base_snapshot.release()
            self._base_snapshot = None  # (the state after the ingest is the new base)
        self._base_unknown = False
        self._base_keys = total - sum(replaced.values()) + sum(brought.values())
        self._base_counts = None if counts is None else add_counts(counts, replaced, brought)
        self._changes, self._ranges, self._base_live = {}, [], {}
        self._change_bytes = 0
        self._overflow = True  # a snapshot is committed: the changed values need not be kept
        self._ingested = True
        return sum(brought.values())

    # ------------------------------------------------------------------ commit / abort

    def commit(self) -> CommitMessage:
        """Make version ``self.version + 1`` durable in the location; see the module docstring."""
        self._check_active()
        copy, loc = self._copy, self.location
        version = self.version + 1
        attempt = new_attempt_id()
        base_name, base = copy.manifest_name, copy.manifest
        checkpoint = None  # a checkpoint of the new version (snapshot commits), parked below
        try:
            num_keys, key_counts = self._count()
            # the count was the base snapshot's last reader: released now, the snapshot's flush
            # below writes each key's newest version only, not the base's as well
            if self._base_snapshot is not None:
                self._base_snapshot.release()
            snapshot = None if base is None else base.snapshot
            chain = () if base is None else base.changelogs
            nbytes = nobjects = 0
            wrote_snapshot = False
            if self._changes or self._ranges or self._ingested or self._untracked:
                log = None  # not encoded when a snapshot is due whatever its size, or due at its least size
                ranges = merge_ranges(self._ranges)
                # the floor is counted only when the change set's charge (at least its records'
                # size) could reach a snapshot: a common batch's changelog is far from one
                if not (self._overflow or self._needs_snapshot(snapshot, chain, 0)):
                    refuse = None
                    if self._needs_snapshot(snapshot, chain, self._change_bytes):
                        def refuse(floor: int) -> bool:
                            return self._needs_snapshot(snapshot, chain, floor)
                    log = encode_changelog(ranges, self._changes, refuse)
                if log is None or self._needs_snapshot(snapshot, chain, len(log)):
                    if not self._rewrite_if_state_rewritten(num_keys, chain) and not self._ingested:
                        copy.settle_debt(num_keys)
                    checkpoint = copy.checkpoint()
                    snapshot, nbytes, nobjects = copy.write_snapshot(
                        loc, self.operator, self.partition, version, attempt, checkpoint)
                    chain = ()
                    wrote_snapshot = True
                else:
                    name = changelog_name(self.operator, self.partition, version, attempt)
                    loc.write(name, log)
                    chain = chain + (FileRef(name, len(log), xxhash.xxh3_128_hexdigest(log), version=version),)
                    nbytes, nobjects = len(log), 1
            manifest = Manifest(self.operator, self.partition, version, attempt, base_name, num_keys,
                                snapshot, chain, key_counts)
            name = manifest_name(self.operator, self.partition, version, attempt)
            data = manifest.encode()
            loc.write(name, data)
            nbytes += len(data)
            nobjects += 1
        except BaseException:
            if checkpoint is not None:
                copy.drop_checkpoint(checkpoint)
            self._discard()
            raise
        self._finish()
        self.bytes_referenced = sum(c.size for c in manifest.changelogs) + (
            0 if manifest.snapshot is None else sum(f.size for f in manifest.snapshot.files))
        copy.advance(name, manifest)
        if self.options.park_copies and background_parking():
            held.give_back(loc, self.operator, self.partition, copy, self.options.max_idle_stores,
                           park=lambda: self._park(checkpoint))
        elif self._park(checkpoint):
            held.give_back(loc, self.operator, self.partition, copy, self.options.max_idle_stores)
        else:
            copy.destroy()
        return CommitMessage(self.operator, self.partition, version, name, base_name, num_keys,
                             nbytes, nobjects, wrote_snapshot)

    def _park(self, checkpoint: str | None) -> bool:
        """Leave the committed copy on the machine (``StoreOptions.park_copies``;
        :mod:`antkv.spark.store.parked_copies`); False if that failed.  The version is
        committed whatever happens here: a copy that cannot be parked (a full disk) is logged,
        not kept (its database may have turned read-only), and the next process to open the
        partition rebuilds it from the location.  In a reused Spark worker this runs in a thread
        after the commit returned (``idle_copies.background_parking``)."""
        copy = self._copy
        if not self.options.park_copies:
            if checkpoint is not None:
                copy.drop_checkpoint(checkpoint)
            try:
                copy.carry_deferred()  # (written now if many: the idle copy's next store would, failing its batch)
            except antkv.Error as e:
                log.warning("antkv.spark: %s/%d version %d was committed, its working copy is dropped: %s",
                            self.operator, self.partition, copy.version, e)
                return False
            return True
        try:
            copy.park(ParkedCopies(copy.cache), self.location, self.operator, self.partition, checkpoint)
        except (antkv.Error, OSError) as e:  # the local disk's trouble: the version is committed all the same
            log.warning("antkv.spark: %s/%d version %d was committed but not parked: %s",
                        self.operator, self.partition, copy.version, e)
            return False
        return True

    def _rewrite_if_state_rewritten(self, num_keys: int, chain) -> bool:
        """Before a snapshot: replace the working copy's database by the live state in one
        table (:meth:`WorkingCopy.rewrite`) when the row cache, with this batch's change set,
        holds that state nearly whole (:meth:`WorkingCopy.whole_state`) and the changes since
        the last snapshot -- the ``chain``'s changelogs and this batch's -- reach half its
        bytes; returns whether it did.  A checkpoint would then upload a table about that
        large anyway, beside older tables holding the same keys; a state that changed less
        keeps its tables (a snapshot uploads only the new one), and so does a batch that
        ingested ranges (its snapshot names the source partition's objects)."""
        if self._ingested:
            return False
        # (the change set holds each changed key's value, or None, unless a range deletion,
        # an overflow or an ingest made it drop them)
        values_kept = not (self._ranges or self._untracked or self._overflow)
        whole = self._copy.whole_state(num_keys, self._changes if values_kept else None)
        if whole is None:
            return False
        keys, values = whole
        changed = sum(ref.size for ref in chain) + self._change_bytes
        if 2 * changed >= sum(map(len, keys)) + sum(map(len, values)):
            self._copy.rewrite(keys, values)
            self._db = self._copy.db
            return True
        return False

    def _needs_snapshot(self, snapshot, chain, log_bytes: int) -> bool:
        o = self.options
        if len(chain) + 1 > o.max_changelog_chain:
            return True
        if o.remote_tables and self._copy.local_bytes() + int(
                self._db.property("antkv.cur-size-all-mem-tables")) > o.cache_disk_bytes // 4:
            # remote tables: hand what was written since the last snapshot (its tables, and the
            # memtables that become tables) over to the location
            return True
        chain_bytes = sum(c.size for c in chain) + log_bytes
        return chain_bytes > max(snapshot.bytes if snapshot is not None else 0, MiB) * o.snapshot_ratio

    def abort(self) -> None:
        """Forget this batch: the working copy is dropped, nothing was published."""
        if not self._done:
            self._discard()

    def close(self) -> None:
        """Abort if the batch was not committed (a store is done after commit or abort)."""
        self.abort()

    def __enter__(self) -> "StateStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _check_active(self) -> None:
        if self._done:
            raise antkv.DBClosedError(
                f"state store {self.operator}/{self.partition} version {self.version} is committed or aborted")

    def _finish(self) -> None:
        self._done = True
        if self._copy.remote is not None:
            self._copy.remote.blocks.release(self)  # the chunks this batch's prefetch held
        self._rows.deactivate()
        if self._base_snapshot is not None:
            self._base_snapshot.release()
        self._changes, self._ranges, self._base_live, self._pending, self._appends = {}, [], {}, {}, {}
        self._settle_hooks = []

    def _discard(self) -> None:
        try:
            self._finish()
        except antkv.Error:
            pass
        self._copy.destroy()

    def __repr__(self) -> str:
        return f"StateStore({self.location.uri!r}, {self.operator!r}, partition={self.partition}, version={self.version})"

