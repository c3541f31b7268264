"""The byte formats of the objects the state store writes to a checkpoint location.

Every object the store writes (manifest, changelog, batch marker, event-time record, pipeline
record), except the snapshot files uploaded as the engine wrote them, is one *envelope*::

    +--------+------+-------+-------------+----------------+------------------------+
    | magic  | kind | codec | payload     | payload length | checksum               |
    | 6 B    | 1 B  | 1 B   | n bytes     | u64 LE         | xxh3_64 of all before  |
    +--------+------+-------+-------------+----------------+------------------------+
    magic = b"AKVSPK"; kind (part of the format): b"M" manifest, b"C" changelog, b"B" marker,
           b"W" event-time record, b"P" pipeline record, b"K" parked-copy record (kept in
           the local cache, never in a location: parked_copies.py);
    codec: 0 = payload stored as is, 1 = zstd frame

The trailer comes last so a truncated object never verifies.  Payloads:

* **manifest** (JSON, UTF-8) -- one committed version of one partition, written by the task
  attempt that made it::

      {"format": 1, "operator": str, "partition": int, "version": int, "attempt": str,
       "base": <manifest name this version was built on> | null, "num_keys": int,
       "snapshot": null | {"version": int,                 # the version the snapshot holds
                           "files": [{"local": "000012.sst", "object": <name>,
                                      "size": int, "xxh3": <xxh3_128 hex of the bytes>}, ...],
                           "meta": {"MANIFEST-000015": <base64>, "CURRENT": <base64>, ...}},
       "changelogs": [{"object": <name>, "version": int, "size": int, "xxh3": <hex>}, ...],
       "key_counts": null | {<hex of a 2-byte key prefix>: int, ...}}   # optional

  The state of the version is the snapshot (or the empty state) with the changelogs applied
  in order.  Snapshot files (engine tables and sealed value-log files) are uploaded as they
  are, checked by the size and xxh3_128 recorded here; ``meta`` holds the engine's small
  per-checkpoint files inline.  ``key_counts`` (:mod:`antkv.spark.store.key_counts`) counts the
  keys per prefix; its counts are positive and sum to ``num_keys``.  A manifest whose JSON
  exceeds 4 KiB is stored zstd-compressed (codec 1).

* **changelog** (zstd) -- a batch's net changes: every range deletion, then every point
  change, each one record::

      kind u8 | key length u32 LE | key | [value length u32 LE | value]
      kind: 0 = delete key, 1 = put key value, 2 = delete range [key, value)

* **marker** (JSON) -- one published batch of one operator::

      {"format": 1, "operator": str, "version": int, "query_id": str, "run_id": str,
       "num_partitions": int, "manifests": [<manifest name of partition 0>, ...],
       "num_keys": int,
       "outputs": [<output file name>, ...]}   # optional: a pipeline's published output files

  ``outputs`` (absent from markers of plain state commits) names, in partition order, the
  output files of the attempts whose manifests the marker names: they are batch
  ``version - 1``'s output, published by the same write as its state.

* **event-time record** (JSON) -- written by the driver of a processor in the EventTime time
  mode before it publishes a version (``antkv/spark/processor/transform.py``)::

      {"format": 1, "version": int, "max_event_time_ms": int | null, "watermark_ms": int}

* **pipeline record** (JSON) -- an operator's key columns and key groups, written by its first
  batch (``pipeline_record.py``)::

      {"format": 1, "key_groups": int, "key": [str, ...]}

Two formats are for readers outside antkv, so they are plain and open:

* **output file** -- an Apache Parquet file of the pipeline's output schema, written by one task
  attempt through ``pyarrow`` (``<operator>/_output/<v>/<attempt>-<NNNNNN>.parquet``).
* **output-log record** -- one line of JSON (UTF-8, no envelope: Spark's ``json`` source reads
  it), written once by the driver after marker ``v`` is published, holding a copy of the
  marker's ``outputs``; it outlives the marker, which cleanup retires::

      {"format": 1, "operator": str, "version": int, "batch_id": int, "schema": <DDL>,
       "files": [<output file name, relative to the location root>, ...]}

Decoding checks magic, kind, length and checksum, and raises :class:`CorruptionError` naming
the object on any mismatch.
"""

from __future__ import annotations

import base64
import contextlib
import json
import struct
from dataclasses import dataclass, field
from itertools import chain

import xxhash
import zstandard

from antkv import CorruptionError

MAGIC = b"AKVSPK"
KIND_MANIFEST = b"M"  # part of the format
KIND_CHANGELOG = b"C"  # part of the format
KIND_MARKER = b"B"  # part of the format
KIND_EVENT_TIME = b"W"  # part of the format
KIND_PIPELINE = b"P"  # part of the format
KIND_PARKED = b"K"  # part of the format
CODEC_NONE = 0
CODEC_ZSTD = 1
FORMAT = 1
_TRAILER = struct.Struct("<QQ")
_HEADER_LEN = len(MAGIC) + 2

CHANGE_DELETE = 0  # part of the format
CHANGE_PUT = 1
CHANGE_DELETE_RANGE = 2
_REC = struct.Struct("<BI")
_LEN = struct.Struct("<I")
_COMPRESS_MANIFEST = 4096  # manifest JSON bytes beyond which it is stored compressed


def seal(kind: bytes, payload: bytes, compress: bool = False) -> bytes:
    """Wrap ``payload`` in an envelope of ``kind`` (the checksum covers the header, the stored
    payload and its length; the payload is copied once, into the envelope)."""
    codec = CODEC_NONE
    if compress:
        payload = zstandard.ZstdCompressor(level=1).compress(payload)
        codec = CODEC_ZSTD
    header = MAGIC + kind + bytes((codec,))
    check = xxhash.xxh3_64(header)
    check.update(payload)
    check.update(struct.pack("<Q", len(payload)))
    return b"".join((header, payload, _TRAILER.pack(len(payload), check.intdigest())))


def unseal(kind: bytes, data: bytes, name: str) -> bytes:
    """The payload of an envelope of ``kind``; CorruptionError naming ``name`` if it is not one."""
    buf, begin, end = _open_envelope(kind, data, name)
    return buf if begin == 0 and end == len(buf) else buf[begin:end]


def _open_envelope(kind: bytes, data: bytes, name: str) -> tuple[bytes, int, int]:
    """:func:`unseal`'s payload as ``(buffer, begin, end)``: ``data`` itself and the payload's
    bounds in it when it is stored uncompressed (a changelog of random values can be tens of
    megabytes: no copy is made), else the decompressed bytes whole."""
    if len(data) < _HEADER_LEN + _TRAILER.size:
        raise CorruptionError(f"object too short ({len(data)} bytes)", name)
    n, check = _TRAILER.unpack_from(data, len(data) - _TRAILER.size)
    if xxhash.xxh3_64_intdigest(memoryview(data)[: len(data) - 8]) != check:
        raise CorruptionError("object checksum mismatch", name)
    if data[: len(MAGIC)] != MAGIC or data[len(MAGIC): len(MAGIC) + 1] != kind:
        raise CorruptionError(f"not a {kind.decode()} object (bad magic or kind)", name)
    if n != len(data) - _HEADER_LEN - _TRAILER.size:
        raise CorruptionError("object length mismatch", name)
    codec = data[len(MAGIC) + 1]
    if codec == CODEC_ZSTD:
        try:
            out = zstandard.ZstdDecompressor().decompress(data[_HEADER_LEN: _HEADER_LEN + n], max_output_size=1 << 40)
        except zstandard.ZstdError as e:
            raise CorruptionError(f"bad zstd payload: {e}", name) from e
        return out, 0, len(out)
    if codec != CODEC_NONE:
        raise CorruptionError(f"unknown codec {codec}", name)
    return data, _HEADER_LEN, _HEADER_LEN + n


def file_digest(path: str) -> tuple[int, str]:
    """``(size, xxh3_128 hex)`` of a local file: the check recorded for a snapshot file."""
    h = xxhash.xxh3_128()
    size = 0
    with open(path, "rb") as f:
        while True:
            b = f.read(4 << 20)
            if not b:
                break
            h.update(b)
            size += len(b)
    return size, h.hexdigest()


# ---------------------------------------------------------------------- manifest


@dataclass(frozen=True)
class FileRef:
    """An object the manifest depends on, with the size and hash it must have."""

    object: str
    size: int
    xxh3: str
    local: str | None = None  # engine file name (snapshot files)
    version: int | None = None  # the version a changelog brings the state to


@dataclass(frozen=True)
class Snapshot:
    version: int
    files: tuple[FileRef, ...]
    meta: dict  # engine metadata file name -> bytes

    @property
    def bytes(self) -> int:
        return sum(f.size for f in self.files)


@dataclass(frozen=True)
class Manifest:
    operator: str
    partition: int
    version: int
    attempt: str
    base: str | None
    num_keys: int
    snapshot: Snapshot | None
    changelogs: tuple[FileRef, ...] = field(default=())
    key_counts: dict | None = None  # 2-byte key prefix -> keys (antkv.spark.store.key_counts)

    def objects(self) -> set[str]:
        """Every object this version needs (besides the manifest itself)."""
        out = {c.object for c in self.changelogs}
        if self.snapshot is not None:
            out.update(f.object for f in self.snapshot.files)
        return out

    def encode(self) -> bytes:
        snap = None
        if self.snapshot is not None:
            snap = {
                "version": self.snapshot.version,
                "files": [{"local": f.local, "object": f.object, "size": f.size, "xxh3": f.xxh3}
                          for f in self.snapshot.files],
                "meta": {k: base64.b64encode(v).decode("ascii") for k, v in sorted(self.snapshot.meta.items())},
            }
        doc = {
            "format": FORMAT, "operator": self.operator, "partition": self.partition,
            "version": self.version, "attempt": self.attempt, "base": self.base,
            "num_keys": self.num_keys, "snapshot": snap,
            "changelogs": [{"object": c.object, "version": c.version, "size": c.size, "xxh3": c.xxh3}
                           for c in self.changelogs],
            "key_counts": None if self.key_counts is None else {
                p.hex(): n for p, n in sorted(self.key_counts.items())},
        }
        payload = json.dumps(doc, separators=(",", ":")).encode()
        return seal(KIND_MANIFEST, payload, compress=len(payload) > _COMPRESS_MANIFEST)

    @staticmethod
    def decode(data: bytes, name: str) -> "Manifest":
        doc = _document(KIND_MANIFEST, data, name)
        with _malformed("manifest", name):
            snap = doc["snapshot"]
            snapshot = None
            if snap is not None:
                snapshot = Snapshot(
                    int(snap["version"]),
                    tuple(FileRef(f["object"], int(f["size"]), f["xxh3"], local=f["local"]) for f in snap["files"]),
                    {k: base64.b64decode(v) for k, v in snap["meta"].items()},
                )
            counts = doc.get("key_counts")
            if counts is not None:
                counts = {bytes.fromhex(p): int(n) for p, n in counts.items()}
                if any(n <= 0 for n in counts.values()) or sum(counts.values()) != int(doc["num_keys"]):
                    raise CorruptionError("manifest key counts disagree with its number of keys", name)
            return Manifest(
                doc["operator"], int(doc["partition"]), int(doc["version"]), doc["attempt"], doc["base"],
                int(doc["num_keys"]), snapshot,
                tuple(FileRef(c["object"], int(c["size"]), c["xxh3"], version=int(c["version"]))
                      for c in doc["changelogs"]),
                counts,
            )


# ---------------------------------------------------------------------- marker


@dataclass(frozen=True)
class Marker:
    operator: str
    version: int
    query_id: str
    run_id: str
    manifests: tuple[str, ...]  # by partition
    num_keys: int
    outputs: tuple[str, ...] | None = None  # output file names, by partition; None: no output recorded
    output_schema: str | None = None  # the output's DDL, with outputs: the marker alone reads them

    def encode(self) -> bytes:
        doc = {
            "format": FORMAT, "operator": self.operator, "version": self.version,
            "query_id": self.query_id, "run_id": self.run_id,
            "num_partitions": len(self.manifests), "manifests": list(self.manifests),
            "num_keys": self.num_keys,
        }
        if self.outputs is not None:
            doc["outputs"] = list(self.outputs)
        if self.output_schema is not None:
            doc["output_schema"] = self.output_schema
        return seal(KIND_MARKER, json.dumps(doc, separators=(",", ":")).encode())

    @staticmethod
    def decode(data: bytes, name: str) -> "Marker":
        doc = _document(KIND_MARKER, data, name)
        with _malformed("marker", name):
            manifests = tuple(doc["manifests"])
            if len(manifests) != doc["num_partitions"] or not all(isinstance(m, str) for m in manifests):
                raise CorruptionError("marker partition list is inconsistent", name)
            outputs = doc.get("outputs")
            if outputs is not None:
                outputs = tuple(outputs)
                if not all(isinstance(o, str) for o in outputs):
                    raise CorruptionError("marker output list is inconsistent", name)
            schema = doc.get("output_schema")
            if schema is not None and not isinstance(schema, str):
                raise CorruptionError("marker output schema is not a string", name)
            return Marker(doc["operator"], int(doc["version"]), doc["query_id"], doc["run_id"],
                          manifests, int(doc["num_keys"]), outputs, schema)


# ---------------------------------------------------------------------- output log


@dataclass(frozen=True)
class OutputLogRecord:
    """Which files hold batch ``version - 1``'s output (see the module docstring)."""

    operator: str
    version: int
    schema: str  # the output's DDL
    files: tuple[str, ...]

    @property
    def batch_id(self) -> int:
        return self.version - 1

    def encode(self) -> bytes:
        doc = {"format": FORMAT, "operator": self.operator, "version": self.version,
               "batch_id": self.batch_id, "schema": self.schema, "files": list(self.files)}
        return (json.dumps(doc, separators=(",", ":")) + "\n").encode()

    @staticmethod
    def decode(data: bytes, name: str) -> "OutputLogRecord":
        try:
            doc = json.loads(data)
        except (UnicodeDecodeError, ValueError) as e:
            raise CorruptionError(f"output-log record is not valid JSON: {e}", name) from e
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise CorruptionError(f"not a format-{FORMAT} output-log record", name)
        with _malformed("output-log record", name):
            files = tuple(doc["files"])
            if not all(isinstance(f, str) for f in files) or doc["batch_id"] != doc["version"] - 1:
                raise CorruptionError("output-log record is inconsistent", name)
            return OutputLogRecord(doc["operator"], int(doc["version"]), str(doc["schema"]), files)


def _document(kind: bytes, data: bytes, name: str) -> dict:
    """The JSON object in an envelope of ``kind``, of this format version."""
    try:
        doc = json.loads(unseal(kind, data, name))
    except (UnicodeDecodeError, ValueError) as e:
        raise CorruptionError(f"object is not valid JSON: {e}", name) from e
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise CorruptionError(f"not a format-{FORMAT} JSON object", name)
    return doc


@contextlib.contextmanager
def _malformed(what: str, name: str):
    try:
        yield
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise CorruptionError(f"malformed {what}: {e!r}", name) from e


# ---------------------------------------------------------------------- changelog


def merge_ranges(ranges) -> list[tuple[bytes, bytes]]:
    """``[begin, end)`` ranges sorted, overlapping and touching ones merged: the same keys."""
    out: list[list[bytes]] = []
    for b, e in sorted(ranges):
        if out and b <= out[-1][1]:
            if e > out[-1][1]:
                out[-1][1] = e
        else:
            out.append([b, e])
    return [(b, e) for b, e in out]


_ESTIMATE_SAMPLE = 256 * 1024  # bytes of records compressed to estimate a changelog's ratio
_WORTH_COMPRESSING = 0.9  # a changelog whose head compresses no better than this is stored as is


def _compressed_ratio(sample: bytes) -> float:
    return len(zstandard.ZstdCompressor(level=1).compress(sample)) / max(1, len(sample))


def encode_changelog(ranges, changes, refuse=None) -> bytes | None:
    """``ranges``: ``[(begin, end)]``; ``changes``: ``{key: value or None}`` (None = deleted).

    Ranges are replayed first, so a point change must be newer than every range it falls in
    (the store keeps it that way: a range deletion turns earlier changes in it into deletes).
    Compressed with zstd unless its first 256 KiB do not compress (random values).

    ``refuse(floor)``, if given, is asked before the payload is compressed, with a lower bound
    of the changelog's size (from the records built and the head's ratio, sampled once for
    both: the exact size when the head does not compress, else the payload's size times the
    ratio times :data:`_COMPRESSED_MARGIN`): True means a changelog that large is not wanted
    (a snapshot replaces it), and None is returned.  A payload no larger than the sample is
    encoded without asking.
    """
    payload = _changelog_payload(ranges, list(changes), list(changes.values()))
    compress, ratio = _worth_compressing(payload[:_ESTIMATE_SAMPLE])
    if refuse is not None and len(payload) > _ESTIMATE_SAMPLE:
        floor = int(len(payload) * ratio * _COMPRESSED_MARGIN) if compress else \
            _HEADER_LEN + len(payload) + _TRAILER.size
        if refuse(floor):
            return None
    return seal(KIND_CHANGELOG, payload, compress=compress)


def _worth_compressing(head: bytes) -> tuple[bool, float]:
    """``(compress?, ratio)`` for a changelog whose payload starts with ``head``."""
    ratio = _compressed_ratio(head)
    return ratio < _WORTH_COMPRESSING, ratio


def _changelog_payload(ranges, keys: list, values: list) -> bytes:
    """The records of ``ranges`` then of the points ``keys[i] -> values[i]`` (None: deleted).

    A batch of puts only, or of deletions only, is joined from its parts with no Python step
    per record: a record's head depends only on its key's (and value's) length, and a batch
    has few distinct lengths, so each head is packed once.  Puts whose keys share one length
    and values another (a state variable's, of one shape) have one head and one value length
    between each key and value: each record's key and value are joined around the one, and
    the records joined with the other; other puts, and deletions, are laid out by slice
    assignments (heads, keys, values) and joined once."""
    rec, ln, put, delete = _REC.pack, _LEN.pack, CHANGE_PUT, CHANGE_DELETE
    parts = [b"".join((rec(CHANGE_DELETE_RANGE, len(b)), b, ln(len(e)), e)) for b, e in ranges]
    deleted = values.count(None)
    n = len(keys)
    if not deleted:
        key_sizes, value_sizes = set(map(len, keys)), set(map(len, values))
        if len(key_sizes) == 1 and len(value_sizes) == 1:
            head, between = rec(put, key_sizes.pop()), ln(value_sizes.pop())
            parts.append(head + head.join(map(between.join, zip(keys, values))))
        else:  # the records' four parts laid out by slice assignments and joined once
            points = [b""] * (4 * n)
            points[0::4] = _heads(lambda size: rec(put, size), keys, key_sizes)
            points[1::4] = keys
            points[2::4] = _heads(ln, values, value_sizes)
            points[3::4] = values
            parts += points
    elif deleted == n:
        points = [b""] * (2 * n)
        points[0::2] = _heads(lambda size: rec(delete, size), keys)
        points[1::2] = keys
        parts += points
    else:  # one bytes object per record, made in a comprehension: fewer interpreter steps per change
        parts += [rec(delete, len(k)) + k if v is None else b"".join((rec(put, len(k)), k, ln(len(v)), v))
                  for k, v in zip(keys, values)]
    return b"".join(parts)


def _heads(pack, items: list, sizes: set | None = None) -> list:
    """``[pack(len(item)) for item in items]``, packing each distinct length once; ``sizes``,
    if known: the set of those lengths."""
    if sizes is None:
        sizes = set(map(len, items))
    if len(sizes) == 1:
        return [pack(sizes.pop())] * len(items)
    packed = {size: pack(size) for size in sizes}
    return list(map(packed.__getitem__, map(len, items)))


_COMPRESSED_MARGIN = 0.8  # a compressed changelog is taken to shrink at most this much more than its head


def decode_changelog(data: bytes, name: str) -> tuple[list, list, list, int]:
    """``(ranges, keys, values, size)`` of a changelog object: its range deletions
    ``[(begin, end)]``, its point changes in order (``values[i]`` None: ``keys[i]`` deleted)
    and its payload's size.  A changelog holds its range deletions first
    (:func:`encode_changelog` writes them so: they are replayed before its points); a range
    deletion after a point change is corruption."""
    payload, pos, n = _open_envelope(KIND_CHANGELOG, data, name)
    base = pos  # errors give offsets in the payload
    rec, ln = _REC.unpack_from, _LEN.unpack_from
    ranges, keys, values = [], [], []
    key_of, value_of = keys.append, values.append
    try:
        while pos < n:
            kind, kl = rec(payload, pos)
            if kind != CHANGE_DELETE_RANGE:
                break
            at = pos + 5 + kl
            (el,) = ln(payload, at)
            pos = at + 4 + el
            ranges.append((payload[at - kl: at], payload[at + 4: pos]))
        while pos < n:  # the points: one loop with no call but the slices and appends
            kind, kl = rec(payload, pos)
            at = pos + 5 + kl
            key_of(payload[at - kl: at])
            if kind == CHANGE_PUT:
                (vl,) = ln(payload, at)
                pos = at + 4 + vl
                value_of(payload[at + 4: pos])
            elif kind == CHANGE_DELETE:
                pos = at
                value_of(None)
            elif kind == CHANGE_DELETE_RANGE:
                raise CorruptionError("changelog range deletion after a point change", name, pos - base)
            else:
                raise CorruptionError(f"unknown changelog record kind {kind}", name, pos - base)
        if pos > n:  # positions only grow: only the last record can run past the end
            raise struct.error("past the end")
    except struct.error as e:
        raise CorruptionError("truncated changelog record", name, min(pos, n) - base) from e
    return ranges, keys, values, n - base
