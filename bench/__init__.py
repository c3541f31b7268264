"""db_bench-style benchmarks of antkv against RocksDB and the other Python-reachable engines.

``python -m bench --help``; the method and the latest results are in ``docs/performance.md``.
Modules: ``engines``/``peers`` (one adapter interface), ``workloads``/``ycsb`` (what runs),
``runner`` (one measurement in a fresh process), ``measure`` (clocks, I/O, RSS, disk),
``report``/``plots`` (the Markdown table and PNGs), ``install`` (optional peers).
"""
