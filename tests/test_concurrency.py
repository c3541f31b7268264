"""The default configuration: flush and compaction on the background thread while several
threads write, read, scan and hold snapshots.  Each writer owns its keys, so the expected final
state is exact; readers check what they can check while everything moves under them."""

from __future__ import annotations

import random
import threading

import antkv

OPTS = dict(
    write_buffer_size=16 * 1024,
    block_size=512,
    target_file_size_base=16 * 1024,
    max_bytes_for_level_base=64 * 1024,
    level0_file_num_compaction_trigger=2,
    level0_slowdown_writes_trigger=4,
    level0_stop_writes_trigger=6,
    min_blob_size=200,
    blob_file_size=32 * 1024,
    blob_gc_threshold=0.3,
    max_background_jobs=2,
)


def test_writers_readers_and_background_work(tmp_path):
    db = antkv.open(str(tmp_path / "db"), **OPTS)
    errors: list[BaseException] = []
    finals: list[dict] = [dict() for _ in range(3)]
    stop = threading.Event()

    def writer(w: int) -> None:
        rng = random.Random(w)
        model = finals[w]
        try:
            for i in range(3000):
                k = b"w%d-%04d" % (w, rng.randrange(600))
                r = rng.random()
                if r < 0.75:
                    v = bytes([i % 256]) * rng.choice([8, 60, 400])
                    db.put(k, v)
                    model[k] = v
                elif r < 0.9:
                    db.delete(k)
                    model.pop(k, None)
                else:
                    lo = b"w%d-%04d" % (w, rng.randrange(600))
                    hi = lo[:-1] + b"9"
                    db.delete_range(lo, hi)
                    for kk in [kk for kk in model if lo <= kk < hi]:
                        del model[kk]
                # read-your-writes, while flushes and compactions run
                assert db.get(k) == model.get(k)
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    def reader() -> None:
        rng = random.Random(99)
        try:
            while not stop.is_set():
                with db.snapshot() as snap:
                    first = list(db.items(snapshot=snap))
                    again = list(db.items(snapshot=snap))
                    assert first == again  # a snapshot is stable while the LSM changes
                    keys = [k for k, _ in first]
                    assert keys == sorted(keys) and len(set(keys)) == len(keys)
                    back = list(db.items(reverse=True, snapshot=snap))
                    assert back == first[::-1]
                    if first:
                        k, v = first[rng.randrange(len(first))]
                        assert db.get(k, snapshot=snap) == v
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(3)]
    readers = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads + readers:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    for t in readers:
        t.join()
    assert not errors, errors[0]
    expected = {}
    for m in finals:
        expected.update(m)
    assert dict(db.items()) == expected
    st = db.stats()
    assert st["flushes"] > 5 and st["compactions"] > 0
    db.compact_range()
    db.gc_value_log()
    assert dict(db.items()) == expected
    db.verify()
    db.close()
    with antkv.open(str(tmp_path / "db"), **OPTS) as db:
        assert dict(db.items()) == expected
        db._versions.current._check()


def test_flush_waits_for_memtables_already_being_flushed(tmp_path):
    db = antkv.open(str(tmp_path / "db"), **OPTS)
    for i in range(2000):
        db.put(b"k%05d" % i, b"v" * 50)
    db.flush()  # returns only when every memtable is in a table
    assert not db._imms
    db.flush()  # empty memtable, nothing pending: returns at once
    assert db.stats()["immutable_memtables"] == 0
    db.close()


def test_a_waited_flush_runs_beside_the_older_one_and_is_logged_after_it():
    """While the flushing thread writes the oldest memtable's table, ``flush()`` makes a second
    immutable memtable: the compaction thread writes its table at the same time, waits, and
    logs its edit only after the older one's (oldest first), so L0 and the WAL numbers stay in
    order; everything reads back, also after a power loss."""
    from antkv.fs.fault import FaultInjectionFileSystem
    from antkv.fs.memory import MemoryFileSystem

    second_started = threading.Event()

    class Fs(FaultInjectionFileSystem):
        def create(self, path):
            f = super().create(path)
            if path.endswith(".sst"):
                name = threading.current_thread().name
                if name.startswith("antkv-compaction"):  # the second flush writes its table
                    second_started.set()
                elif name.startswith("antkv-flush") and not second_started.is_set():
                    assert second_started.wait(10)  # the older flush waits until it does
            return f

    inner = MemoryFileSystem()
    db = antkv.open("db", file_system=Fs(inner), max_background_jobs=2, write_buffer_size=4000,
                    max_write_buffer_number=4, level0_file_num_compaction_trigger=100, enable_blob_files=False)
    for i in range(12):
        db.put(b"a%03d" % i, b"x" * 100)  # ~4,000 B charged: the memtable is full
    db.put(b"b", b"2")  # switches first: the first flush starts, "b" goes to the new memtable
    db.flush()  # the second memtable: flushed beside the first, logged after it
    assert second_started.is_set()
    l0 = db._versions.current.levels[0]
    assert len(l0) == 2 and db.stats()["flushes"] == 2
    assert sorted(f.largest_seq for f in l0) == [12, 13] and l0[0].number != l0[1].number
    assert db.get(b"a000") == b"x" * 100 and db.get(b"b") == b"2"
    db.close()
    inner.crash("power")
    with antkv.open("db", file_system=inner) as db:
        assert len(dict(db.items())) == 13 and db.get(b"b") == b"2"
