"""The internal key: what every layer of antkv sorts, stores and compares.

An *internal key* is a user key plus a *trailer* of a 56-bit sequence number and an 8-bit
kind.  Internal keys are ordered by user key ascending (bytewise), then sequence number
descending, so the newest version of a key comes first::

    +-----------------+--------------------------------------+
    | user key (n B)  | trailer: u64 = (seq << 8) | kind     |
    +-----------------+--------------------------------------+

The packed trailer is a notation: no file stores it as one u64.  The WAL and the tables store
the sequence number and the kind as separate fields (``docs/format.md``).  In memory antkv
never concatenates key and trailer either: hot paths carry ``(user_key, seq, kind)``
separately.  Iterators of every layer (memtable, table, level, merge) yield *entry tuples*::

    (user_key: bytes, neg_seq: int, kind: int, value: bytes)      # neg_seq == -seq

whose natural tuple order IS the internal-key order (user key ascending, sequence descending),
so ``heapq.merge`` and ``bisect`` compare them in C.  A user key appears at most once per
sequence number in the whole database, so two entry tuples never compare equal on their first
two fields.  Reverse iterators yield the same tuples in exactly the opposite order.

A point lookup (``MemTable.get``, ``TableReader.find`` and ``get``, ``table_get_covered``)
answers with a *found entry* ``(seq, kind, value)``: the sequence number positive.

The ``Kind`` values are PART OF THE FILE FORMAT: they are written into the WAL, the SST data
blocks and range-tombstone blocks.  DO NOT CHANGE THEM.
"""

from __future__ import annotations

import os as _os
from enum import IntEnum

CHECK_INVARIANTS = _os.environ.get("ANTKV_INVARIANTS") == "1"
"""With ``ANTKV_INVARIANTS=1`` (the tests set it) the engine checks structural invariants as it
goes: every installed version (levels sorted and non-overlapping, L1 older than L0) and every
flushed memtable."""

MAX_SEQUENCE = (1 << 56) - 1
"""The largest sequence number; a read at MAX_SEQUENCE sees everything."""


class Kind(IntEnum):
    """What an internal key records.  PART OF THE FILE FORMAT: never renumber."""

    DELETION = 0
    VALUE = 1
    RANGE_DELETION = 2
    VALUE_POINTER = 3  # the value lives in the value log; see antkv/vlog/pointer.py
    EXPIRING = 5  # a VALUE or VALUE_POINTER with an expiry time; see antkv/base/expiry.py
    MERGE = 7  # a merge operand (db.merge); see antkv/base/merge_operator.py


# Plain-int aliases for hot paths (attribute lookups on an IntEnum cost more than a global).
DELETION = 0
VALUE = 1
RANGE_DELETION = 2
VALUE_POINTER = 3
EXPIRING = 5
MERGE = 7
# Every point kind but DELETION is ODD: the batched scans (antkv/read/runs.py) mask entries with
# ``first_version_of_key & kind``, a C-level bitwise and that must be 1 for any shown kind.

# A MERGE entry is not a value on its own: reads and compaction combine it with the versions
# below it (antkv/read/merge_visibility.py, antkv/compaction/operand_combining.py); the batched scans hand a run
# holding one over to the per-entry path.

MAX_KIND = MERGE
VALID_KINDS = frozenset((DELETION, VALUE, RANGE_DELETION, VALUE_POINTER, EXPIRING, MERGE))
"""Every kind a WAL record or a table may hold; any other byte there is corruption."""
