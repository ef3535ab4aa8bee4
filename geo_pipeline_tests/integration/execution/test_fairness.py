"""Fair sharing (R10): a tenant with 10,000 queued samples cannot hold back a tenant with 10,
and a slow platform does not delay another platform's samples."""

from __future__ import annotations

import asyncio
import threading

from geo_pipeline_tests.integration.execution.helpers import FakeConnector, fetch, make_run
from geo_pipeline_tests.integration.execution.test_worker_flow import run_worker_until


def _completed(db_url: str, tenant: str) -> int:
    return fetch(
        db_url,
        "SELECT count(*) AS n FROM geo.samples WHERE tenant_id = %s "
        "AND collection_state = 'completed'",
        (tenant,),
    )[0]["n"]


def test_small_tenant_finishes_before_big_tenants_thousandth(db_url, redis_url, redis_ns):
    make_run(db_url, "r-big", tenant="tenant-a", questions=500, repeats=20)  # 10,000 samples
    b_created = threading.Event()
    snapshot: dict[str, int] = {}

    def done() -> bool:
        a = _completed(db_url, "tenant-a")
        if not b_created.is_set() and a >= 20:
            # Tenant A is being worked on; now tenant B queues 10 samples.
            make_run(db_url, "r-small", tenant="tenant-b", questions=10)
            b_created.set()
        if b_created.is_set() and _completed(db_url, "tenant-b") == 10:
            snapshot["a_when_b_done"] = a
            snapshot["a_after"] = _completed(db_url, "tenant-a")
            return True
        return False

    asyncio.run(
        run_worker_until(
            db_url, redis_url, redis_ns, {"deepseek": FakeConnector("deepseek")}, done, timeout_s=60
        )
    )
    assert b_created.is_set() and snapshot, "tenant B never finished"
    # Every B sample completed before A's 1,000th (measured from the completion times).
    a_before_last_b = fetch(
        db_url,
        "SELECT count(*) AS n FROM geo.samples a WHERE a.tenant_id = 'tenant-a' "
        "AND a.collection_state = 'completed' AND a.completed_at <= "
        "(SELECT max(completed_at) FROM geo.samples WHERE tenant_id = 'tenant-b')",
    )[0]["n"]
    assert a_before_last_b < 1000, snapshot


def test_slow_platform_does_not_delay_another(db_url, redis_url, redis_ns):
    make_run(db_url, "r-slow", questions=100, channels=[{"platform": "qwen", "device": "web"}])
    make_run(db_url, "r-fast", questions=20, channels=[{"platform": "kimi", "device": "web"}])
    fakes = {
        "qwen": FakeConnector("qwen", latency_s=2.0),
        "kimi": FakeConnector("kimi"),
    }

    def done() -> bool:
        return _completed(db_url, "acme") >= 120

    asyncio.run(run_worker_until(db_url, redis_url, redis_ns, fakes, done, timeout_s=60))
    rows = fetch(
        db_url,
        "SELECT platform, min(completed_at) AS first, max(completed_at) AS last, count(*) AS n "
        "FROM geo.samples WHERE collection_state = 'completed' GROUP BY platform",
    )
    by = {r["platform"]: r for r in rows}
    assert by["kimi"]["n"] == 20 and by["qwen"]["n"] == 100
    # Every fast-platform sample was done before the first slow-platform answer arrived.
    assert by["kimi"]["last"] < by["qwen"]["first"]
