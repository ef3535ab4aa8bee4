"""Consumer groups on a real Redis: racing reclaimers, dead letters, shared rate limits."""

from __future__ import annotations

import asyncio
import time

import redis.asyncio as aioredis
from psycopg_pool import ConnectionPool

from geo_pipeline.store import db as dbmod
from geo_pipeline.streams import consumer as sc
from geo_pipeline.streams.keys import DEAD, GROUP, collect_stream, stream_key
from geo_pipeline.streams.ratelimit import SharedRateLimiter
from geo_pipeline.worker.runner import Worker, WorkerSettings
from geo_pipeline_tests.integration.execution.helpers import CAPS, FakeConnector, fetch


def test_two_reclaimers_racing_take_each_entry_once(redis_url, redis_ns):
    async def go() -> tuple[list[str], list[str], int]:
        r = aioredis.Redis.from_url(redis_url, decode_responses=True)
        key = stream_key(redis_ns, collect_stream("deepseek"))
        await sc.ensure_group(r, key)
        for i in range(300):
            await r.xadd(key, {"sample_id": f"s{i}"})
        await r.xreadgroup(GROUP, "dead-consumer", {key: ">"}, count=1000)
        await asyncio.sleep(0.3)  # the dead consumer's entries are now idle
        a, b = await asyncio.gather(
            sc.autoclaim(r, key, "c1", 200, count=7), sc.autoclaim(r, key, "c2", 200, count=11)
        )
        pending = await r.xpending(key, GROUP)
        await r.aclose()
        return (
            [e.message_id for e in a.entries],
            [e.message_id for e in b.entries],
            int(pending["pending"]),
        )

    a, b, pending = asyncio.run(go())
    assert not set(a) & set(b)
    assert len(set(a) | set(b)) == 300 == pending


def test_trimmed_entries_are_dropped_from_the_pending_list(redis_url, redis_ns):
    async def go() -> tuple[int, int]:
        r = aioredis.Redis.from_url(redis_url, decode_responses=True)
        key = stream_key(redis_ns, "collect:kimi")
        await sc.ensure_group(r, key)
        ids = [await r.xadd(key, {"sample_id": f"s{i}"}) for i in range(5)]
        await r.xreadgroup(GROUP, "c0", {key: ">"}, count=10)
        await r.xdel(key, ids[0], ids[1])
        got = await sc.autoclaim(r, key, "c1", 0)
        if got.deleted:
            await r.xack(key, GROUP, *got.deleted)
        pending = await r.xpending(key, GROUP)
        await r.aclose()
        return len(got.entries), int(pending["pending"])

    entries, pending = asyncio.run(go())
    assert entries == 3 and pending == 3


def test_entries_delivered_too_often_go_to_the_dead_letter_stream(db_url, redis_url, redis_ns):
    async def go() -> tuple[int, list[dict[str, str]], dict[str, int]]:
        r = aioredis.Redis.from_url(redis_url, decode_responses=True)
        w = Worker(
            WorkerSettings(
                platforms=["deepseek"], worker_id="worker:t:1", max_deliveries=2, reclaim_idle_ms=0
            ),
            db_url=db_url,
            redis=r,
            ns=redis_ns,
            capabilities=CAPS,
            connectors={"deepseek": FakeConnector("deepseek")},
        )
        w.ctx.pool = ConnectionPool(
            db_url,
            kwargs={"row_factory": dbmod.dict_row, "autocommit": True},
            min_size=1,
            max_size=2,
            open=True,
        )
        lane = w.lanes["deepseek"]
        await sc.ensure_group(r, lane.key)
        await r.xadd(lane.key, {"sample_id": "s-poison", "event_id": "77"})
        await r.xreadgroup(GROUP, "c0", {lane.key: ">"}, count=10)  # delivery 1
        n1 = await lane.reclaim_once()  # delivery 2: kept
        lane.inbox.clear()
        n2 = await lane.reclaim_once()  # delivery 3 > 2: dead
        dead = await r.xrange(stream_key(redis_ns, DEAD))
        pending = await r.xpending(lane.key, GROUP)
        w.ctx.pool.close()
        await r.aclose()
        return n1 + n2, [d[1] for d in dead], {"pending": int(pending["pending"])}

    n, dead, pending = asyncio.run(go())
    assert n == 2
    assert len(dead) == 1 and dead[0]["sample_id"] == "s-poison" and dead[0]["deliveries"] == "3"
    assert pending == {"pending": 0}
    rows = fetch(db_url, "SELECT sample_id, event_id, deliveries, reason FROM geo.dead_letters")
    assert rows == [
        {"sample_id": "s-poison", "event_id": "77", "deliveries": 3, "reason": "max_deliveries"}
    ]


def test_rate_limit_is_shared_by_all_workers(redis_url, redis_ns):
    async def go() -> tuple[int, float]:
        r = aioredis.Redis.from_url(redis_url, decode_responses=True)
        limiters = [
            SharedRateLimiter(r, redis_ns, "deepseek", "submit", rate_per_s=50, burst=10, batch=5)
            for _ in range(3)
        ]
        count = 0
        t0 = time.monotonic()

        async def hammer(lim: SharedRateLimiter) -> None:
            nonlocal count
            while time.monotonic() - t0 < 1.0:
                await lim.acquire()
                count += 1

        await asyncio.gather(*(hammer(lim) for lim in limiters))
        elapsed = time.monotonic() - t0
        await r.aclose()
        return count, elapsed

    count, elapsed = asyncio.run(go())
    # burst 10 + 50/s over ~1 s, shared by three limiters (+ at most a few in flight).
    assert 30 <= count <= 10 + 50 * elapsed + 15
