"""The child process: one workload, one engine, one value size, one run.

``python -m bench.runner '<json spec>'`` prints one line ``BENCH-RESULT <json>`` (and, with a
profiler, the profile before it).  Running each measurement in a fresh process is what makes
``/proc/self/io`` and the peak RSS belong to that workload alone (see :mod:`bench.measure`).

Order inside the child, so the counters cover exactly what they claim:

1. copy the base database if the workload changes it, open it, import whatever the engine
   loads lazily (``Engine.warm``), run the workload's setup (e.g. the range tombstones of
   ``readrandom_rt100``);
2. snapshot ``/proc/self/io``; start the clock;
3. run the workload; for write workloads ``settle()`` (flush and the compactions the writes
   triggered); stop the clock; check the answers (``workloads.CHECKS``, untimed);
4. ``close()``; read ``/proc/self/io`` again (so bytes written at close count) and the bytes on
   disk; for ``overwrite`` also reopen, ``compact()`` (compaction + GC) and measure the space
   again ("space amplification after GC settles").

A fill also writes ``bench-meta.json`` beside the database (how many keys it loaded), which the
read and mutate workloads of the same (engine, value size, run) read.
"""

from __future__ import annotations

import io
import json
import os
import pstats
import shutil
import sys
import time
import traceback

from . import measure
from .engines import ENGINES, AntKV, EngineUnavailable
from .workloads import CHECKS, KEY_SIZE, WORKLOADS, WRITE_WORKLOADS, Context, key

MARKER = "BENCH-RESULT "
META = "bench-meta.json"


def _meta_path(db_path: str) -> str:
    return db_path.rstrip("/") + "." + META


def run_one(spec: dict) -> dict:
    name, wl_name, vs = spec["engine"], spec["workload"], spec["value_size"]
    setup, workload, kind = WORKLOADS[wl_name]
    cls = ENGINES[name]
    AntKV.extra_options = dict(spec.get("antkv_options") or {})
    path = spec["path"]
    num = spec["num"]
    loaded = num
    if kind != "fill":
        if not os.path.exists(_meta_path(spec["base"])):
            raise RuntimeError("no base database: this engine's fillrandom failed")
        with open(_meta_path(spec["base"])) as f:
            loaded = json.load(f)["loaded"]
        if kind == "mutate":
            shutil.rmtree(path, ignore_errors=True)
            shutil.copytree(spec["base"], path, symlinks=True)
            _fsync_tree(path)  # clean pages: an engine rewriting them must be charged
        else:
            path = spec["base"]
    elif os.path.exists(path):
        shutil.rmtree(path)
    max_seconds = spec.get("max_seconds") or 0
    ctx = Context(value_size=vs, num=num, loaded=loaded, reads=spec.get("reads") or loaded,
                  seed=spec.get("seed", 301), seek_nexts=spec.get("seek_nexts", 10),
                  ycsb_ops=spec.get("ycsb_ops") or 0)

    eng = cls(path)
    eng.warm()
    if setup is not None:
        setup(eng, ctx)
    rss_before = measure.peak_rss_mib()
    profiler = _start_profiler(spec.get("profile"))
    io0 = measure.read_proc_io()
    t0 = time.perf_counter()
    if max_seconds:
        ctx.deadline = t0 + max_seconds
    out = workload(eng, ctx)
    t1 = time.perf_counter()
    writes = wl_name in WRITE_WORKLOADS or out.bytes_written > 0
    if writes:
        eng.settle()
    t2 = time.perf_counter()
    profile_text = _stop_profiler(profiler, spec.get("profile"))
    check = CHECKS.get(wl_name)
    wrong = check(eng, ctx, out) if check is not None else None
    engine_stats = _jsonable(eng.engine_stats())
    eng.close()
    io1 = measure.read_proc_io()
    io = measure.io_delta(io0, io1)
    disk = measure.dir_bytes(path)
    live_keys = loaded if out.live_keys is None else out.live_keys
    live_bytes = live_keys * (KEY_SIZE + vs)
    secs = t2 - t0
    moved = out.bytes_written if wl_name in WRITE_WORKLOADS else out.bytes_read
    res = {
        "ok": True,
        "ops": out.ops,
        "secs": secs,
        "secs_ops": t1 - t0,
        "secs_settle": t2 - t1,
        "ops_s": out.ops / secs if secs > 0 else 0.0,
        "mib_s": moved / measure.MiB / secs if secs > 0 else 0.0,
        "user_bytes_written": out.bytes_written,
        "user_bytes_read": out.bytes_read,
        "disk_write_bytes": io.get("write_bytes", 0),
        "disk_cancelled_bytes": io.get("cancelled_write_bytes", 0),
        "wchar": io.get("wchar", 0),
        # Deletes hand the engine only keys: their disk bytes are reported, not a ratio.
        "write_amp": (io.get("write_bytes", 0) / out.bytes_written)
        if out.bytes_written and wl_name not in ("deleterange", "deleteseq") else None,
        "disk_bytes": disk,
        "live_keys": live_keys,
        "space_amp": disk / live_bytes if live_bytes else None,
        "rss_mib": measure.peak_rss_mib(),
        "rss_before_open_mib": rss_before,
        "truncated": out.truncated,
        "wrong": wrong,  # None, or how the engine's answers were wrong (see workloads.CHECKS)
        "loaded": loaded,
        "extra": out.extra,
        "engine_stats": engine_stats,
        **measure.latency_summary(out.latencies),
    }
    if wl_name == "fillrandom" or wl_name == "fillseq":
        with open(_meta_path(path), "w") as f:
            json.dump({"loaded": out.ops, "num": num, "engine": name}, f)
    if wl_name == "overwrite" and spec.get("gc", True):
        _measure_after_gc(cls, path, ctx, live_bytes, res)
    if kind == "mutate" and not spec.get("keep"):
        shutil.rmtree(path, ignore_errors=True)
    if profile_text:
        res["profile"] = profile_text
    return res


def _measure_after_gc(cls, path: str, ctx: Context, live_bytes: int, res: dict) -> None:
    """Reopen, compact + GC, check a sample of keys survived, measure the space again."""
    eng = cls(path)
    try:
        t = time.perf_counter()
        eng.compact()
        res["secs_gc"] = time.perf_counter() - t
        sample = ctx.loaded_keys()[:: max(1, ctx.loaded // 50)]
        lost = sum(1 for i in sample if eng.get(key(i)) is None)
        if lost:
            res["wrong"] = f"compact()/GC lost {lost} of {len(sample)} sampled keys"
    except Exception as e:  # a peer's GC that breaks its own data is a finding, not a crash
        res["wrong"] = f"compact()/GC, then get: {type(e).__name__}: {e}"
    finally:
        eng.close()
    res["disk_bytes_gc"] = measure.dir_bytes(path)
    res["space_amp_gc"] = res["disk_bytes_gc"] / live_bytes if live_bytes else None


def _fsync_tree(path: str) -> None:
    for root, _dirs, files in os.walk(path):
        for name in files:
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


def _jsonable(d: dict) -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, (int, float, str, bool)) or v is None:
            out[str(k)] = v
        elif isinstance(v, dict):
            out[str(k)] = _jsonable(v)
        elif isinstance(v, (list, tuple)):
            out[str(k)] = [x if isinstance(x, (int, float, str, bool)) else repr(x) for x in v]
        else:
            out[str(k)] = repr(v)
    return out


def _start_profiler(kind: str | None):
    if not kind:
        return None
    if kind == "pyinstrument":
        from pyinstrument import Profiler

        p = Profiler(interval=0.0005)
        p.start()
        return p
    import cProfile

    p = cProfile.Profile()
    p.enable()
    return p


def _stop_profiler(p, kind: str | None) -> str:
    if p is None:
        return ""
    if kind == "pyinstrument":
        p.stop()
        return p.output_text(unicode=False, color=False, show_all=False)
    p.disable()
    buf = io.StringIO()
    st = pstats.Stats(p, stream=buf)
    buf.write("=== top 25 by cumulative time ===\n")
    st.sort_stats("cumulative").print_stats(25)
    buf.write("=== top 25 by internal time ===\n")
    st.sort_stats("tottime").print_stats(25)
    return buf.getvalue()


def main(argv: list[str]) -> int:
    spec = json.loads(argv[1])
    try:
        res = run_one(spec)
    except EngineUnavailable as e:
        res = {"ok": False, "error": str(e), "unavailable": True}
    except NotImplementedError as e:
        res = {"ok": False, "error": f"not supported: {e}", "unsupported": True}
    except Exception as e:
        res = {"ok": False, "error": f"{type(e).__name__}: {e}",
               "traceback": traceback.format_exc(limit=8)}
    sys.stdout.write(MARKER + json.dumps(res) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
