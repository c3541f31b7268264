"""StatefulPipeline on the real local Spark: batch jobs, a streaming query, rescale, refusals.

The state function is the demo's (value, list and map state per user); every check compares
the pipeline's published state and output with the same computation in plain Spark."""

import os

import pytest

import antkv
from antkv.spark import StatefulPipeline, StoreOptions, read_output, read_state
from antkv.spark.tools.demo import (
    OUTPUT_SCHEMA,
    click_state,
    expected_with_spark,
    run_demo,
    write_event_files,
)
from antkv.spark.store.keygroups import KeyGroupError

from test_spark_store_model import s3_server, s3_uri  # noqa: F401


def _pipeline(root, partitions, key_groups=64, func=click_state, options=None, uri=None):
    return StatefulPipeline(uri or "file://" + str(root / "state"), "clicks", ["user"], func, OUTPUT_SCHEMA,
                            partitions=partitions, key_groups=key_groups, query_id="t", options=options)


# remote: the state's tables are read from the location (a local directory, or the S3 server the
# tests start) through a block cache of 4 KiB on the Spark workers' disk, far smaller than the
# state (StoreOptions.tables)
@pytest.mark.parametrize("tables", ["local", "remote", "remote-s3"])
def test_batch_jobs_with_rescale_2_3_1_equal_plain_spark(spark, tmp_path, tables, request):
    events = tmp_path / "events"
    write_event_files(str(events), 0, 4, users=60, events=150, payload_bytes=40)
    options = uri = None
    if tables == "remote-s3":
        uri, location = s3_uri(request.getfixturevalue("s3_server"))
    if tables.startswith("remote"):
        options = StoreOptions(tables="remote", cache_disk_bytes=4096, cache_dir=str(tmp_path / "cache"),
                               max_changelog_chain=1)
    outputs = []
    for f, partitions in enumerate([2, 2, 3, 1]):
        df = spark.read.parquet(str(events / f"events-{f:05d}.parquet"))
        result = _pipeline(tmp_path, partitions, options=options, uri=uri).run(df)
        m = result.metrics
        assert (m.batch_id, m.version, m.partitions, m.rows) == (f, f + 1, partitions, 150)
        assert m.previous_partitions == (2 if f == 2 else 3 if f == 3 else partitions)
        assert len(m.partition_metrics) == partitions
        assert sum(p.rows for p in m.partition_metrics) == 150
        assert all(p.rescaled == (f >= 2) for p in m.partition_metrics)
        outputs += [tuple(r) for r in result.output.collect()]
    want_state, want_rows = expected_with_spark(spark, str(events))
    got = read_state(uri or "file://" + str(tmp_path / "state"), "clicks")
    assert got == want_state
    assert sorted(outputs) == want_rows
    # the key count the driver reports is exact: one value, one list and the map entries per user
    keys = len(want_state["clicks"]) * 2 + sum(len(v) for v in want_state["pages"].values())
    assert result.metrics.keys == keys + 4  # + K and the three state names in the metadata area
    if tables.startswith("remote"):
        if uri is None:
            snapshots = {os.path.join(d, n): os.path.getsize(os.path.join(d, n))
                         for d, _, names in os.walk(tmp_path / "state") for n in names}
        else:
            snapshots = {}
            for p in location.list_subdirs("clicks"):
                snapshots.update(location.list_sizes(f"clicks/{p}"))
        snapshots = {n: size for n, size in snapshots.items() if n.endswith((".sst", ".vlog"))}
        assert snapshots and sum(snapshots.values()) >= 10 * 4096  # the snapshot files the location retains
        assert not [n for _, _, names in os.walk(tmp_path / "cache" / "objects") for n in names]
        assert os.listdir(tmp_path / "cache" / "blocks")  # the workers read through the block cache
        fetched = sum(p.block_fetched_bytes for p in result.metrics.partition_metrics)
        assert fetched > 0 and sum(p.block_misses for p in result.metrics.partition_metrics) > 0


def test_streaming_demo_verdict_at_a_small_size(spark, tmp_path):
    lines = []
    verdict = run_demo(spark, str(tmp_path), users=80, events=200, batches=2, payload_bytes=64,
                       key_groups=128, report=lines.append)
    assert verdict.ok, str(verdict)
    assert verdict.batches == 4 and verdict.users == 80
    assert any("rescaled 2 -> 3" in line for line in lines)
    with open(tmp_path / "metrics.jsonl") as f:
        assert len(f.readlines()) == 4


def test_a_changed_k_is_refused_before_any_task_and_publishes_nothing(spark, tmp_path):
    events = tmp_path / "events"
    write_event_files(str(events), 0, 2, users=20, events=40, payload_bytes=8)
    _pipeline(tmp_path, 2, key_groups=64).run(spark.read.parquet(str(events / "events-00000.parquet")))
    with pytest.raises(KeyGroupError, match="cannot change after the first batch.*64.*128"):
        _pipeline(tmp_path, 2, key_groups=128).run(spark.read.parquet(str(events / "events-00001.parquet")))
    assert _pipeline(tmp_path, 2).coordinator.latest_version() == 1


def test_a_replayed_batch_keeps_the_state_and_its_published_output(spark, tmp_path):
    events = tmp_path / "events"
    write_event_files(str(events), 0, 2, users=30, events=60, payload_bytes=8)
    calls = []

    def sink(output_df, batch_id):
        calls.append((batch_id, sorted(tuple(r) for r in output_df.collect())))

    run = _pipeline(tmp_path, 2).foreach_batch(sink)
    for f in (0, 1):
        run(spark.read.parquet(str(events / f"events-{f:05d}.parquet")), f)
    before = read_state("file://" + str(tmp_path / "state"), "clicks")
    pipe = _pipeline(tmp_path, 2)
    again = pipe.foreach_batch(sink)
    again(spark.read.parquet(str(events / "events-00001.parquet")), 1)  # Spark reruns batch 1
    assert pipe.history[-1].replayed
    assert read_state("file://" + str(tmp_path / "state"), "clicks") == before
    assert [b for b, _ in calls] == [0, 1, 1] and calls[1][1] == calls[2][1]  # the sink sees the first run's rows
    _, want_rows = expected_with_spark(spark, str(events))
    published = [tuple(r) for b in (0, 1) for r in read_output(spark, "file://" + str(tmp_path / "state"), "clicks", b).collect()]
    assert sorted(published) == want_rows
    # the replay's own output files were losers: cleanup removed them
    files = sorted(p.name for p in (tmp_path / "state" / "clicks" / "_output" / f"{2:020d}").iterdir())
    assert len(files) == 2 and all(f.endswith(".parquet") for f in files)


def test_a_failing_state_function_publishes_nothing_and_the_next_run_succeeds(spark, tmp_path):
    events = tmp_path / "events"
    write_event_files(str(events), 0, 2, users=20, events=40, payload_bytes=8)
    first = spark.read.parquet(str(events / "events-00000.parquet"))

    def broken(state, rows):
        yield from click_state(state, rows)
        raise ValueError("the user's function failed")

    with pytest.raises(Exception, match="the user's function failed"):
        _pipeline(tmp_path, 2, func=broken).run(first)
    pipe = _pipeline(tmp_path, 2)
    assert pipe.coordinator.latest_version() == 0
    pipe.run(first)
    want, _ = expected_with_spark(spark, str(events / "events-00000.parquet"))
    assert read_state("file://" + str(tmp_path / "state"), "clicks") == want


def test_bad_output_and_arguments_are_refused_clearly(spark, tmp_path):
    events = tmp_path / "events"
    write_event_files(str(events), 0, 1, users=10, events=20, payload_bytes=8)
    df = spark.read.parquet(str(events))

    def wrong_columns(state, rows):
        import pandas as pd
        yield pd.DataFrame({"user": ["x"]})

    with pytest.raises(Exception, match=r"lacks columns \['clicks', 'last_ts'\]"):
        _pipeline(tmp_path, 2, func=wrong_columns).run(df)
    with pytest.raises(antkv.InvalidArgumentError, match="reserved"):
        StatefulPipeline(str(tmp_path), "op", "user", click_state, "_antkv_commit string", partitions=1)
    with pytest.raises(TypeError):
        StatefulPipeline(str(tmp_path), "op", [], click_state, OUTPUT_SCHEMA, partitions=1)
    with pytest.raises(KeyGroupError):
        StatefulPipeline(str(tmp_path), "op", "user", click_state, OUTPUT_SCHEMA, partitions=5, key_groups=4)
    assert not os.path.exists(tmp_path / "state" / "clicks" / "markers")


def test_a_task_raises_the_collector_threshold_while_it_runs_and_restores_it(spark, tmp_path):
    """The state function runs with the first threshold at TASK_THRESHOLD (a worker's held
    working copies are walked less often); the driver's thresholds are untouched."""
    import gc

    import pandas as pd

    from antkv.spark.runtime.collector import TASK_THRESHOLD

    def report_threshold(state, rows):
        yield pd.DataFrame({"user": ["-"], "clicks": [gc.get_threshold()[0]], "last_ts": [0]})

    events = tmp_path / "events"
    write_event_files(str(events), 0, 1, users=10, events=20, payload_bytes=8)
    before = gc.get_threshold()
    out = _pipeline(tmp_path, 2, func=report_threshold).run(spark.read.parquet(str(events))).output
    values = [r["clicks"] for r in out.collect()]  # one row per call: per chunk of keys
    assert len(values) >= 2 and set(values) == {TASK_THRESHOLD}
    assert gc.get_threshold() == before


def test_task_collections_restores_the_thresholds_once_after_the_last_task():
    import gc

    from antkv.spark.runtime.collector import TASK_THRESHOLD, task_collections

    saved = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        with task_collections():
            assert gc.get_threshold() == (TASK_THRESHOLD, 10, 10)
            with task_collections():  # a second task in the process (nested or concurrent)
                assert gc.get_threshold() == (TASK_THRESHOLD, 10, 10)
            assert gc.get_threshold() == (TASK_THRESHOLD, 10, 10)  # the first is still running
        assert gc.get_threshold() == (700, 10, 10)
        with pytest.raises(ValueError):
            with task_collections():
                raise ValueError("a failing task")
        assert gc.get_threshold() == (700, 10, 10)
        for own in ((50_000, 10, 10), (0, 10, 10)):  # a higher threshold, or no automatic collection
            gc.set_threshold(*own)
            with task_collections():
                assert gc.get_threshold() == own
            assert gc.get_threshold() == own
    finally:
        gc.set_threshold(*saved)
