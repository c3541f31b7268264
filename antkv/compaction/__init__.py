"""Flush and compaction: the picker, the compaction stream, table outputs, jobs and the worker
processes that run them."""
