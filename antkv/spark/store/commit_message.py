"""The commit message a task attempt returns to the driver after :meth:`StateStore.commit`.

Small by design (it travels in a Spark result row): the partition, the manifest the attempt
wrote for the new version, the manifest it was built on, figures, and -- for a pipeline task --
the output files the attempt wrote.  The driver publishes a batch only when every partition's
message names the expected base (``commit_protocol.py``).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from antkv import InvalidArgumentError


@dataclass(frozen=True)
class CommitMessage:
    operator: str
    partition: int
    version: int  # the version this commit made
    manifest: str  # the object name of its manifest
    base: str | None  # the manifest of version - 1 it was built on (None: the empty version 0)
    num_keys: int  # exact number of keys in the new version
    bytes_uploaded: int  # bytes this commit wrote to the location
    objects_uploaded: int
    snapshot: bool  # True when this commit wrote a snapshot, False for a changelog (or nothing)
    outputs: tuple[str, ...] | None = None  # the output files this attempt wrote (a pipeline task), in order

    def __post_init__(self):
        if self.outputs is not None and not isinstance(self.outputs, tuple):
            object.__setattr__(self, "outputs", tuple(self.outputs))  # a JSON list, decoded

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"), sort_keys=True)

    @staticmethod
    def from_json(text: str) -> "CommitMessage":
        if not isinstance(text, (str, bytes)):
            raise TypeError(f"a commit message is a JSON str, not {type(text).__name__}")
        try:
            doc = json.loads(text)
            return CommitMessage(**doc)
        except (ValueError, TypeError) as e:
            raise InvalidArgumentError(f"not a commit message: {e}") from e
