"""Smoke test of ``bench/bench_sst.py``: a tiny run end to end prints every figure (never
checks how fast anything is)."""

from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_bench_sst_micro_and_table_phases_run():
    cmd = [sys.executable, "bench/bench_sst.py", "--num", "3000", "--gets", "500", "--micro", "--repeat", "1",
           "--memory"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout
    for label in ("build add_sorted", "build add", "encode_block", "decode_block", "bloom build", "bloom probe",
                  "bloom FPR", "get hit (cache)", "scan bwd (no cache)"):
        assert label in out, (label, out)
