"""The exact key count of a version, in total and per key prefix.

A manifest records ``num_keys`` and, when known, ``key_counts``: the number of keys per
*prefix*, the first :data:`PREFIX_LEN` bytes of a key (a pipeline's stored keys begin with
their key group, so a prefix is a key group; the operator's metadata keys share the prefix
``ff ff``).  Invariant: the counts are positive and sum to ``num_keys``.

Why per prefix: for a bound ``x`` of at most :data:`PREFIX_LEN` bytes, ``k >= x`` exactly
when ``k[:PREFIX_LEN] >= x`` and ``k < x`` exactly when ``k[:PREFIX_LEN] < x`` (compare
bytewise; a shorter key is its own prefix).  So the keys of such a range -- every key-group
range, every clip and bring-in of a rescale -- are counted by adding counts, without reading a
key: the count of a rescale costs nothing per key it drops or brings in.

The count of a new version is the base's plus, over every key the batch changed, ``live now -
live in the base``; a range deletion removes the base's keys in it that the batch did not write
again (by the counts when the range is aligned to prefixes, else by one scan of its keys).  A
store that starts empty knows its counts from the start; one whose base manifest has none
(written before counts existed) counts totals only, as before.  Counts are dropped (``None``)
beyond :data:`MAX_PREFIXES` distinct prefixes, which only keys that are not a pipeline's reach,
so a manifest stays small.
"""

from __future__ import annotations

from collections import Counter
from operator import itemgetter

PREFIX_LEN = 2
MAX_PREFIXES = (1 << 15) + 1  # every key group of the largest K, and the metadata prefix
_PREFIX = itemgetter(slice(PREFIX_LEN))  # a key's prefix, in C


def aligned(begin: bytes, end: bytes) -> bool:
    """Whether the keys of ``[begin, end)`` are exactly the keys whose prefix is in it."""
    return len(begin) <= PREFIX_LEN and len(end) <= PREFIX_LEN


def in_range(counts: dict, begin: bytes, end: bytes) -> dict:
    """The counts of the prefixes in ``[begin, end)`` (REQUIRES: ``aligned(begin, end)``)."""
    return {p: n for p, n in counts.items() if begin <= p < end}


def count_changes(db, snap, base_keys: int, base_counts: dict | None, changes: dict, known: dict,
                  ranges: list, scan_factor: int, known_all: bool = False) -> tuple[int, dict | None]:
    """``(keys now, counts now or None)`` of a state whose base (read at snapshot ``snap`` of
    ``db``) held ``base_keys`` keys with ``base_counts``, after the batch's net ``changes``
    (key -> value, ``None`` if deleted, any other object if live) and its merged range
    deletions ``ranges`` (point changes are newer than every range).  ``known[k]`` tells
    whether ``k`` was live in the base when the batch read it; other keys are read at ``snap``
    (one point read each, or one scan of the base when more than ``1/scan_factor`` of it is to
    be read).  ``known_all``: the caller knows that ``known`` holds every key of ``changes``."""
    per = None if base_counts is None else {}
    if base_keys == 0:
        total = 0
        for k, v in changes.items():
            if v is not None:
                total += 1
                if per is not None:
                    p = k[:PREFIX_LEN]
                    per[p] = per.get(p, 0) + 1
        return total, _limited(per)
    unknown = [] if known_all or known.keys() >= changes.keys() else [k for k in changes if k not in known]
    if unknown:
        known = dict(known)
        if len(unknown) * scan_factor > base_keys:
            # most of the base is touched: one scan of it costs less than a read per key
            live = {k for k in db.keys(snapshot=snap) if k in changes}
            for k in unknown:
                known[k] = k in live
        else:
            for k in unknown:
                known[k] = db.get(k, snapshot=snap) is not None
    by_counts = per is not None and all(aligned(b, e) for b, e in ranges)
    # only the keys whose liveness the batch changed move a count (most updates do not)
    # (each list is empty, and not built, when every key was live in the base / none was deleted)
    born = [k for k, v in changes.items() if v is not None and not known[k]] if False in known.values() else []
    died = [k for k, v in changes.items() if v is None and known[k]] if None in changes.values() else []
    delta = len(born) - len(died)
    if per is not None:  # (counted by prefix in C: a batch's keys fall in few prefixes)
        for p, n in Counter(map(_PREFIX, born)).items():
            per[p] = per.get(p, 0) + n
        for p, n in Counter(map(_PREFIX, died)).items():
            per[p] = per.get(p, 0) - n
    rewritten = {}  # prefix -> changed keys live in the base (when ranges are counted by prefix)
    if by_counts and ranges:
        for k in changes:
            if known[k]:
                p = k[:PREFIX_LEN]
                rewritten[p] = rewritten.get(p, 0) + 1
    for b, e in ranges:
        if by_counts:
            for p, n in in_range(base_counts, b, e).items():
                dropped = n - rewritten.get(p, 0)  # live in the base, not written again
                delta -= dropped
                per[p] = per.get(p, 0) - dropped
            continue
        for k in db.keys(b, e, snapshot=snap):
            if k not in changes:
                delta -= 1  # live in the base, deleted by the range, not written again
                if per is not None:
                    p = k[:PREFIX_LEN]
                    per[p] = per.get(p, 0) - 1
    if per is None:
        return base_keys + delta, None
    counts = dict(base_counts)
    for p, d in per.items():
        n = counts.get(p, 0) + d
        if n:
            counts[p] = n
        else:
            counts.pop(p, None)
    return base_keys + delta, _limited(counts)


def add_counts(counts: dict, removed: dict, added: dict) -> dict | None:
    """``counts`` minus ``removed`` plus ``added``, prefix by prefix (zero counts dropped)."""
    out = dict(counts)
    for p, n in removed.items():
        left = out.get(p, 0) - n
        if left:
            out[p] = left
        else:
            out.pop(p, None)
    for p, n in added.items():
        out[p] = out.get(p, 0) + n
    return _limited(out)


def scan_counts(db, begin: bytes, end: bytes) -> dict:
    """The counts of the keys of ``db`` in ``[begin, end)``, by one ordered scan of keys."""
    counts: dict = {}
    for k in db.keys(begin, end):
        p = k[:PREFIX_LEN]
        counts[p] = counts.get(p, 0) + 1
    return counts


def count_all(db) -> tuple[int, dict | None]:
    """``(keys, counts or None)`` of the whole of ``db``, by one ordered scan of its keys (the
    counts are None beyond :data:`MAX_PREFIXES` prefixes, as :func:`count_changes` gives them)."""
    counts = scan_counts(db, b"", None)
    return sum(counts.values()), _limited(counts)


def _limited(counts: dict | None) -> dict | None:
    return None if counts is None or len(counts) > MAX_PREFIXES else counts
