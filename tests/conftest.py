"""Shared test settings: invariant checks on, hypothesis deterministic and bounded."""

import os

from hypothesis import HealthCheck, settings

os.environ.setdefault("ANTKV_INVARIANTS", "1")

settings.register_profile(
    "antkv",
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    print_blob=True,
)
settings.load_profile("antkv")
