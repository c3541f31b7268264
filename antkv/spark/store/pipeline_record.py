"""The operator's pipeline record: the key columns and ``K`` its state was written with.

``<root>/<operator>/pipeline.json`` is written once, by the first batch of the operator, in the
checksummed envelope of every other object of the location (``objects.py``, kind ``P``)::

    {"format": 1, "key_groups": K, "key": [<key column>, ...]}

Every later batch checks it *before anything is written*: the key columns must be in the
batch's DataFrame (:class:`antkv.InvalidArgumentError` naming the missing ones), and they and
``K`` must be the recorded ones (the state of a key lives under its encoded key columns and
its key group: another key, or another ``K``, would read none of it).  A damaged or
truncated record is a :class:`antkv.CorruptionError` naming it.
"""

from __future__ import annotations

import json

from antkv import CorruptionError, InvalidArgumentError

from antkv.spark.store.keygroups import check_key_group_count
from antkv.spark.store.location import PIPELINE_OBJECT, Location
from antkv.spark.store.objects import FORMAT, KIND_PIPELINE, seal, unseal


def pipeline_record_name(operator: str) -> str:
    return f"{operator}/{PIPELINE_OBJECT}"


def check_key_columns(columns, key) -> None:
    """Refuse a batch whose DataFrame lacks some of the key columns, naming them."""
    present = set(columns)
    missing = [k for k in key if k not in present]
    if missing:
        raise InvalidArgumentError(f"the key columns {missing} are not in the DataFrame "
                                   f"(its columns: {sorted(present)})")


def read_pipeline_record(location: Location, operator: str) -> dict | None:
    """The operator's record (None before its first batch); CorruptionError if damaged."""
    name = pipeline_record_name(operator)
    if not location.exists(name):
        return None
    path = location.path(name)
    try:
        doc = json.loads(unseal(KIND_PIPELINE, location.read(name), path))
    except (UnicodeDecodeError, ValueError) as e:
        raise CorruptionError(f"pipeline record is not valid JSON: {e}", path) from e
    if (not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(doc.get("key_groups"), int)
            or not isinstance(doc.get("key"), list) or not all(isinstance(k, str) for k in doc["key"])):
        raise CorruptionError("pipeline record lacks its key columns or key groups", path)
    return doc


def ensure_pipeline_record(location: Location, operator: str, key: list, key_groups: int) -> None:
    """Write the operator's record on its first batch; on every batch, refuse another ``K``
    (:class:`antkv.spark.store.keygroups.KeyGroupError`) or other key columns."""
    doc = read_pipeline_record(location, operator)
    if doc is None:
        record = {"format": FORMAT, "key_groups": key_groups, "key": list(key)}
        location.create_exclusive(pipeline_record_name(operator), seal(KIND_PIPELINE, json.dumps(record).encode()))
        doc = read_pipeline_record(location, operator)  # a concurrent first batch may have won
    check_key_group_count(doc["key_groups"], key_groups)
    if doc["key"] != list(key):
        raise InvalidArgumentError(f"operator {operator!r} keeps state by the key columns {doc['key']}; "
                                   f"this run groups by {list(key)}: use another operator name for another key")
