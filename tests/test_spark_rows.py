"""The Rows a row-based processor is handed (``antkv.spark.processor.rows``), without a Spark job:
a key's chunks cut from whole converted batches are the Rows of the frames the pandas runner
cuts, and each value is what Spark's row-based worker hands over."""

from __future__ import annotations

import datetime
import zoneinfo

import numpy as np
import pandas as pd
import pytest
from pyspark.sql import Row
from pyspark.sql.types import ArrayType, DoubleType, LongType, StringType, TimestampNTZType, TimestampType

from antkv.spark.processor.rows import RowMaker, column_values, value_converter
from antkv.spark.state.chunks import FrameCuts, key_chunks

NAMES = ["key", "ts", "n", "x", "tags"]
TYPES = [StringType(), TimestampType(), LongType(), DoubleType(), ArrayType(StringType())]


def batch(rows):
    frame = pd.DataFrame(rows, columns=["kg"] + NAMES)
    frame["ts"] = pd.to_datetime(frame["ts"])
    return frame


FRAMES = [  # sorted by (key group, key); "b" continues into the second batch
    batch([(1, "a", "2026-01-01 10:00", 1, 0.5, np.array(["p"], dtype=object)),
           (1, "b", "2026-01-01 10:01", None, None, np.array([], dtype=object)),
           (1, "b", None, 3, 1.5, None)]),
    batch([(1, "b", "2026-01-01 10:03", 4, 2.5, np.array(["q", "r"], dtype=object)),
           (2, "c", "2026-01-01 10:04", 5, 3.5, np.array(["s"], dtype=object))]),
]


def cut(cuts, limit):
    return [(kg, key, [list(c) if isinstance(c, list) else c for c in chunks])
            for kg, key, chunks in key_chunks(FRAMES, "kg", ["key"], NAMES, limit, cuts=cuts)]


@pytest.mark.parametrize("limit", [1, 2, 10])
def test_a_keys_rows_are_cut_as_its_frames_are(limit):
    maker = RowMaker(NAMES, TYPES, "Etc/UTC")
    frames, rows = cut(FrameCuts, limit), cut(maker, limit)
    assert [(kg, key) for kg, key, _ in rows] == [(1, ("a",)), (1, ("b",)), (2, ("c",))]
    for (_, _, frame_chunks), (_, _, row_chunks) in zip(frames, rows):
        assert [len(c) for c in row_chunks] == [len(f) for f in frame_chunks]
        assert all(len(c) <= limit for c in row_chunks)
        assert row_chunks == [maker.rows(f) for f in frame_chunks]  # a batch at once = a chunk at a time
    b_rows = [r for c in rows[1][2] for r in c]
    utc = zoneinfo.ZoneInfo("Etc/UTC")
    assert b_rows == [
        Row(key="b", ts=datetime.datetime(2026, 1, 1, 10, 1, tzinfo=utc), n=None, x=None, tags=[]),
        Row(key="b", ts=None, n=3, x=1.5, tags=None),
        Row(key="b", ts=datetime.datetime(2026, 1, 1, 10, 3, tzinfo=utc), n=4, x=2.5, tags=["q", "r"]),
    ]
    assert all(type(r.n) is int for r in b_rows if r.n is not None)
    assert all(r.ts.tzinfo is utc for r in b_rows if r.ts is not None)


def test_timestamps_are_read_in_the_session_time_zone():
    """pandas holds a TIMESTAMP as the naive wall time of the session's zone: the Row gets the
    aware time (a repeated wall time's first occurrence), a TIMESTAMP_NTZ stays naive."""
    walls = pd.Series(pd.to_datetime(["2023-11-05 01:30", "2023-07-01 12:00", None]))
    ny = "America/New_York"
    aware = column_values(walls, TimestampType(), ny, value_converter(TimestampType(), ny))
    assert [t.utcoffset() for t in aware[:2]] == [datetime.timedelta(hours=-4)] * 2  # 01:30 EDT, then EST
    assert aware[0].isoformat() == "2023-11-05T01:30:00-04:00" and aware[2] is None
    one_at_a_time = [value_converter(TimestampType(), ny)(v) for v in walls.tolist()]
    assert one_at_a_time == aware and one_at_a_time[0].utcoffset() == aware[0].utcoffset()
    naive = column_values(walls, TimestampNTZType(), ny, value_converter(TimestampNTZType(), ny))
    assert naive[:2] == [datetime.datetime(2023, 11, 5, 1, 30), datetime.datetime(2023, 7, 1, 12)]
    assert naive[0].tzinfo is None and naive[2] is None


@pytest.mark.parametrize("zone", ["UTC", "Etc/UTC", "America/New_York", "+02:00", "-05:30"])
def test_a_timestamps_zone_is_the_one_pyarrow_hands_spark_processors(zone):
    import pyarrow as pa

    instant = pd.Timestamp("2026-03-01 12:00", tz="UTC")
    want = pa.array([instant], pa.timestamp("us", tz=zone))[0].as_py()  # what Spark's row worker hands over
    wall = pd.Series([instant.tz_convert(want.tzinfo).tz_localize(None)])  # what pandas holds
    got = column_values(wall, TimestampType(), zone, value_converter(TimestampType(), zone))[0]
    assert got == want and repr(got.tzinfo) == repr(want.tzinfo) and got.utcoffset() == want.utcoffset()


def test_nested_values_are_plain_python():
    convert = value_converter(ArrayType(LongType()), "UTC")
    assert convert(np.array([1, 2], dtype=np.int64)) == [1, 2] and type(convert(np.array([7]))[0]) is int
    assert convert(None) is None
