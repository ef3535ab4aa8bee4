"""Per-tenant submit caps per platform (R10): a tenant's cap holds across several workers (one
Redis bucket per tenant and platform), it takes nothing from other tenants, and the worker's
submit path obeys it end to end."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import psycopg
import redis.asyncio as aioredis
from psycopg.rows import dict_row

from geo_pipeline.evidence import LocalArchive
from geo_pipeline.store import tenancy
from geo_pipeline.store.tenancy import PlatformLimit
from geo_pipeline.worker.tenant_limits import TenantSubmitLimits
from geo_pipeline_tests.integration.execution.helpers import FakeConnector, make_run, states
from geo_pipeline_tests.integration.execution.test_worker_flow import run_worker_until

RATE, BURST = 10.0, 2


def test_a_tenants_cap_holds_across_four_workers_and_spares_the_others(redis_url, redis_ns):
    caps = {("a", "deepseek"): PlatformLimit(RATE, BURST)}

    async def load(platforms: list[str]) -> dict[tuple[str, str], PlatformLimit]:
        return caps

    async def main() -> tuple[list[float], float]:
        clients = [aioredis.Redis.from_url(redis_url) for _ in range(4)]
        workers = [TenantSubmitLimits(c, redis_ns, ["deepseek"], load) for c in clients]
        grants: list[float] = []
        t0 = time.monotonic()
        stop = t0 + 1.5

        async def submitter(w: TenantSubmitLimits) -> None:
            while time.monotonic() < stop:
                await w.acquire("a", "deepseek")
                if time.monotonic() < stop:
                    grants.append(time.monotonic() - t0)

        # Four workers with eight concurrent submitters each, all for tenant a ...
        tasks = [asyncio.create_task(submitter(w)) for w in workers for _ in range(8)]
        # ... while tenant b, uncapped, is never made to wait for a's bucket.
        for _ in range(200):
            await workers[0].acquire("b", "deepseek")
        b_limiters = [k for w in workers for k in w._limiters if k[0] == "b"]
        await asyncio.gather(*tasks)
        for c in clients:
            await c.aclose()
        return grants, b_limiters

    grants, b_limiters = asyncio.run(main())
    # A token bucket lets through at most burst + rate x elapsed in any stretch from the start.
    assert len(grants) <= BURST + RATE * 1.5 + 1, len(grants)
    assert len(grants) >= RATE * 1.5 * 0.6, f"cap far below its rate: {len(grants)}"
    for i, t in enumerate(sorted(grants)):
        assert i + 1 <= BURST + RATE * t + 1, f"{i + 1} submits after {t:.2f}s"
    # Tenant b has no cap: no limiter (and so no shared bucket) was ever built for it, whatever
    # the machine's speed; a wall-clock bound on its 200 acquires failed on a loaded box.
    assert b_limiters == [], f"an uncapped tenant was put behind a bucket: {b_limiters}"


class TimedConnector(FakeConnector):
    """Records when each tenant's submits reached the platform."""

    def __init__(self, platform: str, tenant_of: dict[str, str]) -> None:
        super().__init__(platform)
        self.tenant_of = tenant_of
        self.at: dict[str, list[float]] = {}

    async def submit(self, request: Any) -> Any:
        tenant = self.tenant_of[request.sample_id]
        self.at.setdefault(tenant, []).append(time.monotonic())
        return await super().submit(request)


def test_the_worker_submits_a_capped_tenant_at_its_rate(db_url, redis_url, redis_ns, tmp_path):
    slow = make_run(db_url, "r-slow", tenant="slow", questions=12)
    fast = make_run(db_url, "r-fast", tenant="fast", questions=12)
    with psycopg.connect(db_url, row_factory=dict_row) as conn:  # type: ignore[arg-type]
        tenancy.set_platform_limit(conn, "slow", "deepseek", 4.0, burst=1)  # type: ignore[arg-type]
    fake = TimedConnector(
        "deepseek", {**dict.fromkeys(slow, "slow"), **dict.fromkeys(fast, "fast")}
    )
    asyncio.run(
        run_worker_until(
            db_url,
            redis_url,
            redis_ns,
            {"deepseek": fake},
            lambda: states(db_url) == {"completed": 24},
            archive=LocalArchive(str(tmp_path / "ev")),
        )
    )
    assert states(db_url) == {"completed": 24}
    s, f = sorted(fake.at["slow"]), sorted(fake.at["fast"])
    # 12 submits at 4/s with a burst of 1: at least 11 intervals of 0.25 s.
    assert s[-1] - s[0] >= 11 / 4.0 * 0.9, f"capped tenant submitted in {s[-1] - s[0]:.2f}s"
    # The other tenant was not held back behind it.
    assert f[-1] - f[0] < 1.0, f"uncapped tenant took {f[-1] - f[0]:.2f}s"
