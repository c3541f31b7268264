"""Memory accounting: the sharded LRU block cache and the write buffer manager."""
