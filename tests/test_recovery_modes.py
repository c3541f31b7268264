"""``Options.wal_recovery_mode``: RocksDB's four WAL recovery modes, for the WAL and the active
value-log file (antkv/db/files/wal_replay.py states what each keeps)."""

from __future__ import annotations

import os

import pytest

import antkv

OPTS = dict(max_background_jobs=0, min_blob_size=64, write_buffer_size=1 << 20)
MODES = ("tolerate_corrupted_tail_records", "absolute_consistency", "point_in_time_recovery", "skip_any_corrupted_records")


def _wal(path) -> str:
    wals = sorted(n for n in os.listdir(path) if n.endswith(".log"))
    assert len(wals) == 1
    return os.path.join(path, wals[0])


def _make(path, n=30) -> list[tuple[bytes, bytes]]:
    """A database whose last ``n`` small writes live only in its WAL (clean close)."""
    writes = []
    with antkv.open(str(path), **OPTS) as db:
        db.put(b"base", b"flushed")
        db.flush()
        for i in range(n):
            k, v = b"k%02d" % (i % 10), b"v%d" % i  # overwrites: a lost tail undoes some
            db.put(k, v)
            writes.append((k, v))
    return writes


def _state(writes) -> dict:
    d = {b"base": b"flushed"}
    d.update(writes)
    return d


def _open_items(path, mode):
    with antkv.open(str(path), **OPTS, wal_recovery_mode=mode) as db:
        return dict(db.items()), db.stats()["recovery_dropped"]


def test_bad_mode_is_a_clear_error():
    with pytest.raises(antkv.InvalidArgumentError, match="wal_recovery_mode"):
        antkv.Options(wal_recovery_mode="kTolerateCorruptedTailRecords")


@pytest.mark.parametrize("mode", MODES)
def test_truncated_wal_after_a_clean_close(tmp_path, mode):
    path = tmp_path / "db"
    writes = _make(path)
    wal = _wal(path)
    size = os.path.getsize(wal)
    record = size // len(writes)
    with open(wal, "r+b") as f:
        f.truncate(size - record // 2)  # the last record is torn
    if mode == "absolute_consistency":
        with pytest.raises(antkv.CorruptionError, match="torn"):
            antkv.open(str(path), **OPTS, wal_recovery_mode=mode)
        assert os.path.getsize(wal) == size - record // 2  # nothing was cut or flushed
        return
    items, dropped = _open_items(path, mode)
    assert items == _state(writes[:-1])
    assert any("torn tail" in d for d in dropped), dropped  # reported, not silent


@pytest.mark.parametrize("mode", MODES)
def test_wal_truncated_to_zero_bytes_is_reported_and_its_values_kept(tmp_path, mode):
    """A WAL cut to 0 bytes after a clean close held acknowledged writes: every WAL begins
    with a synced header record, so an empty one was truncated.  absolute_consistency refuses
    it and changes nothing; the other modes report it, keep the empty WAL in lost/, and keep
    a copy of the value-log file holding the lost writes' large values (which the open would
    otherwise count as garbage and delete)."""
    path = tmp_path / "db"
    big = os.urandom(200)
    with antkv.open(str(path), **OPTS) as db:
        db.put(b"base", b"flushed")
        db.flush()
        db.put(b"small", b"1")
        db.put(b"large", big)  # in the value log; the WAL holds its pointer
    wal = _wal(path)
    vlogs_before = {n: (path / n).read_bytes() for n in os.listdir(path) if n.endswith(".vlog")}
    assert any(big in data for data in vlogs_before.values())
    with open(wal, "r+b") as f:
        f.truncate(0)
    if mode == "absolute_consistency":
        with pytest.raises(antkv.CorruptionError, match="WAL is empty"):
            antkv.open(str(path), **OPTS, wal_recovery_mode=mode)
        assert os.path.getsize(wal) == 0 and not (path / "lost").exists()
        return
    items, dropped = _open_items(path, mode)
    assert items == {b"base": b"flushed"}
    assert any("empty" in d and os.path.basename(wal) in d for d in dropped), dropped  # reported, not silent
    lost = {n: (path / "lost" / n).read_bytes() for n in os.listdir(path / "lost")}
    assert os.path.basename(wal) in lost
    assert any(big in data for data in lost.values()), sorted(lost)


@pytest.mark.parametrize("mode", MODES)
def test_damaged_byte_in_the_middle_of_the_wal(tmp_path, mode):
    path = tmp_path / "db"
    writes = _make(path)
    wal = _wal(path)
    size = os.path.getsize(wal)
    record = size // len(writes)
    with open(wal, "r+b") as f:  # damage the payload of record 10
        f.seek(10 * record + record - 2)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0x55]))
    if mode in ("tolerate_corrupted_tail_records", "absolute_consistency"):
        with pytest.raises(antkv.CorruptionError, match="checksum"):
            antkv.open(str(path), **OPTS, wal_recovery_mode=mode)
        return
    items, dropped = _open_items(path, mode)
    if mode == "point_in_time_recovery":
        assert items == _state(writes[:10])  # the state just before the damage
    else:
        assert items == _state(writes[:10] + writes[11:])  # only the damaged record is gone
    assert dropped


@pytest.mark.parametrize("mode", MODES)
def test_truncated_active_value_log_file(tmp_path, mode):
    path = tmp_path / "db"
    with antkv.open(str(path), **OPTS) as db:
        db.put(b"a", b"small")
        db.put(b"big1", b"1" * 500)
        db.put(b"a", b"overwritten")
        db.put(b"big2", b"2" * 500)
        db.put(b"c", b"after")
    vlog = sorted(n for n in os.listdir(path) if n.endswith(".vlog"))[-1]
    p = path / vlog
    with open(p, "r+b") as f:
        f.truncate(os.path.getsize(p) - 100)  # big2's record is torn
    if mode == "absolute_consistency":
        with pytest.raises(antkv.CorruptionError):
            antkv.open(str(path), **OPTS, wal_recovery_mode=mode)
        return
    items, dropped = _open_items(path, mode)
    if mode == "skip_any_corrupted_records":
        assert items == {b"a": b"overwritten", b"big1": b"1" * 500, b"c": b"after"}
    else:  # a prefix of history: big2 and everything after it
        assert items == {b"a": b"overwritten", b"big1": b"1" * 500}
    assert any("torn tail" in d for d in dropped) and dropped


@pytest.mark.parametrize("seed", [0, 1])
def test_modes_agree_with_rocksdb(seed, tmp_path):
    """The same logical damage (a WAL cut inside a batch, a flipped byte in a batch) opened by
    antkv and by RocksDB (rocksdict) in each of the four modes: the same error or state
    (``fuzz/recovery_modes.py``; ``python -m fuzz.recovery_modes --seeds N`` runs more)."""
    from fuzz.recovery_modes import check_seed

    assert check_seed(seed, str(tmp_path)) >= 40
