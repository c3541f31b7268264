"""The versioned state store and its commit protocol, free of pandas and pyspark.

A store is one versioned key-value store per ``(checkpoint location, operator, partition)``
(:mod:`.state_store`, configured by :mod:`.store_options`), opened by :mod:`.opening` from a
working copy on the executor (:mod:`.working_copy`, :mod:`.row_cache`, :mod:`.local_cache`,
:mod:`.memory`; kept between batches by :mod:`.idle_copies`) and committed to a checkpoint location
(:mod:`.location`) as write-once objects whose formats :mod:`.objects` defines; the driver
publishes each version with :mod:`.commit_protocol`.  :mod:`.keygroups` says which keys a
partition owns and :mod:`.rescale` opens a store for another number of partitions.  Nothing here
imports pandas or pyspark (``tests/test_layers.py`` checks), so a store can be used, tested and
inspected in any Python process.
"""
