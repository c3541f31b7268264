"""The differential fuzzer: the same seeded operation stream runs on antkv and on RocksDB.

Layout (one concept per module)::

    generator.py    seeded, lazily generated operation streams (a prefix of a longer stream
                    with the same seed is exactly the shorter stream)
    oracle.py       the RocksDB side through ``rocksdict`` (raw mode, plain or with blob
                    files) and the binding quirks it works around
    antkv_side.py   the antkv side: the same adapter interface over ``antkv.open``
    cursors.py      bounded cursors over a raw RocksDB iterator or a materialised list
    options_sets.py named extreme antkv option sets plus seeded random ones
    runner.py       runs one stream on two sides, compares every answer, reports the first
                    difference with a one-line reproducer
    shrink.py       delta debugging of a diverging stream down to a minimal one
    replay.py       the JSON replay-file format of a stream

Invariant: every answer either side gives (point reads, iterator positions, keys and values,
scans, snapshot reads, checkpoint contents, error categories) is compared; a difference is
never filtered out, only a binding quirk that is not a semantic difference is adapted to,
and each such adaptation is listed in ``docs/testing.md``.
"""
