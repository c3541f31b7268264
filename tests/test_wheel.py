"""The wheel, installed alone into a fresh virtualenv (``tests/wheel_env.py``): it holds every
module of the package, its version is ``antkv.__version__``, its ``antkv`` console script runs,
and a small database opens, writes and reads back from the installed copy."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile

import antkv

from wheel_env import ROOT, bare_venv, build_wheel, can_import_antkv, clean_env

SMALL_DB = """
import sys, antkv
path = sys.argv[1]
with antkv.open(path) as db:
    for i in range(1000):
        db.put(b"k%04d" % i, b"v" * (i % 300))
    db.delete(b"k0007")
    db.flush()
with antkv.open(path) as db:
    got = list(db.items(prefix=b"k000"))
    assert got == [(b"k%04d" % i, b"v" * i) for i in range(10) if i != 7], got
    assert db.get(b"k0999") == b"v" * (999 % 300)
print(antkv.__version__, antkv.__file__)
"""


def test_the_wheel_installs_alone_and_runs(tmp_path):
    wheel = build_wheel(str(tmp_path / "dist"))
    assert os.path.basename(wheel) == f"antkv-{antkv.__version__}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as z:
        shipped = {n for n in z.namelist() if n.startswith("antkv/")}
    modules = {os.path.relpath(os.path.join(d, f), ROOT).replace(os.sep, "/")
               for d, _, files in os.walk(os.path.join(ROOT, "antkv")) for f in files if f.endswith(".py")}
    assert modules and modules == shipped, (modules ^ shipped)

    venv = tmp_path / "venv"
    python = bare_venv(str(venv))
    imported, said = can_import_antkv(python)
    assert not imported and "No module named 'antkv'" in said, said  # nothing but the wheel brings it
    subprocess.run([sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps", "--no-index", wheel],
                   check=True, capture_output=True, env=clean_env(), timeout=300)

    version = subprocess.run([str(venv / "bin" / "antkv"), "--version"], capture_output=True, text=True,
                             env=clean_env(), timeout=60)
    assert version.returncode == 0 and version.stdout.startswith(f"antkv {antkv.__version__} (Python "), version
    run = subprocess.run([python, "-c", SMALL_DB, str(tmp_path / "db")], capture_output=True, text=True,
                         env=clean_env(), timeout=120, cwd=str(tmp_path))
    assert run.returncode == 0, run.stderr
    got_version, got_file = run.stdout.split()
    assert got_version == antkv.__version__
    assert got_file.startswith(str(venv)), got_file  # the installed copy, not the checkout's
