"""Routing rows to their partitions inside Spark's JVM.

A row's key group is ``pmod(xxhash64(key columns), K)``, computed by Spark itself so that
Python never hashes a row; partition ``p`` of ``N`` owns the contiguous key-group range
:func:`antkv.spark.store.keygroups.key_group_range` draws.  :func:`route` repartitions a
DataFrame by that rule (``repartitionById``), so that each task sees exactly its own key groups.
"""

from __future__ import annotations

from antkv import InvalidArgumentError
from antkv.spark.store.keygroups import DEFAULT_KEY_GROUPS, validate_key_group_count, validate_parallelism


def key_group_column(key_columns, key_groups: int = DEFAULT_KEY_GROUPS):
    """A Spark Column: the key group of each row, ``pmod(xxhash64(key columns), K)`` as an int,
    evaluated in the JVM."""
    from pyspark.sql import functions as F

    validate_key_group_count(key_groups)
    if isinstance(key_columns, str):
        key_columns = [key_columns]
    if not key_columns:
        raise InvalidArgumentError("at least one key column is needed")
    return F.pmod(F.xxhash64(*key_columns), F.lit(key_groups)).cast("int")


def partition_column(key_group_col, key_groups: int, partitions: int):
    """A Spark Column: the partition owning each row's key group, ``floor(g * N / K)``."""
    from pyspark.sql import functions as F

    validate_parallelism(key_groups, partitions)
    if isinstance(key_group_col, str):
        key_group_col = F.col(key_group_col)
    # g * N < 2**30 is exact as a double, and a quotient that is not a whole number is at least
    # 1 / K away from one, so truncating the double division is exactly floor(g * N / K).
    return ((key_group_col.cast("long") * partitions) / F.lit(key_groups)).cast("int")


def route(df, key_columns, partitions: int, key_groups: int = DEFAULT_KEY_GROUPS,
          key_group_col: str = "__key_group"):
    """``df`` with its key group in column ``key_group_col``, repartitioned so that partition
    ``p`` of ``partitions`` holds exactly the rows whose key group it owns."""
    validate_parallelism(key_groups, partitions)
    with_group = df.withColumn(key_group_col, key_group_column(key_columns, key_groups))
    return with_group.repartitionById(
        partitions, partition_column(key_group_col, key_groups, partitions)
    )
