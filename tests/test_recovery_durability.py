"""Recovery itself must leave the database durable: a power loss right after a recovery
loses nothing the recovery made visible."""

from __future__ import annotations

import antkv
from antkv.fs.memory import MemoryFileSystem

OPTS = dict(max_background_jobs=0, min_blob_size=10)


def test_kill_then_recovery_then_power_loss_keeps_large_values():
    # found while writing docs/durability.md: recovery flushed replayed value pointers into a
    # synced table but never synced the value-log file they point into
    fs = MemoryFileSystem()
    db = antkv.open("db", file_system=fs, **OPTS)
    db.put(b"a", b"x" * 20)
    db.put(b"b", b"small")
    fs.crash("kill")
    antkv.open("db", file_system=fs, **OPTS).close()
    fs.crash("power")
    with antkv.open("db", file_system=fs, **OPTS) as db:
        assert db.get(b"a") == b"x" * 20
        assert db.get(b"b") == b"small"
        db.verify()


def test_checkpoint_on_memory_file_system_survives_power_loss():
    fs = MemoryFileSystem()
    db = antkv.open("db", file_system=fs, **OPTS)
    for i in range(50):
        db.put(b"k%02d" % i, b"v" * (i % 30))
    db.checkpoint("cp")
    db.close()
    fs.crash("power")
    with antkv.open("cp", file_system=fs, create_if_missing=False, **OPTS) as cp:
        assert dict(cp.items()) == {b"k%02d" % i: b"v" * (i % 30) for i in range(50)}
