"""What a read-write open changed before its commit point, undone when the open refuses.

A read-write open (:mod:`antkv.db.recovery`) changes the directory in two phases.  Its
**commit point** is the MANIFEST roll that swaps ``CURRENT`` to a MANIFEST recording the
replayed WAL's tables and the fresh WAL and value-log file.  Before it, every change is
recorded here, and when the open refuses (raises) :meth:`OpenChanges.undo` puts the directory
back as the open found it:

=========================================  ==============================================
change before the commit point              undone by
=========================================  ==============================================
a file numbered with a number this open     removing it (flush outputs of the replayed WAL,
handed out                                  the new WAL, value-log file and MANIFEST)
``CURRENT``, ``CURRENT.tmp``, ``OPTIONS``,  writing the bytes it found back (or removing
``OPTIONS.tmp`` (:meth:`replaces`)           the file, if there was none)
a file moved to ``lost/`` (:meth:`moved`)   moving it back
a copy kept in ``lost/`` (:meth:`copied`)   removing the copy (and any file in ``lost/``
                                            that was not there: a copy cut short)
an unsealed value-log file cut back to its  appending the bytes cut off again
last whole record (:meth:`cut_back`)
``lost/`` itself, if the open created it    removing it once it is empty again
=========================================  ==============================================

After the commit point nothing refuses the open any more: what is left (deleting provable
debris, the originals of WALs copied to ``lost/``) is best effort, and what a failure there
leaves behind the next open finds and sorts again (:mod:`antkv.db.files.unaccounted`).

The undo itself is best effort too (a file system that refused one call may refuse the next):
each step that fails is logged and the others still run.  It deletes only files this open
created.
"""

from __future__ import annotations

import logging
import os

from ...base.filenames import lost_dir_name, parse_file_name
from ...errors import Error

log = logging.getLogger("antkv")

_COPY_CHUNK = 1 << 20


class OpenChanges:
    """The undo record of one read-write open of ``dbname`` (see the module docstring)."""

    def __init__(self, fs, dbname: str):
        self._fs = fs
        self._dbname = dbname
        self.numbers: set[int] = set()  # file numbers this open handed out
        self._replaced: dict[str, bytes | None] = {}  # path -> bytes found (None: no file)
        self._steps: list[tuple[str, tuple]] = []  # ("moved" | "copied" | "cut", args), in order
        self._lost_existed = fs.is_dir(lost_dir_name(dbname))
        self._lost_found = set(fs.listdir(lost_dir_name(dbname))) if self._lost_existed else set()
        self.committed = False

    # --- recording (each call before the change it announces; the undo of a change that
    #     then failed to happen finds nothing to undo) ---

    def handed_out(self, number: int) -> None:
        self.numbers.add(number)

    def replaces(self, *names: str) -> None:
        """The open is about to write these files of the directory (``CURRENT``, ``OPTIONS``
        and their ``.tmp``): remember what they hold now (the first time only)."""
        for name in names:
            path = os.path.join(self._dbname, name)
            if path in self._replaced:
                continue
            try:
                self._replaced[path] = self._fs.read_all(path) if self._fs.exists(path) else None
            except Error as e:  # an unreadable file (the open tolerates an unreadable OPTIONS): left alone
                log.info("%s: %s cannot be read (%s): not restored if the open refuses", self._dbname, name, e)

    def moved(self, source: str, target: str) -> None:
        self._steps.append(("moved", (source, target)))

    def copied(self, target: str) -> None:
        self._steps.append(("copied", (target,)))

    def cut_back(self, path: str, length: int) -> None:
        """``path`` is about to be truncated to ``length`` bytes: keep what is cut off."""
        f = self._fs.open_random(path)
        try:
            tail = f.read(length, f.size() - length)
        finally:
            f.close()
        self._steps.append(("cut", (path, length, tail)))

    # --- undoing ---

    def undo(self) -> None:
        """Put back what the open changed (it refused before its commit point)."""
        if self.committed:
            return
        fs, db = self._fs, self._dbname
        # CURRENT first (through CURRENT.tmp, as every swap), the .tmp files after it
        for path, data in sorted(self._replaced.items(), key=lambda item: item[0].endswith(".tmp")):
            self._try(f"restore {os.path.basename(path)}", self._restore, path, data)
        try:
            names = fs.listdir(db)
        except Error as e:
            log.warning("%s: undoing a refused open: listing the directory failed: %s", db, e)
            names = []
        for name in names:
            parsed = parse_file_name(name)
            if parsed is not None and parsed[1] in self.numbers:
                self._try(f"remove {name}", fs.remove, os.path.join(db, name))
        for kind, args in reversed(self._steps):
            if kind == "moved":
                self._try(f"move {args[1]} back", self._move_back, *args)
            elif kind == "copied":
                self._try(f"remove {args[0]}", self._remove_if_there, args[0])
            else:
                self._try(f"restore the tail of {args[0]}", self._append_back, *args)
        lost = lost_dir_name(db)
        if fs.is_dir(lost):
            self._try("clean lost/", self._clean_lost, lost)
        self._try("sync the directory", fs.sync_dir, db)

    def _restore(self, path: str, data: bytes | None) -> None:
        fs = self._fs
        if data is None:
            if fs.exists(path):
                fs.remove(path)
        elif not fs.exists(path) or fs.read_all(path) != data:
            if path.endswith(".tmp"):
                fs.write_all(path, data, sync=True)
            else:  # atomically: a crash meanwhile leaves the file whole, old or new
                fs.write_all(path + ".tmp", data, sync=True)
                fs.rename(path + ".tmp", path)

    def _append_back(self, path: str, length: int, tail: bytes) -> None:
        """If ``path`` was cut back to ``length`` bytes, rewrite it as those bytes followed by
        ``tail``: a copy made in ``lost/``, then renamed over it (the file system has no append
        to an existing file)."""
        fs = self._fs
        if not tail or fs.size(path) != length:
            return  # the truncation never happened
        tmp = os.path.join(lost_dir_name(self._dbname), os.path.basename(path) + ".restoring")
        if not fs.is_dir(os.path.dirname(tmp)):
            fs.mkdirs(os.path.dirname(tmp))
        src = fs.open_random(path)
        out = fs.create(tmp)
        try:
            size = src.size()
            for offset in range(0, size, _COPY_CHUNK):
                out.append(src.read(offset, min(_COPY_CHUNK, size - offset)))
            out.append(tail)
            out.sync()
        finally:
            out.close()
            src.close()
        fs.rename(tmp, path)

    def _move_back(self, source: str, target: str) -> None:
        if self._fs.exists(target) and not self._fs.exists(source):
            self._fs.rename(target, source)

    def _remove_if_there(self, path: str) -> None:
        if self._fs.exists(path):
            self._fs.remove(path)

    def _clean_lost(self, lost: str) -> None:
        """Remove what is in ``lost/`` that was not there (a copy the failure cut short), and
        ``lost/`` itself if the open created it."""
        fs = self._fs
        for name in fs.listdir(lost):
            if name not in self._lost_found and not fs.is_dir(os.path.join(lost, name)):
                self._try(f"remove lost/{name}", fs.remove, os.path.join(lost, name))
        if not self._lost_existed and not fs.listdir(lost):
            fs.rmdir(lost)

    def _try(self, what: str, fn, *args) -> None:
        try:
            fn(*args)
        except Error as e:
            log.warning("%s: undoing a refused open: %s failed: %s", self._dbname, what, e)
