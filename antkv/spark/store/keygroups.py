"""Key groups: how a stateful operator's keys are spread over partitions, and how to rescale.

An operator has a fixed number of key groups ``K`` (``1 <= K <= 32768``, default 4096, Flink's
default maximum parallelism).  A row's key group is ``pmod(xxhash64(key columns), K)``, computed
in the JVM (:func:`antkv.spark.runtime.routing.key_group_column`), so Python never hashes a row.  With ``N`` partitions
(``1 <= N <= K``), partition ``p`` owns the contiguous, half-open range of key groups::

    start(p) = ceil(p * K / N)        stop(p) = start(p + 1)        owner(g) = floor(g * N / K)

the ranges Flink assigns (``computeKeyGroupRangeForOperatorIndex`` and its inverse
``computeOperatorIndexForKeyGroup``).  Rows reach their owner through
``DataFrame.repartitionById(N, floor(key_group * N / K))`` (:func:`antkv.spark.runtime.routing.route`), again in the JVM.

Stored keys (the layout is defined here and in :mod:`antkv.spark.state.codec`)::

    offset  size  field
    0       2     key group g, big-endian (0 <= g < K <= 0x8000)
    2       2     state id, big-endian (one per state variable of the operator)
    4       n     grouping key, antkv.spark.state.codec.encode_key (prefix-free, order-preserving)
    4+n     m     entry key within the state: empty for value and list state, the
                  encode_key of the user key for map state

so the state of key groups ``[a, b)`` is exactly the byte range
``[a.to_bytes(2, "big"), b.to_bytes(2, "big"))`` and one ``delete_range`` removes it.  Keys
starting with ``0xFF 0xFF`` (:data:`METADATA_PREFIX`) lie above every key group and hold the
operator's metadata (its ``K``, its state names); no key-group range ever covers them.

Rescale (:func:`plan_rescale`): after a change from ``N`` to ``N'`` partitions, each new
partition starts from the old partition whose range overlaps its own the most (its *base*),
deletes the key groups of the base it does not own (at most two byte ranges, a head and a tail),
and brings in the rest of its range from the other overlapping old partitions.
"""

from __future__ import annotations

from dataclasses import dataclass

from antkv import CorruptionError, InvalidArgumentError

DEFAULT_KEY_GROUPS = 4096
MAX_KEY_GROUPS = 1 << 15
KEY_GROUP_BYTES = 2
STATE_ID_BYTES = 2
MAX_STATE_ID = (1 << (8 * STATE_ID_BYTES)) - 1
METADATA_PREFIX = b"\xff\xff"
KEY_GROUP_COUNT_KEY = METADATA_PREFIX + b"key-groups"


class KeyGroupError(InvalidArgumentError):
    """A key group is invalid for this operator or partition, or ``K`` changed."""


def _check_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    return value


def validate_key_group_count(key_groups: int) -> int:
    """``key_groups`` if it is a valid ``K`` (1..32768), else :class:`KeyGroupError`."""
    _check_int("key_groups", key_groups)
    if not 1 <= key_groups <= MAX_KEY_GROUPS:
        raise KeyGroupError(f"key_groups must be in 1..{MAX_KEY_GROUPS}, got {key_groups}")
    return key_groups


def validate_parallelism(key_groups: int, partitions: int) -> None:
    """Raise :class:`KeyGroupError` unless ``1 <= partitions <= key_groups``."""
    validate_key_group_count(key_groups)
    _check_int("partitions", partitions)
    if not 1 <= partitions <= key_groups:
        raise KeyGroupError(
            f"partitions must be in 1..{key_groups} (the number of key groups), got {partitions}"
        )


def check_key_group_count(stored: int | None, requested: int) -> int:
    """The ``K`` to use, given the one stored with the operator's state (None before the first
    batch).  ``K`` decides where every key is stored, so it cannot change once state exists."""
    validate_key_group_count(requested)
    if stored is not None and stored != requested:
        raise KeyGroupError(
            f"the number of key groups cannot change after the first batch: the state was "
            f"written with {stored} key groups, this run asks for {requested}"
        )
    return requested


def ensure_key_group_count(store, key_groups: int) -> int:
    """Record ``K`` in a store the first time, and refuse a different ``K`` later.

    ``store`` is anything with the ``get``/``put`` of :class:`antkv.DB`; ``K`` is stored under
    :data:`KEY_GROUP_COUNT_KEY` as 4 bytes big-endian."""
    raw = store.get(KEY_GROUP_COUNT_KEY)
    if raw is not None and len(raw) != 4:
        raise CorruptionError(f"the stored number of key groups is {len(raw)} bytes, not 4")
    stored = None if raw is None else int.from_bytes(raw, "big")
    check_key_group_count(stored, key_groups)
    if raw is None:
        store.put(KEY_GROUP_COUNT_KEY, key_groups.to_bytes(4, "big"))
    return key_groups


# --------------------------------------------------------------------------- ranges


@dataclass(frozen=True, slots=True)
class KeyGroupRange:
    """The half-open range of key groups ``[start, stop)``; empty when ``start >= stop``."""

    start: int
    stop: int

    def __len__(self) -> int:
        return max(0, self.stop - self.start)

    def __contains__(self, key_group: int) -> bool:
        return self.start <= key_group < self.stop

    def __iter__(self):
        return iter(range(self.start, self.stop))

    def intersection(self, other: "KeyGroupRange") -> "KeyGroupRange":
        return KeyGroupRange(max(self.start, other.start), min(self.stop, other.stop))

    def key_bounds(self) -> tuple[bytes, bytes]:
        """The byte range ``[begin, end)`` holding every stored key of these key groups."""
        return key_group_prefix(self.start), key_group_prefix(self.stop)

    def __repr__(self) -> str:
        return f"KeyGroupRange({self.start}, {self.stop})"


def key_group_range(key_groups: int, partitions: int, partition: int) -> KeyGroupRange:
    """The key groups partition ``partition`` of ``partitions`` owns (Flink's assignment)."""
    validate_parallelism(key_groups, partitions)
    _check_int("partition", partition)
    if not 0 <= partition < partitions:
        raise KeyGroupError(f"partition must be in 0..{partitions - 1}, got {partition}")
    start = (partition * key_groups + partitions - 1) // partitions
    stop = ((partition + 1) * key_groups + partitions - 1) // partitions
    return KeyGroupRange(start, stop)


def partition_for_key_group(key_groups: int, partitions: int, key_group: int) -> int:
    """The partition of ``partitions`` that owns ``key_group`` (the inverse of
    :func:`key_group_range`)."""
    validate_parallelism(key_groups, partitions)
    _check_int("key_group", key_group)
    if not 0 <= key_group < key_groups:
        raise KeyGroupError(f"key group must be in 0..{key_groups - 1}, got {key_group}")
    return key_group * partitions // key_groups


def key_group_prefix(key_group: int) -> bytes:
    """The first :data:`KEY_GROUP_BYTES` of every stored key of ``key_group``.  ``key_group``
    may equal ``K`` (the end of the last range)."""
    if not 0 <= key_group <= MAX_KEY_GROUPS:
        raise KeyGroupError(f"key group must be in 0..{MAX_KEY_GROUPS}, got {key_group}")
    return key_group.to_bytes(KEY_GROUP_BYTES, "big")


def state_id_bytes(state_id: int) -> bytes:
    """The :data:`STATE_ID_BYTES` that follow the key group in every key of a state."""
    _check_int("state_id", state_id)
    if not 0 <= state_id <= MAX_STATE_ID:
        raise KeyGroupError(f"state id must be in 0..{MAX_STATE_ID}, got {state_id}")
    return state_id.to_bytes(STATE_ID_BYTES, "big")


def state_prefix(key_group: int, state_id: int) -> bytes:
    """The first four bytes of every stored key of state ``state_id`` in ``key_group``."""
    return key_group_prefix(key_group) + state_id_bytes(state_id)


def check_partition_key_groups(key_group_values, key_groups: int, partitions: int,
                               partition: int) -> None:
    """Fail at once if any of ``key_group_values`` (an array, a pandas Series or a list) is
    not owned by ``partition``: the rows were routed with another ``K`` or ``N``, or not
    routed at all.  Vectorised (one min and one max); raises :class:`KeyGroupError`."""
    import numpy as np

    owned = key_group_range(key_groups, partitions, partition)
    values = np.asarray(key_group_values)
    if values.size == 0:
        return
    if values.dtype.kind not in "iu":
        raise KeyGroupError(f"key group values must be integers, got dtype {values.dtype}")
    low, high = int(values.min()), int(values.max())
    if low >= owned.start and high < owned.stop:
        return
    outside = values[(values < owned.start) | (values >= owned.stop)]
    first = int(outside[0])
    owner = (f"owned by partition {first * partitions // key_groups}"
             if 0 <= first < key_groups else f"not a key group of {key_groups}")
    raise KeyGroupError(
        f"partition {partition} of {partitions} owns key groups [{owned.start}, {owned.stop}) "
        f"of {key_groups} but received {outside.size} row(s) outside it (first: key group "
        f"{first}, {owner}); route rows with antkv.spark.runtime.routing.route using the operator's "
        f"K and N"
    )


# --------------------------------------------------------------------------- rescale


@dataclass(frozen=True, slots=True)
class PartitionRescale:
    """What new partition ``partition`` does to start from the old partitions' state.

    Invariants (checked by the tests): the base's range minus the ``clip`` byte ranges is the
    base's overlap with ``key_groups``; that overlap and the ``bring_in`` ranges are disjoint
    and together are exactly ``key_groups``; each ``bring_in`` range lies inside its source's
    old range; no other old partition overlaps ``key_groups``."""

    partition: int
    key_groups: KeyGroupRange
    base: int
    clip: tuple[tuple[bytes, bytes], ...]
    bring_in: tuple[tuple[int, KeyGroupRange], ...]


def plan_rescale(key_groups: int, old_partitions: int, new_partitions: int) -> tuple[PartitionRescale, ...]:
    """For each new partition: its range, its base, what to clip, and what to bring in.

    The base is the old partition with the largest overlap (the lowest index on a tie), so the
    most state is kept in place.  With ``old == new`` every partition is its own base."""
    validate_parallelism(key_groups, old_partitions)
    validate_parallelism(key_groups, new_partitions)
    old_ranges = [key_group_range(key_groups, old_partitions, p) for p in range(old_partitions)]
    plans = []
    for partition in range(new_partitions):
        new = key_group_range(key_groups, new_partitions, partition)
        first = partition_for_key_group(key_groups, old_partitions, new.start)
        last = partition_for_key_group(key_groups, old_partitions, new.stop - 1)
        overlapping = [(p, old_ranges[p].intersection(new)) for p in range(first, last + 1)]
        base, kept = max(overlapping, key=lambda item: (len(item[1]), -item[0]))
        base_range = old_ranges[base]
        clip = []
        if base_range.start < kept.start:
            clip.append(KeyGroupRange(base_range.start, kept.start).key_bounds())
        if kept.stop < base_range.stop:
            clip.append(KeyGroupRange(kept.stop, base_range.stop).key_bounds())
        bring_in = tuple((p, r) for p, r in overlapping if p != base and len(r))
        plans.append(PartitionRescale(partition, new, base, tuple(clip), bring_in))
    return tuple(plans)


def clip_to_key_groups(store, plan: PartitionRescale) -> None:
    """Delete from ``store`` (a copy of the base's state) every key group the new partition
    does not own: one ``delete_range`` per clip range, no key read."""
    for begin, end in plan.clip:
        store.delete_range(begin, end)
