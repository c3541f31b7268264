"""The point read through the tables: one Python frame for every table a get visits.

:func:`table_get` is :meth:`antkv.read.read_view.SuperVersion.table_get`, the part of
``DB.get`` after the memtables.  Tables are probed newest first: the L0 tables whose range
holds the key (every L0 table when their ranges all overlap: a check of each range would
almost never rule one out, see :class:`antkv.manifest.version_set.Version`), then at most one
table per sorted level.  For the common case it does, inline,
what four functions would do one call each:

1. the bloom probe (:func:`antkv.sst.bloom.may_contain_probe`, on the key's hash computed once);
2. the index search (the first index key >= the key names the only block that can hold it);
3. the block cache hit, without a lock (the clock policy's hit: :mod:`antkv.memory.clock`),
   or on a miss the block read, checked and cached as :meth:`TableReader.load_searchable`
   does (through the reader's ``block_source``, the file's positional read: a read of a table
   closed meanwhile fails, and :meth:`TableReader.read_failed` reports it as closed; a short
   read or a bare ``OSError`` is read again by :meth:`TableReader.read_checked`, which reports
   what the file's own read finds);
4. the search of a cached fixed-width block (``bytes.find`` on its key column, the layout
   cached with the block: :func:`antkv.sst.block.searchable_block`), when the newest version
   of the key is visible.

The newest version of the key, when the key is in the table, is in the first block whose
index key is >= the key, so when the fast search finds it visible it is the answer, whatever
that index key is.  Anything else takes the general path, which gives the same answers: a
block fetched but decoded or of variable-width keys, or whose newest version is not the one
visible, is searched by :meth:`TableReader.search_cached` (the block is not looked up twice,
so the cache counts one hit or one miss per block a read touches); when the block's index key
equals the key, the key's versions may go on in the next blocks (or, the index key being a
separator, start there), and :meth:`TableReader.find` picks the block (its lookup counts the
block a second time: rare, a read at an older snapshot of a key that ends a block); a cache
whose hits lock (the LRU policy) or no cache go to :meth:`TableReader.find` too; range
tombstones anywhere in the tables hand the whole lookup to :func:`table_get_covered`.
"""

from __future__ import annotations

from bisect import bisect_left

from ..base.dbformat import MAX_KIND
from ..errors import CorruptionError
from ..errors import IOError as AntIOError
from ..manifest.version_set import find_file
from ..sst.block import searchable_block
from ..sst.bloom import DIGEST_HEAD, LANE_MASK, PROBE_TABLE, digest, key_probe, may_contain_probe
from ..sst.format import BLOCK_TRAILER_SIZE, check_block
from ..sst.reader import SEARCHABLE_CHARGE


def table_get(sv, key: bytes, read_seq: int, open_table):
    """Newest visible ``(seq, kind, value)`` of ``key`` in the tables of super version ``sv``,
    or None (absent or covered by a range tombstone)."""
    # key_probe(key), inline: the key's hash, once for every filter probed (the general paths
    # below rebuild key_probe's tuple, (x, pe, pf, d), and the negated read sequence find takes)
    d = digest(key)
    x, a, b = DIGEST_HEAD(d)
    pe, pf = PROBE_TABLE[a & LANE_MASK], PROBE_TABLE[b & LANE_MASK]
    klen = len(key) or -1  # a key column's width is never -1: an empty key takes the general search
    version = sv.version
    candidates = version.levels[0]  # checked against the key's range below, unless all overlap
    if version.sorted_levels:
        candidates = list(candidates)
        for _level, files, largest in version.sorted_levels:
            i = bisect_left(largest, key)
            if i == len(files):
                continue
            f = files[i]
            if f.largest_exclusive and f.largest == key:
                i += 1
                if i == len(files):
                    continue
                f = files[i]
            if f.smallest <= key:  # (find_file, inline)
                candidates.append(f)
    # False when the L0 ranges all overlap: a table whose range misses the key is then ruled
    # out by its filter or the search of its block (block_plan plans the same tables)
    check = version.l0_ranges_apart
    for f in candidates:
        if check and not f.smallest <= key <= f.largest:
            continue
        p = f.point  # the reader's point-read form and the reader, once the table is open
        if p is None:
            r = f.reader or open_table(f)
            p = f.point
            if p is None:  # a reader without the form
                if r.range_tombstones:
                    return table_get_covered(sv, key, read_seq, open_table)
                if may_contain_probe(r.filter, (x, pe, pf, d)):
                    found = r.find(key, -read_seq)
                    if found is not None:
                        return found
                continue
        bits, nfb, k, ikeys, offsets, sizes, key_base, block_shards, r = p
        if k == 6:  # the default filter (10 bits per key): its two masks, inline
            o = (x % nfb) << 6
            if not (bits[o + pe[0]] & pe[1] and bits[o + pe[2]] & pe[3] and bits[o + pe[4]] & pe[5]):
                continue
            if not (bits[o + pf[0]] & pf[1] and bits[o + pf[2]] & pf[3] and bits[o + pf[4]] & pf[5]):
                continue
        elif k and not may_contain_probe(r.filter, (x, pe, pf, d)):
            continue
        i = bisect_left(ikeys, key)
        if i == len(ikeys):
            continue
        ckey = key_base + i  # antkv.memory.cache.Cache.new_block_keys
        s = block_shards[i]  # the shard of ckey, found when the table was opened
        find = s.find  # (a call of s.find straight away would look it up as a method, unspecialised)
        e = find(ckey)
        if e is not None:  # a clock entry (value, charge, key, slot)
            s.bits[e[3]] = 1  # its reference bit
            next(s.hit_counter)  # s.count_hit(), without the method-wrapper's call
            block = e[0]
        else:  # r.load_searchable(i, offset, size), inline
            next(s.miss_counter)
            offset = offsets[i]
            size = sizes[i]
            pread, verify, path = r.block_source
            try:
                buf, size = check_block(pread(size + BLOCK_TRAILER_SIZE, offset), offset, size, verify, path)
            except AntIOError as exc:  # the file's own read failed
                r.read_failed(exc)
            except (OSError, CorruptionError):  # a bare OSError or a short read: the file's read says
                buf, size = r.read_checked(offset, size)
            block = searchable_block(buf, size, path, offset)
            s.put(ckey, block, size + SEARCHABLE_CHARGE, False)
        try:
            buf, _size, width, n, seqs_off, qw, kinds_off, ends, g, _r = block
        except ValueError:  # not SEARCHABLE_FIELDS long: decoded by an iterator
            width = 0
        if width == klen:  # (0: not one width)
            end = n * width
            pos = buf.find(key, 0, end)
            while pos > 0 and pos % width:  # a match across two keys: go on from the next key
                pos = buf.find(key, pos - pos % width + width, end)
            if pos >= 0:
                j = pos // width
                at = seqs_off + j * qw
                seq = int.from_bytes(buf[at : at + qw], "little")
                kind = buf[kinds_off + j]
                if seq <= read_seq and kind <= MAX_KIND:  # else an older version, or damage
                    v = g + n + j
                    return seq, kind, buf[ends[v - 1] : ends[v]]
            elif ikeys[i] != key:
                continue  # not in block i, so in no block of this table
        # the general search: an index key equal to the key may have the key's versions in the
        # next blocks too (find picks the block), else search_cached says which version or
        # which damage
        if ikeys[i] == key:
            found = r.find(key, -read_seq)
        else:
            found = r.search_cached(block, i, key, -read_seq)
        if found is not None:
            return found
    return None


def table_get_covered(sv, key: bytes, read_seq: int, open_table):
    """:func:`table_get` when range tombstones may cover ``key``: a key in an older table is
    older than any tombstone of a newer one, so the first covering tombstone ends the
    search."""
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
