"""Tools over Spark state: reading a version's state (:mod:`.state_reader`) and the streaming
demo (``python -m antkv.spark.tools.demo``)."""
