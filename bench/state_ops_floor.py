"""The floor of the views' writes: a batch of value updates, list appends or map puts done with
the fewest steps the state store's structure allows.

A batch's writes must (1) be seen by the batch's own reads, (2) be found by the next batch in
the working copy's row cache, as bytes and, for a row, decoded, (3) reach the working copy's
database (its deferred writes), (4) keep the key count exact, and (5) be published by the
commit as a changelog, with a manifest naming it.  :class:`WriteFloor` does those and nothing
else, on dicts as large as the store's: a call builds the stored key as the views do and puts
the row, of plain values, as given in one dict (a value's or map entry's, or a list's appended
row); the commit encodes the rows in bulk (``RowsCodec.encode_many``), looks each key up once
in the row cache (what the key count and the cache's charge read, and a list's bytes before),
extends the lists' bytes, updates the cache's two dicts and the deferred writes once each, and
writes the changelog (``encode_changelog``) and an object the size of the store's manifest
through the same location, each synced.

What it leaves out is what the store adds around those steps: the checks of a call (a store
committed, a codec switched, a key group outside the partition), settling in bounded steps,
the row cache's budget and eviction, reads through the engine (every value the floor extends
or replaces is in its row cache: the bench's batches are warm), range deletions, and the
snapshot a long changelog chain calls for.  The bench (``bench/bench_state_ops.py``) times it
beside the views' same calls, so that antkv's share of it is measured in the same run.
"""

from __future__ import annotations

from itertools import repeat

from antkv.spark.state.codec import encode_key
from antkv.spark.state.rows_codec import PLAIN_TYPES, ROWS
from antkv.spark.store.keygroups import key_group_prefix, state_id_bytes
from antkv.spark.store.objects import encode_changelog


class WriteFloor:
    """The views' three writes over copies of a warm store's row cache and deferred writes;
    ``location`` (an ``antkv.spark.store.location.Location``) receives each commit's changelog
    and ``manifest_bytes`` zero bytes in its place."""

    def __init__(self, rows: dict, decoded: dict, deferred: dict, location, manifest_bytes: int, sids=(1, 2, 3)):
        self.rows, self.decoded, self.deferred = dict(rows), dict(decoded), dict(deferred)
        self.location = location
        self.manifest_bytes = manifest_bytes
        self.rows_written: dict[bytes, tuple] = {}  # key -> a value's decoded form, (row,)
        self.rows_appended: dict[bytes, tuple] = {}  # key -> the row appended to a list, as (row,)
        self.keys_added = None  # after a commit: how many keys the batch added to the state
        self.commits = 0
        self._key_group = None
        self._prefix = b""
        self._key = b""
        value, lists, maps = map(state_id_bytes, sids)
        self.value, self.list, self.map = _Value(self, value), _List(self, lists), _Map(self, maps)

    def set_current_key(self, key_group: int, key: tuple) -> None:
        if key_group != self._key_group:
            self._prefix, self._key_group = key_group_prefix(key_group), key_group
        self._key = encode_key(key)

    def get(self, key: bytes):
        """``key``'s value as the batch sees it: its write, else the row cache's (None: absent)."""
        row = self.rows_written.get(key)
        if row is not None:
            return ROWS.encode(row)
        value = self.rows.get(key)
        appended = self.rows_appended.get(key)
        if appended is None:
            return value
        return (value or b"") + ROWS.encode(appended)

    def commit(self) -> None:
        """REQUIRES: the batch wrote values or appended to lists, not both (each bench batch
        does one operation), one row to each list."""
        rows, appended = self.rows_written, self.rows_appended
        keys = list(rows or appended)
        olds = list(map(self.rows.get, keys, repeat(None)))
        self.keys_added = olds.count(None)
        if rows:
            written = dict(zip(keys, ROWS.encode_many(list(rows.values()))))
        else:
            encoded = ROWS.encode_many(list(appended.values()))
            written = dict(zip(keys, map(bytes.__add__, [old or b"" for old in olds], encoded)))
        self.deferred.update(written)
        self.rows.update(written)
        self.decoded.update(rows)
        self.commits += 1
        self.location.write(f"changelog-{self.commits}", encode_changelog([], written))
        self.location.write(f"manifest-{self.commits}", bytes(self.manifest_bytes))
        self.rows_written, self.rows_appended = {}, {}


class _Variable:
    def __init__(self, floor: WriteFloor, sid: bytes):
        self._floor = floor
        self._sid = sid


class _Value(_Variable):
    def update(self, row: tuple) -> None:
        floor = self._floor
        if type(row) is not tuple or not PLAIN_TYPES.issuperset(map(type, row)):
            raise TypeError("the write floor takes rows of plain values")
        floor.rows_written[floor._prefix + self._sid + floor._key] = (row,)


class _List(_Variable):
    def appendValue(self, row: tuple) -> None:  # noqa: N802 - Spark's name
        floor = self._floor
        if type(row) is not tuple or not PLAIN_TYPES.issuperset(map(type, row)):
            raise TypeError("the write floor takes rows of plain values")
        key = floor._prefix + self._sid + floor._key
        if key in floor.rows_appended:
            raise ValueError("the write floor appends one row to a list per batch")
        floor.rows_appended[key] = (row,)


class _Map(_Variable):
    def updateValue(self, user_key: tuple, row: tuple) -> None:  # noqa: N802 - Spark's name
        floor = self._floor
        if type(row) is not tuple or not PLAIN_TYPES.issuperset(map(type, row)):
            raise TypeError("the write floor takes rows of plain values")
        floor.rows_written[floor._prefix + self._sid + floor._key + encode_key(user_key)] = (row,)
