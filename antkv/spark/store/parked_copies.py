"""Parked working copies: a committed copy left on the machine for whichever process runs the
partition next.

Spark runs a partition's next task in any free Python worker, stops idle workers after a
minute, and starts a crashed one anew.  A copy kept open in the process that committed it
(:mod:`antkv.spark.store.idle_copies`) is found by that process only.  A *parked* copy
belongs to the machine: after each commit the store checkpoints its working copy's database
into the local cache's ``parked/`` directory, beside a record of the version it holds.  A
process that opens the partition at exactly that version *claims* the parked copy (one
rename), checks it and opens it: no download, no changelog replay, no rebuild.

Layout under the local cache's root::

    parked/<slot>/<entry>/owner.lock   held by the parking process until RECORD is in place
                                       (<entry>: the version, 20 digits, "-", a random id)
    parked/<slot>/<entry>/db/          an antkv checkpoint of the working copy's database
    parked/<slot>/<entry>/RECORD       what db/ holds (an envelope of kind b"K", objects.py):
                                       location identity, operator, partition, the manifest
                                       (name and bytes) of the version, the copy's file map,
                                       and the size and xxh3_128 of every file in db/
    parked/trash-<id>/                 an entry being removed (renamed here first)

``<slot>`` is a hash of (location identity, operator, partition).

Invariants:

* an entry can be claimed only once its RECORD exists, and RECORD is renamed into place after
  every file of ``db/`` is complete: a process killed while parking leaves an entry without
  RECORD, whose free ``owner.lock`` marks it as debris for :meth:`ParkedCopies.sweep`;
* a claim takes an entry whole by renaming it into the claimer's own working directory (whose
  ``owner.lock`` it holds): of two processes racing for an entry exactly one gets it, the
  other finds it gone and looks elsewhere (in the end: rebuilds from the location);
* a removal renames the entry to ``trash-<id>`` first, so no claim ever takes half an entry;
* a claimed copy is used only if RECORD verifies, names the location, operator, partition and
  manifest asked for, and ``db/`` holds exactly the files RECORD lists, each with its size and
  xxh3_128.  Anything else (a stale version, a lost attempt's copy, a damaged or truncated
  file, a file too many) is removed and the partition is built another way: a parked copy is
  never served unless it is exactly what was committed;
* a worker Spark reuses parks in a thread after its commit returned
  (:mod:`antkv.spark.store.idle_copies`); a claim of a version whose entry is still being
  parked waits for it (its owner lock) rather than rebuilding;
* parking a version removes the slot's entries of older versions, so a slot holds the newest
  copy committed on this machine (two when duplicate attempts of one version both parked);
  entries beyond the local cache's disk budget go least recently parked first, never the one
  just parked (:meth:`ParkedCopies.trim`).

**Upkeep.**  Sweeping and trimming read every slot of the machine (every partition of every
query that ran there): a pass over a thousand slots took 150 ms.  A parking process passes
over them at most once per :data:`UPKEEP_EVERY_S`, and in between keeps an estimate -- the
parked bytes its last pass left, plus every entry it parked since (an overestimate: a newer
version's entry replaces the slot's older ones) -- and passes at once when the estimate and
the cached objects exceed the disk budget (:meth:`ParkedCopies.upkeep`).  The budget may
then be exceeded, until the next pass, by what other processes park meanwhile; debris of a
killed process waits for the next pass of any process.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
import threading
import time
import uuid
from dataclasses import dataclass

import xxhash

import antkv
from antkv.spark.store.local_cache import LocalCache, WorkDir, os_errors
from antkv.spark.store.location import Location
from antkv.spark.store.objects import FORMAT, KIND_PARKED, FileRef, Manifest, file_digest, seal, unseal

RECORD = "RECORD"
PARKING_WAIT_S = 30.0  # how long a claim waits for the parking of the version it wants
UPKEEP_EVERY_S = 30.0  # a parking process sweeps and trims the whole parked area at least this often
_DAMAGED = object()  # an entry whose RECORD does not decode
_OWNER_LOCK = "owner.lock"
_TRASH = "trash-"
_upkeep: dict[str, list] = {}  # parked root -> [monotonic time of this process's last pass, estimated parked bytes]
_upkeep_lock = threading.Lock()


@dataclass(frozen=True)
class ParkedRecord:
    """What a parked entry's ``db/`` holds."""

    location: str  # Location.identity
    operator: str
    partition: int
    manifest_name: str
    manifest: bytes  # the manifest object's bytes (Manifest.encode())
    file_map: dict  # engine file name -> FileRef of the object holding it (WorkingCopy.file_map)
    files: dict  # every file in db/ -> (size, xxh3_128 hex)

    @property
    def version(self) -> int:
        return self.decoded_manifest().version

    def decoded_manifest(self) -> Manifest:
        return Manifest.decode(self.manifest, self.manifest_name)

    def encode(self) -> bytes:
        doc = {
            "format": FORMAT, "location": self.location, "operator": self.operator,
            "partition": self.partition, "manifest_name": self.manifest_name,
            "manifest": self.manifest.hex(),
            "file_map": {k: [r.object, r.size, r.xxh3] for k, r in sorted(self.file_map.items())},
            "files": {k: [size, digest] for k, (size, digest) in sorted(self.files.items())},
        }
        return seal(KIND_PARKED, json.dumps(doc, separators=(",", ":")).encode(), compress=True)

    @staticmethod
    def decode(data: bytes, path: str) -> "ParkedRecord":
        doc = json.loads(unseal(KIND_PARKED, data, path))
        try:
            return ParkedRecord(
                doc["location"], doc["operator"], int(doc["partition"]), doc["manifest_name"],
                bytes.fromhex(doc["manifest"]),
                {k: FileRef(o, int(s), h, local=k) for k, (o, s, h) in doc["file_map"].items()},
                {k: (int(s), h) for k, (s, h) in doc["files"].items()})
        except (KeyError, TypeError, ValueError) as e:
            raise antkv.CorruptionError(f"malformed parked-copy record: {e}", path) from e


class ParkedCopies:
    """The parked copies of one local cache (``<cache root>/parked``); see the module docstring."""

    def __init__(self, cache: LocalCache):
        self.cache = cache
        self.root = os.path.join(cache.root, "parked")

    def slot(self, location: Location, operator: str, partition: int) -> str:
        key = f"{location.identity}\0{operator}\0{partition}".encode()
        return os.path.join(self.root, xxhash.xxh64_hexdigest(key))

    # ------------------------------------------------------------------ parking

    def park(self, location: Location, operator: str, partition: int, checkpoint: str,
             manifest_name: str, manifest: Manifest, file_map: dict) -> str:
        """Move ``checkpoint`` (an antkv checkpoint of a working copy that holds ``manifest``,
        committed as object ``manifest_name``) into a new entry of the partition's slot, and
        remove the slot's entries of older versions; returns the new entry's path.  On an
        error the new entry is removed and the checkpoint with it: nothing half-parked can be
        claimed."""
        slot = self.slot(location, operator, partition)
        entry = os.path.join(slot, f"{manifest.version:020d}-{uuid.uuid4().hex}")
        with os_errors(entry):
            with self.cache.locked():  # a sweep never sees the entry before its lock is held
                os.makedirs(entry)
                fd = os.open(os.path.join(entry, _OWNER_LOCK), os.O_RDWR | os.O_CREAT, 0o644)
                fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                try:
                    db = os.path.join(entry, "db")
                    os.rename(checkpoint, db)
                    files = _digests(db, file_map)
                    record = ParkedRecord(location.identity, operator, partition, manifest_name,
                                          manifest.encode(), dict(file_map), files)
                    tmp = os.path.join(entry, f"{RECORD}.tmp")
                    with open(tmp, "wb") as f:
                        f.write(record.encode())
                    os.rename(tmp, os.path.join(entry, RECORD))
                except BaseException:
                    shutil.rmtree(entry, ignore_errors=True)
                    raise
            finally:
                os.close(fd)
            for other, rec in self._entries(slot):
                if other != entry and rec is not None and rec is not _DAMAGED and rec.version < manifest.version:
                    self._remove(other)
        return entry

    # ------------------------------------------------------------------ claiming

    def claim(self, location: Location, operator: str, partition: int, version: int, accept,
              work: WorkDir) -> ParkedRecord | None:
        """Claim the best entry of the partition's slot into ``work`` (its ``db/`` becomes
        ``work.db_path``) and return its verified record, or None.  ``accept(record)`` ranks an
        entry: None refuses it, else a number (lower is better).  A claimed entry that does
        not verify is removed and the next one tried.  An entry of ``version`` still being
        parked (by a worker that committed it and parks in the background) is waited for, up
        to :data:`PARKING_WAIT_S`."""
        slot = self.slot(location, operator, partition)
        _wait_for_parking(slot, version)
        ranked = []
        for entry, rec in self._entries(slot):
            if rec is _DAMAGED:
                self._remove(entry)  # RECORD appears whole (a rename): one that does not decode is damage
                continue
            if rec is None or (rec.location, rec.operator, rec.partition) != (location.identity, operator, partition):
                continue
            rank = accept(rec)
            if rank is not None:
                ranked.append((rank, entry))
        for _, entry in sorted(ranked):
            taken = os.path.join(work.path, f"claimed-{uuid.uuid4().hex}")
            try:
                os.rename(entry, taken)
            except FileNotFoundError:
                continue  # another process claimed (or removed) it first
            except OSError as e:
                raise antkv.IOError(f"cannot claim a parked copy: {e}", e, entry) from e
            record = _verified(taken)
            if record is None:
                shutil.rmtree(taken, ignore_errors=True)
                continue
            with os_errors(work.path):
                shutil.rmtree(work.db_path)  # empty: made with the work directory
                os.rename(os.path.join(taken, "db"), work.db_path)
                shutil.rmtree(taken, ignore_errors=True)
            return record
        return None

    # ------------------------------------------------------------------ upkeep

    def sweep(self) -> int:
        """Remove entries a process killed while parking left without RECORD, and trash a
        killed remover left; returns how many."""
        try:
            slots = os.listdir(self.root)
        except FileNotFoundError:
            return 0
        debris = [os.path.join(self.root, name) for name in slots if name.startswith(_TRASH)]
        with self.cache.locked():
            for name in slots:
                if name.startswith(_TRASH):
                    continue
                slot = os.path.join(self.root, name)
                try:
                    entries = [os.path.join(slot, e) for e in os.listdir(slot)]
                except (FileNotFoundError, NotADirectoryError):
                    continue
                debris += [e for e in entries if not os.path.exists(os.path.join(e, RECORD)) and _abandoned(e)]
        for path in debris:
            self._remove(path)
        return len(debris)

    def upkeep(self, budget: int, other_bytes: int, keep: str) -> int:
        """After parking ``keep``: :meth:`sweep` and :meth:`trim` the parked area when this
        process last did over :data:`UPKEEP_EVERY_S` ago, or its estimate of the parked bytes
        plus ``other_bytes`` (the cache's objects) exceeds ``budget`` (the module docstring's
        *Upkeep*); returns the entries removed."""
        added = _own_bytes(os.path.join(keep, "db"))
        now = time.monotonic()
        with _upkeep_lock:
            last = _upkeep.get(self.root)
            if last is not None and now - last[0] < UPKEEP_EVERY_S and other_bytes + last[1] + added <= budget:
                last[1] += added
                return 0
            _upkeep[self.root] = [now, (last[1] if last else 0) + added]  # (until it ends, no other pass starts)
        removed = self.sweep()
        trimmed, parked_bytes = self._trim(budget, other_bytes, keep)
        with _upkeep_lock:
            _upkeep[self.root] = [now, parked_bytes + added]
        return removed + trimmed

    def trim(self, budget: int, other_bytes: int, keep: str | None = None) -> int:
        """Remove entries, least recently parked first, while ``other_bytes`` (the cache's
        objects) plus the bytes only parked entries hold exceed ``budget``, never the entry
        ``keep`` (the one just parked: the copy the partition's next task wants); returns
        entries removed."""
        return self._trim(budget, other_bytes, keep)[0]

    def _trim(self, budget: int, other_bytes: int, keep: str | None) -> tuple[int, int]:
        """:meth:`trim`; returns ``(entries removed, bytes only the entries left but keep hold)``."""
        entries = []
        total = other_bytes
        try:
            slots = [os.path.join(self.root, s) for s in os.listdir(self.root) if not s.startswith(_TRASH)]
        except FileNotFoundError:
            return 0, 0
        for slot in slots:
            for entry, rec in self._entries(slot):
                if rec is None or rec is _DAMAGED or entry == keep:
                    continue
                own = _own_bytes(os.path.join(entry, "db"))
                total += own
                try:
                    entries.append((os.stat(os.path.join(entry, RECORD)).st_mtime, entry, own))
                except FileNotFoundError:
                    continue
        removed = 0
        for _, entry, own in sorted(entries):
            if total <= budget:
                break
            self._remove(entry)
            total -= own
            removed += 1
        return removed, total - other_bytes

    def records(self, location: Location, operator: str, partition: int) -> list[ParkedRecord]:
        """The records of the partition's claimable entries (tests, tools)."""
        return [rec for _, rec in self._entries(self.slot(location, operator, partition))
                if rec is not None and rec is not _DAMAGED]

    def _entries(self, slot: str):
        """``(entry path, record)`` for each entry of ``slot``; the record is None when the entry
        has none yet (being parked, or debris for the sweep), :data:`_DAMAGED` when it does not
        decode."""
        try:
            names = os.listdir(slot)
        except FileNotFoundError:
            return []
        out = []
        for name in names:
            entry = os.path.join(slot, name)
            try:
                with open(os.path.join(entry, RECORD), "rb") as f:
                    data = f.read()
            except (FileNotFoundError, NotADirectoryError):
                out.append((entry, None))
                continue
            except OSError:
                continue
            try:
                out.append((entry, ParkedRecord.decode(data, os.path.join(entry, RECORD))))
            except (antkv.CorruptionError, ValueError):
                out.append((entry, _DAMAGED))
        return out

    def _remove(self, entry: str) -> None:
        trash = entry
        if not os.path.basename(entry).startswith(_TRASH):
            trash = os.path.join(self.root, f"{_TRASH}{uuid.uuid4().hex}")
            try:
                os.rename(entry, trash)
            except FileNotFoundError:
                return  # claimed or removed by another process
            except OSError:
                return  # left for a later sweep
        shutil.rmtree(trash, ignore_errors=True)


def _wait_for_parking(slot: str, version: int) -> None:
    """Wait until no entry of ``version`` in ``slot`` is being parked (its owner lock held and
    no RECORD yet), at most :data:`PARKING_WAIT_S` in all."""
    prefix = f"{version:020d}-"
    try:
        pending = [os.path.join(slot, n) for n in os.listdir(slot) if n.startswith(prefix)]
    except (FileNotFoundError, NotADirectoryError):
        return
    deadline = time.monotonic() + PARKING_WAIT_S
    for entry in pending:
        while (not os.path.exists(os.path.join(entry, RECORD)) and os.path.isdir(entry)
               and not _abandoned(entry) and time.monotonic() < deadline):
            time.sleep(0.01)


def _digests(db: str, file_map: dict) -> dict:
    """``{file: (size, xxh3_128)}`` for every file in ``db``; a file the file map names by an
    object whose size it has is recorded with the object's hash (the object's bytes, linked
    from the local cache or uploaded from this file: no need to read it again)."""
    files = {}
    for name in os.listdir(db):
        path = os.path.join(db, name)
        ref = file_map.get(name)
        size = os.stat(path).st_size
        if ref is not None and ref.size == size:
            files[name] = (size, ref.xxh3)
        else:
            files[name] = file_digest(path)
    return files


def _verified(entry: str) -> ParkedRecord | None:
    """The record of claimed ``entry`` if its ``db/`` holds exactly the files it lists with
    their sizes and hashes, else None."""
    path = os.path.join(entry, RECORD)
    try:
        with open(path, "rb") as f:
            record = ParkedRecord.decode(f.read(), path)
        db = os.path.join(entry, "db")
        if sorted(os.listdir(db)) != sorted(record.files):
            return None
        for name, (size, digest) in record.files.items():
            if file_digest(os.path.join(db, name)) != (size, digest):
                return None
        return record
    except (OSError, antkv.CorruptionError, ValueError):
        return None


def _abandoned(entry: str) -> bool:
    """Whether no process holds ``entry``'s owner lock (its parker ended before RECORD)."""
    try:
        fd = os.open(os.path.join(entry, _OWNER_LOCK), os.O_RDWR)
    except FileNotFoundError:
        return True  # a lock is the entry's first file: an entry without one lost it to damage
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError as e:
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return False
        raise
    finally:
        os.close(fd)


def _own_bytes(db: str) -> int:
    """Bytes of the files in ``db`` no other directory links (only this entry holds them)."""
    total = 0
    try:
        names = os.listdir(db)
    except FileNotFoundError:
        return 0
    for name in names:
        try:
            st = os.stat(os.path.join(db, name))
        except FileNotFoundError:
            continue
        if st.st_nlink == 1:
            total += st.st_size
    return total
