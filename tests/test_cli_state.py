"""The ``antkv state-*`` commands on a Spark pipeline's checkpoint location (built here with the
store API: two partitions, two published versions, value, list and map state), and the hint the
database commands give when pointed at a location."""

from __future__ import annotations

import json
import os
import sys

import pytest

import antkv
from antkv.spark import CommitCoordinator, StoreOptions, open_store
import antkv.spark.tools.state_reader
from antkv.spark.store.keygroups import METADATA_PREFIX, key_group_range
from antkv.spark.state.views import KeyedState

K = 16


@pytest.fixture
def run(antkv_cli):
    return antkv_cli


@pytest.fixture
def location(tmp_path):
    """Version 1: users u0..u9 with a count, a list of events and a map of pages; version 2
    updates u0's count.  Returns (location path, the expected decoded state of version 2)."""
    loc = str(tmp_path / "state")
    options = StoreOptions(cache_dir=str(tmp_path / "cache"))
    coord = CommitCoordinator(loc, "clicks", 2, query_id="q")
    expected = {"count": {}, "events": {}, "pages": {}}
    for version in (1, 2):
        bases = coord.base_manifests(version - 1)
        messages = []
        for p in range(2):
            owned = key_group_range(K, 2, p)
            store = open_store(loc, "clicks", p, version - 1, manifest=bases[p], options=options)
            state = KeyedState(store, owned)
            count, events, pages = state.value_state("count", 1), state.list_state("events", 2), state.map_state("pages", 3)
            for u in range(10):
                group = u % K
                if group not in owned or (version == 2 and u != 0):
                    continue
                key = (f"u{u}",)
                state.set_current_key(group, key)
                count.update((u * 10 + version,))
                expected["count"][key] = (u * 10 + version,)
                if version == 1:
                    events.put([(f"e{u}a",), (f"e{u}b",)])
                    pages.updateValue(("home",), (u,))
                    expected["events"][key] = [(f"e{u}a",), (f"e{u}b",)]
                    expected["pages"][key] = {("home",): (u,)}
            messages.append(store.commit())
        coord.publish(version, messages)
    return loc, expected


def test_state_info_names_versions_partitions_and_keys(run, location):
    loc, expected = location
    code, out, err = run("state-info", loc, "--json")
    assert code == 0 and err == ""
    [op] = json.loads(out)
    assert op["operator"] == "clicks" and op["versions"] == [1, 2] and op["version"] == 2
    # 10 users x 3 states, plus each partition's 3 state-name records
    assert op["keys"] == sum(p["keys"] for p in op["partitions"]) == 30 + 2 * 3 and len(op["partitions"]) == 2
    code, out, _ = run("state-info", loc, "--version", "1")
    assert code == 0 and "showing version 1" in out and "p0:" in out and "p1:" in out
    code, _, err = run("state-info", loc, "--version", "7")
    assert code == 1 and "no published version 7" in err and "1..2" in err
    code, _, err = run("state-info", loc, "--operator", "nope")
    assert code == 1 and "no published version" in err
    code, _, err = run("state-info", os.path.dirname(loc))  # not a location
    assert code == 1 and "no operator has a published version" in err
    code, _, err = run("state-info", os.path.join(os.path.dirname(loc), "missing"))
    assert code == 1 and err
    code, _, err = run("state-show", loc, "nope")
    assert code == 1 and "'nope' has no published version" in err and "None" not in err
    code, _, err = run("state-show", loc, "clicks", "--version", "abc")
    assert code == 2 and "invalid int" in err


def test_state_show_prints_the_decoded_state(run, location):
    loc, expected = location
    code, out, err = run("state-show", loc, "clicks", "--json")
    assert code == 0 and err == ""
    lines = [json.loads(line) for line in out.splitlines()]
    shown = {(d["state"], tuple(d["key"])): d["value"] for d in lines}
    assert shown[("count", ("u0",))] == [2] and shown[("count", ("u3",))] == [31]
    assert shown[("events", ("u4",))] == [["e4a"], ["e4b"]]
    assert shown[("pages", ("u5",))] == [[["home"], [5]]]
    assert len(lines) == sum(len(v) for v in expected.values())
    code, out, _ = run("state-show", loc, "clicks", "--version", "1", "--limit", "3")
    assert code == 0 and len(out.splitlines()) == 3 and out.startswith("count\t")


def test_state_export_makes_a_database_the_other_commands_read(run, location, tmp_path):
    loc, expected = location
    dest = tmp_path / "exported"
    code, out, err = run("state-export", loc, "clicks", dest)
    assert code == 0 and "exported" in out and err == ""
    with antkv.open(str(dest), read_only=True) as db:
        exported = dict(db.items())
    data = [k for k in exported if not k.startswith(METADATA_PREFIX)]
    assert len(data) == 30 and len(exported) == 33  # 10 users x 3 states; 3 state names, once
    assert f"exported {len(exported)} keys" in out
    assert antkv.spark.tools.state_reader.decoded_state(loc, "clicks") == expected
    code, out, _ = run("scan", dest, "--escape", "--limit", "2")
    assert code == 0 and len(out.splitlines()) == 2
    code, _, err = run("state-export", loc, "clicks", dest)  # never over an existing directory
    assert code == 1 and "already exists" in err
    assert dict(antkv.open(str(dest), read_only=True).items()) == exported


def test_database_commands_point_at_the_state_commands(run, location):
    loc, _ = location
    for target in (loc, os.path.join(loc, "clicks"), os.path.join(loc, "clicks", "p00000")):
        code, _, err = run("scan", target)
        assert code == 1 and "checkpoint location" in err and "state-info" in err, err
    code, _, err = run("scan", os.path.dirname(loc))  # a plain directory: no hint
    assert code == 1 and "checkpoint location" not in err


def _objects(loc):
    """Every object file under the location, relative to it."""
    out = []
    for root, _, files in os.walk(loc):
        out += [os.path.relpath(os.path.join(root, f), loc) for f in files]
    return sorted(out)


def test_state_verify_reads_every_object_and_names_what_is_missing_or_damaged(run, location):
    loc, _ = location
    code, out, err = run("state-verify", loc)
    assert code == 0 and err == "" and out.startswith("OK: operator clicks:") and "versions 1..2" in out
    code, out, _ = run("state-verify", loc, "--json")
    [op] = json.loads(out)
    assert op["versions"] == op["intact_versions"] == [1, 2] and op["problems"] == []
    assert op["manifests"] == 4 and op["objects"] > 0 and op["bytes"] > 0
    before = {name: open(os.path.join(loc, name), "rb").read() for name in _objects(loc)}
    # damage an object only version 2 names, and remove one both versions share
    manifests = antkv.spark.CommitCoordinator(loc, "clicks", 2, query_id="q").base_manifests(2)
    from antkv.spark.store.location import Location
    from antkv.spark.store.published import read_manifest

    v2 = read_manifest(Location(loc), manifests[0])
    v1_objects = set()
    for m in antkv.spark.CommitCoordinator(loc, "clicks", 2, query_id="q").base_manifests(1):
        v1_objects |= read_manifest(Location(loc), m).objects()
    only_v2 = sorted(v2.objects() - v1_objects)
    shared = sorted(read_manifest(Location(loc), manifests[1]).objects() & v1_objects)
    assert only_v2 and shared
    with open(os.path.join(loc, only_v2[0]), "r+b") as f:
        f.seek(3)
        byte = f.read(1)
        f.seek(3)
        f.write(bytes([byte[0] ^ 0xFF]))
    os.rename(os.path.join(loc, shared[0]), os.path.join(loc, "..", "moved-away"))
    code, out, err = run("state-verify", loc)
    assert code == 1 and "clicks" in err
    assert "DAMAGED: operator clicks" in out and "versions that load: none" in out
    assert f"{only_v2[0]}: damaged" in out and "(breaks versions 2)" in out
    assert f"{shared[0]}: missing (breaks versions 1, 2)" in out
    code, out, _ = run("state-verify", loc, "--version", "2", "--json")
    [op] = json.loads(out)
    assert code == 1 and op["intact_versions"] == [] and {p["object"] for p in op["problems"]} == {only_v2[0], shared[0]}
    os.rename(os.path.join(loc, "..", "moved-away"), os.path.join(loc, shared[0]))
    code, out, _ = run("state-verify", loc, "--json")
    [op] = json.loads(out)
    assert code == 1 and op["intact_versions"] == [1] and [p["object"] for p in op["problems"]] == [only_v2[0]]
    # read-only: the location holds exactly what it held (but the one damaged byte)
    after = {name: open(os.path.join(loc, name), "rb").read() for name in _objects(loc)}
    assert after.keys() == before.keys() and [n for n in after if after[n] != before[n]] == [only_v2[0]]
    # bad input
    assert run("state-verify", loc, "--version", "9")[0] == 1
    assert run("state-verify", loc, "--operator", "nope")[0] == 1
    assert run("state-verify", loc, "--version", "x")[0] == 2
    code, _, err = run("state-verify", os.path.join(loc, "missing"))
    assert code == 1 and "does not exist" in err
