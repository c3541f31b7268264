"""The floor of the views' writes: a batch of value updates, list appends or map puts done with
the fewest steps the state store's structure allows.

A batch's writes must (1) be seen by the batch's own reads, (2) be found by the next batch in
the working copy's row cache, as bytes and, for a row, decoded, (3) reach the working copy's
database (its deferred writes), (4) keep the key count exact, and (5) be published by the
commit as a changelog, with a manifest naming it.  :class:`WriteFloor` does those and nothing
else, on dicts as large as the store's: a call builds the stored key as the views do and puts
the value in one dict (a row of plain values kept as given, a list's bytes extended); the
commit encodes the rows in bulk (``RowsCodec.encode_many``), looks each key up once in the row
cache (what the key count and the cache's charge read), updates the cache's two dicts and the
deferred writes once each, and writes the changelog (``encode_changelog``) and an object the
size of the store's manifest through the same location, each synced.

What it leaves out is what the store adds around those steps: the checks of a call (a store
committed, a codec switched, a key group outside the partition), settling in bounded steps,
the row cache's budget and eviction, reads through the engine (every value the floor extends
or replaces is in its row cache: the bench's batches are warm), range deletions, and the
snapshot a long changelog chain calls for.  The bench (``bench/bench_state_ops.py``) times it
beside the views' same calls, so that antkv's share of it is measured in the same run.
"""

from __future__ import annotations

from itertools import repeat

from antkv.spark.state.codec import encode_key, encode_row
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
        self.bytes_written: dict[bytes, bytes] = {}  # key -> a list's bytes
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
        value = self.bytes_written.get(key)
        return self.rows.get(key) if value is None else value

    def commit(self) -> None:
        written = self.bytes_written
        rows = self.rows_written
        if rows:
            written.update(zip(rows, ROWS.encode_many(list(rows.values()))))
        self.keys_added = list(map(self.rows.get, written, repeat(None))).count(None)
        self.deferred.update(written)
        self.rows.update(written)
        self.decoded.update(rows)
        self.commits += 1
        self.location.write(f"changelog-{self.commits}", encode_changelog([], written))
        self.location.write(f"manifest-{self.commits}", bytes(self.manifest_bytes))
        self.rows_written, self.bytes_written = {}, {}


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
        key = floor._prefix + self._sid + floor._key
        old = floor.bytes_written.get(key) or floor.rows.get(key)
        suffix = encode_row(row)
        floor.bytes_written[key] = suffix if old is None else old + suffix


class _Map(_Variable):
    def updateValue(self, user_key: tuple, row: tuple) -> None:  # noqa: N802 - Spark's name
        floor = self._floor
        if type(row) is not tuple or not PLAIN_TYPES.issuperset(map(type, row)):
            raise TypeError("the write floor takes rows of plain values")
        floor.rows_written[floor._prefix + self._sid + floor._key + encode_key(user_key)] = (row,)
