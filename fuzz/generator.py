"""Seeded operation streams for the differential fuzzer.

An *operation* is a plain tuple whose first field names it; every other field is ``bytes``,
``int``, ``bool``, ``None`` or a tuple of those, so a stream is printable and JSON-encodable
(``fuzz/replay.py``)::

    ("put", key, vspec)                 vspec = (value_id, size); see make_value()
    ("delete", key)
    ("delete_range", begin, end)        begin > end is legal input: both must refuse it
    ("batch", (sub, ...))               sub = a put / delete / delete_range tuple
    ("merge", key, vspec)               db.merge with the append operator (options_sets.py)
    ("merge_batch", (sub, ...))         a batch whose subs may also be ("merge", key, vspec)
    ("get", key)
    ("contains", key)                   ``key in db`` and ``db[key]`` (KeyError when missing)
    ("snap_take", sid)
    ("snap_get", sid, key)
    ("snap_scan", sid, start, stop, reverse, limit)
    ("snap_release", sid)                also closes the cursors opened at that snapshot
    ("iter_open", iid, lower, upper, sid_or_None)
    ("iter", iid, step, key_or_None)    step: seek, seek_for_prev, seek_to_first,
                                        seek_to_last, next, prev
    ("iter_close", iid)
    ("scan", start, stop, prefix, reverse, limit)   prefix and start/stop never both set
    ("flush",)  ("compact_range", begin, end)  ("reopen",)  ("checkpoint",)
    ("gc",)  ("verify",)
    ("ingest", (file, ...))             file = sorted put / delete tuples of distinct keys: an
                                        external table (antkv.SstFileWriter, RocksDB's
                                        SstFileWriter), ingested in one call, later files newer

Invariant: ``OpStream(seed)`` draws every operation from one ``random.Random(seed)`` and
never looks ahead, so the first n operations of a stream do not depend on how long it runs;
``--seed S --ops N`` therefore reproduces any prefix exactly.

The stream does not depend on what the engine under test supports: an operation whose
feature has not landed yet (e.g. ``gc`` before value-log GC exists) is skipped on BOTH sides
by the runner and counted, so a seed means the same stream for every engine version.

The generator only tracks which snapshot and iterator ids it has handed out; it does not know
the database state.  Operations on ids that no longer exist (possible after shrinking) are
answered ``("skip",)`` by both sides.
"""

from __future__ import annotations

import random
from itertools import islice
from typing import Iterator

# Keys shared by every stream: the empty key, keys that are prefixes of each other, the
# extreme bytes, so ordering, prefix scans and bounds meet the corner cases often.
SMALL_KEYS = (
    b"", b"\x00", b"\x00\x00", b"\x01", b"a", b"ab", b"abc", b"abd", b"ac", b"b",
    b"k0", b"k1", b"k10", b"k2", b"k3", b"kk", b"user/", b"user/1", b"user/10",
    b"user/2", b"z", b"\x7f", b"\xfe", b"\xff", b"\xff\xff", b"\xff\xff\x00",
)
PREFIXES = (b"", b"a", b"ab", b"k", b"user/", b"user/1", b"\x00", b"\xff", b"t/")
_ALPHABET = b"\x00\x01ab09kz\xfe\xff"

LARGE_VALUE = 100 * 1024

ITER_STEPS = ("seek", "seek_for_prev", "seek_to_first", "seek_to_last", "next", "prev")
MAX_LIVE_SNAPSHOTS = 3
MAX_LIVE_ITERATORS = 4


def make_value(vid: int, size: int) -> bytes:
    """The value a ``(vid, size)`` spec stands for: deterministic, distinct per vid.

    A third of the values are random (incompressible), a third repeat a short pattern
    (compressible), a third are text-like.
    """
    if size <= 0:
        return b""
    head = b"%d:" % vid
    rng = random.Random(vid)
    style = vid % 3
    if style == 0:
        body = rng.randbytes(size)
    elif style == 1:
        pattern = rng.randbytes(1 + vid % 13)
        body = pattern * (size // len(pattern) + 1)
    else:
        words = [b"lorem", b"ipsum", b"dolor", b"sit", b"amet", b"antkv", b"%d" % vid]
        parts = []
        n = 0
        while n < size:
            w = words[rng.randrange(len(words))]
            parts.append(w)
            n += len(w) + 1
        body = b" ".join(parts)
    return (head + body)[:size]


class Profile:
    """Per-stream proportions, drawn from the seed so streams differ in character."""

    def __init__(self, rng: random.Random):
        self.small_space = rng.random() < 0.5  # mostly the small key set vs a large space
        self.reuse = rng.uniform(0.3, 0.8)  # chance to reuse an already written key
        self.big_values = rng.random() < 0.3  # some values of hundreds of KiB
        self.write_heavy = rng.random() < 0.5


class OpStream:
    """An endless, seeded stream of operations.  Iterate it (lazily) or call take(n)."""

    def __init__(self, seed: int):
        self.seed = seed
        self.rng = random.Random(seed)
        self.profile = Profile(self.rng)
        self.used: list[bytes] = []
        self.next_vid = seed * 1_000_003 % (1 << 40)
        self.next_sid = 0
        self.next_iid = 0
        self.snaps: list[int] = []
        self.iters: list[int] = []
        self.iter_snap: dict[int, int | None] = {}
        p = self.profile
        self.weights = [
            ("put", 30 if p.write_heavy else 18),
            ("delete", 7),
            ("delete_range", 3),
            ("batch", 5),
            ("merge", 8),
            ("merge_batch", 2),
            ("get", 16 if p.write_heavy else 24),
            ("contains", 2),
            ("snap", 5),
            ("iter", 14),
            ("scan", 5),
            ("flush", 1.2),
            ("compact_range", 0.6),
            ("reopen", 0.4),
            ("checkpoint", 0.15),
            ("gc", 0.4),
            ("verify", 0.1),
            ("ingest", 0.3),
        ]
        self._names = [n for n, _ in self.weights]
        self._cum = []
        total = 0.0
        for _, w in self.weights:
            total += w
            self._cum.append(total)

    # --- drawing keys and values ---

    def key(self) -> bytes:
        r = self.rng
        if self.used and r.random() < self.profile.reuse:
            return self.used[r.randrange(len(self.used))]
        if self.profile.small_space or r.random() < 0.25:
            k = SMALL_KEYS[r.randrange(len(SMALL_KEYS))]
        else:
            n = r.choice((0, 1, 2, 3, 4, 6, 8, 12, 24))
            k = PREFIXES[r.randrange(len(PREFIXES))] + bytes(
                _ALPHABET[r.randrange(len(_ALPHABET))] for _ in range(n)
            )
        if len(self.used) < 3000:
            self.used.append(k)
        else:
            self.used[r.randrange(len(self.used))] = k
        return k

    def any_key(self) -> bytes:
        """A key for reads and bounds: also keys that were never written."""
        r = self.rng
        if r.random() < 0.7:
            return self.key()
        k = self.key()
        return r.choice((k + b"\x00", k[:-1], k + b"\xff", b"", b"\xff\xff\xff", b"k"))

    def vspec(self) -> tuple[int, int]:
        r = self.rng
        self.next_vid += 1
        x = r.random()
        if x < 0.08:
            size = 0
        elif x < 0.45:
            size = r.randrange(1, 17)
        elif x < 0.75:
            size = r.randrange(17, 200)
        elif x < 0.93:
            size = r.randrange(200, 5000)
        elif x < 0.985 or not self.profile.big_values:
            size = r.randrange(5000, 50_000)
        else:
            size = r.randrange(LARGE_VALUE, 400 * 1024)
        return (self.next_vid, size)

    def range_pair(self, allow_reversed: bool) -> tuple[bytes, bytes]:
        a, b = self.any_key(), self.any_key()
        if allow_reversed and self.rng.random() < 0.03:
            return (max(a, b), min(a, b))  # reversed (or equal): an InvalidArgument case
        return (min(a, b), max(a, b))

    def bound(self) -> bytes | None:
        return None if self.rng.random() < 0.4 else self.any_key()

    # --- operations ---

    def __iter__(self) -> Iterator[tuple]:
        while True:
            yield self.next_op()

    def take(self, n: int) -> list[tuple]:
        return list(islice(self, n))

    def next_op(self) -> tuple:
        r = self.rng
        x = r.random() * self._cum[-1]
        i = 0
        while self._cum[i] < x:
            i += 1
        name = self._names[i]
        return getattr(self, "_op_" + name)()

    def _op_put(self):
        return ("put", self.key(), self.vspec())

    def _op_delete(self):
        return ("delete", self.key())

    def _op_delete_range(self):
        return ("delete_range",) + self.range_pair(allow_reversed=True)

    def _op_batch(self):
        r = self.rng
        subs = []
        for _ in range(r.choice((1, 2, 3, 5, 8, 20))):
            y = r.random()
            if y < 0.6:
                subs.append(("put", self.key(), self.vspec()))
            elif y < 0.85:
                subs.append(("delete", self.key()))
            else:
                # Never reversed inside a batch: the binding applies part of such a batch
                # (see oracle.py), which is not a contract either engine can be held to.
                subs.append(("delete_range",) + self.range_pair(allow_reversed=False))
        return ("batch", tuple(subs))

    def _op_merge(self):
        return ("merge", self.key(), self.vspec())

    def _op_merge_batch(self):
        r = self.rng
        subs = []
        for _ in range(r.choice((1, 2, 3, 5, 8))):
            y = r.random()
            if y < 0.5:
                subs.append(("merge", self.key(), self.vspec()))
            elif y < 0.75:
                subs.append(("put", self.key(), self.vspec()))
            elif y < 0.9:
                subs.append(("delete", self.key()))
            else:
                subs.append(("delete_range",) + self.range_pair(allow_reversed=False))
        return ("merge_batch", tuple(subs))

    def _op_ingest(self):
        r = self.rng
        files = []
        for _ in range(r.choice((1, 1, 2, 3))):
            keys = sorted({self.key() for _ in range(r.choice((1, 2, 4, 8, 16)))})
            files.append(tuple(("put", k, self.vspec()) if r.random() < 0.8 else ("delete", k) for k in keys))
        return ("ingest", tuple(files))

    def _op_get(self):
        return ("get", self.any_key())

    def _op_contains(self):
        return ("contains", self.any_key())

    def _op_snap(self):
        r = self.rng
        y = r.random()
        if self.snaps and y < 0.45:
            sid = self.snaps[r.randrange(len(self.snaps))]
            return ("snap_get", sid, self.any_key())
        if self.snaps and y < 0.6:
            sid = self.snaps[r.randrange(len(self.snaps))]
            start, stop = self.range_pair(allow_reversed=False)
            if r.random() < 0.3:
                start = None
            if r.random() < 0.3:
                stop = None
            return ("snap_scan", sid, start, stop, r.random() < 0.4, r.choice((5, 50, 100000)))
        if self.snaps and (y < 0.75 or len(self.snaps) >= MAX_LIVE_SNAPSHOTS):
            sid = self.snaps.pop(r.randrange(len(self.snaps)))
            # Cursors reading at this snapshot close with it (see oracle.py).
            self.iters = [i for i in self.iters if self.iter_snap.get(i) != sid]
            return ("snap_release", sid)
        sid = self.next_sid
        self.next_sid += 1
        self.snaps.append(sid)
        return ("snap_take", sid)

    def _op_iter(self):
        r = self.rng
        if not self.iters or (r.random() < 0.08 and len(self.iters) < MAX_LIVE_ITERATORS):
            iid = self.next_iid
            self.next_iid += 1
            self.iters.append(iid)
            lower, upper = self.bound(), self.bound()
            if lower is not None and upper is not None and r.random() < 0.9:
                lower, upper = min(lower, upper), max(lower, upper)
            sid = None
            if self.snaps and r.random() < 0.3:
                sid = self.snaps[r.randrange(len(self.snaps))]
            self.iter_snap[iid] = sid
            return ("iter_open", iid, lower, upper, sid)
        if r.random() < 0.04:
            return ("iter_close", self.iters.pop(r.randrange(len(self.iters))))
        iid = self.iters[r.randrange(len(self.iters))]
        y = r.random()
        if y < 0.30:
            return ("iter", iid, "next", None)
        if y < 0.50:
            return ("iter", iid, "prev", None)
        if y < 0.70:
            return ("iter", iid, "seek", self.any_key())
        if y < 0.85:
            return ("iter", iid, "seek_for_prev", self.any_key())
        if y < 0.93:
            return ("iter", iid, "seek_to_first", None)
        return ("iter", iid, "seek_to_last", None)

    def _op_scan(self):
        r = self.rng
        limit = r.choice((1, 10, 100, 100000))
        reverse = r.random() < 0.4
        if r.random() < 0.3:
            return ("scan", None, None, self.any_key()[:3], reverse, limit)
        start, stop = self.range_pair(allow_reversed=False)
        if r.random() < 0.3:
            start = None
        if r.random() < 0.3:
            stop = None
        return ("scan", start, stop, None, reverse, limit)

    def _op_flush(self):
        return ("flush",)

    def _op_compact_range(self):
        if self.rng.random() < 0.4:
            return ("compact_range", None, None)
        return ("compact_range",) + self.range_pair(allow_reversed=False)

    def _op_reopen(self):
        # Reopening drops every snapshot and iterator on both sides.
        self.snaps.clear()
        self.iters.clear()
        return ("reopen",)

    def _op_checkpoint(self):
        return ("checkpoint",)

    def _op_gc(self):
        return ("gc",)

    def _op_verify(self):
        return ("verify",)


def generate(seed: int, n: int) -> list[tuple]:
    """The first ``n`` operations of stream ``seed``."""
    return OpStream(seed).take(n)
