"""Keyed state as a function sees it: the encodings of keys and rows (:mod:`.codec`) and the
value, list and map state views over a partition's store (:mod:`.views`).  Uses pandas for a
partition's rows; never pyspark."""
