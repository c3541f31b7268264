"""Read paths: super versions and read views, merging iterators, runs, the DB iterator, snapshots."""
