"""What the row cache charges for a value it keeps decoded, as Python objects, beside its bytes.

A decoded value (``StateStore.get_decoded`` / ``put_decoded``) is a tuple of rows whose elements
are ints, strings, floats, bytes, Nones or nested rows.  What it costs in memory is not a fixed
multiple of its stored bytes: a row of three longs (20 bytes stored) takes 293 bytes as
objects with its dict slot, about 15 per stored byte, while a 1 KiB string takes about one
byte per stored byte.  So the charge depends on the value's length:

- a value stored in fewer than :data:`LONG_VALUE` bytes is charged :data:`DECODED_OVERHEAD`
  plus :data:`DECODED_PER_BYTE` per stored byte, a bound for rows of small numbers, the
  worst case per byte, computed without touching the objects;
- a longer value is charged :data:`DECODED_OVERHEAD` plus the measured size of its objects
  (:func:`held_bytes`).  Charging it 10 bytes per stored byte would charge a row holding a 1 KiB
  string ten times what it holds, and the cache would keep a tenth of the decoded values it
  has room for.

Invariant: the charge of a value is a function of its bytes and its decoded objects, which are
immutable (the codec contract of ``StateStore.get_decoded``), so the charge given back when a
decoded value is dropped is the charge taken when it was kept.
"""

from __future__ import annotations

from itertools import chain, compress
from sys import getsizeof

DECODED_OVERHEAD = 96  # bytes a decoded value is charged beyond its objects' bytes (its dict slot, tuple of rows)
DECODED_PER_BYTE = 10  # per stored byte of a short value: a row of three longs (20 bytes) measured 293 B with its slot
LONG_VALUE = 128  # a value stored in this many bytes or more is charged its objects' measured size

_CONTAINERS = frozenset((tuple, list))
_TUPLES = frozenset((tuple,))
_TUPLE_HEAD, _SLOT = getsizeof(()), getsizeof((None,)) - getsizeof(())  # a tuple: head + a slot per element


def held_bytes(values) -> int:
    """``sys.getsizeof`` of each of ``values`` and, recursively, of the elements of the tuples
    and lists among them: the bytes the objects hold (an object two of them share is counted
    twice, so this is at least what they hold).  Each level is summed with loops in C, a level
    of tuples alone (the rows) from their lengths, as ``getsizeof`` sizes a tuple."""
    total = 0
    level = values if type(values) is list else list(values)
    while level:
        types = set(map(type, level))
        if _TUPLES.issuperset(types):
            total += _TUPLE_HEAD * len(level) + _SLOT * sum(map(len, level))
            level = list(chain.from_iterable(level))
            continue
        total += sum(map(getsizeof, level))
        if _CONTAINERS.isdisjoint(types):
            break
        level = list(chain.from_iterable(compress(level, map(_CONTAINERS.__contains__, map(type, level)))))
    return total


def decoded_charge(raw: bytes, value) -> int:
    """The charge of ``value``, kept decoded beside its stored bytes ``raw``."""
    n = len(raw)
    if n < LONG_VALUE:
        return DECODED_OVERHEAD + DECODED_PER_BYTE * n
    return DECODED_OVERHEAD + held_bytes((value,))


def decoded_charges(raws: list, values, raw_bytes: int | None = None) -> int:
    """``sum(map(decoded_charge, raws, values))``, summed in C when every value is short;
    ``raw_bytes``, if known: ``sum(map(len, raws))``."""
    if not raws:
        return 0
    total = DECODED_OVERHEAD * len(raws)
    if max(map(len, raws)) < LONG_VALUE:
        return total + DECODED_PER_BYTE * (sum(map(len, raws)) if raw_bytes is None else raw_bytes)
    lengths = list(map(len, raws))
    long_ones = list(map(LONG_VALUE.__le__, lengths))
    short_bytes = sum(lengths) - sum(compress(lengths, long_ones))
    return total + DECODED_PER_BYTE * short_bytes + held_bytes(compress(values, long_ones))


def recharge(longest: int, grown: int) -> int | None:
    """What the charge changes by when decoded values are replaced by as many others, whose
    stored bytes are ``grown`` more in all, if every one of either is short (stored in at most
    ``longest`` bytes, less than :data:`LONG_VALUE`: its charge then depends on its length
    alone); None if one is long (its objects are measured)."""
    if longest >= LONG_VALUE:
        return None
    return DECODED_PER_BYTE * grown
