"""A batch's prefetch in remote mode: the chunks its point reads will need, fetched in parallel.

A working copy in remote mode reads its snapshot's tables from the location through the block
cache (:mod:`~antkv.spark.store.block_cache`).  A point read of a key whose chunk the cache
lacks waits for one ranged request; a batch of scattered reads on a cold cache (the first
batch after a restore, a rescale, a move) would make one request per key, one after another.
A store that knows the keys a batch will read asks the engine where they are
(:meth:`antkv.DB.data_blocks`: each key's data block in each table its filter may hold it in,
from the tables' indexes and filters, which an open table holds in memory), and
:func:`prefetch` fetches what the cache lacks before the reads, as RocksDB's ``MultiGet`` with
``async_io`` does:

* the blocks are cut into the cache's aligned chunks; chunks already held in memory are
  skipped, and those in an entry on local disk are read from there and held (the chunks this
  batch fetches go into the disk cache too, and would evict them before the reads);
* adjacent chunks of one object are coalesced into one request of up to
  :data:`~antkv.spark.store.block_cache.READAHEAD_CHUNKS` chunks (4 MiB);
* the requests run on :data:`PREFETCH_THREADS` threads (``pyarrow`` releases the GIL while it
  waits on the location);
* each chunk fetched is held in memory for the batch (:meth:`BlockCache.hold`, up to
  ``memory_cap`` bytes; the store releases them at commit or abort), because a batch may need
  more than the disk budget keeps, and is written to the disk cache while the chunks this
  prefetch writes stay within three quarters of its budget, so the next batch finds them.

The reads that follow find their chunks held or cached.  A prefetch that would pass
``memory_cap`` fetches the first chunks up to it; the reads fetch the rest one by one, as
without a prefetch.  A failed request raises as a read would (``antkv.IOError`` naming the
object and the range): the batch fails and Spark's retry opens the version again.
"""

from __future__ import annotations

from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait

from antkv.spark.store.block_cache import READAHEAD_CHUNKS, BlockCache
from antkv.spark.store.location import Location
from antkv.spark.store.objects import FileRef

PREFETCH_THREADS = 8  # requests a prefetch has in flight at once


def prefetch(blocks: BlockCache, wanted: list[tuple[Location, FileRef, set]], holder,
             memory_cap: int) -> dict:
    """Fetch the chunks of the byte ranges ``wanted`` names (``(location, ref, {(offset,
    length), ...})`` per object) that ``blocks`` lacks, in parallel; hold them for ``holder``
    and cache them (module docstring).  Returns ``dict(chunks=, requests=, bytes=)`` fetched."""
    c = blocks.chunk_bytes
    runs = []  # (location, ref, key, first chunk, chunk count)
    total = 0
    for location, ref, ranges in wanted:
        key = blocks.object_key(location, ref)
        last_chunk = (ref.size - 1) // c
        indexes = set()
        for offset, length in ranges:
            lo, hi = offset // c, min((offset + max(length, 1) - 1) // c, last_chunk)
            indexes.update(range(lo, hi + 1))
        missing = []
        for i in sorted(indexes):
            if not blocks.has(key, i):
                missing.append(i)
                continue
            if total + c > memory_cap:
                continue
            data = blocks.get(key, i)  # on local disk now: held too, so this batch's own
            if data is None:  # writes to the cache cannot evict it before the reads
                missing.append(i)
            else:
                blocks.hold(holder, key, i, data)
                total += len(data)
        for run in _runs(missing):
            nbytes = min((run[-1] + 1) * c, ref.size) - run[0] * c
            if total + nbytes > memory_cap:
                break
            total += nbytes
            runs.append((location, ref, key, run[0], len(run)))
    if not runs:
        return dict(chunks=0, requests=0, bytes=0)
    readers = {}
    for location, ref, *_ in runs:
        if (id(location), ref.object) not in readers:
            readers[(id(location), ref.object)] = location.ranges(ref.object, blocks.read_timeout_s)

    def fetch(run):
        location, ref, _key, first, count = run
        lo, hi = first * c, min((first + count) * c, ref.size)
        return readers[(id(location), ref.object)].read(lo, hi - lo)

    cache_room = blocks.budget * 3 // 4
    fetched = chunks = 0
    pool = ThreadPoolExecutor(max_workers=min(PREFETCH_THREADS, len(runs)), thread_name_prefix="antkv-prefetch")
    try:
        futures = {pool.submit(fetch, run): run for run in runs}
        pending = set(futures)
        while pending:
            done, pending = wait(pending, return_when=FIRST_EXCEPTION)
            for fut in done:
                data = fut.result()  # a failed request raises here: the rest are cancelled below
                _location, _ref, key, first, _count = futures[fut]
                blocks.count_fetch((len(data) + c - 1) // c, len(data))
                for j in range(0, len(data), c):
                    chunk = data[j:j + c]
                    blocks.hold(holder, key, first + j // c, chunk)
                    if fetched + j < cache_room:
                        blocks.put(key, first + j // c, chunk)
                    chunks += 1
                fetched += len(data)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        for r in readers.values():
            r.close()
    return dict(chunks=chunks, requests=len(runs), bytes=fetched)


def _runs(indexes: list[int]):
    """Runs of consecutive ``indexes`` (sorted), each at most READAHEAD_CHUNKS long."""
    run: list[int] = []
    for i in indexes:
        if run and (i != run[-1] + 1 or len(run) == READAHEAD_CHUNKS):
            yield run
            run = []
        run.append(i)
    if run:
        yield run
