"""The Spark side of a stateful pipeline: routing rows to the partition that owns their key
group (:mod:`.routing`), running one task per partition and publishing the batch
(:mod:`.pipeline`), the batch's output files, published with the state (:mod:`.output`), and
the task's garbage-collector settings (:mod:`.collector`)."""
