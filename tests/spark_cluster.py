"""A real Spark standalone cluster on 127.0.0.1 for the tests: one master and two workers.

They are started with ``bin/spark-class org.apache.spark.deploy.master.Master`` and
``...deploy.worker.Worker`` from the installed pyspark (its pip package ships no ``sbin``
scripts), each in a process group of its own, each worker with one core, a small memory, and
its own work, local and antkv cache directories (``SPARK_WORKER_DIR``, ``SPARK_LOCAL_DIRS``,
``ANTKV_SPARK_CACHE_DIR``: the executor a worker starts inherits them), so that two executors
share nothing but the checkpoint location, as on two machines.  The workers' environment has no
``PYTHONPATH`` or ``PYSPARK_PYTHON``: which Python an executor runs and where it finds antkv
are the application's choice (``spark.pyspark.python``, ``spark.executorEnv.PYTHONPATH``, or
antkv shipped with the job).

:func:`start_cluster` returns once both workers registered with the master (read from the
master's JSON status page); :meth:`StandaloneCluster.stop` ends every process it started
(SIGTERM to each process group, SIGKILL after a grace period) and is what the ``spark_cluster``
fixture of ``tests/conftest.py`` calls, also when the start fails half-way.

A process holds one SparkContext, and the test session already holds the local one; so a
driver for the cluster runs in a subprocess: ``pytest`` again, on chosen test files, with
``ANTKV_SPARK_MASTER`` set to the master's URL (the ``spark`` fixture then connects there).
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field

import pyspark

SPARK_HOME = os.path.dirname(pyspark.__file__)
# Every JVM of the tests (the drivers, the executors, the master and workers): compiled by the
# client compiler only and one garbage-collector thread.  The tests' jobs are short, and on a
# machine of two cores the server compiler's and the parallel collector's threads took CPU the
# jobs needed: a session start and a dozen small jobs used 29-30 s of JVM CPU, 15-16 s with these.
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
WORKERS = 2
WORKER_MEMORY = "1g"
START_TIMEOUT_S = 120


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _end_with_parent() -> None:
    """In the child before exec: SIGTERM it when the test process ends, even killed (a session
    that never reaches the fixture's teardown leaves no cluster behind)."""
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


@dataclass
class StandaloneCluster:
    root: str
    master_url: str = ""
    status_url: str = ""
    processes: list = field(default_factory=list)  # (name, Popen), the master first
    worker_dirs: list = field(default_factory=list)

    def _spawn(self, name: str, args: list[str], env: dict) -> None:
        log = open(os.path.join(self.root, f"{name}.log"), "wb")
        proc = subprocess.Popen([os.path.join(SPARK_HOME, "bin", "spark-class"), *args], env=env,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                cwd=self.root, preexec_fn=_end_with_parent)
        log.close()
        self.processes.append((name, proc))

    def alive_workers(self) -> int:
        try:
            with urllib.request.urlopen(self.status_url, timeout=5) as r:
                status = json.load(r)
        except OSError:
            return 0
        return sum(w.get("state") == "ALIVE" for w in status.get("workers", []))

    def log_tail(self, chars: int = 3000) -> str:
        out = []
        for name, _ in self.processes:
            with open(os.path.join(self.root, f"{name}.log"), "rb") as f:
                out.append(f"--- {name}.log\n" + f.read().decode("utf-8", "replace")[-chars:])
        return "\n".join(out)

    def stop(self) -> None:
        """End every process this cluster started (the workers first: they end their
        executors), waiting for each; SIGKILL what does not end within 20 s."""
        for _name, proc in reversed(self.processes):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        for _name, proc in reversed(self.processes):
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        for _name, proc in self.processes:  # the executors a worker started are in its group
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def start_cluster(root: str) -> StandaloneCluster:
    """Start a master and :data:`WORKERS` workers under ``root``; see the module docstring.
    On any failure, stop what was started and raise with the processes' logs."""
    os.makedirs(root, exist_ok=True)
    cluster = StandaloneCluster(root)
    port, ui = free_port(), free_port()
    cluster.master_url, cluster.status_url = f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{ui}/json/"
    base = dict(os.environ, SPARK_HOME=SPARK_HOME, SPARK_LOCAL_IP="127.0.0.1", SPARK_NO_DAEMONIZE="1",
                SPARK_DAEMON_JAVA_OPTS=JVM_OPTIONS)
    for name in ("PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET", "PYTHONPATH", "PYSPARK_PYTHON"):
        base.pop(name, None)  # an executor inherits its worker's environment: antkv only as the app says
    try:
        cluster._spawn("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                  "--port", str(port), "--webui-port", str(ui)], base)
        for w in range(WORKERS):
            d = os.path.join(root, f"worker{w}")
            dirs = {name: os.path.join(d, name) for name in ("work", "local", "antkv-cache")}
            for path in dirs.values():
                os.makedirs(path, exist_ok=True)
            cluster.worker_dirs.append(d)
            env = dict(base, SPARK_WORKER_DIR=dirs["work"], SPARK_LOCAL_DIRS=dirs["local"],
                       ANTKV_SPARK_CACHE_DIR=dirs["antkv-cache"])
            cluster._spawn(f"worker{w}", ["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                                          "--cores", "1", "--memory", WORKER_MEMORY, "--work-dir", dirs["work"],
                                          "--webui-port", str(free_port()), cluster.master_url], env)
        deadline = time.monotonic() + START_TIMEOUT_S
        while cluster.alive_workers() < WORKERS:
            dead = [name for name, proc in cluster.processes if proc.poll() is not None]
            if dead or time.monotonic() > deadline:
                raise RuntimeError(f"the Spark cluster did not come up ({'exited: ' + ', '.join(dead) if dead else 'timeout'})"
                                   f"\n{cluster.log_tail()}")
            time.sleep(0.5)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def driver_env(cluster: StandaloneCluster) -> dict:
    """The environment of a subprocess driving ``cluster`` (see the module docstring)."""
    return dict(os.environ, ANTKV_SPARK_MASTER=cluster.master_url, ANTKV_SPARK_CLUSTER_ROOT=cluster.root,
                PYSPARK_PYTHON=sys.executable)
