"""``docs/spark-reference.md`` covers every public name of ``antkv.spark``.

Derived from the code, so a new class, parameter, field, metric, option or column that the page
does not mention fails here: every name of ``antkv.spark.__all__`` and of the migration module,
every parameter of their signatures, every public method of the classes users call, every field
of the result, metric and option records, and every option and column of the ``antkv-state``
data source must appear in code (between backticks) on the page.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import re

import antkv.spark as spark_api
from antkv.spark.tools import migrate, state_source

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = os.path.join(ROOT, "docs", "spark-reference.md")
MIGRATION = ["migrate_apply_in_pandas_with_state", "migrate_transform_with_state", "copy_query_progress", "MigrationResult"]
WITH_METHODS = ["StatefulPipeline", "TransformWithState", "StateStore", "CommitCoordinator", "PartitionState"]


def code_words(text: str) -> set[str]:
    """Every identifier written inside backticks (inline or fenced) on the page."""
    fenced = re.findall(r"^```.*?^```", text, re.S | re.M)
    prose = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    spans = fenced + [s for paragraph in prose.split("\n\n") for s in re.findall(r"`([^`]+)`", paragraph)]
    return {w for span in spans for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", span)}


def _public(name: str):
    return getattr(migrate, name) if name in MIGRATION else getattr(spark_api, name)


def required() -> dict[str, set[str]]:
    """What the page must name, by where it comes from."""
    need: dict[str, set[str]] = {}
    for name in list(spark_api.__all__) + MIGRATION:
        obj = _public(name)
        words = need.setdefault(name, {name})
        if dataclasses.is_dataclass(obj):
            words |= {f.name for f in dataclasses.fields(obj)}
        elif callable(obj) and not (inspect.isclass(obj) and issubclass(obj, BaseException)):
            try:
                params = inspect.signature(obj).parameters
            except (TypeError, ValueError):
                params = {}
            words |= {p for p in params if p not in ("self", "args", "kwargs", "options")}
        if name in WITH_METHODS:
            words |= {m for m, v in vars(obj).items() if not m.startswith("_") and callable(v)}
    need["antkv-state options"] = set(state_source.OPTIONS.values())
    need["antkv-state columns"] = {column for column, _ in state_source._TYPES}
    return need


def missing(text: str) -> dict[str, list[str]]:
    have = code_words(text)
    out = {}
    for where, words in required().items():
        lacking = sorted(w for w in words if w not in have)
        if lacking:
            out[where] = lacking
    return out


def test_the_reference_names_every_public_name_parameter_field_option_and_column():
    assert missing(open(PAGE, encoding="utf-8").read()) == {}


def test_the_check_sees_a_metric_the_page_forgets():
    text = open(PAGE, encoding="utf-8").read()
    assert "cache_hit_ratio" in code_words(text)
    assert "cache_hit_ratio" in missing(text.replace("cache_hit_ratio", "hit ratio")).get("BatchMetrics", [])
