"""A batch's appends of decoded values (``StateStore.append_decoded``: a list state's rows),
made bytes in bulk when the batch's writes settle.

While the batch runs, a key appended to has the pending write :data:`APPENDED`, and the store
keeps the values appended to it apart (``appends``: key -> the one value, or a list of them in
order; a decoded value is immutable, never a list).  A key whose pending write is no longer
:data:`APPENDED` was written since (a put, a delete): what was appended before is dropped with
it.  Settling encodes every value appended in one ``codec.encode_many``, looks each key's
bytes before up in the row cache at once, and makes each key's pending write those bytes
with its values' encodings after them.
"""

from __future__ import annotations

from itertools import chain, compress, islice, repeat
from operator import add, countOf, is_, is_not

from antkv.spark.store.row_cache import MISSING, PREFIX_LEN

APPENDED = object()  # the pending write of a key appended to, whose values wait in appends


def settle_appends(pending: dict, appends: dict, codec, rows, read_through) -> list | None:
    """Make the keys of ``pending`` appended to (``appends``, values of ``codec``) pending
    writes of bytes: their values encoded in bulk, each key's after its value before -- the
    row cache's (``rows``), else ``read_through(key)``'s unless the key's group is held whole
    (then absent).  Returns, when every pending write is one of them, what the row cache held
    for each pending key before the writes, in order (``MISSING`` where none), as the store's
    settle reads it; else None.  A value ``codec`` cannot encode raises, leaving ``pending``
    unchanged."""
    if countOf(pending.values(), APPENDED) == len(appends):  # (a pending APPENDED is a key of appends)
        keys = list(appends)
    else:  # some were written since: those are not appended to
        keys = list(compress(appends, map(is_, map(pending.__getitem__, appends), repeat(APPENDED))))
        appends = {k: appends[k] for k in keys}
    values = list(appends.values())
    encode_many = getattr(codec, "encode_many", None)
    if list in set(map(type, values)):  # keys appended to more than once: their values in a run
        counts = [len(v) if type(v) is list else 1 for v in values]
        values = list(chain.from_iterable(v if type(v) is list else (v,) for v in values))
    else:
        counts = None
    encoded = encode_many(values) if encode_many is not None else list(map(codec.encode, values))
    if counts is not None:
        run = iter(encoded)
        encoded = [b"".join(islice(run, n)) for n in counts]
    n = len(keys)
    found = bases = list(map(rows.rows.get, keys, repeat(MISSING, n)))
    if not all(map(is_not, found, repeat(MISSING, n))) or not all(found):  # (absent, empty or not cached)
        complete = rows.complete  # (a key the cache does not hold is read, unless its key group is whole)
        found = [b if b is not MISSING or k[:PREFIX_LEN] in complete else read_through(k)
                 for k, b in zip(keys, found)]
        bases = [b"" if b is None or b is MISSING else b for b in found]
    pending.update(zip(keys, map(add, bases, encoded)))
    return found if n == len(pending) else None  # (then pending's keys are keys, in order)
