"""A point read through tables that range tombstones may cover: :func:`table_get_covered`.

``DB.get`` (:meth:`antkv.db.read_api.ReadAPI.get`) searches the tables in its own frame; it
hands the whole search to :func:`table_get_covered` when a table it meets holds range
tombstones.
"""

from __future__ import annotations

from ..manifest.version_set import find_file
from ..sst.bloom import key_probe, may_contain_probe


def table_get_covered(sv, key: bytes, read_seq: int, open_table):
    """The newest visible ``(seq, kind, value)`` of ``key`` in the tables of super version
    ``sv``, or None (absent or covered by a range tombstone): a key in an older table is older
    than any tombstone of a newer one, so the first covering tombstone ends the search."""
    candidates = [f for f in sv.version.levels[0] if f.smallest <= key <= f.largest]
    for _level, files, largest in sv.version.sorted_levels:
        f = find_file(files, largest, key)
        if f is not None:
            candidates.append(f)
    tomb = 0
    neg = -read_seq
    probe = key_probe(key)
    for f in candidates:
        r = f.reader or open_table(f)
        if r.range_tombstones:
            t = r.fragments().max_covering_seq(key, read_seq)
            if t > tomb:
                tomb = t
        e = r.find(key, neg) if may_contain_probe(r.filter, probe) else None
        if e is not None:
            return None if tomb > e[0] else e
        if tomb:  # older tables hold only versions older than this tombstone
            return None
    return None
