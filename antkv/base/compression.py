"""Compression codes: the byte a table block's trailer and a value-log file's header and
records store, the same in both formats.  PART OF THE FILE FORMAT (tables and value logs).

``Options.compression`` and ``Options.blob_compression`` name them: ``None`` or ``"zstd"``.
"""

from __future__ import annotations

COMPRESSION_NONE = 0
COMPRESSION_ZSTD = 1
COMPRESSION_CODES = {None: COMPRESSION_NONE, "zstd": COMPRESSION_ZSTD}  # option value -> byte
COMPRESSION_NAMES = {code: name for name, code in COMPRESSION_CODES.items()}  # byte -> option value
