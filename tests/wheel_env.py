"""The antkv wheel of this checkout, and Pythons that cannot import antkv, for the tests that
install or ship it (``tests/test_wheel.py``, ``tests/test_spark_cluster.py``).

:func:`build_wheel` builds the wheel from a copy of the checkout's sources (so that concurrent
builds never share a ``build/`` directory), with ``pip wheel --no-deps``: offline when the
running Python has the build backend (``make`` installs it: the ``dist`` extra), else in pip's
isolated build environment.

:func:`bare_venv` makes a virtualenv that has no antkv but sees the running Python's
dependencies (xxhash, zstandard, mmh3, pandas, pyarrow, pyspark...) through a ``.pth`` file
naming the running Python's ``site-packages``.  A directory a ``.pth`` file names is only put
on ``sys.path``: the ``.pth`` files inside it, such as the editable install's import hook,
are not run, so the checkout's antkv stays invisible (:func:`can_import_antkv` shows it).  Run
it with :func:`clean_env`: no ``PYTHONPATH`` pointing at a checkout."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import sysconfig
from importlib import metadata

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _has_backend() -> bool:
    try:
        return int(metadata.version("setuptools").split(".")[0]) >= 77
    except metadata.PackageNotFoundError:
        return False


def build_wheel(dest: str) -> str:
    """Build ``antkv-<version>-py3-none-any.whl`` of this checkout into ``dest``; its path."""
    src = os.path.join(dest, "src")
    shutil.copytree(os.path.join(ROOT, "antkv"), os.path.join(src, "antkv"),
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(os.path.join(ROOT, name), src)
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", dest, src]
    if _has_backend():
        cmd.insert(4, "--no-build-isolation")
    subprocess.run(cmd, check=True, capture_output=True, timeout=300, env=clean_env())
    (wheel,) = glob.glob(os.path.join(dest, "antkv-*-py3-none-any.whl"))
    return wheel


def clean_env(**extra) -> dict:
    """This process's environment without what would put a checkout's antkv on the path."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}
    env.update(extra)
    return env


def bare_venv(path: str) -> str:
    """A virtualenv at ``path`` without pip or antkv that sees this Python's dependencies; its
    ``bin/python``."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", path], check=True, env=clean_env(), timeout=120)
    python = os.path.join(path, "bin", "python")
    own = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         check=True, capture_output=True, text=True, env=clean_env()).stdout.strip()
    seen = dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))
    with open(os.path.join(own, "antkv_test_dependencies.pth"), "w") as f:
        f.write("".join(f"{p}\n" for p in seen))
    return python


def can_import_antkv(python: str) -> tuple[bool, str]:
    """Whether ``python`` (run in :func:`clean_env`, outside the checkout: ``python -c`` puts
    its working directory on the path) imports antkv, and what it said."""
    proc = subprocess.run([python, "-c", "import antkv; print(antkv.__version__, antkv.__file__)"],
                          capture_output=True, text=True, env=clean_env(), timeout=60,
                          cwd=os.path.dirname(os.path.dirname(python)))
    return proc.returncode == 0, (proc.stdout + proc.stderr).strip()
