"""The database: the :class:`DB` handle and the parts it is built from.

``antkv.open`` and ``antkv.DB`` are the public names; the modules here are the engine's
machinery around them (``docs/impl.md`` draws the map):

* :mod:`~antkv.db.database` -- ``DB`` and ``open``: the write API, maintenance, closing;
* :mod:`~antkv.db.state` -- ``DBState``: every field the parts share, grouped by the lock that
  guards it, and the few primitives all of them use;
* the parts, each a base class of ``DB`` that inherits the parts it calls (so calls go one way,
  down): :mod:`~antkv.db.obsolete_files`, :mod:`~antkv.db.background`,
  :mod:`~antkv.db.write_path`, :mod:`~antkv.db.value_log_gc`, :mod:`~antkv.db.checkpoint`,
  :mod:`~antkv.db.ingest`, :mod:`~antkv.db.resume`, :mod:`~antkv.db.stats`,
  :mod:`~antkv.db.read_api`, :mod:`~antkv.db.recovery`;
* below them, what they use: :mod:`~antkv.db.files` (the directory's own files: LOG, OPTIONS,
  STATS, ``lost/``, WAL replay), :mod:`~antkv.db.read_only`, :mod:`~antkv.db.write_limits` and
  :mod:`~antkv.db.sst_file_writer`.
"""

from .database import DB, open
from .state import DEFAULT_CACHE_CAPACITY, DEFAULT_CACHE_POLICY

__all__ = ["DB", "open", "DEFAULT_CACHE_CAPACITY", "DEFAULT_CACHE_POLICY"]
