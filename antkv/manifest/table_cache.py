"""The table cache: the open reader of every live table (LevelDB's ``table_cache``).

A table is opened once, on first use, and its reader is kept on the table's metadata
(``FileMetaData.reader``, and its point-read form in ``FileMetaData.point``): readers test
that field first and call :meth:`TableCache.get` only when it is still None, so an open table
costs no lookup.  The reader is closed when the table
is deleted (:meth:`evict`) or the database closes (:meth:`close`).  The readers share the
database's block cache.

Thread-safety: ``get``, ``evict`` and ``close`` take the cache's own lock (a leaf lock: nothing
is acquired under it but the file system's).
"""

from __future__ import annotations

import threading

from ..sst.reader import TableReader
from .translated_table import open_table_reader


class TableCache:
    def __init__(self, fs, dbname: str, block_cache, verify_checksums: bool, cache_index_and_filter_blocks: bool):
        self._fs = fs
        self._dbname = dbname
        self._block_cache = block_cache
        self._verify = verify_checksums
        self._cache_meta = cache_index_and_filter_blocks  # Options.cache_index_and_filter_blocks
        self._lock = threading.Lock()
        self._readers: dict[int, TableReader] = {}  # table number -> its open reader

    def get(self, f) -> TableReader:
        """The reader of table ``f`` (a ``FileMetaData``), opened now if it is not yet."""
        with self._lock:
            r = f.reader
            if r is None:
                r = open_table_reader(
                    self._fs, self._dbname, f, cache=self._block_cache, verify_checksums=self._verify,
                    cache_index_and_filter_blocks=self._cache_meta,
                )
                self._readers[f.number] = r
                if r.point is not None:
                    f.point = r.point + (r,)
                f.reader = r
            return r

    def memory_outside_cache(self) -> int:
        """What the open readers' index and filter blocks hold outside the block cache (RocksDB's
        ``estimate-table-readers-mem``): 0 when they are charged to it."""
        with self._lock:
            return sum(r.memory_outside_cache for r in self._readers.values())

    def evict(self, number: int) -> None:
        """Close the reader of deleted table ``number``, if it was open."""
        with self._lock:
            reader = self._readers.pop(number, None)
        if reader is not None:
            reader.close()

    def close(self) -> None:
        """Close every reader (the database is closing)."""
        with self._lock:
            readers, self._readers = list(self._readers.values()), {}
        for reader in readers:
            reader.close()
