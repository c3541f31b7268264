"""antkv: a pure-Python, WiscKey-style, key-value-separated LSM storage engine."""

from .errors import (
    CorruptionError,
    DBClosedError,
    Error,
    InvalidArgumentError,
    IOError,
    LockError,
    MemoryLimitError,
)
from .options import Options, WriteOptions

__all__ = [
    "Error",
    "InvalidArgumentError",
    "CorruptionError",
    "DBClosedError",
    "LockError",
    "MemoryLimitError",
    "IOError",
    "Options",
    "WriteOptions",
]
__version__ = "0.1.0"
