"""Stream plumbing that must not depend on the Redis version: XAUTOCLAIM replies of Redis >= 7
(deleted ids listed) and 6.2 (nil entries in place), and the message fields (R8)."""

from __future__ import annotations

import os
import subprocess
import sys

from geo_pipeline.streams.consumer import parse_autoclaim
from geo_pipeline.streams.keys import collect_stream, screenshot_stream, stream_key
from geo_pipeline.streams.relay import message_fields
from geo_pipeline_tests.processes import outcome


def test_autoclaim_reply_of_redis_7_lists_deleted_ids():
    reply = ["0-0", [["1-1", ["sample_id", "s1", "event_id", "9"]]], ["1-0", "1-2"]]
    got = parse_autoclaim("ns:collect:x", reply)
    assert [e.message_id for e in got.entries] == ["1-1"]
    assert got.entries[0].sample_id == "s1"
    assert got.deleted == ["1-0", "1-2"]
    assert got.next_id == "0-0"


def test_autoclaim_reply_of_redis_6_2_has_nil_entries():
    reply = [b"5-0", [(b"1-1", {b"sample_id": b"s1"}), (b"1-2", None), None]]
    got = parse_autoclaim("k", reply)
    assert [e.message_id for e in got.entries] == ["1-1"]
    assert got.deleted == ["1-2"]
    assert got.next_id == "5-0"


def test_autoclaim_reply_of_redis_py_tuple_shape():
    reply = ("0-0", [("1-1", {"sample_id": "s1"})], [])
    got = parse_autoclaim("k", reply)
    assert got.entries[0].fields == {"sample_id": "s1"} and got.deleted == []


def test_completion_message_has_exactly_the_sensor_fields():
    row = {
        "outbox_id": 42,
        "stream": "completions",
        "kind": "completion",
        "sample_id": "s1",
        "run_id": "r1",
        "tenant_id": "acme",
        "payload": {"channel": "deepseek__web", "collection_state": "completed", "x": "no"},
    }
    assert message_fields(row) == {
        "event_id": "42",
        "sample_id": "s1",
        "run_id": "r1",
        "channel": "deepseek__web",
        "collection_state": "completed",
    }


def test_collect_message_carries_ids_and_routing_only():
    row = {
        "outbox_id": 7,
        "stream": "collect:kimi",
        "kind": "collect",
        "sample_id": "s1",
        "run_id": "r1",
        "tenant_id": "acme",
        "payload": {"priority": 5, "config": {"secret": 1}},
    }
    f = message_fields(row)
    assert set(f) == {"event_id", "kind", "sample_id", "run_id", "tenant_id", "priority"}


def test_key_names():
    assert stream_key("geo", collect_stream("kimi")) == "geo:collect:kimi"
    assert screenshot_stream("kimi") == "screenshot:kimi"


def test_crashpoint_kills_with_sigkill_only_when_named():
    code = (
        "from geo_pipeline.runtime.crash import crashpoint\n"
        "crashpoint('other'); crashpoint('after_read_before_claim');"
        "crashpoint('after_read_before_claim'); print('alive')"
    )
    env = {**os.environ, "GEO_CRASH_AT": "after_read_before_claim", "GEO_CRASH_AFTER": "2"}
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert p.returncode == -9 and "alive" not in p.stdout, outcome(p)
    env["GEO_CRASH_AFTER"] = "3"
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert p.returncode == 0 and "alive" in p.stdout, outcome(p)
