"""Replay files: a (shrunk) operation stream and how to run it, as JSON.

::

    {
      "seed": 17, "option_set": "blob-100", "oracle": "blob", "subject": "antkv",
      "note": "op #12 get: rocksdb answered ..., antkv answered ...",
      "ops": [["put", "x:6b31", [5, 8]], ["get", "x:6b31"], ...]
    }

Operation fields are encoded recursively: ``bytes`` -> ``"x:" + hex``, ``str`` ->
``"s:" + text``, tuples -> JSON lists; ints, booleans and null stay as they are.  Decoding
turns every list back into a tuple, so a decoded stream equals the generated one.
"""

from __future__ import annotations

import json


def encode(x):
    if isinstance(x, bytes):
        return "x:" + x.hex()
    if isinstance(x, str):
        return "s:" + x
    if isinstance(x, (tuple, list)):
        return [encode(y) for y in x]
    if x is None or isinstance(x, (bool, int)):
        return x
    raise TypeError(f"cannot encode {type(x).__name__} in a replay file")


def decode(x):
    if isinstance(x, str):
        if x.startswith("x:"):
            return bytes.fromhex(x[2:])
        if x.startswith("s:"):
            return x[2:]
        raise ValueError(f"bad replay field {x!r}")
    if isinstance(x, list):
        return tuple(decode(y) for y in x)
    return x


def write(path: str, ops: list[tuple], **meta) -> None:
    doc = dict(meta)
    doc["ops"] = [encode(op) for op in ops]
    with open(path, "w") as f:
        json.dump(doc, f, indent=None, separators=(",", ":"))
        f.write("\n")


def read(path: str) -> tuple[list[tuple], dict]:
    with open(path) as f:
        doc = json.load(f)
    ops = [decode(op) for op in doc.pop("ops")]
    return ops, doc
