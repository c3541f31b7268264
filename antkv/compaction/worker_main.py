"""The worker process: ``python -m antkv.compaction.worker_main PARENT_PID``.

It reads jobs from stdin and answers on stdout (the protocol, the lifetime rules and the
database's side are in :mod:`antkv.compaction.worker`), running each job exactly as the
database would in-process.  A module of its own so that running it does not load the
database's side of the protocol a second time.
"""

from __future__ import annotations

import gc
import os
import sys

from ..fs.os_file_system import OSFileSystem
from ..manifest.translated_table import open_table_reader
from .jobs import execute_compaction, execute_flush, memtable_from_payload
from .outputs import OutputEnv
from .worker import HAS_PDEATHSIG, error_message, recv_frame, send_frame


def _die_with_parent(parent_pid: int) -> None:
    """Ask Linux to SIGKILL this process when the thread that started it ends."""
    if HAS_PDEATHSIG:
        try:
            import ctypes
            import signal

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)


def worker_main(parent_pid: int) -> None:
    _die_with_parent(parent_pid)
    # A job allocates a few hundred thousand tuples and lists that die together at its end;
    # the collector's passes over them find nothing (jobs make no reference cycles worth
    # waiting for) and cost up to ~10% of a flush.  Collect once after each job instead.
    gc.disable()
    proto_in = sys.stdin.buffer
    proto_out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # stray prints must not corrupt the protocol
    sys.stdout = sys.stderr
    fs = OSFileSystem.instance()

    def new_file_number() -> int:
        try:
            send_frame(proto_out, ("number",))
            reply = recv_frame(proto_in)
        except (EOFError, OSError):
            os._exit(1)  # the database is gone: write nothing more
        return reply[1]

    while True:
        try:
            msg = recv_frame(proto_in)
        except (EOFError, OSError):
            return
        env = OutputEnv(fs, msg[1], msg[2], new_file_number, {})
        readers = []
        try:
            if msg[0] == "flush":
                result = execute_flush(memtable_from_payload(msg[3]), msg[4], env, msg[5], msg[6])
            else:

                def open_reader(f):
                    r = open_table_reader(fs, env.path, f, verify_checksums=env.table_options.verify_checksums)
                    readers.append(r)
                    return r

                result = execute_compaction(msg[3], env, open_reader)
            reply = ("done", result)
        except Exception as e:  # noqa: BLE001 - reported to the parent, which raises it
            reply = error_message(e)
        finally:
            for r in readers:
                r.close()
        try:
            send_frame(proto_out, reply)
        except OSError:
            return
        msg = result = reply = None
        gc.collect()  # after replying: the database need not wait for it


if __name__ == "__main__":
    worker_main(int(sys.argv[1]))
