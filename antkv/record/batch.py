"""``WriteBatch``: an ordered group of updates applied atomically.

The encoding below is both the WAL record payload and ``WriteBatch.data()``; it is PART OF THE
FILE FORMAT.  All integers little-endian::

    batch   := header record*
    header  := sequence u64 | count u32                      (12 bytes)
    record  := kind u8 | key_len u32 | value_len u32 | key | value

    kind VALUE          key = user key, value = the value
    kind DELETION       key = user key, value = empty
    kind RANGE_DELETION key = begin,    value = end          (half-open [begin, end))
    kind VALUE_POINTER  key = user key, value = value pointer (antkv/vlog/pointer.py)
    kind EXPIRING       key = user key, value = expiring entry (antkv/base/expiry.py)
    kind MERGE          key = user key, value = the merge operand (always inline)

The i-th record of a batch gets sequence number ``sequence + i``.
"""

from __future__ import annotations

import struct
from itertools import repeat
from typing import Iterator

from ..base.dbformat import DELETION, EXPIRING, MERGE, RANGE_DELETION, VALID_KINDS, VALUE, VALUE_POINTER
from ..base.expiry import decode_expiring
from ..errors import CorruptionError, InvalidArgumentError

BATCH_HEADER = struct.Struct("<QI")
RECORD_HEADER = struct.Struct("<BII")
SINGLE_RECORD = struct.Struct("<QIBII")  # header + record header of a one-record batch


def as_bytes(x: object, what: str) -> bytes:
    """``x`` as ``bytes``; accepts bytes-like objects, rejects ``str`` and others with TypeError."""
    if type(x) is bytes:
        return x  # type: ignore[return-value]
    if isinstance(x, (bytes, bytearray, memoryview)):
        try:
            return bytes(x)
        except (ValueError, BufferError) as e:  # a released memoryview, an unexportable buffer
            raise InvalidArgumentError(f"{what} is not a usable buffer: {e}") from None
    if isinstance(x, str):
        raise TypeError(f"{what} must be bytes, not str (encode it first, e.g. {what}.encode())")
    raise TypeError(f"{what} must be bytes, not {type(x).__name__}")


_BYTES_OR_NONE = frozenset((bytes, type(None)))


def batch_of_changes(changes: dict, size: int) -> "WriteBatch":
    """``WriteBatch().update(changes)`` for a caller that holds ``changes`` as bytes already
    and has counted them (the Spark state store settling its buffered writes): no pass over
    them checks a type or adds a length, and ``DB.write`` meets its updates one at a time
    (:class:`_ChangeSetBatch`).  REQUIRES: every key is bytes, every value bytes or None
    (deleted), ``size`` is the sum of the keys' lengths and the values' (None: 0), and
    ``changes`` is not changed while the batch is in use."""
    return _ChangeSetBatch(changes, size)


class WriteBatch:
    """Updates applied together by ``DB.write``: all of them or none, also across a crash."""

    __slots__ = ("_ops", "_size", "_merges")

    def __init__(self) -> None:
        self._ops: list[tuple[int, bytes, bytes]] = []
        self._size = 0
        self._merges = 0

    def put(self, key, value) -> "WriteBatch":
        if type(key) is not bytes:
            key = as_bytes(key, "key")
        if type(value) is not bytes:
            value = as_bytes(value, "value")
        self._ops.append((VALUE, key, value))
        self._size += len(key) + len(value)
        return self

    def delete(self, key) -> "WriteBatch":
        if type(key) is not bytes:
            key = as_bytes(key, "key")
        self._ops.append((DELETION, key, b""))
        self._size += len(key)
        return self

    def update(self, changes: dict) -> "WriteBatch":
        """Put every ``key: value`` of ``changes``, and delete the keys whose value is None,
        in the dict's order: ``put`` and ``delete`` of each, done in bulk."""
        types = set(map(type, changes))
        types.update(map(type, changes.values()))
        if not types <= _BYTES_OR_NONE:
            for key, value in changes.items():
                if value is None:
                    self.delete(key)
                else:
                    self.put(key, value)
            return self
        return self._update_checked(changes, sum(map(len, changes)) + sum(map(len, filter(None, changes.values()))))

    def _update_checked(self, changes: dict, size: int) -> "WriteBatch":
        """:meth:`update` for a caller that checked the types: REQUIRES every key of ``changes``
        bytes, every value bytes or None, and ``size`` their lengths' sum (keys, and values
        not None).  See :func:`batch_of_changes`."""
        deleted = list(changes.values()).count(None)
        if not deleted:  # (puts only, or deletions only: the entries made in C)
            self._ops += zip(repeat(VALUE), changes, changes.values())
        elif deleted == len(changes):
            self._ops += zip(repeat(DELETION), changes, repeat(b""))
        else:
            self._ops += [(DELETION, k, b"") if v is None else (VALUE, k, v) for k, v in changes.items()]
        self._size += size
        return self

    def merge(self, key, operand) -> "WriteBatch":
        """Merge ``operand`` into ``key`` (the database's ``Options.merge_operator`` combines
        them; writing the batch to a database without one is an InvalidArgumentError)."""
        key = as_bytes(key, "key")
        operand = as_bytes(operand, "operand")
        self._ops.append((MERGE, key, operand))
        self._size += len(key) + len(operand)
        self._merges += 1
        return self

    @property
    def num_merges(self) -> int:
        """Merge operands in the batch."""
        return self._merges

    def delete_range(self, begin, end) -> "WriteBatch":
        """Delete every key in ``[begin, end)``; ``begin == end`` is a no-op."""
        begin = as_bytes(begin, "begin")
        end = as_bytes(end, "end")
        if begin > end:
            raise InvalidArgumentError(f"delete_range: begin {begin!r} > end {end!r}")
        if begin != end:
            self._ops.append((RANGE_DELETION, begin, end))
            self._size += len(begin) + len(end)
        return self

    def clear(self) -> None:
        self._ops.clear()
        self._size = 0
        self._merges = 0

    def count(self) -> int:
        return len(self._ops)

    __len__ = count

    @property
    def data_size(self) -> int:
        """User bytes (keys and values) in the batch."""
        return self._size

    def ops(self) -> list[tuple[int, bytes, bytes]]:
        """``(kind, key, value)`` of every update, in order."""
        return list(self._ops)

    def data(self) -> bytes:
        """The stable encoding (with sequence 0)."""
        return encode_batch(0, self._ops)

    @classmethod
    def from_data(cls, data: bytes) -> "WriteBatch":
        """The batch ``data()`` encoded; CorruptionError when ``data`` does not decode,
        InvalidArgumentError naming the first record no write could have made (a value
        pointer, an expiring entry that is not a valid expiry and value, a deletion with a
        value, a range deletion whose begin is after its end)."""
        _, ops = decode_batch(as_bytes(data, "data"), "<WriteBatch data>")
        b = cls()
        for i, (kind, key, value) in enumerate(ops):
            _check_user_record(i, kind, key, value)
            b._ops.append((kind, key, value))
            b._size += len(key) + len(value)
            b._merges += kind == MERGE
        return b

    def __repr__(self) -> str:
        return f"WriteBatch(count={self.count()}, data_size={self._size})"


def updates_to_write(batch: WriteBatch):
    """What ``DB.write`` writes of ``batch``: its :meth:`~WriteBatch.ops`, or for a batch of
    :func:`batch_of_changes` a sequence (``len``, and the same ``(kind, key, value)`` entries
    each time it is iterated) that makes them as they are consumed."""
    if type(batch) is _ChangeSetBatch and batch._changes is not None:
        return _ChangeOps(batch._changes, batch._deleted)
    return batch.ops()


class _ChangeSetBatch(WriteBatch):
    """The batch of :func:`batch_of_changes`: the change set ``{key: value or None}`` itself,
    made into ``(kind, key, value)`` entries only as ``DB.write`` iterates them
    (:func:`updates_to_write`).

    Why: a list of a tuple per key outlives the loop that builds it, and CPython's garbage
    collector counts every such new container -- a change set of 20,000 keys set off ~28
    collections of the youngest generation and a few of the next, ~0.1-0.25 us per key
    written.  Entries made by ``zip`` as they are consumed are freed (or reused) as the next
    is made, so the collector's count does not grow.  Any other use of the batch (another
    update, ``ops()``, ``data()``) first turns it into a plain batch's list (:meth:`_spill`)."""

    __slots__ = ("_changes", "_deleted")

    def __init__(self, changes: dict, size: int) -> None:
        super().__init__()
        self._changes: dict | None = changes
        self._deleted = list(changes.values()).count(None)
        self._size = size

    def _spill(self) -> None:
        changes = self._changes
        if changes is not None:
            self._changes = None
            size, self._size = self._size, 0
            self._update_checked(changes, size)

    def put(self, key, value) -> "WriteBatch":
        self._spill()
        return super().put(key, value)

    def delete(self, key) -> "WriteBatch":
        self._spill()
        return super().delete(key)

    def update(self, changes: dict) -> "WriteBatch":
        self._spill()
        return super().update(changes)

    def merge(self, key, operand) -> "WriteBatch":
        self._spill()
        return super().merge(key, operand)

    def delete_range(self, begin, end) -> "WriteBatch":
        self._spill()
        return super().delete_range(begin, end)

    def clear(self) -> None:
        self._changes = None
        super().clear()

    def count(self) -> int:
        return len(self._ops) if self._changes is None else len(self._changes)

    __len__ = count

    def ops(self) -> list[tuple[int, bytes, bytes]]:
        self._spill()
        return super().ops()

    def data(self) -> bytes:
        self._spill()
        return super().data()


class _ChangeOps:
    """The ``(kind, key, value)`` entries of a change set, in its order, made anew by each
    iteration (``len`` is the number of keys): puts and deletions as ``WriteBatch.update``
    makes them."""

    __slots__ = ("_changes", "_deleted")

    def __init__(self, changes: dict, deleted: int) -> None:
        self._changes = changes
        self._deleted = deleted  # keys whose value is None

    def __len__(self) -> int:
        return len(self._changes)

    def __iter__(self):
        changes = self._changes
        if not self._deleted:
            return zip(repeat(VALUE), changes, changes.values())
        if self._deleted == len(changes):
            return zip(repeat(DELETION), changes, repeat(b""))
        return ((DELETION, k, b"") if v is None else (VALUE, k, v) for k, v in changes.items())


def _check_user_record(i: int, kind: int, key: bytes, value: bytes) -> None:
    where = f"WriteBatch.from_data: record {i}"
    if kind == VALUE_POINTER:
        raise InvalidArgumentError(f"{where}: a WriteBatch from user data cannot hold value pointers")
    if kind == DELETION and value:
        raise InvalidArgumentError(f"{where}: a deletion carries a value of {len(value)} bytes")
    if kind == RANGE_DELETION and key >= value:
        raise InvalidArgumentError(f"{where}: range deletion begin {key[:40]!r} is not before end {value[:40]!r}")
    if kind == EXPIRING:
        try:
            _, inner, _ = decode_expiring(value)
        except CorruptionError as e:
            raise InvalidArgumentError(f"{where}: not an expiring entry ({e})") from None
        if inner != VALUE:
            raise InvalidArgumentError(f"{where}: an expiring entry from user data must wrap a value, not kind {inner}")


def encode_batch(sequence: int, ops: list[tuple[int, bytes, bytes]]) -> bytes:
    pack = RECORD_HEADER.pack
    parts = [BATCH_HEADER.pack(sequence, len(ops))]
    for kind, key, value in ops:
        parts.append(pack(kind, len(key), len(value)))
        parts.append(key)
        parts.append(value)
    return b"".join(parts)


def decode_batch(data: bytes, path: str, offset: int = 0) -> tuple[int, list[tuple[int, bytes, bytes]]]:
    """``(sequence, ops)`` of an encoded batch; ``CorruptionError`` at ``path``/``offset`` if malformed."""
    try:
        sequence, count = BATCH_HEADER.unpack_from(data, 0)
        p = BATCH_HEADER.size
        ops = []
        unpack = RECORD_HEADER.unpack_from
        hsize = RECORD_HEADER.size
        for _ in range(count):
            kind, klen, vlen = unpack(data, p)
            p += hsize
            key = data[p : p + klen]
            p += klen
            value = data[p : p + vlen]
            p += vlen
            if kind not in VALID_KINDS or p > len(data):
                raise ValueError("bad record")
            ops.append((kind, key, value))
        if p != len(data):
            raise ValueError("trailing bytes")
    except (struct.error, ValueError) as e:
        raise CorruptionError(f"malformed write batch ({e})", path, offset) from None
    return sequence, ops


def iter_batch(sequence: int, ops) -> Iterator[tuple[int, int, bytes, bytes]]:
    """``(seq, kind, key, value)`` of each op, numbering from ``sequence``."""
    for i, (kind, key, value) in enumerate(ops):
        yield sequence + i, kind, key, value
