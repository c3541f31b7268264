r"""The machine-wide block cache: ranges of snapshot files read from the location, on local disk.

A working copy in remote mode (``StoreOptions(tables="remote")``, :mod:`remote_tables`) reads
its snapshot's tables and value-log files from the checkpoint location by byte ranges.  The
ranges are cut into aligned *chunks* (:attr:`BlockCache.chunk_bytes`, 64 KiB; smaller when
``cache_disk_bytes`` is under 4 MiB), and every chunk fetched is kept here, for every Python
worker on the host.

Layout under the local cache's root::

    blocks/LOCK                               fcntl lock held by an eviction
    blocks/<hh>/<object key>-<chunk index>    one chunk of one object (an entry)
    blocks/<hh>/<entry>.tmp-<pid>-<random>    an entry being written

``<object key>`` is the xxh3_128 of (location identity, object name, the object's xxh3_128):
objects are write-once, so a key names the same bytes forever.  An entry is::

    +---------------------------+-------+---------------+------------------------------+
    | chunk bytes (<= chunk)    | magic | payload bytes | xxh3_64(entry name + chunk)  |
    |                           | AKBc  | u32 LE        | u64 LE                       |
    +---------------------------+-------+---------------+------------------------------+

Invariants:

* an entry is immutable: written whole under a temporary name, then renamed into place (two
  processes writing the same entry write the same bytes; the last rename wins, harmlessly);
* an entry is served only if its trailer checks (magic, length, hash over its own name and
  its bytes, so a misplaced entry fails too); one that does not is removed and the chunk read
  from the location again;
* entries are evicted least recently used first (a hit refreshes the entry's mtime) to keep
  their total within ``cache_disk_bytes``, checked after every sixteenth of the budget written
  by a process; a reader that opened an entry before its removal still reads it whole;
* a full local disk (ENOSPC or EDQUOT writing an entry) evicts down to half the entries' bytes
  and skips the entry: the read is served from the bytes fetched, the task goes on.

Read-ahead (:class:`RemoteFile`): a read of the chunk after the one a file read last fetches
twice as many chunks as the previous fetch (up to :data:`READAHEAD_CHUNKS`, 4 MiB) in one
request, so a scan of a table is a few large sequential requests, not one per block.  Any
other read fetches one chunk: a point read costs a request of 64 KiB, a few of the engine's
16 KiB blocks.

Reads that pass the cache by (RocksDB's ``fill_cache=false``): chunks a cache of this budget
would only lose again before anyone read them are fetched without being kept, so they neither
pay an entry's write nor evict the chunks the point reads of the next batches need.

* A *bulk read* -- one read of more than :data:`READAHEAD_CHUNKS` chunks, which is how a
  compaction reads an input table (:meth:`antkv.sst.reader.TableReader.columns`: the table's data
  blocks with one read) -- serves the chunks the cache holds from their entries and fetches
  every run of the others in requests of up to :data:`READAHEAD_CHUNKS` chunks, keeping none:
  the compaction deletes its inputs, and its outputs are written locally.
* A *long scan* -- a sequential run of one file past a quarter of the budget -- keeps its
  chunks only up to that quarter: a scan larger than the cache would evict every other entry
  and then its own first chunks before the next scan came back to them.
"""

from __future__ import annotations

import errno
import logging
import os
import struct
import threading
import time
import uuid

import xxhash

from antkv import IOError as AntIOError
from antkv.fs import FileSystem, RandomAccessFile, default_file_system

from antkv.spark.store.local_cache import HostLock, tree_bytes
from antkv.spark.store.location import Location
from antkv.spark.store.objects import FileRef

log = logging.getLogger(__name__)
MiB = 1 << 20
CHUNK_BYTES = 64 * 1024  # the chunk of a cache of at least 4 MiB: a point read fetches this much
READAHEAD_CHUNKS = 64  # the most chunks one sequential fetch asks for (4 MiB)
_TRAILER = struct.Struct("<4sIQ")  # magic, payload length, xxh3_64(entry name + payload)
_MAGIC = b"AKBc"
_FULL = (errno.ENOSPC, errno.EDQUOT)
_DEBRIS_AGE_S = 600.0  # a temporary entry this old belongs to a process that died while writing it


class BlockCache:
    """The block cache under ``<root>/blocks``, bounded by ``budget`` bytes (module docstring).

    ``file_system`` (an :class:`antkv.fs.FileSystem`) writes and reads the entries; the
    counters are this process's."""

    def __init__(self, root: str, budget: int, file_system: FileSystem | None = None):
        self.root = os.path.join(os.path.abspath(root), "blocks")
        self.budget = budget
        self.chunk_bytes = _chunk_for(budget)
        self.file_system = file_system or default_file_system()
        self._lock_path = os.path.join(self.root, "LOCK")
        self._mutex = threading.Lock()
        self._since_scan = budget  # bytes written since the last eviction check: check at once
        self.hits = 0  # chunks served from an entry on disk
        self.misses = 0  # chunks fetched from the location
        self.fetches = 0  # requests to the location
        self.fetched_bytes = 0
        self.corrupt_dropped = 0  # entries whose trailer did not check
        self.full_skipped = 0  # entries not written for want of disk space
        self.passed_by = 0  # chunks fetched and not kept: bulk reads and long scans (module docstring)
        self.read_timeout_s: float | None = None  # a location read taking longer fails (ObjectRanges)
        self._held: dict[tuple[str, int], bytes] = {}  # chunks a prefetch holds in memory (hold)
        self._holders: dict[object, list[tuple[str, int]]] = {}  # holder -> the chunks it holds
        self.file_system.mkdirs(self.root)

    def object_key(self, location: Location, ref: FileRef) -> str:
        return xxhash.xxh3_128_hexdigest(f"{location.identity}\0{ref.object}\0{ref.xxh3}".encode())

    def entry_path(self, key: str, index: int) -> str:
        return os.path.join(self.root, key[:2], f"{key}-{index:08d}")

    # ------------------------------------------------------------------ entries

    def get(self, key: str, index: int, touch: bool = True) -> bytes | None:
        """Chunk ``index`` of object ``key`` if a prefetch holds it in memory (:meth:`hold`)
        or an entry holds it and checks, else None.  ``touch``: a hit makes the entry the most
        recently used (a bulk read's does not: it will not read the chunk again)."""
        data = self._held.get((key, index))
        if data is not None:
            with self._mutex:
                self.hits += 1
            return data
        path = self.entry_path(key, index)
        fs = self.file_system
        try:
            raw = fs.read_all(path)
        except AntIOError as e:
            if e.errno != errno.ENOENT:
                log.warning("antkv.spark: block cache entry %s unreadable (%s): reading it again", path, e)
                self._drop(path)
            return None
        payload = _payload(raw, os.path.basename(path))
        if payload is None:
            log.warning("antkv.spark: block cache entry %s fails its checksum: reading it again", path)
            with self._mutex:
                self.corrupt_dropped += 1
            self._drop(path)
            return None
        if touch:
            try:
                os.utime(path)  # recency for eviction
            except OSError:
                pass  # evicted meanwhile: the bytes read are still good
        with self._mutex:
            self.hits += 1
        return payload

    def put(self, key: str, index: int, data: bytes) -> None:
        """Keep ``data`` as chunk ``index`` of object ``key``; skipped when the disk is full."""
        path = self.entry_path(key, index)
        name = os.path.basename(path)
        trailer = _TRAILER.pack(_MAGIC, len(data), xxhash.xxh3_64_intdigest(name.encode() + data))
        tmp = f"{path}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        fs = self.file_system
        try:
            fs.mkdirs(os.path.dirname(path))
            f = fs.create(tmp)
            try:
                f.append(data + trailer)  # not synced: a torn entry fails its checksum and is read again
            finally:
                f.close()
            fs.rename(tmp, path)
        except AntIOError as e:
            self._drop(tmp)
            if e.errno not in _FULL:
                raise
            with self._mutex:
                self.full_skipped += 1
            log.warning("antkv.spark: local disk full writing the block cache (%s): evicting", e)
            self.evict(full=True)
            return
        with self._mutex:
            self._since_scan += len(data)
            due = self._since_scan >= max(self.budget // 16, self.chunk_bytes)
        if due:
            self.evict()

    def fetch(self, ranges, key: str, first: int, count: int, size: int, keep: bool = True) -> list[bytes]:
        """Read chunks ``first .. first + count - 1`` (those before ``size``) of an object from
        the location in one request (``ranges``: :class:`~antkv.spark.store.location.ObjectRanges`),
        keep each here (unless not ``keep``: a read that passes the cache by), and return them."""
        c = self.chunk_bytes
        lo, hi = first * c, min((first + count) * c, size)
        data = ranges.read(lo, hi - lo)
        chunks = [data[i:i + c] for i in range(0, len(data), c)]
        with self._mutex:
            self.fetches += 1
            self.misses += len(chunks)
            self.fetched_bytes += len(data)
            if not keep:
                self.passed_by += len(chunks)
        if keep:
            for i, chunk in enumerate(chunks):
                self.put(key, first + i, chunk)
        return chunks

    def has(self, key: str, index: int) -> bool:
        """Whether chunk ``index`` of object ``key`` is held in memory or has an entry (not checked)."""
        return (key, index) in self._held or os.path.exists(self.entry_path(key, index))

    def count_fetch(self, chunks: int, nbytes: int) -> None:
        """Count one request to the location that read ``chunks`` chunks, ``nbytes`` bytes
        (a prefetch's: :mod:`~antkv.spark.store.prefetch`)."""
        with self._mutex:
            self.fetches += 1
            self.misses += chunks
            self.fetched_bytes += nbytes

    def hold(self, holder, key: str, index: int, data: bytes) -> None:
        """Keep chunk ``index`` of object ``key`` in memory for ``holder`` until
        :meth:`release` (a batch's prefetch: chunks the disk budget cannot keep until read)."""
        with self._mutex:
            if (key, index) not in self._held:
                self._held[(key, index)] = data
                self._holders.setdefault(holder, []).append((key, index))

    def held_bytes(self) -> int:
        with self._mutex:
            return sum(map(len, self._held.values()))

    def release(self, holder) -> None:
        """Drop the chunks :meth:`hold` keeps for ``holder``."""
        with self._mutex:
            for k in self._holders.pop(holder, ()):
                self._held.pop(k, None)

    def put_file(self, location: Location, ref: FileRef, local_path: str) -> None:
        """Keep the local file ``local_path``, which holds object ``ref``'s bytes (just
        uploaded), so that the next reads of it are hits.  Of a file above a quarter of the
        budget (a compaction's output), the chunks of its first quarter: what a long scan of
        it would keep (module docstring), so the next scan finds them here."""
        key, c = self.object_key(location, ref), self.chunk_bytes
        kept = min(ref.size, self.budget // 4)
        f = self.file_system.open_random(local_path)
        try:
            for i in range((kept + c - 1) // c):
                self.put(key, i, f.read(i * c, c))
        finally:
            f.close()

    # ------------------------------------------------------------------ eviction

    def evict(self, full: bool = False) -> int:
        """Remove least recently used entries while their bytes exceed 7/8 of the budget (with
        ``full``: half of what they hold, at most that); returns bytes freed."""
        with self._mutex:
            self._since_scan = 0
        entries, total = [], 0
        now = time.time()
        try:
            with HostLock(self._lock_path):
                for sub in os.scandir(self.root):
                    if not sub.is_dir():
                        continue
                    for e in os.scandir(sub.path):
                        try:
                            st = e.stat()
                        except FileNotFoundError:
                            continue
                        if ".tmp-" in e.name:
                            if now - st.st_mtime > _DEBRIS_AGE_S:
                                self._drop(e.path)
                            continue
                        total += st.st_size
                        entries.append((st.st_mtime, e.path, st.st_size))
                target = self.budget * 7 // 8
                if full:
                    target = min(target, total // 2)
                freed = 0
                if total > self.budget or full:
                    for _, path, size in sorted(entries):
                        if total - freed <= target:
                            break
                        self._drop(path)
                        freed += size
                return freed
        except OSError as e:  # eviction is upkeep: a failure of it fails no read
            log.warning("antkv.spark: block cache eviction failed: %s", e)
            return 0

    def usage(self) -> int:
        """Bytes of the entries on disk now (tests, metrics)."""
        return tree_bytes(self.root)

    def stats(self) -> dict:
        with self._mutex:
            return dict(hits=self.hits, misses=self.misses, fetches=self.fetches,
                        fetched_bytes=self.fetched_bytes, corrupt_dropped=self.corrupt_dropped,
                        full_skipped=self.full_skipped, passed_by=self.passed_by)

    def _drop(self, path: str) -> None:
        try:
            self.file_system.remove(path)
        except AntIOError:
            pass  # gone already, or left for the next eviction


class RemoteFile(RandomAccessFile):
    """Object ``ref`` of ``location`` read through ``cache``, as the engine's random-access file
    ``path``.  It keeps the chunks of its last fetch that it has not served yet (at most the
    read-ahead window) and the chunk it served last, so the blocks of one chunk cost one
    entry read.  Bulk reads and long scans pass the cache by (module docstring)."""

    def __init__(self, cache: BlockCache, location: Location, ref: FileRef, path: str):
        self.path = path
        self.ref = ref
        self._cache = cache
        self._ranges = location.ranges(ref.object, cache.read_timeout_s)
        self._key = cache.object_key(location, ref)
        self._lock = threading.Lock()
        self._held: dict[int, bytes] = {}  # chunk index -> bytes
        self._next = -1  # the chunk a sequential reader asks for next
        self._ahead = 1  # chunks the next sequential fetch asks for
        self._run = 0  # chunks of the current sequential run: past a quarter of the budget, not kept

    def size(self) -> int:
        return self.ref.size

    def read(self, offset: int, n: int) -> bytes:
        end = min(offset + n, self.ref.size)
        if n <= 0 or offset >= end:
            return b""
        c = self._cache.chunk_bytes
        first, last = offset // c, (end - 1) // c
        if last - first >= READAHEAD_CHUNKS:
            parts = self._bulk(first, last)
        else:
            parts = [self._chunk(i) for i in range(first, last + 1)]
        data = parts[0] if len(parts) == 1 else b"".join(parts)
        lo = offset - first * c
        return data[lo:lo + end - offset]

    def _chunk(self, i: int) -> bytes:
        with self._lock:
            sequential = i == self._next
            if i != self._next - 1:  # (the chunk served last, read again, changes nothing)
                self._run = self._run + 1 if sequential else 0
            data = self._held.get(i)
            if data is None:
                self._ahead = min(self._ahead * 2, READAHEAD_CHUNKS) if sequential else 1
                data = self._cache.get(self._key, i)
                if data is not None:
                    self._held = {i: data}
                else:
                    keep = self._run * self._cache.chunk_bytes <= self._cache.budget // 4
                    chunks = self._cache.fetch(self._ranges, self._key, i, self._ahead, self.ref.size, keep)
                    self._held = dict(enumerate(chunks, i))
                    data = chunks[0]
            else:
                for j in [j for j in self._held if j < i]:
                    del self._held[j]
            if i != self._next - 1:
                self._next = i + 1
            return data

    def _bulk(self, first: int, last: int) -> list[bytes]:
        """Chunks ``first .. last`` for a bulk read: those the cache holds from their entries
        (not made recent), every run of the others fetched in requests of up to
        :data:`READAHEAD_CHUNKS` chunks, none kept."""
        cache, key = self._cache, self._key
        parts: list[bytes] = []
        with self._lock:
            i = first
            while i <= last:
                data = cache.get(key, i, touch=False) if cache.has(key, i) else None
                if data is not None:
                    parts.append(data)
                    i += 1
                    continue
                j = i + 1
                while j <= last and j - i < READAHEAD_CHUNKS and not cache.has(key, j):
                    j += 1
                parts += cache.fetch(self._ranges, key, i, j - i, self.ref.size, keep=False)
                i = j
            self._held, self._next, self._run = {}, last + 1, 0
        return parts

    def close(self) -> None:
        self._held = {}
        self._ranges.close()


def _chunk_for(budget: int) -> int:
    """The chunk size of a cache of ``budget`` bytes: :data:`CHUNK_BYTES`, or a 64th of a
    smaller budget (a power of two, at least 4 KiB), so a small cache still holds many chunks."""
    if budget >= 64 * CHUNK_BYTES:
        return CHUNK_BYTES
    c = 4096
    while c * 2 * 64 <= budget:
        c *= 2
    return c


def _payload(raw: bytes, name: str) -> bytes | None:
    """The chunk an entry named ``name`` holds, or None when its trailer does not check."""
    if len(raw) < _TRAILER.size:
        return None
    magic, n, digest = _TRAILER.unpack_from(raw, len(raw) - _TRAILER.size)
    payload = raw[:-_TRAILER.size]
    if magic != _MAGIC or n != len(payload) or xxhash.xxh3_64_intdigest(name.encode() + payload) != digest:
        return None
    return payload
