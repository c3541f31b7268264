"""antkv: a pure-Python, WiscKey-style, key-value-separated LSM storage engine.

    import antkv
    with antkv.open("/tmp/db") as db:
        db.put(b"key", b"value")
        assert db.get(b"key") == b"value"

See ``README.md`` and ``docs/`` for the API, the engine's design and its file formats.
"""

from .db import DB, open
from .destroy import destroy
from .repair import RepairReport, repair
from .errors import (
    BackgroundError,
    CorruptionError,
    DBClosedError,
    Error,
    InvalidArgumentError,
    IOError,
    LockError,
    MemoryLimitError,
    ReadOnlyError,
)
from .base.merge_operator import AppendOperator
from .db.sst_file_writer import SstFileWriter
from .memory.cache import Cache
from .memory.write_buffer_manager import WriteBufferManager, shared_memory
from .options import Options, WriteOptions
from .read.iterators import DBIterator
from .read.snapshot import Snapshot
from .record.batch import WriteBatch

__all__ = [
    "open",
    "destroy",
    "repair",
    "RepairReport",
    "DB",
    "WriteBatch",
    "AppendOperator",
    "SstFileWriter",
    "Snapshot",
    "DBIterator",
    "Options",
    "WriteOptions",
    "Cache",
    "WriteBufferManager",
    "shared_memory",
    "Error",
    "InvalidArgumentError",
    "CorruptionError",
    "DBClosedError",
    "LockError",
    "MemoryLimitError",
    "ReadOnlyError",
    "IOError",
    "BackgroundError",
]
__version__ = "0.1.0"
