"""The checkpoint location: where committed state lives, and the name of every object in it.

A location is a directory (a key prefix) on any file system ``pyarrow.fs`` reaches: a local
path, ``file://``, ``s3://``, ``hdfs://``, ``gs://``, ``abfs://``... or a ``FileSystem``
instance passed in.  It is used with *object-store semantics only*:

* every object is written once, under a name nobody else writes (the names below carry the
  version and a random attempt id), and is never modified, renamed or appended to;
* nothing relies on a listing showing an object just written (listings are used only by
  cleanup, where a missing entry merely defers the deletion to the next cleanup);
* the one write that must not overwrite -- a batch's marker -- goes through
  :meth:`Location.create_exclusive` (a true conditional create on a local file system; on the
  others, an existence check plus a read-back, see ``docs/spark-design.md``).

Layout (``<v>`` is a version, 20 digits, zero-padded so names sort; ``<a>`` an attempt id of
16 hex digits; ``<p>`` a partition, 5 digits)::

    <root>/<operator>/_batches/<v>.marker                published batch markers (objects.py)
    <root>/<operator>/p<p>/<v>-<a>.manifest               one per committed task attempt
    <root>/<operator>/p<p>/<v>-<a>.changelog              the batch's changes, if a changelog commit
    <root>/<operator>/p<p>/<v>-<a>-<NNNNNN>.sst | .vlog   snapshot files (engine tables, value logs)
    <root>/<operator>/_event_time/<v>.time               a processor's event time as of version <v>
    <root>/<operator>/_output/<v>/<a>-<NNNNNN>.parquet    a pipeline task attempt's output rows
    <root>/<operator>/_output_log/<v>.json               the output files version <v> published (objects.py)
    <root>/<operator>/pipeline.json                       the operator's key columns and K (pipeline_record.py)
    <any of the above>.tmp-<8 hex>                         a local write in progress (or cut short)

This module owns every name (make and parse) and every call into ``pyarrow.fs``.  Errors leave
as ``antkv`` errors: a missing object that should exist is a :class:`CorruptionError` naming
it; any other failure of the file system is an :class:`antkv.IOError` wrapping it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import sys
from dataclasses import dataclass

import threading
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FuturesTimeout

import pyarrow as pa
import pyarrow.fs as pafs

from antkv import CorruptionError, InvalidArgumentError
from antkv import IOError as AntIOError

_VERSION_DIGITS = 20
_OPERATOR_RE = re.compile(r"^[A-Za-z0-9_.=-]{1,128}$")
_OBJECT_RE = re.compile(
    r"^(?P<version>\d{20})-(?P<attempt>[0-9a-f]{16})"
    r"(?:\.(?P<kind>manifest|changelog)|-(?P<local>\d{6,}\.(?:sst|vlog)))$"
)
_MARKER_RE = re.compile(r"^(?P<version>\d{20})\.marker$")
_EVENT_TIME_RE = re.compile(r"^(\d{20})\.time$")
MARKER_DIR = "_batches"
PIPELINE_OBJECT = "pipeline.json"  # per operator: its key columns and K, sealed (pipeline_record.py)
EVENT_TIME_DIR = "_event_time"
OUTPUT_DIR = "_output"
OUTPUT_LOG_DIR = "_output_log"
_OUTPUT_FILE_RE = re.compile(r"^(?P<attempt>[0-9a-f]{16})-(?P<seq>\d{6,})\.parquet$")
_OUTPUT_LOG_RE = re.compile(r"^(\d{20})\.json$")
_TMP_INFIX = ".tmp-"  # <object name>.tmp-<8 hex>: a local write in progress (Location._local_write)


def new_attempt_id() -> str:
    """A random 64-bit id naming one task attempt's objects (unique with overwhelming odds)."""
    return secrets.token_hex(8)


def check_operator(operator) -> str:
    if not isinstance(operator, str):
        raise TypeError(f"operator must be a str, not {type(operator).__name__}")
    if not _OPERATOR_RE.match(operator) or operator.startswith("_"):
        raise InvalidArgumentError(
            f"operator {operator!r} must be 1-128 characters of [A-Za-z0-9_.=-], not starting with '_'")
    return operator


def check_partition(partition) -> int:
    if isinstance(partition, bool) or not isinstance(partition, int):
        raise TypeError(f"partition must be an int, not {type(partition).__name__}")
    if not 0 <= partition < 100000:
        raise InvalidArgumentError(f"partition must be in [0, 100000), got {partition}")
    return partition


def check_version(version) -> int:
    if isinstance(version, bool) or not isinstance(version, int):
        raise TypeError(f"version must be an int, not {type(version).__name__}")
    if not 0 <= version < 10**_VERSION_DIGITS:
        raise InvalidArgumentError(f"version must be >= 0, got {version}")
    return version


def partition_dir(operator: str, partition: int) -> str:
    return f"{operator}/p{partition:05d}"


def marker_name(operator: str, version: int) -> str:
    return f"{operator}/{MARKER_DIR}/{version:020d}.marker"


def event_time_name(operator: str, version: int) -> str:
    return f"{operator}/{EVENT_TIME_DIR}/{version:020d}.time"


def parse_event_time_name(base: str) -> int | None:
    """The version of an event-time record's base name, or None."""
    m = _EVENT_TIME_RE.match(base)
    return int(m.group(1)) if m else None


def output_dir(operator: str, version: int) -> str:
    """The directory of the output files task attempts write for ``version``."""
    return f"{operator}/{OUTPUT_DIR}/{version:020d}"


def output_file_name(operator: str, version: int, attempt: str, seq: int) -> str:
    """The ``seq``-th output file of a task attempt of the batch making ``version``."""
    return f"{output_dir(operator, version)}/{attempt}-{seq:06d}.parquet"


def parse_output_file_name(operator: str, name: str) -> int | None:
    """The version of an output file's full name (as :func:`output_file_name` makes it), or None."""
    head, _, base = name.rpartition("/")
    directory, _, version = head.rpartition("/")
    if directory != f"{operator}/{OUTPUT_DIR}" or len(version) != _VERSION_DIGITS or not version.isdigit():
        return None
    return int(version) if _OUTPUT_FILE_RE.match(base) else None


def output_log_name(operator: str, version: int) -> str:
    return f"{operator}/{OUTPUT_LOG_DIR}/{version:020d}.json"


def parse_output_log_name(base: str) -> int | None:
    """The version of an output-log record's base name, or None."""
    m = _OUTPUT_LOG_RE.match(base)
    return int(m.group(1)) if m else None


def manifest_name(operator: str, partition: int, version: int, attempt: str) -> str:
    return f"{partition_dir(operator, partition)}/{version:020d}-{attempt}.manifest"


def changelog_name(operator: str, partition: int, version: int, attempt: str) -> str:
    return f"{partition_dir(operator, partition)}/{version:020d}-{attempt}.changelog"


def snapshot_file_name(operator: str, partition: int, version: int, attempt: str, local: str) -> str:
    """The object holding the engine file ``local`` (``000012.sst``) of a snapshot."""
    return f"{partition_dir(operator, partition)}/{version:020d}-{attempt}-{local}"


@dataclass(frozen=True)
class ObjectName:
    """A parsed partition object name (see the layout in the module docstring)."""

    version: int
    attempt: str
    kind: str  # "manifest", "changelog" or "file"
    local: str | None  # the engine file name, for kind == "file"


def parse_object_name(base: str) -> ObjectName | None:
    """Parse the last component of a partition object's name; None for a foreign name."""
    m = _OBJECT_RE.match(base)
    if m is None:
        return None
    kind = m.group("kind") or "file"
    return ObjectName(int(m.group("version")), m.group("attempt"), kind, m.group("local"))


def parse_temporary_name(base: str) -> str | None:
    """The object a leftover temporary file of a local write was for, or None."""
    name, sep, rand = base.rpartition(_TMP_INFIX)
    return name if sep and len(rand) == 8 and all(c in "0123456789abcdef" for c in rand) else None


def parse_marker_name(base: str) -> int | None:
    m = _MARKER_RE.match(base)
    return None if m is None else int(m.group("version"))


class Location:
    """A checkpoint location: ``pyarrow.fs`` file system + root path.

    ``Location(uri)`` resolves any URI ``pyarrow.fs.FileSystem.from_uri`` accepts (a plain
    local path too); ``Location(path, filesystem=fs)`` uses a ``FileSystem`` instance (S3 with
    explicit credentials and endpoint, a ``PyFileSystem``...).  Object names are relative to
    the root and always use ``/``.
    """

    def __init__(self, uri, *, filesystem: pafs.FileSystem | None = None):
        if isinstance(uri, os.PathLike):
            uri = os.fspath(uri)
        if not isinstance(uri, str):
            raise TypeError(f"location must be a str URI or path, not {type(uri).__name__}")
        if filesystem is not None and not isinstance(filesystem, pafs.FileSystem):
            raise TypeError(f"filesystem must be a pyarrow.fs.FileSystem, not {type(filesystem).__name__}")
        if filesystem is None:
            try:
                if "://" in uri:
                    filesystem, root = pafs.FileSystem.from_uri(uri)
                else:
                    filesystem, root = pafs.LocalFileSystem(), os.path.abspath(uri)
            except (ValueError, TypeError, OSError) as e:  # pyarrow.ArrowInvalid is a ValueError
                raise InvalidArgumentError(f"cannot resolve checkpoint location {uri!r}: {e}") from e
        else:
            root = uri
        self.uri = uri
        self.fs = filesystem
        self.root = root.rstrip("/") or "/"
        self._local = type(filesystem) is pafs.LocalFileSystem

    def __repr__(self) -> str:
        return f"Location({self.uri!r})"

    @property
    def identity(self) -> str:
        """A string naming this location across processes (for the executor-local cache)."""
        return f"{self.fs.type_name}:{self.root}"

    def path(self, name: str) -> str:
        return f"{self.root}/{name}"

    # ------------------------------------------------------------------ reads

    def read(self, name: str) -> bytes:
        """The whole object ``name``; a missing one is a CorruptionError naming it."""
        p = self.path(name)
        try:
            with self.fs.open_input_stream(p) as f:
                return f.read()
        except FileNotFoundError as e:
            raise CorruptionError("object missing from the checkpoint location", p) from e
        except OSError as e:
            raise AntIOError(f"cannot read {p}: {e}", e, p) from e

    def exists(self, name: str) -> bool:
        p = self.path(name)
        try:
            return self.fs.get_file_info(p).type != pafs.FileType.NotFound
        except OSError as e:
            raise AntIOError(f"cannot stat {p}: {e}", e, p) from e

    def list_dir(self, directory: str) -> list[str]:
        """Base names of the objects directly under ``directory`` (empty if it does not exist).

        Used only by cleanup: it may miss objects written a moment ago."""
        return self._list(directory, pafs.FileType.File)

    def list_subdirs(self, directory: str) -> list[str]:
        return self._list(directory, pafs.FileType.Directory)

    def list_sizes(self, directory: str) -> dict[str, int]:
        """``{base name: size in bytes}`` of the objects directly under ``directory``: one
        listing, no read (it may miss objects written a moment ago, as :meth:`list_dir`)."""
        return {i.base_name: i.size for i in self._infos(directory) if i.type == pafs.FileType.File}

    def size(self, name: str) -> int | None:
        """The size of object ``name``, or None when it does not exist (one metadata request)."""
        p = self.path(name)
        try:
            info = self.fs.get_file_info(p)
        except OSError as e:
            raise AntIOError(f"cannot stat {p}: {e}", e, p) from e
        return None if info.type == pafs.FileType.NotFound else info.size

    def _infos(self, directory: str):
        p = self.path(directory)
        try:
            return self.fs.get_file_info(pafs.FileSelector(p, allow_not_found=True, recursive=False))
        except OSError as e:
            raise AntIOError(f"cannot list {p}: {e}", e, p) from e

    def _list(self, directory: str, file_type) -> list[str]:
        return sorted(i.base_name for i in self._infos(directory) if i.type == file_type)

    def download(self, name: str, local_path: str) -> None:
        """Copy object ``name`` to the local file ``local_path`` (created, not synced)."""
        p = self.path(name)
        try:
            with self.fs.open_input_stream(p) as src, open(local_path, "wb") as dst:
                _copy_stream(src, dst)
        except FileNotFoundError as e:
            raise CorruptionError("object missing from the checkpoint location", p) from e
        except OSError as e:
            raise AntIOError(f"cannot download {p}: {e}", e, p) from e

    def ranges(self, name: str, timeout_s: float | None = None) -> "ObjectRanges":
        """A reader of byte ranges of object ``name`` (opened on its first read); with
        ``timeout_s``, a read of a location that is not a local file system that takes longer
        fails (:class:`ObjectRanges`)."""
        return ObjectRanges(self, name, None if self._local else timeout_s)

    # ------------------------------------------------------------------ writes

    def write(self, name: str, data: bytes) -> None:
        """Write the new object ``name`` (a unique name: never an overwrite)."""
        p = self.path(name)
        try:
            if self._local:
                self._local_write(p, data)
                return
            with self.fs.open_output_stream(p) as f:
                f.write(data)
        except FileExistsError as e:
            raise AntIOError(f"object {p} already exists: attempt ids must be unique", e, p) from e
        except OSError as e:
            raise AntIOError(f"cannot write {p}: {e}", e, p) from e

    def upload(self, name: str, local_path: str) -> None:
        """Write the new object ``name`` with the bytes of the local file ``local_path``."""
        p = self.path(name)
        try:
            if self._local:
                with open(local_path, "rb") as src:
                    self._local_write(p, src)
                return
            with open(local_path, "rb") as src, self.fs.open_output_stream(p) as dst:
                _copy_stream(src, dst)
        except FileExistsError as e:
            raise AntIOError(f"object {p} already exists: attempt ids must be unique", e, p) from e
        except OSError as e:
            raise AntIOError(f"cannot upload {local_path} to {p}: {e}", e, p) from e

    @contextlib.contextmanager
    def writer(self, name: str):
        """A binary stream writing the new object ``name`` (a unique name: never an overwrite),
        for objects too large to hold in memory.  The object exists, whole and durable, when
        the block ends without an error; a block that raises may leave a partial object under
        a name nobody will ever publish (cleanup removes it) or, locally, a temporary file."""
        p = self.path(name)
        try:
            if not self._local:
                with self.fs.open_output_stream(p) as f:
                    yield f
                return
            os.makedirs(os.path.dirname(p), exist_ok=True)
            tmp = f"{p}{_TMP_INFIX}{secrets.token_hex(4)}"
            try:
                with open(tmp, "xb") as f:
                    yield f
                    f.flush()
                    os.fsync(f.fileno())
                os.link(tmp, p)  # fails if the name exists: write-once
            finally:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
            _fsync_dir(os.path.dirname(p))
        except FileExistsError as e:
            raise AntIOError(f"object {p} already exists: attempt ids must be unique", e, p) from e
        except OSError as e:
            raise AntIOError(f"cannot write {p}: {e}", e, p) from e

    def create_exclusive(self, name: str, data: bytes) -> bool:
        """Create ``name`` only if it does not exist; True when this call created it.

        A conditional create on a local file system (a hard link, which fails if the name
        exists).  ``pyarrow.fs`` offers none
        for other file systems: there the object is written only if a check finds it absent,
        then read back; a writer that lost a race it could not see reads back the other
        writer's bytes and gets False.  Two writers racing within that window on a store
        without conditional writes can both believe they won -- the single-driver assumption
        Spark makes for every checkpoint location (``docs/spark-design.md``).
        """
        p = self.path(name)
        try:
            if self._local:
                try:
                    self._local_write(p, data)
                    return True
                except FileExistsError:
                    return False
            if self.exists(name):
                return False
            with self.fs.open_output_stream(p) as f:
                f.write(data)
        except OSError as e:
            raise AntIOError(f"cannot create {p}: {e}", e, p) from e
        return self.read(name) == data

    def delete(self, name: str) -> None:
        """Delete object ``name``; one already gone is not an error."""
        p = self.path(name)
        try:
            self.fs.delete_file(p)
        except FileNotFoundError:
            return
        except OSError as e:
            raise AntIOError(f"cannot delete {p}: {e}", e, p) from e

    def _local_write(self, p: str, data) -> None:
        """A local object appears whole or not at all, and only if absent, durable on return.

        The bytes go to a temporary file (``<name>.tmp-<random>``), fsynced, which is then
        hard-linked to the final name -- ``link`` fails if the name exists, so this is also the
        conditional create -- and unlinked; the directory is fsynced.  A crash leaves at most
        the temporary file, which cleanup removes (:func:`parse_temporary_name`)."""
        d = os.path.dirname(p)
        os.makedirs(d, exist_ok=True)
        tmp = f"{p}{_TMP_INFIX}{secrets.token_hex(4)}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            try:
                if isinstance(data, (bytes, bytearray, memoryview)):
                    with os.fdopen(fd, "wb", closefd=False) as f:
                        f.write(data)
                else:
                    _copy_file(data, fd)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.link(tmp, p)
        finally:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        _fsync_dir(d)


class ObjectRanges:
    """Byte ranges of one object, read with ``pyarrow.fs`` ``open_input_file`` / ``read_at``
    (ranged GETs on an object store).  The file is opened on the first read and kept; a
    failed read closes it, so the next read opens it again.  Safe to use from several threads.

    With ``timeout_s``, each read (the open included) runs on a thread of a pool shared by the
    process and the caller waits at most that long: a location that stops answering fails the
    read with an ``antkv.IOError`` naming the object, the range and the timeout, on every file
    system, whatever timeouts its client has or lacks (they differ by file system and
    platform).  The stalled request is abandoned, not interrupted: its
    thread ends when the client gives up, and the file it used is not used again."""

    def __init__(self, location: "Location", name: str, timeout_s: float | None = None):
        self.location = location
        self.name = name
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._file = None

    def read(self, offset: int, n: int) -> bytes:
        """Exactly ``n`` bytes at ``offset``: a missing object or a short read is a
        CorruptionError naming it, any other failure (a timeout too) an antkv.IOError."""
        if self.timeout_s is None:
            return self._read(offset, n)
        future = _deadline_pool().submit(self._read, offset, n)
        try:
            return future.result(self.timeout_s)
        except FuturesTimeout:
            future.cancel()
            self._file = None  # left to the stalled thread; the next read opens the object again
            p = self.location.path(self.name)
            raise AntIOError(
                f"timed out after {self.timeout_s:g} s reading {n} bytes at offset {offset} of {p} "
                "(StoreOptions.location_timeout_s)",
                TimeoutError(errno.ETIMEDOUT, "location read timed out"), p) from None

    def _read(self, offset: int, n: int) -> bytes:
        p = self.location.path(self.name)
        try:
            f = self._file
            if f is None:  # opened outside the lock: a stalled open holds up no other caller
                f = self.location.fs.open_input_file(p)
                with self._lock:
                    if self._file is None:
                        self._file = f
            data = f.read_at(n, offset)
        except FileNotFoundError as e:
            raise CorruptionError("object missing from the checkpoint location", p) from e
        except (OSError, pa.ArrowException) as e:
            self.close()
            os_error = e if isinstance(e, OSError) else None
            raise AntIOError(f"cannot read {n} bytes at offset {offset} of {p}: {e}", os_error, p) from e
        if len(data) != n:
            raise CorruptionError(f"object holds {offset + len(data)} bytes, a read wanted {offset + n}", p)
        return data

    def close(self) -> None:
        with self._lock:
            f, self._file = self._file, None
        if f is not None:
            try:
                f.close()
            except (OSError, pa.ArrowException):
                pass


_DEADLINE_THREADS = 32  # location reads under a deadline in flight at once, per process
_deadline_executor = None
_deadline_lock = threading.Lock()


def _deadline_pool() -> ThreadPoolExecutor:
    """The process's pool running location reads that have a deadline (ObjectRanges)."""
    global _deadline_executor
    with _deadline_lock:
        if _deadline_executor is None:
            _deadline_executor = ThreadPoolExecutor(_DEADLINE_THREADS, thread_name_prefix="antkv-location-read")
        return _deadline_executor


def _fsync_dir(d: str) -> None:
    dfd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


_NOT_FOR_THESE_FILES = (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EXDEV, errno.ENOTSOCK)
_KERNEL_COPY = hasattr(os, "sendfile") and sys.platform.startswith("linux")  # elsewhere it wants a socket


def _copy_file(src, dst_fd: int) -> None:
    """Copy the binary file ``src`` (read from its start) to the descriptor ``dst_fd``: in the
    kernel (``sendfile``) where the system copies between these files, else through memory.
    An upload of a working copy's table then costs the process no copy through its memory."""
    try:
        src_fd = src.fileno()
    except (AttributeError, OSError):  # no descriptor (io.UnsupportedOperation is an OSError)
        src_fd = None
    if src_fd is not None and _KERNEL_COPY:
        sent = 0
        while True:
            try:
                n = os.sendfile(dst_fd, src_fd, None, 1 << 30)
            except OSError as e:
                if sent == 0 and e.errno in _NOT_FOR_THESE_FILES:
                    break  # not between these files: copy through memory
                raise
            if n == 0:
                return
            sent += n
    with os.fdopen(dst_fd, "wb", closefd=False) as f:
        _copy_stream(src, f)


def _copy_stream(src, dst, chunk: int = 4 << 20) -> None:
    while True:
        b = src.read(chunk)
        if not b:
            break
        dst.write(b)


def as_location(location) -> Location:
    """``location`` as a :class:`Location` (a URI or path is opened as one)."""
    return location if isinstance(location, Location) else Location(location)
