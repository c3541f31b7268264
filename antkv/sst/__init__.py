"""SST files: immutable sorted tables of internal-key entries (LevelDB/RocksDB block-based style).

* ``format.py`` -- the file layout: block handle, block trailer (compression + xxh3 checksum),
  footer with magic number and format version;
* ``block.py`` -- block contents: columns with restart points and key prefix compression,
  decoded into parallel tuples for ``bisect``;
* ``bloom.py`` -- the blocked bloom filter (mmh3, one 512-bit block per key);
* ``properties.py`` -- :class:`TableProperties` and the properties block;
* ``builder.py`` -- :class:`TableBuilder` writes a table;
* ``reader.py`` -- :class:`TableReader` reads one (through the block cache), :func:`dump_table`.

The byte-by-byte description of the format is ``docs/format/sst.md``.
"""

from .builder import TableBuilder
from .properties import TableProperties
from .reader import TableReader, dump_table

__all__ = ["TableBuilder", "TableProperties", "TableReader", "dump_table"]
