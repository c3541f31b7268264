"""Microseconds per state operation: the processor handle's and the pipeline views' calls on a
partition's store, without Spark.

Usage::

    .venv/bin/python bench/bench_state_ops.py                 # 20,000 keys, 3 rounds
        [--keys 20000] [--rounds 3] [--ops value_get value_update ...] [--json out.json]

One store (a local checkpoint location, one partition owning every key group) holds, for each
of ``--keys`` string grouping keys, a committed value (``start long, last long, events long``,
the processor bench's session), a list of one element, a map entry and an event-time timer.
Every row written -- the committed ones and each batch's -- differs per key and per batch (its
times in milliseconds: ints of 41 bits), so that the row codec, the changelog and its
compression meet values as a stream gives them, not one value over and over.
Each operation then runs once per key, in key order as a batch meets them, in a batch of its
own on the newest committed version (opened warm: the working copy and its row cache are the
previous batch's, as in a steady stream; as the runners do, the batch first reads the key groups
it touches densely whole into the row cache, untimed, which costs nothing once they are held),
and is timed over all keys; the batch then commits
(timed apart, per key).  The figure is the CPU time of the process (every thread: a flush or
compaction the writes cause counts) over the loop divided by the keys, including
setting the current key (one ``set_current_key`` per key, reported alone as ``set_key``, the
views' as ``view_set_key``) -- the cost a processor's handler pays per call.  The timer deletion deletes the timer the registration
before it added, so every round meets the same state but for the lists, one element longer.

Operations (``processor_*``: :class:`antkv.spark.processor.handle.ProcessorHandle`; ``view_*``:
:class:`antkv.spark.state.views.KeyedState`, the ``StatefulPipeline``'s views):

* ``*_value_get`` -- ``get()`` of the key's value (its first read in the batch);
* ``*_value_update`` -- ``update()`` with a new value (after no read);
* ``*_list_append`` -- ``appendValue()`` of one element;
* ``*_map_put`` -- ``updateValue()`` of an existing user key;
* ``processor_timer_register`` / ``processor_timer_delete`` -- a new timer, the existing timer;
* ``dict_*`` -- the same operation on plain dicts (a value per key, a list per key, a dict per
  key, a set of timers): the floor of a state that costs nothing;
* ``floor_*`` -- the views' writes done with the fewest steps the store's structure allows, on
  copies of the warm row cache (``bench/state_ops_floor.py``), committed as they commit: the
  floor of the views' writes, whose share of it the report gives.

The best of ``--rounds`` runs is reported per operation, the call's and the commit's each
(a commit that writes a snapshot, every few versions, is then not the one reported).  Single
runs on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SCHEMA = "start long, last long, events long"
KEY_GROUPS = 128


def _keys(n: int) -> list[tuple[int, tuple]]:
    """``(key group, grouping key)`` of ``n`` keys, in key-group order as a batch meets them."""
    import xxhash

    keys = [(f"user-{i:08d}",) for i in range(n)]
    return sorted((xxhash.xxh64_intdigest(k[0].encode()) % KEY_GROUPS, k) for k in keys)


def _rows(n: int, batch: int) -> list[tuple]:
    """The row each of ``n`` keys writes in batch ``batch``: a session (start, last, events) as
    the processor bench keeps, its times in milliseconds (41-bit ints), different for every key
    and every batch, so that no encoding, changelog or compression meets one value over and over."""
    start = 1_700_000_000_000
    return [(start + 1_000 * i, start + 1_000 * i + 60_000 * batch + i % 997, batch + i % 13) for i in range(n)]


class _Processor:
    """The processor handle and its state variables over one store."""

    def __init__(self, store):
        from antkv.spark.processor.handle import ProcessorHandle
        from antkv.spark.store.keygroups import key_group_range

        self.handle = h = ProcessorHandle(store, key_group_range(KEY_GROUPS, 1, 0), "EventTime", 0)
        self.value = h.getValueState("session", SCHEMA)
        self.list = h.getListState("events", SCHEMA)
        self.map = h.getMapState("by_day", "day long", SCHEMA)
        h.phase = "INITIALIZED"


class _Views:
    """The pipeline's keyed views over one store."""

    def __init__(self, store):
        from antkv.spark.state.views import KeyedState
        from antkv.spark.store.keygroups import key_group_range

        self.keyed = k = KeyedState(store, key_group_range(KEY_GROUPS, 1, 0))
        self.value = k.value_state("session", 1)
        self.list = k.list_state("events", 2)
        self.map = k.map_state("by_day", 3)


def _populate(loc: str, options, keys) -> str:
    """Version 1 (its manifest's name): every key's value, list, map entry and timer."""
    from antkv.spark import open_store

    store = open_store(loc, "bench", 0, 0, manifest=None, options=options)
    p = _Processor(store)
    v = _Views(store)
    for (kg, key), row in zip(keys, _rows(len(keys), 0)):
        p.handle.set_current_key(kg, key)
        p.value.update(row)
        p.list.appendValue(row)
        p.map.updateValue((7,), row)
        p.handle.registerTimer(1_000)
        v.keyed.set_current_key(kg, key)
        v.value.update(row)
        v.list.appendValue(row)
        v.map.updateValue((7,), row)
    return store.commit().manifest


def _operations():
    """name -> (what it runs over: "processor", "views" or "dict", the per-key call, given the
    state and the key's row for the batch)."""
    return {
        "set_key": ("processor", lambda s, row: None),
        "view_set_key": ("views", lambda s, row: None),
        "processor_value_get": ("processor", lambda s, row: s.value.get()),
        "processor_value_update": ("processor", lambda s, row: s.value.update(row)),
        "processor_list_append": ("processor", lambda s, row: s.list.appendValue(row)),
        "processor_map_put": ("processor", lambda s, row: s.map.updateValue((7,), row)),
        "processor_timer_register": ("processor", lambda s, row: s.handle.registerTimer(2_000)),
        "processor_timer_delete": ("processor", lambda s, row: s.handle.deleteTimer(2_000)),
        "view_value_get": ("views", lambda s, row: s.value.get()),
        "view_value_update": ("views", lambda s, row: s.value.update(row)),
        "view_list_append": ("views", lambda s, row: s.list.appendValue(row)),
        "view_map_put": ("views", lambda s, row: s.map.updateValue((7,), row)),
        "floor_set_key": ("floor", lambda s, row: None),
        "floor_value_update": ("floor", lambda s, row: s.value.update(row)),
        "floor_list_append": ("floor", lambda s, row: s.list.appendValue(row)),
        "floor_map_put": ("floor", lambda s, row: s.map.updateValue((7,), row)),
        "dict_value_get": ("dict", lambda s, row: s.values.get(s.key)),
        "dict_value_update": ("dict", lambda s, row: s.values.__setitem__(s.key, row)),
        "dict_list_append": ("dict", lambda s, row: s.lists[s.key].append(row)),
        "dict_map_put": ("dict", lambda s, row: s.maps[s.key].__setitem__((7,), row)),
        "dict_timer_register": ("dict", lambda s, row: s.timers.add((s.key, 2_000))),
        "dict_timer_delete": ("dict", lambda s, row: s.timers.discard((s.key, 2_000))),
    }


class _Dicts:
    """State in plain dicts, keyed by the grouping key: no persistence, no encoding."""

    def __init__(self, keys):
        rows = _rows(len(keys), 0)
        self.values = {k: row for (_, k), row in zip(keys, rows)}
        self.lists = {k: [row] for (_, k), row in zip(keys, rows)}
        self.maps = {k: {(7,): row} for (_, k), row in zip(keys, rows)}
        self.timers = {(k, t) for _, k in keys for t in (1_000, 2_000)}
        self.key = None

    def set_current_key(self, kg, key):
        self.key = key


class _Stream:
    """The committed versions of the bench's store: each timed batch opens the newest (warm:
    the previous batch's working copy and row cache, as a steady stream meets them) and commits."""

    def __init__(self, loc: str, options, keys, floor_loc: str):
        self.loc, self.options, self.keys = loc, options, keys
        self.manifest = _populate(loc, options, keys)
        self.version = 1
        self.floor_loc = floor_loc
        self._floor = None  # the views' write floor, made from the first warm store (_write_floor)
        from antkv.spark.store.keygroups import key_group_prefix

        self.touched = {}  # key group prefix -> grouping keys of the batch there
        for kg, _ in keys:
            prefix = key_group_prefix(kg)
            self.touched[prefix] = self.touched.get(prefix, 0) + 1

    def time(self, over: str, call) -> tuple[float, float]:
        """Seconds per key of ``call`` over every key in one batch, and of the batch's commit;
        the keys write the rows of the newest version's batch (:func:`_rows`)."""
        from antkv.spark import open_store

        keys = self.keys
        if over == "dict":
            state = _Dicts(keys)
            set_key = state.set_current_key
        elif over == "floor":
            state = self._write_floor()
            set_key = state.set_current_key
        else:
            store = open_store(self.loc, "bench", 0, self.version, manifest=self.manifest, options=self.options)
            store.warm_touched(self.touched)  # as the runners do: dense key groups read whole, once
            state = _Processor(store) if over == "processor" else _Views(store)
            set_key = state.handle.set_current_key if over == "processor" else state.keyed.set_current_key
        rows = _rows(len(keys), self.version)
        start = time.process_time()
        for (kg, key), row in zip(keys, rows):
            set_key(kg, key)
            call(state, row)
        elapsed = time.process_time() - start
        if over == "dict":
            return elapsed / len(keys), 0.0
        if over == "floor":
            start = time.process_time()
            state.commit()
            return elapsed / len(keys), (time.process_time() - start) / len(keys)
        start = time.process_time()
        self.manifest = store.commit().manifest
        committed = time.process_time() - start
        self.version += 1
        return elapsed / len(keys), committed / len(keys)

    def _write_floor(self):
        """The views' write floor, made the first time from copies of the row cache and the
        deferred writes of the newest version's working copy, warm as the views' batches find
        it (that store then commits no change: the next version holds the same state)."""
        if self._floor is None:
            from antkv.spark import open_store
            from antkv.spark.store.location import as_location
            from bench.state_ops_floor import WriteFloor

            store = open_store(self.loc, "bench", 0, self.version, manifest=self.manifest, options=self.options)
            store.warm_touched(self.touched)
            rows, copy = store._rows, store._copy  # (read, not changed: the floor takes copies)
            manifest_bytes = as_location(self.loc).size(self.manifest)
            self._floor = WriteFloor(rows.rows, rows.decoded, copy.deferred, as_location(self.floor_loc),
                                     manifest_bytes)
            self.manifest = store.commit().manifest
            self.version += 1
        return self._floor


def run(n: int, rounds: int, names) -> dict:
    """``{operation: (us per key, us of commit per key)}``, the best of ``rounds`` each."""
    from antkv.spark import StoreOptions, release_idle_stores

    work = tempfile.mkdtemp(prefix="antkv-state-ops-")
    try:
        options = StoreOptions(cache_dir=os.path.join(work, "cache"), park_copies=False)
        stream = _Stream(f"file://{work}/loc", options, _keys(n), f"file://{work}/floor")
        ops = _operations()
        best = {name: (float("inf"), float("inf")) for name in names}
        for _ in range(rounds):
            for name in names:
                over, call = ops[name]
                op, commit = stream.time(over, call)
                best[name] = (min(best[name][0], op), min(best[name][1], commit))
        release_idle_stores()
        return {name: (op * 1e6, commit * 1e6) for name, (op, commit) in best.items()}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def report(keys: int, rounds: int, result: dict) -> str:
    """The table of ``result`` (:func:`run`), and the views' writes' share of their floor."""
    set_key = result.get("set_key", (0.0, 0.0))[0]
    set_keys = {"floor": result.get("floor_set_key", (0.0, 0.0))[0], "view": result.get("view_set_key", (set_key,))[0],
                "": set_key}

    def alone(name: str) -> float:
        us = result[name][0]
        if name.startswith("dict_") or name.endswith("set_key"):
            return us
        return us - set_keys[name.split("_")[0] if name.startswith(("floor_", "view_")) else ""]

    lines = [f"{keys:,} keys, best of {rounds}; us per key: the call with setting the key, the call alone, "
             f"the batch's commit", f"{'operation':<28}{'us/key':>10}{'op alone':>10}{'commit':>10}"]
    lines += [f"{name:<28}{us:>10.2f}{alone(name):>10.2f}{commit:>10.2f}" for name, (us, commit) in result.items()]
    def cost(name: str) -> float:  # the call alone and the commit
        return alone(name) + result[name][1]

    shares = [f"{op.replace('_', ' ')} {100 * cost('floor_' + op) / cost('view_' + op):.0f}%"
              for op in ("value_update", "list_append", "map_put")
              if {"view_" + op, "floor_" + op, "set_key", "floor_set_key"} <= result.keys()]
    if shares:
        lines.append("the views' writes at this share of their floor's rate (call and commit, setting the key "
                     "apart): " + ", ".join(shares))
    return "\n".join(lines)


def main(argv=None) -> None:
    ops = list(_operations())
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--keys", type=int, default=20_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--ops", nargs="+", default=ops, choices=ops)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    result = run(args.keys, args.rounds, args.ops)
    print(report(args.keys, args.rounds, result))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"keys": args.keys, "rounds": args.rounds, "us_per_key": result}, f, indent=1)


if __name__ == "__main__":
    main()
