"""Merge operators: how ``db.merge(key, operand)`` combines operands (RocksDB's
``AssociativeMergeOperator``).

A merge operator is any object with

* ``name``: a str naming it, stable across versions of the program: the database records it
  (the ``OPTIONS`` file) and refuses to open with another operator, or with none, once it may
  hold MERGE entries;
* ``merge(key, existing, operand) -> bytes``: ``existing`` is the value the key had (``None``
  when it had none: never written, deleted, range-deleted or expired) and ``operand`` the newer
  operand.  It must be **associative**: the engine also calls it with ``existing`` set to an
  *older operand* to combine two operands into one (a *partial merge*) during flush and
  compaction, and expects ``merge(merge(v, a), b) == merge(v, merge(a, b))`` for every value
  or ``None`` ``v`` -- as RocksDB's associative operators do.

:func:`full_merge` folds a key's operands (oldest first) onto its base value: what reads return
and what compaction writes once it reaches the base.  An operator that raises, or returns
anything but ``bytes``, fails the read or the background job with ``InvalidArgumentError``:
nothing is written from it.

The built-in :class:`AppendOperator` (name ``"append"``, or ``"append:<delimiter>"`` with a
delimiter) concatenates operands, as RocksDB's ``StringAppendOperator`` does: what Spark's list
state uses on RocksDB.  It is rebuilt from its name in worker processes; a user-defined
operator makes flush and compaction run in the database's own process.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import InvalidArgumentError

BUILTIN_PREFIX = "append"


@dataclass(frozen=True)
class AppendOperator:
    """Concatenate operands, ``delimiter`` between them: ``merge(b"a", b"b") == b"a" +
    delimiter + b"b"``; onto no value, an operand is the value."""

    delimiter: bytes = b""

    def __post_init__(self) -> None:
        if not isinstance(self.delimiter, bytes):
            raise TypeError(f"AppendOperator delimiter must be bytes, not {type(self.delimiter).__name__}")

    @property
    def name(self) -> str:
        if not self.delimiter:
            return BUILTIN_PREFIX
        return f"{BUILTIN_PREFIX}:{self.delimiter.hex()}"

    def merge(self, key: bytes, existing: bytes | None, operand: bytes) -> bytes:
        if existing is None:
            return operand
        return existing + self.delimiter + operand


def resolve(spec):
    """The merge operator ``Options.merge_operator`` names: None, a built-in's name
    (``"append"``, ``"append:<hex delimiter>"``) or an operator object."""
    if spec is None:
        return None
    if isinstance(spec, str):
        if spec == BUILTIN_PREFIX:
            return AppendOperator()
        if spec.startswith(BUILTIN_PREFIX + ":"):
            try:
                return AppendOperator(bytes.fromhex(spec[len(BUILTIN_PREFIX) + 1 :]))
            except ValueError:
                pass
        raise InvalidArgumentError(
            f"Options.merge_operator: unknown built-in {spec!r} (built-ins: 'append', 'append:<hex delimiter>'; "
            "or pass an object with a name and merge(key, existing, operand))"
        )
    name = getattr(spec, "name", None)
    if not isinstance(name, str) or not name or not callable(getattr(spec, "merge", None)):
        raise InvalidArgumentError(
            "Options.merge_operator: must be None, a built-in's name or an object with a non-empty str 'name' "
            f"and a merge(key, existing, operand) method; got {type(spec).__name__}"
        )
    return spec


def is_builtin(op) -> bool:
    """Whether ``op`` can be rebuilt from its name in another process."""
    return type(op) is AppendOperator


def merge_two(op, key: bytes, existing: bytes | None, operand: bytes) -> bytes:
    """``op.merge`` with its result checked."""
    try:
        out = op.merge(key, existing, operand)
    except Exception as e:  # noqa: BLE001 - the user's code: reported as bad input
        raise InvalidArgumentError(f"merge operator {op.name!r} failed on key {key!r}: {type(e).__name__}: {e}") from e
    if type(out) is not bytes:
        if isinstance(out, (bytearray, memoryview)):
            return bytes(out)
        raise InvalidArgumentError(f"merge operator {op.name!r} returned {type(out).__name__}, not bytes")
    return out


def full_merge(op, key: bytes, base: bytes | None, operands: list[bytes]) -> bytes:
    """``base`` (None: no value) with ``operands`` (OLDEST first) applied."""
    value = base
    for operand in operands:
        value = merge_two(op, key, value, operand)
    return value  # type: ignore[return-value]


def partial_merge(op, key: bytes, operands: list[bytes]) -> bytes:
    """One operand equivalent to ``operands`` (oldest first, at least one)."""
    value = operands[0]
    for operand in operands[1:]:
        value = merge_two(op, key, value, operand)
    return value


def missing_operator(where: str) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"{where} holds merge operands but no merge operator is configured: open the database with "
        "Options(merge_operator=...) naming the operator it was written with"
    )
