"""A WAL file: log framing (:mod:`.log_format`) of write batches (:mod:`.batch`), beginning
with one empty batch.

Every WAL antkv creates starts with a *header record*: an empty write batch (count 0) whose
sequence is the next sequence number the database will assign.  It is written and synced when
the file is created, before any write can be appended, so:

* a WAL holding no complete record was truncated: whatever writes it held are gone (recovery
  reports it; under ``absolute_consistency`` it is a :class:`~antkv.errors.CorruptionError`);
* the header's sequence number says where the WAL continues the database's history, which
  lets recovery decide whether a WAL it has no record of creating is this database's.

An empty batch is an ordinary batch: readers replay it as nothing.

PART OF THE FILE FORMAT: the header record.
"""

from __future__ import annotations

import logging

from .batch import encode_batch
from .log_format import HEADER_SIZE, LogWriter, frame

log = logging.getLogger("antkv")
HEADER_RECORD_SIZE = HEADER_SIZE + len(encode_batch(0, []))  # 28: a WAL no longer than this holds no write


def header_record(next_sequence: int) -> bytes:
    """The framed first record of a WAL whose first write will get ``next_sequence``."""
    return frame(encode_batch(next_sequence, []))


def is_header_record(offset: int, ops) -> bool:
    """Whether the batch ``ops`` read at ``offset`` of a WAL is its header record."""
    return offset == 0 and not ops


def create_wal(fs, path: str, next_sequence: int) -> LogWriter:
    """Create the WAL ``path``, write its header record and sync it; the writer appends the
    database's batches after it."""
    file = fs.create(path)
    try:
        file.append(header_record(next_sequence))
        file.sync()
    except BaseException:
        # nothing was ever written to it: remove it rather than leave a WAL without a header
        # (which recovery would report as truncated)
        try:
            file.close()
            fs.remove(path)
        except Exception as cleanup:  # noqa: BLE001 - the original error is the one raised
            log.warning("%s: removing the WAL whose creation failed failed too: %s", path, cleanup)
        raise
    return LogWriter(file)


def write_empty_wal(fs, path: str, next_sequence: int) -> None:
    """Write (and sync) a WAL holding only its header record: "nothing to replay"."""
    fs.write_all(path, header_record(next_sequence), sync=True)
