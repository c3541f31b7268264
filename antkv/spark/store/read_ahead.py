"""Reading a partition's key groups whole into its row cache, ahead of a batch that touches
most of their keys: one ordered scan of a run of adjacent key groups instead of a point read
per key (``StateStore.warm``), and the ranges those runs cover (also what the remote mode's
prefetch plans its reads over)."""

from __future__ import annotations

from itertools import compress, repeat
from operator import is_not


def prefix_runs(prefixes: list[bytes]) -> list[list]:
    """``[begin, end)`` ranges covering sorted fixed-length ``prefixes``, adjacent ones merged
    (``end`` None: unbounded)."""
    runs = []
    for p in prefixes:
        n = int.from_bytes(p, "big") + 1
        nxt = None if n >> (8 * len(p)) else n.to_bytes(len(p), "big")  # None: no key is above p
        if runs and runs[-1][1] == p:
            runs[-1][1] = nxt
        else:
            runs.append([p, nxt])
    return runs


def hold_whole(db, rows, prefixes: set, codec=None) -> int:
    """Read every entry of ``db`` under each of ``prefixes`` (the row cache's prefix length)
    into ``rows`` (a :class:`~antkv.spark.store.row_cache.RowCache`) and mark the prefix whole
    -- one scan per run of adjacent prefixes; an entry the cache cannot hold un-marks its
    prefix.  With ``codec`` (which has ``decode_some(raws)``: each raw's decoded value, or None
    for one it does not decode in bulk), the entries it decodes are kept decoded too.  REQUIRES:
    ``db`` holds every write of the state (none deferred in the prefixes).  Returns the entries
    read."""
    read = 0
    for begin, end in prefix_runs(sorted(prefixes)):  # adjacent prefixes: one scan
        rows.complete.update(p for p in prefixes if begin <= p and (end is None or p < end))  # (those without keys too)
        items = db.items(begin, end)
        if codec is None:
            read += rows.fill(items)  # an eviction un-marks a prefix
            continue
        items = list(items)
        read += rows.fill(items)
        if items:
            keys, raws = map(list, zip(*items))
            values = codec.decode_some(raws)
            decoded = list(map(is_not, values, repeat(None, len(values))))
            rows.keep_decoded(list(compress(keys, decoded)), list(compress(raws, decoded)),
                              list(compress(values, decoded)), codec)
    return read
