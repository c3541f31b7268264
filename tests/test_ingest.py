"""Ingestion (``antkv.SstFileWriter``, ``db.ingest``, ``db.ingest_database``): a model test
under extreme option sets, placement, links instead of copies, value-log accounting, bad input,
a crash at every file-system call of an ingest, and RocksDB's ``SstFileWriter`` +
``ingest_external_file`` as the oracle for the same operations."""

from __future__ import annotations

import os
import random

import pytest
import rocksdict

import antkv
from antkv.fs.fault import FaultInjectionFileSystem, SimulatedCrash
from antkv.fs.memory import MemoryFileSystem

from model_configs import CONFIGS

KEYS = [b"k%03d" % i for i in range(60)]


def _value(rng: random.Random) -> bytes:
    return bytes([rng.randrange(256)]) * rng.choice([0, 3, 40, 300])


def _external_ops(rng: random.Random) -> list[tuple]:
    """A random external file: sorted distinct point keys, range deletes anywhere."""
    keys = sorted(rng.sample(KEYS, rng.randint(0, 12)))
    ops = [("put", k, _value(rng)) if rng.random() < 0.8 else ("delete", k) for k in keys]
    for _ in range(rng.choice([0, 0, 1, 2])):
        a, b = sorted(rng.sample(KEYS, 2))
        ops.append(("delete_range", a, b))
    if not ops:
        ops.append(("put", rng.choice(KEYS), _value(rng)))
    return ops


def write_external(path: str, ops: list[tuple], options) -> None:
    with antkv.SstFileWriter(path, options) as w:
        for op in ops:
            getattr(w, op[0])(*op[1:])


def apply_external(model: dict, ops: list[tuple]) -> None:
    """One ingested file: its range deletes hide what was there before, its point entries win
    (all of the file has one sequence number, and a tombstone hides only older data)."""
    for op in ops:
        if op[0] == "delete_range":
            for k in [k for k in model if op[1] <= k < op[2]]:
                del model[k]
    for op in ops:
        if op[0] == "put":
            model[op[1]] = op[2]
        elif op[0] == "delete":
            model.pop(op[1], None)


def random_writes(db, model: dict, rng: random.Random, n: int) -> None:
    for _ in range(n):
        r = rng.random()
        k = rng.choice(KEYS)
        if r < 0.7:
            v = _value(rng)
            db.put(k, v)
            model[k] = v
        elif r < 0.85:
            db.delete(k)
            model.pop(k, None)
        elif r < 0.93:
            a, b = sorted(rng.sample(KEYS, 2))
            db.delete_range(a, b)
            for kk in [kk for kk in model if a <= kk < b]:
                del model[kk]
        else:
            db.flush()


def check(db, model: dict) -> None:
    assert dict(db.items()) == model
    assert list(db.keys(reverse=True)) == sorted(model, reverse=True)
    for k in KEYS[::7]:
        assert db.get(k) == model.get(k)


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_ingest_external_model(config):
    fs = MemoryFileSystem()
    opts = antkv.Options(file_system=fs, **CONFIGS[config])
    rng = random.Random(config)
    fs.mkdirs("ext")
    db = antkv.open("db", opts)
    model: dict = {}
    nfile = 0
    for round_ in range(12):
        random_writes(db, model, rng, rng.randint(0, 40))
        snap = db.snapshot()
        before = dict(model)
        files = []
        for _ in range(rng.randint(1, 3)):
            nfile += 1
            path = f"ext/f{nfile}.sst"
            ops = _external_ops(rng)
            write_external(path, ops, opts)
            files.append((path, ops))
        db.ingest([p for p, _ in files], move=rng.random() < 0.5)
        for _, ops in files:
            apply_external(model, ops)
        check(db, model)
        assert dict(db.items(snapshot=snap)) == before  # older snapshots never see an ingest
        snap.release()
        if round_ % 4 == 3:
            db.compact_range()
            check(db, model)
        if round_ % 3 == 2:
            db.close()
            db = antkv.open("db", opts)
            check(db, model)
    db.gc_value_log()
    check(db, model)
    db.verify()
    db.close()


def _random_db(path: str, opts, rng: random.Random, n: int) -> dict:
    model: dict = {}
    with antkv.open(path, opts) as db:
        random_writes(db, model, rng, n)
        if rng.random() < 0.5:
            db.compact_range()
        random_writes(db, model, rng, n // 3)
    return model


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_ingest_database_model(config):
    """Another database's key range replaces ours: links for the tables inside the range,
    rewrites only for those straddling it; the result survives compaction, GC and reopening."""
    fs = MemoryFileSystem()
    opts = antkv.Options(file_system=fs, **CONFIGS[config])
    rng = random.Random("db" + config)
    db = antkv.open("db", opts)
    model: dict = {}
    for round_ in range(6):
        src = f"src{round_}"
        src_model = _random_db(src, opts, rng, 120)
        with antkv.open(src, opts) as s:
            s.checkpoint(src + "-cp")
        random_writes(db, model, rng, rng.randint(0, 60))
        lo, hi = sorted(rng.sample(KEYS, 2))
        if rng.random() < 0.2:
            lo = None
        if rng.random() < 0.2:
            hi = None
        db.ingest_database(src + "-cp", lo, hi)
        inside = lambda k: (lo is None or k >= lo) and (hi is None or k < hi)  # noqa: E731
        model = {k: v for k, v in model.items() if not inside(k)}
        model.update({k: v for k, v in src_model.items() if inside(k)})
        check(db, model)
        random_writes(db, model, rng, 20)
        check(db, model)
        if round_ % 2:
            db.compact_range()
            check(db, model)
        db.close()
        db = antkv.open("db", opts)
        check(db, model)
    db.gc_value_log()
    db.compact_range()
    check(db, model)
    db.verify()
    db.close()


def test_placement_lowest_non_overlapping_level(tmp_path):
    opts = antkv.Options(max_background_jobs=0, num_levels=5)
    with antkv.open(str(tmp_path / "db"), opts) as db:
        write_external(str(tmp_path / "a.sst"), [("put", b"m", b"1")], opts)
        assert db.ingest([str(tmp_path / "a.sst")])["tables"][0][0] == 4  # empty: the bottom
        write_external(str(tmp_path / "b.sst"), [("put", b"m", b"2")], opts)
        assert db.ingest([str(tmp_path / "b.sst")])["tables"][0][0] == 3  # above the overlap
        write_external(str(tmp_path / "c.sst"), [("put", b"z", b"3")], opts)
        assert db.ingest([str(tmp_path / "c.sst")])["tables"][0][0] == 4  # no overlap anywhere
        db.put(b"m", b"4")
        db.flush()  # an L0 table over m
        write_external(str(tmp_path / "d.sst"), [("put", b"m", b"5")], opts)
        assert db.ingest([str(tmp_path / "d.sst")])["tables"][0][0] == 0
        db.put(b"n", b"6")  # in the memtable: the ingest flushes it first
        write_external(str(tmp_path / "e.sst"), [("put", b"n", b"7")], opts)
        db.ingest([str(tmp_path / "e.sst")])
        assert db.get(b"m") == b"5" and db.get(b"n") == b"7" and db.get(b"z") == b"3"
        db.put(b"n", b"8")  # writes after an ingest are newer than it
        assert db.get(b"n") == b"8"


def test_ingest_links_and_never_rewrites(tmp_path):
    """Tables come in as hard links (same inode, same bytes); large values stay where the
    writer put them and their value-log file is linked too; move removes the inputs after."""
    opts = antkv.Options(max_background_jobs=0, min_blob_size=100)
    ext = str(tmp_path / "x.sst")
    write_external(ext, [("put", b"a", b"v" * 500), ("put", b"b", b"small")], opts)
    ino = os.stat(ext).st_ino
    vino = os.stat(ext + ".vlog").st_ino
    with antkv.open(str(tmp_path / "db"), opts) as db:
        out = db.ingest([ext], move=True)
        (level, number), = out["tables"]
        assert os.stat(os.path.join(db.path, "%06d.sst" % number)).st_ino == ino
        (vnum,) = out["vlog_files"]
        assert os.stat(os.path.join(db.path, "%06d.vlog" % vnum)).st_ino == vino
        assert not os.path.exists(ext) and not os.path.exists(ext + ".vlog")
        assert db.get(b"a") == b"v" * 500 and db.get(b"b") == b"small"
        db.checkpoint(str(tmp_path / "cp"))
    # another database's tables inside the range are linked, the straddling one is not
    with antkv.open(str(tmp_path / "db2"), opts) as db2:
        src = str(tmp_path / "cp")
        src_tables = {n: os.stat(os.path.join(src, n)).st_ino for n in os.listdir(src) if n.endswith(".sst")}
        out = db2.ingest_database(src, b"a", b"c")
        linked = {os.stat(os.path.join(db2.path, "%06d.sst" % n)).st_ino for _, n in out["tables"]}
        assert set(src_tables.values()) <= linked
        assert db2.get(b"a") == b"v" * 500
        db2.verify()


def test_clipped_value_log_bytes_are_garbage(tmp_path):
    """Value-log bytes of the source that no table in the range points to count as garbage at
    once; GC then drops them and the file goes when nothing is left."""
    opts = antkv.Options(max_background_jobs=0, min_blob_size=50, blob_gc_threshold=0.9)
    with antkv.open(str(tmp_path / "src"), opts) as src:
        for i in range(40):
            src.put(b"k%02d" % i, bytes([i]) * 200)
        src.checkpoint(str(tmp_path / "cp"))
    expected = {b"k%02d" % i: bytes([i]) * 200 for i in range(10)}
    with antkv.open(str(tmp_path / "db"), opts) as db:
        out = db.ingest_database(str(tmp_path / "cp"), b"k00", b"k10")
        (vnum,) = out["vlog_files"]
        st = db._versions.vlogs[vnum]  # noqa: SLF001 - the accounting itself is under test
        assert st.sealed and st.total > 0
        assert abs(st.garbage / st.total - 0.75) < 0.02, (st.garbage, st.total)
        assert dict(db.items()) == expected
    # at a threshold below 75% the file is a GC candidate: live values move, the file goes
    with antkv.open(str(tmp_path / "db"), opts.replace(blob_gc_threshold=0.5)) as db:
        db.gc_value_log()
        assert vnum not in db._versions.vlogs  # noqa: SLF001 - relocated, then deleted
        assert not os.path.exists(os.path.join(db.path, "%06d.vlog" % vnum))
        assert dict(db.items()) == expected
        db.verify()
    with antkv.open(str(tmp_path / "cp"), opts) as cp:  # the source lost nothing through the links
        assert len(dict(cp.items())) == 40
        cp.verify()


def test_bad_input_changes_nothing(tmp_path):
    opts = antkv.Options(max_background_jobs=0)
    w = antkv.SstFileWriter(str(tmp_path / "u.sst"), opts)
    w.put(b"b", b"1")
    with pytest.raises(antkv.InvalidArgumentError):
        w.put(b"a", b"2")  # out of order
    with pytest.raises(antkv.InvalidArgumentError):
        w.put(b"b", b"2")  # not strictly increasing
    with pytest.raises(TypeError):
        w.put("c", b"2")
    with pytest.raises(antkv.InvalidArgumentError):
        w.delete_range(b"z", b"a")
    w.finish()
    with pytest.raises(antkv.InvalidArgumentError):
        antkv.SstFileWriter(str(tmp_path / "u.sst"), opts)  # exists
    with pytest.raises(antkv.InvalidArgumentError):
        antkv.SstFileWriter(str(tmp_path / "e.sst"), opts).finish()  # empty
    assert not os.path.exists(tmp_path / "e.sst")
    with antkv.open(str(tmp_path / "db"), opts) as db:
        db.put(b"keep", b"me")
        db.flush()
        before = sorted(os.listdir(db.path))
        # a damaged file: CorruptionError, nothing changed
        data = bytearray((tmp_path / "u.sst").read_bytes())
        data[5] ^= 0xFF
        (tmp_path / "bad.sst").write_bytes(bytes(data))
        with pytest.raises(antkv.CorruptionError):
            db.ingest([str(tmp_path / "u.sst"), str(tmp_path / "bad.sst")])
        with pytest.raises(antkv.IOError):
            db.ingest([str(tmp_path / "missing.sst")])
        # a table of a database is not an external table
        table = [n for n in os.listdir(db.path) if n.endswith(".sst")][0]
        with pytest.raises(antkv.InvalidArgumentError):
            db.ingest([os.path.join(db.path, table)])
        with pytest.raises(TypeError):
            db.ingest([b"u.sst"])
        with pytest.raises(antkv.InvalidArgumentError):
            db.ingest([])
        with pytest.raises(antkv.InvalidArgumentError):
            db.ingest_database(str(tmp_path / "db"), b"z", b"a")
        assert sorted(os.listdir(db.path)) == before
        assert dict(db.items()) == {b"keep": b"me"}
        assert os.path.exists(tmp_path / "u.sst")


def test_an_unverified_ingest_still_checks_each_block_when_read(tmp_path):
    """``verify_checksums=False`` skips the whole read before the ingest (for a table just
    written): a damaged data block is then ingested, but a read of it is CorruptionError,
    never a wrong answer; the default refuses the file and changes nothing."""
    opts = antkv.Options(max_background_jobs=0, block_size=256)
    path = str(tmp_path / "t.sst")
    with antkv.SstFileWriter(path, opts) as w:
        w.put_sorted([b"k%04d" % i for i in range(200)], [b"v%04d" % i * 8 for i in range(200)])
    data = bytearray(open(path, "rb").read())
    data[data.index(b"v0100")] ^= 0xFF  # a byte of a data block's value
    open(path, "wb").write(bytes(data))
    with antkv.open(str(tmp_path / "db"), opts) as db:
        with pytest.raises(TypeError):
            db.ingest([path], verify_checksums=1)
        with pytest.raises(antkv.CorruptionError):
            db.ingest([path])
        assert list(db.keys()) == []
        db.ingest([path], verify_checksums=False)
        assert db.get(b"k0000") == b"v0000" * 8  # an undamaged block
        with pytest.raises(antkv.CorruptionError):
            db.get(b"k0100")
        with pytest.raises(antkv.CorruptionError):
            list(db.items())


def test_ingest_database_damaged_value_log_footer_changes_nothing(tmp_path):
    opts = antkv.Options(max_background_jobs=0, min_blob_size=10)
    with antkv.open(str(tmp_path / "src"), opts) as src:
        src.put(b"a", b"x" * 100)
        src.checkpoint(str(tmp_path / "cp"))
    (vlog,) = [n for n in os.listdir(tmp_path / "cp") if n.endswith(".vlog")]
    path = tmp_path / "cp" / vlog
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x40  # the footer's check
    path.write_bytes(bytes(data))
    with antkv.open(str(tmp_path / "db"), opts) as db:
        db.put(b"b", b"1")
        with pytest.raises(antkv.CorruptionError):
            db.ingest_database(str(tmp_path / "cp"))
        assert dict(db.items()) == {b"b": b"1"}
        assert not [n for n in os.listdir(db.path) if n.endswith(".vlog") and os.stat(os.path.join(db.path, n)).st_ino == os.stat(path).st_ino]


def test_ingest_database_refuses_unsealed_value_log(tmp_path):
    """A live database's active value-log file may still grow: only checkpoints (whose files
    are all sealed) and closed-and-reopened databases are accepted when tables point into it."""
    opts = antkv.Options(max_background_jobs=0, min_blob_size=10)
    src = antkv.open(str(tmp_path / "src"), opts)
    src.put(b"a", b"x" * 100)
    src.flush()
    with antkv.open(str(tmp_path / "db"), opts) as db:
        with pytest.raises(antkv.InvalidArgumentError, match="not sealed"):
            db.ingest_database(src.path)
        assert dict(db.items()) == {}
    src.close()


# --------------------------------------------------------------------------- crashes


_SETUPS: dict = {}  # (kind, move) -> (file system, model before, model after), built once


def _crash_run(crash_at, mode_seed, kind: str, move: bool):
    """Set up (not counted; a copy of the same setup each time), then ingest with a crash at
    file-system call ``crash_at`` (None: no crash).  Returns ``(inner fs, crashed, the model
    before, the model after, the calls made)``."""
    if (kind, move) not in _SETUPS:
        _SETUPS[kind, move] = _crash_setup(kind)
    built, model, after = _SETUPS[kind, move]
    inner = built.clone()
    opts = dict(CONFIGS["all-blobs-gc"])
    fs = FaultInjectionFileSystem(inner, seed=mode_seed)
    if crash_at is not None:
        fs.crash_at(crash_at)
    try:
        db = antkv.open("db", file_system=fs, **opts)
        if kind == "external":
            db.ingest(["ext/f0.sst", "ext/f1.sst"], move=move)
        else:
            db.ingest_database("cp", b"k010", b"k040")
        db.close()
    except SimulatedCrash:
        return inner, True, dict(model), dict(after), fs.calls
    return inner, False, dict(model), dict(after), fs.calls


def _crash_setup(kind: str):
    """The database (and the external files or the checkpoint to ingest) before the ingest."""
    inner = MemoryFileSystem()
    opts = dict(CONFIGS["all-blobs-gc"])
    rng = random.Random(7)
    inner.mkdirs("ext")
    model: dict = {}
    db = antkv.open("db", file_system=inner, **opts)
    random_writes(db, model, rng, 60)
    files = []
    if kind == "external":
        for i in range(2):
            ops = _external_ops(rng)
            write_external(f"ext/f{i}.sst", ops, antkv.Options(file_system=inner, **opts))
            files.append(ops)
        after = dict(model)
        for ops in files:
            apply_external(after, ops)
    else:
        src_model = _random_db("src", antkv.Options(file_system=inner, **opts), rng, 80)
        with antkv.open("src", file_system=inner, **opts) as s:
            s.checkpoint("cp")
        after = {k: v for k, v in model.items() if not b"k010" <= k < b"k040"}
        after.update({k: v for k, v in src_model.items() if b"k010" <= k < b"k040"})
    db.close()
    return inner, model, after


def test_a_cloned_memory_file_system_is_the_same_files_and_independent():
    """What the crash runs rely on: a clone has the files, links, directories and durable
    state of the original, and neither sees the other's later writes."""
    fs = MemoryFileSystem()
    fs.mkdirs("d")
    w = fs.create("d/a")
    w.append(b"synced")
    w.sync()
    w.append(b"+unsynced")
    w.close()
    fs.sync_dir("d")
    fs.link("d/a", "d/b")
    twin = fs.clone()
    assert twin.read_all("d/a") == twin.read_all("d/b") == b"synced+unsynced"
    assert twin.listdir("d") == fs.listdir("d")
    twin.truncate("d/b", 2)
    assert twin.read_all("d/a") == b"sy"  # still one file behind two names
    assert fs.read_all("d/a") == b"synced+unsynced"  # the original is untouched
    fs.remove("d/a")
    assert twin.exists("d/a")
    twin.crash("power")
    # what was synced survives (the truncate was not), the link never made durable does not
    assert twin.read_all("d/a") == b"synced" and not twin.exists("d/b")


@pytest.mark.parametrize("kind,move", [("external", False), ("external", True), ("database", False)])
def test_crash_at_every_call_of_an_ingest(kind, move, quiet_recovery):
    """Kill or power loss at every file-system call of open + ingest + close: the database
    recovers to the state before or after the ingest (never between), and the inputs are intact
    unless the ingest completed with ``move``."""
    inner, crashed, _, after, total = _crash_run(None, 0, kind, move)
    assert not crashed
    with antkv.open("db", file_system=inner, **CONFIGS["all-blobs-gc"]) as db:
        assert dict(db.items()) == after
    inputs = ["ext/f0.sst", "ext/f1.sst"] if kind == "external" else ["cp/CURRENT"]
    outcomes = {"before": 0, "after": 0}
    for n in range(1, total + 1):
        for mode in ("kill", "power", "partial"):
            inner, crashed, before, after, _ = _crash_run(n, n, kind, move)
            assert crashed
            snapshot_inputs = {p: inner.read_all(p) for p in inputs if inner.exists(p)}
            inner.crash(mode, random.Random(n))
            with antkv.open("db", file_system=inner, **CONFIGS["all-blobs-gc"]) as db:
                got = dict(db.items())
                db.verify()
            assert got in (before, after), f"call {n} mode {mode}: neither before nor after the ingest"
            outcomes["before" if got == before else "after"] += 1
            if got == before:
                for p in inputs:  # an ingest that did not happen took nothing away
                    assert inner.exists(p) and inner.read_all(p) == snapshot_inputs.get(p, inner.read_all(p))
            for p, data in snapshot_inputs.items():
                if inner.exists(p):
                    assert inner.read_all(p) == data  # never written through a link
    assert before != after and outcomes["before"] and outcomes["after"], outcomes


# --------------------------------------------------------------------------- RocksDB


def test_differential_against_rocksdb_ingest(tmp_path):
    """The same writes and external files on antkv and on RocksDB (``rocksdict.SstFileWriter``
    + ``ingest_external_file``) give the same database, before and after compaction and
    reopening.  The Python binding's writer has no range delete: files hold puts and deletes."""
    rng = random.Random(15)
    ropts = rocksdict.Options(raw_mode=True)
    rdb = rocksdict.Rdict(str(tmp_path / "rocks"), ropts)
    aopts = antkv.Options(max_background_jobs=0, write_buffer_size=4096, min_blob_size=64,
                          level0_file_num_compaction_trigger=2, target_file_size_base=2048)
    adb = antkv.open(str(tmp_path / "antkv"), aopts)
    n = 0
    for round_ in range(25):
        for _ in range(rng.randint(0, 30)):
            k = rng.choice(KEYS)
            if rng.random() < 0.75:
                v = _value(rng)
                rdb[k] = v
                adb.put(k, v)
            else:
                del rdb[k]
                adb.delete(k)
        paths_r, paths_a = [], []
        for _ in range(rng.randint(1, 3)):
            n += 1
            ops = [op for op in _external_ops(rng) if op[0] != "delete_range"] or [("put", b"k000", b"z")]
            rw = rocksdict.SstFileWriter(ropts)
            rw.open(str(tmp_path / f"r{n}.sst"))
            with antkv.SstFileWriter(str(tmp_path / f"a{n}.sst"), aopts) as aw:
                for op in ops:
                    if op[0] == "put":
                        rw[op[1]] = op[2]
                        aw.put(op[1], op[2])
                    else:
                        del rw[op[1]]
                        aw.delete(op[1])
            rw.finish()
            paths_r.append(str(tmp_path / f"r{n}.sst"))
            paths_a.append(str(tmp_path / f"a{n}.sst"))
        rdb.ingest_external_file(paths_r)
        adb.ingest(paths_a)
        expected = list(rdb.items())
        assert list(adb.items()) == expected, f"round {round_}"
        if round_ % 5 == 4:
            rdb.compact_range(None, None)
            adb.compact_range()
            assert list(adb.items()) == list(rdb.items())
            adb.close()
            adb = antkv.open(str(tmp_path / "antkv"), aopts)
            assert list(adb.items()) == list(rdb.items())
    adb.close()
    rdb.close()


def test_ingested_tables_compacted_in_worker_processes(tmp_path):
    """A background compaction runs in a worker process, which opens the ingested tables
    itself: it must read them through their translation too."""
    import time

    opts = antkv.Options(level0_file_num_compaction_trigger=2, min_blob_size=64, max_background_jobs=2)
    rng = random.Random(3)
    model: dict = {}
    with antkv.open(str(tmp_path / "db"), opts) as db:
        for i in range(6):
            ops = _external_ops(rng) + [("delete_range", b"k000", b"k001")]
            write_external(str(tmp_path / f"{i}.sst"), ops, opts)
            db.put(b"k050", b"%d" % i)  # keeps L0 overlapping: every file lands in L0
            model[b"k050"] = b"%d" % i
            db.ingest([str(tmp_path / f"{i}.sst")])
            apply_external(model, ops)
        deadline = time.monotonic() + 60
        while db.property("antkv.num-files-at-level0") not in ("0", "1") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert db.property("antkv.num-files-at-level0") in ("0", "1")
        assert db.stats()["compactions"] >= 1
        check(db, model)
        db.verify()


@pytest.mark.parametrize("seed", range(8))
def test_put_sorted_writes_the_files_a_put_of_each_pair_writes(tmp_path, seed):
    """``SstFileWriter.put_sorted`` (blocks built in bulk) writes byte for byte the table and
    value-log file that a ``put`` of each pair in turn writes: values in and beyond the
    value log's threshold, calls after ``put`` (a block open) and after another
    ``put_sorted``, an empty call."""
    rng = random.Random(seed)
    opts = antkv.Options(block_size=rng.choice([64, 1024, 4096]), enable_blob_files=True, min_blob_size=512)
    keys = sorted(rng.sample(range(10**6), 600))
    pairs = [(b"k%07d" % k, os.urandom(rng.choice([0, 10, 100, 700]))) for k in keys]
    cuts = sorted(rng.sample(range(1, 600), 3))
    files = []
    for bulk in (False, True):
        path = str(tmp_path / f"{bulk}.sst")
        with antkv.SstFileWriter(path, opts) as w:
            parts = [pairs[:cuts[0]], pairs[cuts[0]:cuts[1]], [], pairs[cuts[1]:cuts[2]], pairs[cuts[2]:]]
            for i, part in enumerate(parts):
                if bulk and i != 1:  # part 1 by put: the next put_sorted starts inside a block
                    w.put_sorted([k for k, _ in part], [v for _, v in part])
                else:
                    for k, v in part:
                        w.put(k, v)
        files.append([open(p, "rb").read() for p in (path, path + ".vlog")])
    assert files[0] == files[1]


def test_a_failed_call_while_writing_an_external_table_leaves_no_file():
    """An I/O error at any file-system call of writing an external table (its blocks reach
    the file in buffered runs) is antkv.IOError from the writer, which then removes what it
    wrote; with no failure the table is complete and ingests."""
    keys = [b"k%05d" % i for i in range(3000)]
    values = [b"%05d" % i * 60 for i in range(3000)]  # 300 B: ~1 MB, several buffered writes
    failed = 0
    for n in range(1, 200):
        fs = FaultInjectionFileSystem(MemoryFileSystem())
        fs.mkdirs("ext")
        fs.fail_at(fs.calls + n)
        try:
            with antkv.SstFileWriter("ext/t.sst", antkv.Options(file_system=fs)) as w:
                w.put_sorted(keys, values)
        except antkv.IOError:
            failed += 1
            fs.disarm()
            assert not fs.exists("ext/t.sst"), n
            continue
        fs.disarm()
        with antkv.open("db", antkv.Options(max_background_jobs=0, file_system=fs)) as db:
            db.ingest(["ext/t.sst"])
            assert db.get(b"k02999") == values[-1] and len(list(db.keys())) == 3000
        break
    assert failed >= 3  # the buffered writes, the sync, the directory's sync at least


def test_put_sorted_refuses_what_put_refuses(tmp_path):
    opts = antkv.Options()
    with antkv.SstFileWriter(str(tmp_path / "a.sst"), opts) as w:
        w.put(b"m", b"1")
        with pytest.raises(antkv.InvalidArgumentError):
            w.put_sorted([b"a", b"b"], [b"1", b"2"])  # not after the last key
        w.put_sorted([b"n", b"o"], [b"1", b"2"])
    for keys, values, error in (([b"b", b"a"], [b"1", b"2"], antkv.InvalidArgumentError),
                                ([b"a", b"a"], [b"1", b"2"], antkv.InvalidArgumentError),
                                ([b"a"], [b"1", b"2"], antkv.InvalidArgumentError),
                                (["a"], [b"1"], TypeError), ([b"a"], [1], TypeError)):
        w = antkv.SstFileWriter(str(tmp_path / "b.sst"), opts)
        with pytest.raises(error):
            w.put_sorted(keys, values)
        w.abandon()
