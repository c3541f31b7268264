"""Log framing (WAL and MANIFEST records) and the write batch a WAL record holds."""
