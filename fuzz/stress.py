"""A multi-threaded stress test in the spirit of RocksDB's ``db_stress``.

Several writers, readers, cursors and snapshots held across writes, plus flush, compaction,
value-log GC, checkpoints, ``property()``, ``verify()`` and close/reopen from other threads, all on
one database with background flush and compaction, under the named extreme option sets of
:mod:`fuzz.options_sets`.

Every answer is checked against per-thread operation logs.  Writer ``w`` owns the contiguous key
range ``[w * R, (w + 1) * R)``, so the history of each key is written by one thread and totally
ordered.  Every operation is stamped from one global clock when it starts and when it returns; a
read that started at ``t0`` and returned at ``t1`` may see the value of the newest operation on
that key acknowledged before ``t0``, or of any operation that overlapped ``[t0, t1]`` -- nothing
else.  A snapshot read must also be repeatable.  At a quiescent reopen the state must equal the
logs exactly.

Close/reopen races everything: an operation that meets a closed handle must raise
:class:`antkv.DBClosedError` (it then retries on the new handle), and a write acknowledged before
close -- including ``disable_wal`` writes -- must be there after the reopen.

A watchdog fails the run when no operation completes for ``--stall-seconds`` and prints every
thread's stack, so a deadlock is a report, not a hung run.

    python -m fuzz.stress --seconds 1800            # every option set in turn
    python -m fuzz.stress --option-set blob-100 --seconds 20 --seed 3
"""

from __future__ import annotations

import argparse
import bisect
import itertools
import os
import random
import shutil
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, field

import antkv

from . import options_sets

_clock = itertools.count(1)  # next() is atomic under the GIL: a total order of events


def tick() -> int:
    return next(_clock)


class StressFailure(AssertionError):
    """An answer no interleaving of the logged operations explains (or a deadlock)."""


@dataclass
class KeyHistory:
    """Operations on one key, in the order its owner ran them: ``(start, end, value)``,
    ``value`` None for a deletion, ``end`` None while the operation is in flight."""

    ops: list = field(default_factory=list)

    def allowed(self, t0: int, t1: int) -> list:
        """Values a read during ``[t0, t1]`` may return."""
        ops = self.ops
        out = []
        base = None  # the newest op acknowledged before t0
        for start, end, value in ops:
            if end is not None and end < t0:
                base = value
            elif start <= t1:
                out.append(value)  # overlaps the read (or still in flight)
        out.append(base)
        return out


class Model:
    """The per-key histories; only the key's owner appends, anyone reads."""

    def __init__(self, num_keys: int):
        self.keys = [b"key%06d" % i for i in range(num_keys)]
        self.hist = [KeyHistory() for _ in range(num_keys)]

    def index(self, key: bytes) -> int:
        return int(key[3:])

    def begin(self, i: int, value) -> list:
        rec = [tick(), None, value]
        self.hist[i].ops.append(rec)
        return rec

    @staticmethod
    def end(recs: list) -> None:
        t = tick()
        for r in recs:
            r[1] = t

    def forget(self, recs: list) -> None:
        """Writes that did not happen: each record leaves its key's history (the last there:
        only the key's owner appends, and it began no other write meanwhile)."""
        for rec in recs:
            for h in self.hist:
                if h.ops and h.ops[-1] is rec:
                    h.ops.pop()
                    break

    def abandon(self, recs: list) -> None:
        """The write raised: it may or may not have happened; it stays "in flight" forever
        (a later read may see either answer)."""

    def check_read(self, key: bytes, got, t0: int, t1: int, what: str) -> None:
        h = self.hist[self.index(key)]
        # copy: the owner may append while we look
        allowed = KeyHistory(list(h.ops)).allowed(t0, t1)
        if got not in allowed:
            raise StressFailure(f"{what}: {key!r} = {_short(got)}, allowed {[_short(v) for v in allowed]} "
                                f"during [{t0}, {t1}]; history {[(s, e, _short(v)) for s, e, v in h.ops[-6:]]}")

    def final_state(self) -> dict:
        out = {}
        for k, h in zip(self.keys, self.hist):
            if h.ops:
                s, e, v = h.ops[-1]
                if e is None:
                    raise StressFailure(f"final state asked with {k!r} in flight")
                if v is not None:
                    out[k] = v
        return out


def _short(v) -> str:
    return "None" if v is None else repr(v[:16]) + (f"..({len(v)})" if len(v) > 16 else "")


class Stress:
    """One run: a database, its threads and the model.  ``run()`` returns counters or raises
    :class:`StressFailure`."""

    def __init__(self, path: str, option_set: str, seed: int, seconds: float, writers: int = 3,
                 readers: int = 2, keys_per_writer: int = 400, stall_seconds: float = 60.0,
                 reopen_every: float = 2.0, require: tuple = ()):
        self.path = path
        self.option_set = option_set
        self.options = options_sets.build(option_set).replace(max_background_jobs=2)
        self.seed = seed
        self.seconds = seconds
        self.writers = writers
        self.readers = readers
        self.R = keys_per_writer
        self.model = Model(writers * keys_per_writer)
        self.stall_seconds = stall_seconds
        self.reopen_every = reopen_every
        # groups of counters: the run goes on past ``seconds`` (at most ``stall_seconds`` more)
        # until one counter of each group moved, so a loaded machine still exercises every actor
        self.require = require
        self.db = antkv.open(path, self.options)
        self.db_lock = threading.Lock()  # guards self.db (the handle threads should use)
        self.reopened = threading.Condition(self.db_lock)
        self.stop = threading.Event()
        self.failures: list[BaseException] = []
        self.progress = 0
        self.counts: dict[str, int] = {}
        self.counts_lock = threading.Lock()

    # ---------------------------------------------------------------- plumbing

    def handle(self):
        with self.db_lock:
            return self.db

    def _wanting(self) -> bool:
        """Whether a group of :attr:`require` has no counter above zero yet."""
        with self.counts_lock:
            return any(not any(self.counts.get(c, 0) for c in group) for group in self.require)

    def count(self, what: str) -> None:
        with self.counts_lock:
            self.counts[what] = self.counts.get(what, 0) + 1
        self.progress += 1

    def retrying(self, fn):
        """Run ``fn(db)``; on DBClosedError wait for the reopen and run it again."""
        while not self.stop.is_set():
            db = self.handle()
            try:
                return fn(db)
            except antkv.DBClosedError:
                with self.db_lock:
                    while self.db is db and not self.stop.is_set():
                        self.reopened.wait(0.1)
        raise _Stopped

    def value(self, rng: random.Random, key: bytes, n: int) -> bytes:
        size = rng.choice((0, 8, 40, 120, 400, 3000))
        head = b"%s#%d#" % (key, n)
        return head + rng.randbytes(max(0, size - len(head)))

    # ---------------------------------------------------------------- actors

    def writer(self, w: int) -> None:
        rng = random.Random(self.seed * 1000 + w)
        lo = w * self.R
        n = 0
        while not self.stop.is_set():
            n += 1
            r = rng.random()
            sync = rng.random() < 0.02
            wo = antkv.WriteOptions(sync=sync, disable_wal=not sync and rng.random() < 0.1)
            i = lo + rng.randrange(self.R)
            key = self.model.keys[i]
            if r < 0.6:
                v = self.value(rng, key, n)
                recs = [self.model.begin(i, v)]
                self._write(recs, lambda db: db.put(key, v, write_options=wo))
            elif r < 0.75:
                recs = [self.model.begin(i, None)]
                self._write(recs, lambda db: db.delete(key, write_options=wo))
            elif r < 0.85:
                j = min(lo + self.R, i + rng.randrange(1, 20))
                recs = [self.model.begin(x, None) for x in range(i, j)]
                end = self.model.keys[j] if j < len(self.model.keys) else b"key999999"
                self._write(recs, lambda db: db.delete_range(key, end, write_options=wo))
            else:
                batch = antkv.WriteBatch()
                recs = []
                for x in sorted(rng.sample(range(lo, lo + self.R), rng.randrange(1, 8))):
                    k = self.model.keys[x]
                    if rng.random() < 0.8:
                        v = self.value(rng, k, n)
                        batch.put(k, v)
                        recs.append(self.model.begin(x, v))
                    else:
                        batch.delete(k)
                        recs.append(self.model.begin(x, None))
                self._write(recs, lambda db: db.write(batch, write_options=wo))
            self.count("writes")

    def _write(self, recs, fn) -> None:
        try:
            self.retrying(fn)
        except _Stopped:
            # the run ended before the write was tried, or while each try raised DBClosedError:
            # either way it did not happen (a write that raises DBClosedError is not in the
            # reopened database: DB.close), so it leaves the logs instead of staying in flight
            self.model.forget(recs)
            return
        Model.end(recs)

    def reader(self, r: int) -> None:
        rng = random.Random(self.seed * 1000 + 100 + r)
        m = self.model
        while not self.stop.is_set():
            choice = rng.random()
            if choice < 0.5:
                key = m.keys[rng.randrange(len(m.keys))]
                t0 = tick()
                got = self.retrying(lambda db: db.get(key))
                m.check_read(key, got, t0, tick(), "get")
                self.count("gets")
            elif choice < 0.7:
                keys = [m.keys[rng.randrange(len(m.keys))] for _ in range(8)]
                t0 = tick()
                got = self.retrying(lambda db: [db.get(k) for k in keys])
                t1 = tick()
                for k, v in zip(keys, got):
                    m.check_read(k, v, t0, t1, "get")
                self.count("gets")
            elif choice < 0.85:
                self.retrying(lambda db: self._snapshot_read(db, rng))
                self.count("snapshot_reads")
            else:
                self.retrying(lambda db: self._cursor(db, rng))
                self.count("scans")

    def _snapshot_read(self, db, rng) -> None:
        m = self.model
        t0 = tick()
        with db.snapshot() as snap:
            t1 = tick()
            lo = rng.randrange(len(m.keys))
            start, stop = m.keys[lo], m.keys[min(len(m.keys) - 1, lo + 50)]
            first = list(db.items(start, stop, snapshot=snap))
            time.sleep(0)  # let writers run between the two reads
            again = list(db.items(start, stop, snapshot=snap))
            if first != again:
                raise StressFailure(f"snapshot read not repeatable over [{start!r}, {stop!r})")
            back = list(db.items(start, stop, snapshot=snap, reverse=True))
            if back != first[::-1]:
                raise StressFailure("reverse scan under a snapshot differs from the forward one")
            seen = dict(first)
            for k in m.keys[lo:min(len(m.keys) - 1, lo + 50)]:
                m.check_read(k, seen.get(k), t0, t1, "snapshot scan")
                got = db.get(k, snapshot=snap)
                if got != seen.get(k):
                    again = db.get(k, snapshot=snap)
                    rescan = dict(db.items(start, stop, snapshot=snap)).get(k)
                    raise StressFailure(
                        f"get under snapshot {snap.sequence} disagrees with its scan at {k!r}: scan "
                        f"{_short(seen.get(k))}, get {_short(got)}; read again: get {_short(again)}, "
                        f"scan {_short(rescan)}; during [{t0}, {t1}] the history allows "
                        f"[{', '.join(map(_short, KeyHistory(list(m.hist[m.index(k)].ops)).allowed(t0, t1)))}]; "
                        f"tables {db.property('antkv.num-files-at-level0')} in L0")

    def _cursor(self, db, rng) -> None:
        m = self.model
        lo = rng.randrange(len(m.keys))
        bound_hi = m.keys[min(len(m.keys) - 1, lo + 40)]
        t0 = tick()
        it = db.iterator(lower_bound=m.keys[lo], upper_bound=bound_hi)
        try:
            if rng.random() < 0.5:
                it.seek_to_first()
                step = it.next
            else:
                it.seek_to_last()
                step = it.prev
            got = []
            while it.valid():
                got.append((it.key(), it.value()))
                step()
        finally:
            it.close()
        t1 = tick()
        keys = [k for k, _ in got]
        if keys != sorted(keys, reverse=step.__name__ == "prev") or len(set(keys)) != len(keys):
            raise StressFailure(f"cursor out of order or repeating: {keys[:5]}...")
        # a cursor reads one implicit snapshot taken between t0 and t1
        seen = dict(got)
        for k in m.keys[lo:min(len(m.keys) - 1, lo + 40)]:
            m.check_read(k, seen.get(k), t0, t1, "cursor")

    def maintainer(self) -> None:
        """Flush, compaction, GC, checkpoints, properties and verify from another thread."""
        rng = random.Random(self.seed * 1000 + 200)
        ck = 0
        while not self.stop.is_set():
            what = rng.choice(("flush", "compact", "gc", "checkpoint", "property", "verify", "stats"))
            if what == "flush":
                self.retrying(lambda db: db.flush(wait=rng.random() < 0.5))
            elif what == "compact":
                a, b = sorted(rng.sample(range(len(self.model.keys)), 2))
                self.retrying(lambda db: db.compact_range(self.model.keys[a], self.model.keys[b]))
            elif what == "gc":
                self.retrying(lambda db: db.gc_value_log())
            elif what == "checkpoint":
                ck += 1
                target = os.path.join(os.path.dirname(self.path), f"ck-{ck}")
                t0 = tick()
                self.retrying(lambda db: db.checkpoint(target))
                t1 = tick()
                with antkv.open(target, max_background_jobs=0) as c:
                    state = dict(c.items())
                    c.verify()
                for k in self.model.keys[:: max(1, len(self.model.keys) // 200)]:
                    self.model.check_read(k, state.get(k), t0, t1, "checkpoint")
                shutil.rmtree(target)
            elif what == "property":
                for name in ("antkv.stats", "antkv.live-blob-file-size", "antkv.num-files-at-level0",
                             "antkv.estimate-num-keys", "antkv.num-snapshots"):
                    self.retrying(lambda db: db.property(name))
            elif what == "verify":
                self.retrying(lambda db: db.verify())
            else:
                self.retrying(lambda db: db.stats())
            self.count(what)
            time.sleep(rng.random() * 0.05)

    def reopener(self) -> None:
        """Close the handle under everyone's feet now and then, and open it again."""
        rng = random.Random(self.seed * 1000 + 300)
        while not self.stop.wait(self.reopen_every * (0.5 + rng.random())):
            with self.db_lock:
                old = self.db
                old.close()
                self.db = antkv.open(self.path, self.options)
                self.reopened.notify_all()
            self.count("reopens")

    # ---------------------------------------------------------------- the run

    def run(self) -> dict:
        actors = [threading.Thread(target=self._guard, args=(self.writer, w), name=f"writer-{w}")
                  for w in range(self.writers)]
        actors += [threading.Thread(target=self._guard, args=(self.reader, r), name=f"reader-{r}")
                   for r in range(self.readers)]
        actors.append(threading.Thread(target=self._guard, args=(self.maintainer,), name="maintainer"))
        actors.append(threading.Thread(target=self._guard, args=(self.reopener,), name="reopener"))
        for t in actors:
            t.daemon = True
            t.start()
        deadline = time.monotonic() + self.seconds
        last, last_change = self.progress, time.monotonic()
        while (time.monotonic() < deadline or (self._wanting() and time.monotonic() < deadline + self.stall_seconds)) \
                and not self.failures:
            time.sleep(0.2)
            if self.progress != last:
                last, last_change = self.progress, time.monotonic()
            elif time.monotonic() - last_change > self.stall_seconds:
                self.failures.append(StressFailure(
                    f"no operation completed for {self.stall_seconds:g} s: deadlock?\n" + thread_stacks()))
                break
        self.stop.set()
        for t in actors:
            t.join(self.stall_seconds)
            if t.is_alive() and not self.failures:
                self.failures.append(StressFailure(f"{t.name} did not stop:\n" + thread_stacks()))
        if self.failures:
            self.handle().close()
            raise self.failures[0]
        # quiescent: every acknowledged write, exactly, before and after a reopen
        expected = self.model.final_state()
        for _ in range(2):
            db = self.handle()
            got = dict(db.items())
            if got != expected:
                diff = sorted(set(got.items()) ^ set(expected.items()))[:5]
                raise StressFailure(f"final state differs from the logs ({len(got)} vs {len(expected)} keys): {diff}")
            db.verify()
            db.close()
            with self.db_lock:
                self.db = antkv.open(self.path, self.options)
        self.handle().close()
        return dict(self.counts)

    def _guard(self, fn, *args) -> None:
        try:
            fn(*args)
        except _Stopped:
            pass
        except BaseException as e:  # noqa: BLE001 - the run reports the first failure
            e.add_note(f"in thread {threading.current_thread().name}\n" + traceback.format_exc())
            self.failures.append(e)
            self.stop.set()


class _Stopped(Exception):
    """The run is ending while an operation waited for a reopen."""


def thread_stacks() -> str:
    frames = sys._current_frames()
    names = {t.ident: t.name for t in threading.enumerate()}
    return "\n".join(f"--- {names.get(ident, ident)}\n" + "".join(traceback.format_stack(f))
                     for ident, f in frames.items())


def run_one(option_set: str, seed: int, seconds: float, workdir: str | None = None, **kw) -> dict:
    base = tempfile.mkdtemp(prefix="antkv-stress-", dir=workdir)
    try:
        return Stress(os.path.join(base, "db"), option_set, seed, seconds, **kw).run()
    finally:
        shutil.rmtree(base, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fuzz.stress", description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="total time; split over the option sets")
    ap.add_argument("--option-set", default=None, help="one named set (default: every named set in turn)")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--per-set", type=float, default=None, help="seconds per option set")
    ap.add_argument("--workdir", default=None)
    a = ap.parse_args(argv)
    sets = [a.option_set] if a.option_set else list(options_sets.NAMED)
    per = a.per_set or max(5.0, a.seconds / len(sets))
    seed = a.seed if a.seed is not None else int(time.time()) % 1_000_000
    print(f"stress: seed {seed}, {len(sets)} option set(s), {per:.0f} s each", flush=True)
    deadline = time.monotonic() + a.seconds
    totals: dict[str, int] = {}
    runs = 0
    k = 0
    while time.monotonic() < deadline or runs == 0:
        name = sets[k % len(sets)]
        s = seed + k
        started = time.monotonic()
        try:
            counts = run_one(name, s, min(per, max(1.0, deadline - time.monotonic())), a.workdir)
        except StressFailure as e:
            print(f"FAILED: option set {name}, seed {s}: {e}")
            print(f"reproduce: {sys.executable} -m fuzz.stress --option-set {name} --seed {s} --seconds {per:g}")
            return 1
        for c, n in counts.items():
            totals[c] = totals.get(c, 0) + n
        runs += 1
        k += 1
        print(f"  {name} seed {s}: {time.monotonic() - started:.1f} s, {counts}", flush=True)
    print(f"stress summary: {runs} runs, {totals}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
