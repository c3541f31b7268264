"""The range arguments of a scan, checked and turned into one half-open ``[lo, hi)``.

``db.items``/``keys``/``values``/``iterator`` accept plyvel's and RocksDB's names for the same
bounds (``start``/``lower_bound``, ``stop``/``upper_bound``), plyvel's ``include_start`` and
``include_stop`` flags, a ``prefix``, and plyvel's ``include_key``/``include_value``; this
module says what they mean, so every scan path (:mod:`antkv.read.iterators`,
:mod:`antkv.read.runs`) sees only ``lo``/``hi``.
"""

from __future__ import annotations

from ..errors import InvalidArgumentError
from ..record.batch import as_bytes


def narrow_to_prefix(lo, hi, prefix):
    """``[lo, hi)`` narrowed to the keys starting with ``prefix`` (unchanged when None)."""
    if prefix is None:
        return lo, hi
    prefix = as_bytes(prefix, "prefix")
    plo, phi = prefix, prefix_successor(prefix)
    lo = plo if lo is None or lo < plo else lo
    hi = phi if hi is None or (phi is not None and phi < hi) else hi
    return lo, hi


def scan_range(lower, lower_alias, upper, upper_alias, include_start, include_stop, prefix):
    """The half-open ``[lo, hi)`` (None: unbounded) that a scan's range arguments select.

    ``lower``/``lower_alias`` and ``upper``/``upper_alias`` are ``(name, value)`` pairs of two
    names for one bound (plyvel's ``start``/``stop``, RocksDB's ``lower_bound``/``upper_bound``):
    at most one of each pair may be given.  Every bound becomes an inclusive lower and an
    exclusive upper one, exactly: in bytewise order ``key + b"\\0"`` is the smallest key after
    ``key``, so ``include_start=False`` starts there and ``include_stop=True`` stops there."""
    lo = _one_of(lower, lower_alias)
    hi = _one_of(upper, upper_alias)
    for name, flag in (("include_start", include_start), ("include_stop", include_stop)):
        if not isinstance(flag, bool):
            raise TypeError(f"{name} must be a bool, not {type(flag).__name__}")
    if lo is not None and not include_start:
        lo += b"\0"
    if hi is not None and include_stop:
        hi += b"\0"
    return narrow_to_prefix(lo, hi, prefix)


def _one_of(named, alias) -> bytes | None:
    (name, value), (alias_name, alias_value) = named, alias
    if alias_value is not None:
        if value is not None:
            raise TypeError(f"give {name} or {alias_name}, not both (they are two names of one bound)")
        name, value = alias_name, alias_value
    return None if value is None else as_bytes(value, name)


def yielded_shape(include_key, include_value) -> tuple[bool, bool]:
    """``(include_key, include_value)`` checked: plyvel's two flags of what iteration yields."""
    if not isinstance(include_key, bool) or not isinstance(include_value, bool):
        raise TypeError("include_key and include_value must be bools")
    if not include_key and not include_value:
        raise InvalidArgumentError("include_key and include_value cannot both be False: nothing to yield")
    return include_key, include_value


def prefix_successor(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key starting with ``prefix`` (None: unbounded)."""
    p = bytearray(prefix)
    while p and p[-1] == 0xFF:
        p.pop()
    if not p:
        return None
    p[-1] += 1
    return bytes(p)
