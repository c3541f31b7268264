"""Spark 4 ``StatefulProcessor`` classes run unchanged on antkv state: the runner
(:mod:`.transform`), the ``StatefulProcessorHandle`` (:mod:`.handle`), its state variables with
TTL (:mod:`.variables`) and timers (:mod:`.timers`)."""
