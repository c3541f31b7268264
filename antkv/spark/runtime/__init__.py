"""The Spark side of a stateful pipeline: routing rows to the partition that owns their key
group (:mod:`.routing`), running one task per partition and publishing the batch
(:mod:`.pipeline`), sinks (:mod:`.sinks`), and the task's garbage-collector settings
(:mod:`.collector`)."""
