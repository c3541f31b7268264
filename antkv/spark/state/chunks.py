"""A task's input as a stream: chunks of whole keys, or each key's rows in bounded chunks.

The runtime sorts each partition's rows by (key group, key) in the JVM
(``sortWithinPartitions`` after ``repartitionById``), and Spark hands the task its rows as a
stream of Arrow batches of at most ``spark.sql.execution.arrow.maxRecordsPerBatch`` rows, as
pandas DataFrames.  So a key's rows are consecutive in the stream, possibly spanning batches.
Two ways to cut that stream, holding one batch (plus the rows of the key being cut) at a time:

* :func:`whole_key_chunks` -- DataFrames of one or more *complete* keys: each incoming batch,
  minus its last key's rows, which are carried into the next chunk (a key may continue in the
  next batch).  A chunk is at most one batch plus one key's rows: the vectorised pipeline API
  (``func(state, rows)``), which then sees every row of a key in one call.
* :func:`key_chunks` -- per key, a lazy iterator of DataFrames of at most ``limit`` rows,
  cut at every ``limit`` rows of the key whatever the batch boundaries (as Spark's
  ``transformWithStateInPandas`` cuts a key's rows): the ``StatefulProcessor`` runner, where a
  key of any size is streamed.

Key equality is the one of :func:`antkv.spark.state.views.group_batch` (nulls equal each other).
"""

from __future__ import annotations

from antkv.spark.state.views import group_batch, row_slicer


def _last_key_start(frame, by) -> int:
    """The first row of the last key of ``frame`` (sorted by ``by``; its rows are a suffix)."""
    import numpy as np

    n = len(frame)
    same = np.ones(n, dtype=bool)
    for col in by:
        values = frame[col]
        last = values.iloc[-1]
        nulls = values.isna().to_numpy()
        if nulls[-1]:
            same &= nulls
        else:
            same &= np.asarray(values.to_numpy() == last, dtype=bool) & ~nulls
    differs = np.flatnonzero(~same)
    return int(differs[-1]) + 1 if len(differs) else 0


def whole_key_chunks(frames, key_group_col: str, key_cols):
    """Yield DataFrames of complete keys from ``frames`` (sorted by key group and key across
    the stream, see the module docstring), each numbered from 0."""
    import pandas as pd

    by = [key_group_col] + list(key_cols)
    carry = None
    for frame in frames:
        if not len(frame):
            continue
        if carry is not None:
            frame = pd.concat([carry, frame], ignore_index=True)
        cut = _last_key_start(frame, by)
        carry = frame.iloc[cut:]
        if cut:
            yield frame.iloc[:cut].reset_index(drop=True)
    if carry is not None and len(carry):
        yield carry.reset_index(drop=True)


class FrameCuts:
    """How :func:`key_chunks` cuts chunks by default: DataFrames numbered from 0, sharing the
    batch's data.  Another cutter (:class:`antkv.spark.processor.rows.RowMaker`) has the same
    two methods and hands out other objects for a key's rows."""

    @staticmethod
    def slicer(frame):
        """A function ``(start, end)`` -> the rows ``start:end`` of ``frame``, the batch."""
        return row_slicer(frame)

    @staticmethod
    def join(pieces):
        """One chunk from its pieces (a key's rows span pieces only across batches)."""
        import pandas as pd

        return pieces[0] if len(pieces) == 1 else pd.concat(pieces, ignore_index=True)


class _KeyStream:
    """The state of :func:`key_chunks`: the current batch, its groups, and where the next
    chunk of the current key starts."""

    def __init__(self, frames, key_group_col, key_cols, columns, limit, on_batch, cuts):
        self.frames = iter(frames)
        self.cuts = cuts
        self.on_batch = on_batch
        self.key_group_col, self.key_cols = key_group_col, list(key_cols)
        self.columns, self.limit = list(columns), limit
        self.batch = None  # the current frame's GroupedBatch
        self.rows = None  # its frame restricted to the columns handed out
        self.slice_rows = None  # cuts.slicer(self.rows): its rows start:end
        self.group = 0  # the current group of the batch
        self.pos = 0  # the next row of the current group to hand out

    def load(self) -> bool:
        """Move to the next non-empty batch; False at the end of the stream."""
        for frame in self.frames:
            if len(frame):
                self.batch = group_batch(frame, self.key_group_col, self.key_cols, presorted=True)
                if self.on_batch is not None:
                    self.on_batch(self.batch)
                self.rows = self.batch.frame[self.columns]
                self.slice_rows = self.cuts.slicer(self.rows)
                self.group = 0
                self.pos = int(self.batch.starts[0])
                return True
        self.batch = None
        return False

    def current(self) -> tuple[int, tuple]:
        return int(self.batch.key_groups[self.group]), self.batch.keys[self.group]

    def chunks(self, key_group: int, key: tuple):
        """The current key's rows, ``limit`` at a time; leaves the stream at the next key."""
        join = self.cuts.join
        pieces, n, limit = [], 0, self.limit
        while True:
            end = int(self.batch.ends[self.group])
            while self.pos < end:
                take = min(end - self.pos, limit - n)
                pieces.append(self.slice_rows(self.pos, self.pos + take))
                n += take
                self.pos += take
                if n == limit:
                    yield join(pieces)
                    pieces, n = [], 0
            self.group += 1
            if self.group < len(self.batch):
                self.pos = int(self.batch.starts[self.group])
                break
            if not self.load() or self.current() != (key_group, key):
                break  # the stream ended, or the next batch starts with another key
        if pieces:
            yield join(pieces)


def key_chunks(frames, key_group_col: str, key_cols, columns, limit: int, on_batch=None, cuts=FrameCuts):
    """Yield ``(key group, key, chunks)`` per key of ``frames`` (sorted by key group and key
    across the stream), ``chunks`` a lazy iterator of DataFrames of ``columns`` holding at most
    ``limit`` rows each; the rows a caller leaves unread are skipped when it asks for the next key.
    ``on_batch(grouped)`` is called with each incoming batch's
    :class:`~antkv.spark.state.views.GroupedBatch` before its keys are handed out.  ``cuts``
    (:class:`FrameCuts` by default) makes the chunks from each batch's frame of ``columns``."""
    if limit < 1:
        raise ValueError("limit must be >= 1")
    stream = _KeyStream(frames, key_group_col, key_cols, columns, limit, on_batch, cuts)
    if not stream.load():
        return
    while stream.batch is not None and stream.group < len(stream.batch):
        key_group, key = stream.current()
        chunks = stream.chunks(key_group, key)
        yield key_group, key, chunks
        for _ in chunks:  # what the caller did not read
            pass
