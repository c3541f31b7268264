"""What recovery keeps of the WALs and of the active value-log file: the four recovery modes.

``Options.wal_recovery_mode`` takes RocksDB's ``WALRecoveryMode`` names and meanings; they
govern the WAL and the value-log files the MANIFEST lists as unsealed (the active one):

==================================  ==========================================================
``tolerate_corrupted_tail_records`` (default) a torn tail -- an incomplete last record, what a
                                    crash leaves -- is dropped; damage followed by intact data
                                    is a CorruptionError.
``absolute_consistency``            nothing may be missing: a torn tail of a WAL or of the
                                    active value-log file, or a WAL record pointing past what
                                    the value-log file holds, is a CorruptionError.  For a
                                    database that was closed cleanly (or synced every write).
``point_in_time_recovery``          replay stops at the first damaged or torn record, in any
                                    WAL; the database is the state just before it (a prefix of
                                    history), later WALs are not replayed.
``skip_any_corrupted_records``      every damaged record is skipped and replay goes on: the
                                    most data, but not a prefix of history (what a repair uses).
==================================  ==========================================================

A WAL of 0 bytes lost its header record (:mod:`antkv.record.wal`): it was truncated, and is
treated as damage before any record (``absolute_consistency``: a CorruptionError; otherwise
dropped, and replay does not go on to later WALs, except under ``skip``).

A WAL record whose value pointer reaches past what survived of the active value-log file lost
its large value with the crash: it and every later record are dropped (``skip``: that record
is skipped).  Everything dropped is listed in :attr:`Replay.dropped`, which recovery reports in
``db.stats()["recovery_dropped"]`` and in the ``antkv`` logger.
"""

from __future__ import annotations

import logging

from ...base.dbformat import VALUE_POINTER
from ...base.expiry import pointer_in
from ...base.filenames import wal_file_name
from ...errors import CorruptionError
from ...options import ABSOLUTE_CONSISTENCY, POINT_IN_TIME, SKIP_ANY_CORRUPTED
from ...record.batch import decode_batch
from ...record.log_format import LogReader
from ...vlog.pointer import decode_pointer
from ...vlog.reader import ValueLogScan

log = logging.getLogger("antkv")
_STOP = object()  # Replay._replay_wal: records of this WAL were dropped; replay ends here
_STOP_LATER = object()  # Replay._replay_wal: this WAL is whole, but replay must not go on to later WALs


def active_vlog_length(fs, path: str, mode: str) -> tuple[int, int, str | None]:
    """``(valid length, record bytes, what was dropped or None)`` of an unsealed value-log
    file under ``mode``; reads only (the caller decides whether to cut the file)."""
    strict = mode == ABSOLUTE_CONSISTENCY
    scan = ValueLogScan(fs, path, strict=strict)
    try:
        scan.run()
    except CorruptionError as e:
        if mode not in (POINT_IN_TIME, SKIP_ANY_CORRUPTED):
            raise
        return scan.valid_length, scan.record_bytes, f"{path}: damaged at offset {e.offset}; kept the {scan.valid_length} bytes before it"
    dropped = None
    if scan.valid_length < scan.file_size:
        dropped = f"{path}: torn tail of {scan.file_size - scan.valid_length} bytes at offset {scan.valid_length}"
    return scan.valid_length, scan.record_bytes, dropped


class Replay:
    """The batches recovery applies, oldest first: iterate for ``(seq, ops)``.

    ``vlog_lengths`` maps every value-log file to the length that survived; ``vlogs`` is the
    version set's value-log states (a pointer into a sealed or unlisted file past its end is
    damage in every mode).  ``wal_data`` (number -> bytes) gives WALs read earlier; the others
    are read when replayed.  ``live_writer``: a read-only replay beside the writer holding the
    LOCK, where the newest WAL's torn last record is a write in flight, not reported as dropped."""

    def __init__(self, fs, dbname: str, wal_numbers, vlog_lengths: dict[int, int], vlogs, mode: str,
                 wal_data: dict[int, bytes] | None = None, live_writer: bool = False, unproven=(),
                 last_sequence: int = 0):
        self.fs = fs
        self.dbname = dbname
        # WALs nothing proves the database's (unaccounted.py): replayed only when their records
        # continue the sequence numbers of what was replayed before them
        self.unproven = set(unproven)
        self.last_sequence = last_sequence  # the MANIFEST's
        self.foreign: set[int] = set()  # unproven WALs whose records do not continue: not replayed
        self.wal_numbers = list(wal_numbers)
        self.vlog_lengths = vlog_lengths
        self.vlogs = vlogs
        self.mode = mode
        self.wal_data = wal_data or {}
        self.live_writer = live_writer
        self.dropped: list[str] = []
        self.replayed_whole: set[int] = set()  # WALs every record of which was replayed
        self.not_whole: set[int] = set()  # WALs holding records replay dropped or never reached

    def _drop(self, what: str) -> None:
        self.dropped.append(what)
        log.warning("recovery (%s): %s", self.mode, what)

    def __iter__(self):
        stopped = False
        replayed_end = 0  # the last sequence number replayed so far
        for number in self.wal_numbers:
            if number in self.unproven and not self._continues(number, replayed_end):
                self.foreign.add(number)
                log.warning("%s: WAL %06d.log is not one this database recorded writing and its records do not "
                            "continue the database's: not replayed", self.dbname, number)
                continue
            if stopped:
                self.not_whole.add(number)
                continue
            whole = True
            for item in self._replay_wal(number):
                if item is None:  # a record dropped
                    whole = False
                elif item is _STOP or item is _STOP_LATER:
                    whole = whole and item is _STOP_LATER
                    stopped = True
                    break
                else:
                    replayed_end = max(replayed_end, item[0] + len(item[1]) - 1)
                    yield item
            (self.replayed_whole if whole else self.not_whole).add(number)

    def _wal_bytes(self, number: int) -> bytes:
        data = self.wal_data.get(number)
        if data is None:
            data = self.wal_data[number] = self.fs.read_all(wal_file_name(self.dbname, number))
        return data

    def _continues(self, number: int, replayed_end: int) -> bool:
        """Whether unproven WAL ``number`` holds no record, or its first record's sequence
        number follows what was replayed before it: after it, and at most one past the
        MANIFEST's last sequence number (or what was replayed)."""
        path = wal_file_name(self.dbname, number)
        try:
            for offset, payload in LogReader(self._wal_bytes(number), path):
                seq, _ = decode_batch(payload, path, offset)
                return replayed_end < seq <= max(replayed_end, self.last_sequence) + 1
        except CorruptionError:
            return False
        return True

    def _replay_wal(self, number: int):
        """The batches of WAL ``number``; None for each record dropped; _STOP or _STOP_LATER
        when replay must not go on to later WALs."""
        mode = self.mode
        path = wal_file_name(self.dbname, number)
        data = self.wal_data.pop(number, None)
        if data is None:
            data = self.fs.read_all(path)
        if not data:
            yield from self._empty_wal(number, path)
            return
        reader = LogReader(data, path, skip_corrupted=mode == SKIP_ANY_CORRUPTED)
        try:
            for offset, payload in reader:
                try:
                    seq, ops = decode_batch(payload, path, offset)
                except CorruptionError:
                    if mode != SKIP_ANY_CORRUPTED:
                        raise
                    self._drop(f"{path}: undecodable record at offset {offset} skipped")
                    yield None
                    continue
                try:
                    survived = self._pointers_survived(ops, path, offset)
                except CorruptionError:
                    if mode != SKIP_ANY_CORRUPTED:
                        raise
                    self._drop(f"{path}: record at offset {offset} skipped: it points outside the value log")
                    yield None
                    continue
                if not survived:
                    if mode == ABSOLUTE_CONSISTENCY:
                        raise CorruptionError(
                            "WAL record points past the end of the active value-log file "
                            "(absolute_consistency recovery: nothing may be missing)", path, offset
                        )
                    if mode == SKIP_ANY_CORRUPTED:
                        self._drop(f"{path}: record at offset {offset} skipped: its large value was lost")
                        yield None
                        continue
                    self._drop(f"{path}: replay stops at offset {offset}: a value it points to was lost")
                    yield _STOP
                    return
                yield seq, ops
        except CorruptionError as e:
            if mode != POINT_IN_TIME:
                raise
            self._drop(f"{path}: replay stops at the damage at offset {e.offset}")
            yield _STOP
            return
        for offset, length in reader.skipped:
            self._drop(f"{path}: {length} damaged bytes at offset {offset} skipped")
            yield None
        if reader.torn_tail_offset is not None:
            if self.live_writer and number == self.wal_numbers[-1]:
                log.info("read-only replay beside a live writer: %s: record at %d being written", path,
                         reader.torn_tail_offset)
                return
            if mode == ABSOLUTE_CONSISTENCY:
                raise CorruptionError(
                    "WAL ends in a torn record (absolute_consistency recovery: nothing may be missing)",
                    path, reader.torn_tail_offset,
                )
            # an incomplete last record, never acknowledged: nothing intact of this WAL is lost
            self._drop(f"{path}: torn tail at offset {reader.torn_tail_offset} dropped")
            if mode != SKIP_ANY_CORRUPTED:
                yield _STOP_LATER  # a later WAL holds newer writes: keep the result a prefix of history

    def _empty_wal(self, number: int, path: str):
        """A WAL of 0 bytes.  Every WAL begins with a header record synced when it is created
        (:mod:`antkv.record.wal`), so this one was truncated and whatever writes it held are
        lost -- unless it is the newest WAL of a live writer, which is creating it now."""
        if self.live_writer and number == self.wal_numbers[-1]:
            log.info("read-only replay beside a live writer: %s: being created", path)
            return
        if self.mode == ABSOLUTE_CONSISTENCY:
            raise CorruptionError(
                "WAL is empty: the header record every WAL begins with is gone, so the file was truncated "
                "and the writes it held are lost (absolute_consistency recovery: nothing may be missing)",
                path, 0,
            )
        self._drop(f"{path}: empty: the header record every WAL begins with is gone, so the file was truncated; "
                   "the writes it held are lost")
        yield None
        if self.mode != SKIP_ANY_CORRUPTED:
            yield _STOP  # later WALs hold newer writes: keep the result a prefix of history

    def _pointers_survived(self, ops, wal_path: str, wal_offset: int) -> bool:
        """False when a value pointer reaches past the recovered tail of an unsealed value-log
        file (lost in the crash).  A pointer past the end of a sealed file, or into a file the
        MANIFEST does not list, is damage (CorruptionError)."""
        for kind, _key, value in ops:
            if kind >= VALUE_POINTER:  # a pointer, or an expiring entry that may wrap one
                pointer = pointer_in(kind, value)
                if pointer is None:
                    continue
                fnum, offset, size = decode_pointer(pointer)
                if offset + size > self.vlog_lengths.get(fnum, -1):
                    st = self.vlogs.get(fnum)
                    if st is None or st.sealed:
                        raise CorruptionError(
                            f"WAL record points to {size} bytes at {offset} of value-log file {fnum:06d}.vlog, "
                            f"which is {'not in the MANIFEST' if st is None else 'sealed and shorter'}",
                            wal_path,
                            wal_offset,
                        )
                    return False
        return True
