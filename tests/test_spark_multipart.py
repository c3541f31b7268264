"""A writer killed mid-object leaves an incomplete multipart upload on S3 (a temporary file on a
local location): ``antkv state-verify`` reports the uploads, and the cleanup after the next
publish removes what the finished batches' dead attempts left -- never what a batch not yet
published may still be writing.

The S3 API is moto's server on 127.0.0.1 (``s3_server``); the writers are real processes killed
with SIGKILL in the middle of a ``Location.writer`` stream of 11 MiB (pyarrow uploads it in
parts, so the upload is open when the process dies).
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import uuid

import pytest

from antkv.spark import CommitCoordinator, Location, StoreOptions, open_store
from antkv.spark.store.location import output_file_name, snapshot_file_name
from antkv.spark.store.multipart import incomplete_uploads

from test_spark_store_model import s3_server  # noqa: F401 (a fixture)

OP = "op"

_KILLED_WRITER = """
import os, pickle, sys
location = pickle.loads(bytes.fromhex(sys.argv[1]))
with location.writer(sys.argv[2]) as f:
    for _ in range(11):
        f.write(b"x" * (1 << 20))
    f.flush()
    os.kill(os.getpid(), 9)
"""


def killed_writer(location: Location, name: str) -> None:
    """A process writing object ``name``, killed before the stream closes."""
    proc = subprocess.run([sys.executable, "-c", _KILLED_WRITER, pickle.dumps(location).hex(), name],
                          capture_output=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]


def publish(location: Location, coord: CommitCoordinator, version: int, options: StoreOptions) -> None:
    bases = coord.base_manifests(version - 1)
    messages = []
    for p in range(2):
        store = open_store(location, OP, p, version - 1, manifest=bases[p], options=options)
        store.put(b"k%d" % p, b"v%d" % version)
        messages.append(store.commit())
    coord.publish(version, messages)


@pytest.fixture(params=["local", "s3"])
def location(request, tmp_path):
    if request.param == "local":
        return Location(str(tmp_path / "state"))
    return Location(f"antkv-state/{uuid.uuid4().hex}", filesystem=request.getfixturevalue("s3_server"))


def left_behind(location: Location) -> set[str]:
    """What killed writers left: incomplete uploads on S3, temporary files on a local location."""
    uploads = incomplete_uploads(location, f"{OP}/")
    if location.fs.type_name != "local":
        return {u.name for u in uploads}
    assert uploads == []
    found = set()
    for d, _, files in os.walk(location.root):
        for f in files:
            if ".tmp-" in f:
                name = os.path.relpath(os.path.join(d, f), location.root)
                found.add(name.rpartition(".tmp-")[0])
    return found


def test_a_killed_writers_upload_is_aborted_once_its_batch_is_published(location, tmp_path):
    options = StoreOptions(cache_dir=str(tmp_path / "cache"))
    coord = CommitCoordinator(location, OP, 2, query_id="q")
    publish(location, coord, 1, options)
    coord.cleanup(1)
    # batch 2 is running: one attempt dies writing a snapshot file, another (on S3) writing an
    # output file (a local one's temporary file is cleanup_output's: tests/test_spark_output.py);
    # an attempt of batch 3 (not yet published) is writing too
    s3 = location.fs.type_name != "local"
    dead = {snapshot_file_name(OP, 0, 2, "a" * 16, "000009.sst")}
    if s3:
        dead.add(output_file_name(OP, 2, "b" * 16, 0))
    running = {snapshot_file_name(OP, 1, 3, "c" * 16, "000011.sst")}
    for name in sorted(dead | running):
        killed_writer(location, name)
    assert left_behind(location) == dead | running
    publish(location, coord, 2, options)
    result = coord.cleanup(2)
    assert left_behind(location) == running  # the unpublished batch's writer is left alone
    assert result.aborted_uploads == (len(dead) if s3 else 0)
    # a late cleanup of an older version never reaches past the newest published one
    coord.cleanup(1)
    assert left_behind(location) == running
    publish(location, coord, 3, options)
    coord.cleanup(3)
    assert left_behind(location) == set()


def test_state_verify_reports_the_incomplete_uploads_it_can_see(antkv_cli, s3_server, tmp_path, monkeypatch):
    settings = s3_server.__reduce__()[1][0]
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", settings["access_key"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", settings["secret_key"])
    root = f"antkv-state/{uuid.uuid4().hex}"
    uri = f"s3://{root}?endpoint_override={settings['endpoint_override']}&scheme=http&region=us-east-1"
    location = Location(root, filesystem=s3_server)
    coord = CommitCoordinator(location, OP, 2, query_id="q")
    publish(location, coord, 1, StoreOptions(cache_dir=str(tmp_path / "cache")))
    code, out, _ = antkv_cli("state-verify", uri, "--json")
    [op] = json.loads(out)
    assert code == 0 and op["incomplete_uploads"] == []
    name = output_file_name(OP, 2, "d" * 16, 0)
    killed_writer(location, name)
    code, out, err = antkv_cli("state-verify", uri)
    assert code == 0 and err == "" and out.startswith("OK: operator op:")  # no version is damaged
    assert f"NOTE: operator op: 1 incomplete multipart uploads" in out and f"  {name}: started " in out
    code, out, _ = antkv_cli("state-verify", uri, "--json")
    [op] = json.loads(out)
    assert code == 0 and [u["object"] for u in op["incomplete_uploads"]] == [name]
    assert op["incomplete_uploads"][0]["initiated"][:4].isdigit()
    # a local location has no multipart uploads: the report says none, not "cannot see"
    local = str(tmp_path / "local")
    publish(Location(local), CommitCoordinator(local, OP, 2, query_id="q"), 1,
            StoreOptions(cache_dir=str(tmp_path / "cache2")))
    code, out, _ = antkv_cli("state-verify", local, "--json")
    assert code == 0 and json.loads(out)[0]["incomplete_uploads"] == []


def test_without_boto3_nothing_is_seen_and_nothing_fails(location, tmp_path, monkeypatch):
    """boto3 is an optional extra: without it, cleanup and state-verify work as before and say
    they cannot see the uploads (on S3), which the bucket's lifecycle rule then removes."""
    monkeypatch.setitem(sys.modules, "boto3", None)  # `import boto3` raises ImportError
    from antkv.tools.state_verify import verify_location

    options = StoreOptions(cache_dir=str(tmp_path / "cache"))
    coord = CommitCoordinator(location, OP, 2, query_id="q")
    publish(location, coord, 1, options)
    name = snapshot_file_name(OP, 0, 2, "e" * 16, "000009.sst")
    killed_writer(location, name)
    s3 = location.fs.type_name != "local"
    assert incomplete_uploads(location, f"{OP}/") == (None if s3 else [])
    publish(location, coord, 2, options)
    assert coord.cleanup(2).aborted_uploads == 0
    [op] = verify_location(location, OP)
    assert op["problems"] == [] and op["incomplete_uploads"] == (None if s3 else [])
    monkeypatch.delitem(sys.modules, "boto3")
    assert left_behind(location) == ({name} if s3 else set())  # left to the lifecycle rule


def test_a_failing_attempts_output_writer_aborts_its_upload(location):
    """An attempt that fails with an error while writing an output file leaves neither an
    incomplete upload nor a partial object (on a local location: no temporary file)."""
    import pandas as pd
    from pyspark.sql.types import BinaryType, LongType, StructField, StructType

    from antkv.spark.runtime.output import OutputWriter

    struct = StructType([StructField("k", LongType()), StructField("blob", BinaryType())])
    writer = OutputWriter(location, OP, 2, struct, "UTC")
    rows = 12 << 6  # 12 MiB of incompressible bytes: more than one part of an S3 upload
    writer.write(pd.DataFrame({"k": range(rows), "blob": [os.urandom(16 << 10) for _ in range(rows)]}))
    [name] = writer.files
    s3 = location.fs.type_name != "local"
    if s3:
        assert [u.name for u in incomplete_uploads(location, f"{OP}/")] == [name]  # open, parts uploaded
    writer.abort()
    assert left_behind(location) == set() and location.size(name) is None
