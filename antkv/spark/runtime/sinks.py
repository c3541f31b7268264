"""Idempotent sinks for ``foreachBatch``: a replayed batch replaces its output, never adds to it.

Spark calls a ``foreachBatch`` function at least once per batch: after a driver failure it
reruns the batches it had not recorded as done, with the same batch ids.  A sink keyed by batch
id turns that into exactly-once output for readers:

    sink = ParquetBatchSink("/data/clicks-out")
    query = stream.writeStream.foreachBatch(pipeline.foreach_batch(sink)).start()
    sink.read()          # every batch's rows once, in batch order

Each batch is one Parquet file ``batch-<id, 20 digits>.parquet``, written to a temporary name
and renamed over the final one (atomic on a local file system), so a reader sees a batch's
rows wholly or not at all, and a rerun's file replaces the first run's.
"""

from __future__ import annotations

import os
import uuid

import antkv

_PREFIX, _SUFFIX = "batch-", ".parquet"


class ParquetBatchSink:
    """``sink(output, batch_id)`` writes a pandas DataFrame as the file of ``batch_id``."""

    def __init__(self, directory: str):
        if not isinstance(directory, (str, os.PathLike)):
            raise TypeError("directory must be a local path")
        self.directory = os.fspath(directory)
        os.makedirs(self.directory, exist_ok=True)

    def path(self, batch_id: int) -> str:
        return os.path.join(self.directory, f"{_PREFIX}{batch_id:020d}{_SUFFIX}")

    def __call__(self, output, batch_id: int) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        if isinstance(batch_id, bool) or not isinstance(batch_id, int) or batch_id < 0:
            raise antkv.InvalidArgumentError(f"batch_id must be an int >= 0, got {batch_id!r}")
        final = self.path(batch_id)
        tmp = f"{final}.tmp-{uuid.uuid4().hex[:8]}"
        try:
            pq.write_table(pa.Table.from_pandas(output, preserve_index=False), tmp)
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
            os.replace(tmp, final)
        except OSError as e:
            raise antkv.IOError(f"cannot write batch {batch_id} to {final}: {e}", e, final) from e
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    def batch_ids(self) -> list[int]:
        """The batch ids written, ascending."""
        ids = []
        for name in os.listdir(self.directory):
            if name.startswith(_PREFIX) and name.endswith(_SUFFIX) and name[len(_PREFIX):-len(_SUFFIX)].isdigit():
                ids.append(int(name[len(_PREFIX):-len(_SUFFIX)]))
        return sorted(ids)

    def read(self):
        """Every batch's rows once, in batch-id order, as one pandas DataFrame (with a
        ``batch_id`` column); None when no batch was written."""
        import pandas as pd
        import pyarrow.parquet as pq

        frames = [pq.read_table(self.path(b)).to_pandas().assign(batch_id=b) for b in self.batch_ids()]
        return pd.concat(frames, ignore_index=True) if frames else None
