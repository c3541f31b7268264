"""Table properties: what a table holds, recorded in its properties block.

The properties block is an ordinary block (see ``block.py``) whose entries are
``(name, seq 0, kind VALUE, encoded value)``, sorted by name, as in RocksDB.  A reader ignores
names it does not know and uses the default for names that are absent, so properties can be
added without a new format version.  Value encodings::

    +-----------------------+-------------------------------------------------------------+
    | name                  | value                                                       |
    +-----------------------+-------------------------------------------------------------+
    | integer properties    | u64 LE (8 bytes)                                            |
    |   num_entries, num_deletions, num_range_deletions, num_value_pointers,              |
    |   smallest_seq, largest_seq, raw_key_size, raw_value_size, data_size, index_size,   |
    |   filter_size, num_data_blocks, largest_is_exclusive (0/1), num_expiring,           |
    |   num_merges                                                                        |
    | smallest_key          | user key bytes (absent when the table is empty)             |
    | largest_key           | user key bytes (absent when the table is empty)             |
    | compression           | ASCII name, empty = none                                    |
    | blob_refs             | k x (value-log file number u64 LE, bytes referenced u64 LE),|
    |                       | ascending file number                                       |
    +-----------------------+-------------------------------------------------------------+

Meaning: ``smallest_key``/``largest_key`` bound the user keys of the point entries AND of the
range tombstones; ``largest_is_exclusive`` says ``largest_key`` is a tombstone's (exclusive) end
beyond every point key.  ``smallest_seq``/``largest_seq`` cover both kinds too.
``raw_key_size`` / ``raw_value_size`` sum the user keys / values of the point entries as given
to the builder; ``data_size``, ``index_size``, ``filter_size`` are on-disk bytes including block
trailers.  ``file_size`` and ``format_version`` are not stored here: a reader takes them from
the file's size and footer.

PART OF THE FILE FORMAT: the property names and value encodings.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from ..errors import CorruptionError
from .block import decode_block, encode_entries
from .format import FORMAT_VERSION

_U64 = struct.Struct("<Q")
_PAIR = struct.Struct("<QQ")
_VALUE = 1

_INT_FIELDS = (
    "num_entries",
    "num_deletions",
    "num_range_deletions",
    "num_value_pointers",
    "smallest_seq",
    "largest_seq",
    "raw_key_size",
    "raw_value_size",
    "data_size",
    "index_size",
    "filter_size",
    "num_data_blocks",
    "num_expiring",
    "num_merges",
)


@dataclass
class TableProperties:
    """Facts about one table; see the module docstring for each field's exact meaning."""

    num_entries: int = 0
    num_deletions: int = 0
    num_range_deletions: int = 0
    num_value_pointers: int = 0
    num_expiring: int = 0  # EXPIRING entries (antkv/base/expiry.py); absent in older tables: 0
    num_merges: int = 0  # MERGE operands (antkv/base/merge_operator.py); absent in older tables: 0
    smallest_key: bytes | None = None
    largest_key: bytes | None = None
    largest_is_exclusive: bool = False
    smallest_seq: int = 0
    largest_seq: int = 0
    raw_key_size: int = 0
    raw_value_size: int = 0
    data_size: int = 0
    index_size: int = 0
    filter_size: int = 0
    num_data_blocks: int = 0
    compression: str | None = None
    file_size: int = 0
    blob_refs: dict[int, int] = field(default_factory=dict)
    format_version: int = FORMAT_VERSION


def encode_properties(props: TableProperties) -> bytes:
    """Properties block contents."""
    items: dict[bytes, bytes] = {name.encode(): _U64.pack(getattr(props, name)) for name in _INT_FIELDS}
    items[b"largest_is_exclusive"] = _U64.pack(1 if props.largest_is_exclusive else 0)
    if props.smallest_key is not None:
        items[b"smallest_key"] = props.smallest_key
    if props.largest_key is not None:
        items[b"largest_key"] = props.largest_key
    items[b"compression"] = (props.compression or "").encode("ascii")
    items[b"blob_refs"] = b"".join(_PAIR.pack(f, n) for f, n in sorted(props.blob_refs.items()))
    return encode_entries([(name, 0, _VALUE, items[name]) for name in sorted(items)])


def decode_properties(buf: bytes, size: int, path: str, offset: int) -> TableProperties:
    """The properties in block contents ``buf[:size]``; CorruptionError when malformed."""
    keys, _, _, values = decode_block(buf, size, path, offset)
    items = dict(zip(keys, values))
    props = TableProperties()
    try:
        for name in _INT_FIELDS:
            raw = items.get(name.encode())
            if raw is not None:
                setattr(props, name, _U64.unpack(raw)[0])
        raw = items.get(b"largest_is_exclusive")
        if raw is not None:
            props.largest_is_exclusive = bool(_U64.unpack(raw)[0])
        props.smallest_key = items.get(b"smallest_key")
        props.largest_key = items.get(b"largest_key")
        props.compression = items.get(b"compression", b"").decode("ascii") or None
        refs = items.get(b"blob_refs", b"")
        props.blob_refs = {f: n for f, n in _PAIR.iter_unpack(refs)}
    except (struct.error, UnicodeDecodeError) as e:
        raise CorruptionError(f"undecodable properties block ({e})", path, offset) from None
    if props.compression not in (None, "zstd"):
        raise CorruptionError(f"unknown compression {props.compression!r} in properties", path, offset)
    return props
