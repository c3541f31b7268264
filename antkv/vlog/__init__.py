"""The value log: where key-value separation puts large values (WiscKey, AntKV).

A value of ``len(value) >= Options.min_blob_size`` is appended to the active value-log file
at write time (:class:`ValueLogWriter`); the WAL, memtable and tables carry only a 25-byte value
pointer (:mod:`antkv.vlog.pointer`).  Reads resolve pointers through :class:`ValueLogReader`.
Compaction never rewrites values; GC relocates the live ones of mostly-garbage files.

Modules: ``format`` (the file format, the only definition of it), ``pointer`` (the value
pointer), ``writer`` (the active file), ``reader`` (pointer resolution, scans, recovery,
verification, dump).
"""

from ..base.filenames import parse_vlog_file_name, vlog_file_name
from .pointer import POINTER_SIZE, decode_pointer, encode_pointer
from .reader import ValueLogReader, ValueLogScan, dump_vlog, iter_records, recover_file, verify_file
from .writer import ValueLogWriter

__all__ = [
    "POINTER_SIZE",
    "encode_pointer",
    "decode_pointer",
    "ValueLogWriter",
    "ValueLogReader",
    "ValueLogScan",
    "iter_records",
    "recover_file",
    "verify_file",
    "dump_vlog",
    "vlog_file_name",
    "parse_vlog_file_name",
]
