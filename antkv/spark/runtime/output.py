"""A pipeline's output: written by the tasks, published with the state, read as a Spark DataFrame.

Spark's file-commit protocol, tied to the state's marker:

1. **Task attempt** (:class:`OutputWriter`): the output frames the state function yields are
   converted to Arrow as Spark converts ``mapInPandas`` output, and streamed into Parquet files
   under names no other attempt can have (``<operator>/_output/<v>/<attempt>-<NNNNNN>.parquet``,
   :func:`antkv.spark.store.location.output_file_name`), written once, never renamed.  The files
   are closed (whole and durable) before the state commits; the commit message names them.
2. **Driver, publish**: the marker of version ``v`` is written once and names the winning
   attempts' manifests *and* their output files with the output's schema
   (:meth:`antkv.spark.store.commit_protocol.CommitCoordinator.publish`): the state and the
   output of batch ``v - 1`` become visible in the same single write, or neither does, and
   the marker alone is enough to read both (:func:`published_output`), whatever step of the
   publication after it the driver dies at.
3. **Driver, output log** (:func:`write_output_log`): a copy of the marker's file list is written
   once as ``<operator>/_output_log/<v>.json``, which outlives the marker (cleanup retires old
   markers).  It is derived from the marker alone, so a driver that died before writing it is
   replaced by any later run (:func:`ensure_output_log`), which writes the same bytes.
4. **Driver, cleanup** (:func:`cleanup_output`): for each version whose marker is retained, the
   files under ``_output/<v>/`` that the marker does not name -- failed, retried, speculative and
   replayed attempts' -- are deleted.  Nothing else is touched: not a later version's files (its
   attempts may be running), nor a name this module did not make.  (An output file a killed
   attempt left half-uploaded on S3 is no file: ``CommitCoordinator.cleanup`` aborts its
   multipart upload, :mod:`antkv.spark.store.multipart`.)
5. **Driver, retention** (:func:`retire_output`, only with a pipeline's ``output_retention``
   ``= R``): once version ``v`` is published, the output of versions ``<= v - R`` is deleted,
   files first and output-log record last.  Without it, every batch's output is kept, as a file
   sink keeps its table.

Readers (:func:`read_output`, :func:`output_dataframe`) read exactly the files of the output log
or marker, never a listing, so no row is read twice or missed; the DataFrame is lazy and is read
in the executors (Spark's Parquet reader on a local location, ``pyarrow`` in Python workers for
any other ``pyarrow.fs`` location).
"""

from __future__ import annotations

import antkv

from antkv.spark.store.commit_protocol import CommitCoordinator
from antkv.spark.store.location import (
    OUTPUT_LOG_DIR,
    Location,
    as_location,
    check_operator,
    check_version,
    marker_name,
    new_attempt_id,
    output_dir,
    output_file_name,
    output_log_name,
    parse_output_file_name,
    parse_output_log_name,
    parse_temporary_name,
)
from antkv.spark.store.multipart import abort_uploads, incomplete_uploads
from antkv.spark.store.objects import OutputLogRecord
from antkv.spark.store.published import read_marker

FILE_ROWS = 1 << 22  # rows per output file before an attempt starts its next one


class OutputWriter:
    """One task attempt's output files for ``version``: ``write(frame)`` each output frame, then
    ``close()`` (the names of the files, all whole and durable) or ``abort()``.

    Memory: one Arrow conversion of one frame and the Parquet writer's current row group."""

    def __init__(self, location: Location, operator: str, version: int, struct, timezone: str | None,
                 safecheck: bool = False):
        """``struct``: the output's ``StructType`` (parsed on the driver: parsing DDL needs the JVM)."""
        from pyspark.sql.pandas.types import to_arrow_schema

        self.location, self.operator, self.version = location, operator, version
        self.struct = struct
        self.arrow_schema = to_arrow_schema(self.struct, timezone=timezone)
        self.timezone, self.safecheck = timezone, safecheck
        self.attempt = new_attempt_id()
        self.files: list[str] = []
        self.rows = 0
        self._file_rows = 0
        self._stream = None  # the open object's context manager
        self._writer = None

    def _to_arrow(self, frame):
        import pyarrow as pa
        from pyspark.sql.pandas.conversion import create_arrow_array_from_pandas

        arrays = [create_arrow_array_from_pandas(frame[f.name], f.dataType, timezone=self.timezone,
                                                 safecheck=self.safecheck) for f in self.struct.fields]
        return pa.Table.from_arrays(arrays, schema=self.arrow_schema)

    def write(self, frame) -> None:
        """Append a pandas DataFrame holding (at least) the output schema's columns."""
        import pyarrow.parquet as pq

        if not len(frame):
            return
        table = self._to_arrow(frame)
        if self._writer is None:
            name = output_file_name(self.operator, self.version, self.attempt, len(self.files))
            self._stream = self.location.writer(name)
            sink = self._stream.__enter__()
            self.files.append(name)
            self._writer = pq.ParquetWriter(sink, self.arrow_schema)
        self._writer.write_table(table)
        self.rows += len(frame)
        self._file_rows += len(frame)
        if self._file_rows >= FILE_ROWS:
            self._finish_file()

    def _finish_file(self) -> None:
        writer, stream = self._writer, self._stream
        self._writer = self._stream = None
        self._file_rows = 0
        try:
            writer.close()
        except BaseException as e:
            stream.__exit__(type(e), e, e.__traceback__)
            raise
        stream.__exit__(None, None, None)

    def close(self) -> tuple[str, ...]:
        """Finish the last file; the names of every file written, in order."""
        if self._writer is not None:
            self._finish_file()
        return tuple(self.files)

    def abort(self) -> None:
        """Give up (the attempt failed): the files are left to cleanup, never published.

        On S3 (with ``boto3``: :mod:`antkv.spark.store.multipart`) the open file's multipart
        upload is aborted first, so closing it fails instead of completing a partial object;
        an upload not yet started, or missed by the listing, is completed by the close as
        without ``boto3``, and cleanup deletes that object."""
        writer, stream = self._writer, self._stream
        self._writer = self._stream = None
        if stream is not None:
            try:
                abort_uploads(self.location, incomplete_uploads(
                    self.location, f"{output_dir(self.operator, self.version)}/{self.attempt}-") or ())
            except antkv.Error:
                pass  # the attempt is failing already; the driver's cleanup aborts it later
            try:
                writer.close()
            except Exception:  # noqa: BLE001 - the attempt is failing already
                pass
            try:
                error = antkv.Error("the task attempt failed")
                stream.__exit__(type(error), error, None)
            except Exception:  # noqa: BLE001
                pass


# ---------------------------------------------------------------------- driver


def write_output_log(location: Location, operator: str, version: int, files, schema: str) -> OutputLogRecord:
    """Write the output-log record of published ``version`` (write-once; one already there must
    hold the same files, as both copy the marker)."""
    record = OutputLogRecord(operator, version, schema, tuple(files))
    name = output_log_name(operator, version)
    if not location.create_exclusive(name, record.encode()):
        existing = OutputLogRecord.decode(location.read(name), location.path(name))
        if existing.files != record.files:
            raise antkv.CorruptionError(f"output log of version {version} names other files than its marker",
                                        location.path(name))
        return existing
    return record


def ensure_output_log(coordinator: CommitCoordinator, version: int, schema: str) -> None:
    """Write the output-log record of published ``version`` from its marker if it is missing
    (a driver that published it died before writing the record)."""
    if version < 1:
        return
    location, operator = coordinator.location, coordinator.operator
    if location.exists(output_log_name(operator, version)):
        return
    marker = coordinator.marker(version)
    if marker.outputs is not None:
        write_output_log(location, operator, version, marker.outputs, marker.output_schema or schema)


def cleanup_output(coordinator: CommitCoordinator, version: int) -> int:
    """Delete the output files of the versions ``<= version`` whose markers are retained that
    their marker does not name (losing attempts); returns how many were deleted.

    REQUIRES: ``version`` is published and its output-log record written."""
    location, operator = coordinator.location, coordinator.operator
    version = check_version(version)
    first = max(1, version - coordinator.min_versions_to_retain + 1)
    deleted = 0
    for v in range(first, version + 1):
        directory = output_dir(operator, v)
        listed = location.list_dir(directory)
        if not listed:
            continue
        outputs = coordinator.marker(v).outputs
        if outputs is None:
            continue
        keep = set(outputs)
        for base in listed:
            name = f"{directory}/{base}"
            target = parse_temporary_name(base)
            ours = parse_output_file_name(operator, f"{directory}/{target or base}") == v
            if ours and (target is not None or name not in keep):
                location.delete(name)
                deleted += 1
    return deleted


def retire_output(location: Location, operator: str, version: int, retention: int) -> int:
    """Delete the published output of every version ``<= version - retention`` (the output of
    the newest ``retention`` batches stays); returns how many objects were deleted.

    A version's files go first (every attempt's: the winners the record names and any loser
    left), its output-log record last, so a crash in between leaves the record, and the next
    call, which finds versions by listing the output log, finishes the version.  Only names
    this module makes are deleted.  REQUIRES: ``version`` is published."""
    cutoff = check_version(version) - retention
    deleted = 0
    for v in output_versions(location, operator):
        if v > cutoff:
            break
        directory = output_dir(operator, v)
        for base in location.list_dir(directory):
            target = parse_temporary_name(base)
            if parse_output_file_name(operator, f"{directory}/{target or base}") == v:
                location.delete(f"{directory}/{base}")
                deleted += 1
        location.delete(output_log_name(operator, v))
        deleted += 1
    return deleted


def check_output_retention(retention) -> int | None:
    """``output_retention`` as given to a pipeline: None (keep every batch's output) or an
    int >= 1."""
    if retention is None:
        return None
    if isinstance(retention, bool) or not isinstance(retention, int):
        raise TypeError(f"output_retention must be an int or None, not {type(retention).__name__}")
    if retention < 1:
        raise antkv.InvalidArgumentError(f"output_retention must be >= 1, got {retention}")
    return retention


def published_output(location, operator: str, version: int) -> OutputLogRecord | None:
    """The output-log record of published ``version``; None when no output was recorded for it.

    InvalidArgumentError when the version's output is not retained: its marker and record
    retired, or its files deleted by ``output_retention``."""
    location = as_location(location)
    operator = check_operator(operator)
    name = output_log_name(operator, check_version(version))
    if location.exists(name):
        return OutputLogRecord.decode(location.read(name), location.path(name))
    if not location.exists(marker_name(operator, version)):
        raise antkv.InvalidArgumentError(
            f"version {version} of {operator!r} has no retained output (never published, or older "
            f"than the operator's retained versions and output_retention)")
    marker = read_marker(location, operator, version)
    if marker.outputs and not location.exists(marker.outputs[0]):
        raise antkv.InvalidArgumentError(
            f"the output of version {version} of {operator!r} was deleted by output_retention")
    if marker.outputs is None:
        return None
    return OutputLogRecord(operator, version, marker.output_schema or "", marker.outputs)


def output_versions(location, operator: str) -> list[int]:
    """The versions whose output-log record exists, ascending (a listing: for tools)."""
    location = as_location(location)
    names = location.list_dir(f"{check_operator(operator)}/{OUTPUT_LOG_DIR}")
    return sorted(v for v in map(parse_output_log_name, names) if v is not None)


def output_dataframe(spark, location: Location, files, schema: str):
    """A lazy Spark DataFrame reading exactly ``files`` (names relative to ``location``), with
    ``schema``; one Spark partition per file, read in the executors."""
    import pyarrow.fs as pafs

    files = list(files)
    if not files:
        return spark.createDataFrame([], schema)
    if type(location.fs) is pafs.LocalFileSystem:
        return spark.read.schema(schema).parquet(*["file://" + location.path(f) for f in files])
    names = spark.sparkContext.parallelize([(f,) for f in files], len(files)).toDF("name string")

    def read(batches):
        import pyarrow.parquet as pq

        for batch in batches:
            for name in batch.column(0).to_pylist():
                with pq.ParquetFile(location.path(name), filesystem=location.fs) as f:
                    yield from f.iter_batches()

    return names.mapInArrow(read, schema)


def read_output(spark, location, operator: str, batch_id: int):
    """Batch ``batch_id``'s published output (version ``batch_id + 1``) as a lazy Spark DataFrame."""
    location = as_location(location)
    if isinstance(batch_id, bool) or not isinstance(batch_id, int) or batch_id < 0:
        raise antkv.InvalidArgumentError(f"batch_id must be an int >= 0, got {batch_id!r}")
    record = published_output(location, operator, batch_id + 1)
    if record is None or not record.schema:
        raise antkv.InvalidArgumentError(f"batch {batch_id} of {operator!r} has no recorded output")
    return output_dataframe(spark, location, record.files, record.schema)
