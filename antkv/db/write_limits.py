"""The largest writes antkv can store, checked at the door before anything is written.

Every key and value ends up in places with a fixed-width length field: a WAL record (its length
is a u32, so one batch encodes to at most 4 GiB), a table block (a block handle's size is a
u32: an inline value and its key, or a key alone, must fit in one block), a value-log record
(its size is a u32).  A write that could not be stored in one of them would be acknowledged and
then fail every flush and every reopen; :func:`check_ops` refuses it with an
InvalidArgumentError before the write touches the WAL, the value log or the memtable.

The limits are read from the modules that define the formats, at each check.
"""

from __future__ import annotations

from ..base.dbformat import EXPIRING, MERGE, RANGE_DELETION, VALUE
from ..base.expiry import HEAD_SIZE
from ..errors import InvalidArgumentError
from ..record import log_format
from ..sst import format as sst_format
from ..vlog import format as vlog_format
from ..vlog.pointer import POINTER_SIZE

CHECK_ABOVE = 1 << 20  # DB.put checks a pair only from this many bytes of key and value on
ENTRY_OVERHEAD = sst_format.BLOCK_ENTRY_OVERHEAD  # what a table block adds around a single entry
BATCH_HEADER = 12  # sequence u64 + count u32 (antkv/record/batch.py)
RECORD_HEADER = 9  # kind u8 + key length u32 + value length u32


def check_ops(ops, min_blob_size: int, user_bytes: int | None = None) -> None:
    """InvalidArgumentError naming the first ``(kind, key, value)`` of ``ops`` that cannot be
    stored (values of at least ``min_blob_size`` bytes go to the value log), or the batch when
    its WAL record would be too large.

    ``user_bytes``, the sum of the keys' and values' lengths, allows the answer without a look
    at each pair when even the whole batch, each pair counted with a value pointer and an
    expiry head on top of its value, fits every limit: a pair's inline bytes, its value-log
    record and the WAL record are each at most that."""
    block = sst_format.max_entry_size()
    vlog = vlog_format.MAX_RECORD_SIZE - vlog_format.RECORD_HEADER_SIZE
    if user_bytes is not None and BATCH_HEADER + user_bytes + len(ops) * (RECORD_HEADER + POINTER_SIZE + HEAD_SIZE) \
            <= min(block, vlog, log_format.MAX_RECORD_SIZE):
        return
    wal_bytes = BATCH_HEADER
    for kind, key, value in ops:
        inline = len(value)
        separated = kind == VALUE and len(value) >= min_blob_size or (
            kind == EXPIRING and len(value) - HEAD_SIZE >= min_blob_size)
        if separated:
            stored = len(value) - (HEAD_SIZE if kind == EXPIRING else 0)
            if len(key) + stored > vlog:
                raise InvalidArgumentError(
                    f"a key of {len(key)} bytes with a value of {stored} bytes exceeds the value-log record limit "
                    f"of {vlog} bytes; nothing was written")
            inline = POINTER_SIZE + (HEAD_SIZE if kind == EXPIRING else 0)
        what = "range deletion" if kind == RANGE_DELETION else "operand" if kind == MERGE else "value"
        if len(key) + inline > block:
            raise InvalidArgumentError(
                f"a key of {len(key)} bytes with {'an inline ' + what if inline else 'no value'} of {inline} bytes "
                f"exceeds the table block limit of {block} bytes"
                f"{' (larger values go to the value log: lower Options.min_blob_size)' if kind == VALUE else ''}; "
                f"nothing was written")
        wal_bytes += RECORD_HEADER + len(key) + inline
    if wal_bytes > log_format.MAX_RECORD_SIZE:
        raise InvalidArgumentError(
            f"a write batch of {len(ops)} updates encodes to {wal_bytes} bytes, over the WAL record limit of "
            f"{log_format.MAX_RECORD_SIZE} bytes: split it; nothing was written")
