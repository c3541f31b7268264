"""Install the optional peer engines one by one, so one that fails does not stop the others.

They are deliberately NOT in the ``bench`` extra of ``pyproject.toml``: ``make test`` installs
``.[test,bench]``, and a peer without a wheel for this platform must not break it.  A failed
install is returned with pip's last error line, and the report lists it as unavailable.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys

# distribution -> module it provides
MODULES = {"rocksdict": "rocksdict", "plyvel": "plyvel", "lmdb": "lmdb", "pycask": "pycask",
           "tritcask": "tritcask", "pylsm": "pylsm", "matplotlib": "matplotlib"}


def ensure(distributions: list[str], timeout: float = 300.0) -> dict[str, str]:
    """pip-install each distribution whose module is not importable; returns
    ``{distribution: reason}`` for those that are still missing."""
    failed = {}
    for dist in dict.fromkeys(d for d in distributions if d):
        module = MODULES.get(dist, dist)
        if importlib.util.find_spec(module) is not None:
            continue
        print(f"bench: installing {dist} ...", file=sys.stderr, flush=True)
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                 dist], capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            failed[dist] = f"pip install {dist} timed out after {timeout:.0f}s"
            continue
        importlib.invalidate_caches()
        if proc.returncode != 0 or importlib.util.find_spec(module) is None:
            lines = [ln for ln in (proc.stderr + proc.stdout).splitlines()
                     if ln.strip() and "is ignored" not in ln]
            failed[dist] = f"pip install {dist} failed: {lines[-1] if lines else proc.returncode}"
    return failed
