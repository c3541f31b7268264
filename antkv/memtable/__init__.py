"""The memtable and range tombstones (and their fragmenter)."""
