"""The database directory's own files besides tables, value logs, WALs and the MANIFEST.

* :mod:`~antkv.db.files.info_log` -- ``LOG``: what the engine did, for an operator (and the
  record of every file number it handed out);
* :mod:`~antkv.db.files.options_file` -- ``OPTIONS``: the options of the last open;
* :mod:`~antkv.db.files.stats_file` -- ``STATS``: the counters of the database's whole life;
* :mod:`~antkv.db.files.unaccounted` -- which files at open are provably debris, and ``lost/``
  for the others;
* :mod:`~antkv.db.files.wal_replay` -- what recovery keeps of the WALs (the recovery modes).
"""
