"""Result retention as a fetch deadline (issue 31), through the simulator's cloro profile over
HTTP on real PostgreSQL and Redis.

- cloro keeps a task 24 h (``result_retention_s``). Tasks accepted, then no worker for 25 h (the
  simulator's clock advanced): the result is gone upstream. Each sample must end in a state that
  says so (``result_gone_upstream``), never be polled on for ever or lost without a reason.
- cloro's ``html`` URL expires 24 h after completion: the rendered page is fetched with the
  answer and carried in the evidence (archived with it), not left as a URL.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx
import pytest

from geo_pipeline.connectors.base import SubmitRequest
from geo_pipeline.connectors.cloro import CloroConnector
from geo_pipeline.connectors.factory import build_connector
from geo_pipeline.connectors.registry import load_registry
from geo_pipeline.domain.retry import PollSchedule
from geo_pipeline_tests.integration.execution.helpers import check_invariants, fetch
from geo_pipeline_tests.integration.execution.test_cloro_worker import PLATFORM, make_cloro_run
from geo_pipeline_tests.integration.execution.test_worker_flow import run_worker_until

N = 6
DAY_S = 24 * 3600


def start(own_simulator: Any, monkeypatch: pytest.MonkeyPatch, **profile: Any) -> Any:
    sim = own_simulator({"services": {"cloro": profile}}, seed=29)
    monkeypatch.setenv("GEO_CLORO_URL", f"{sim.url}/cloro")
    monkeypatch.setenv("GEO_CLORO_API_KEY", "sim-cloro-key")
    return sim


def count(db_url: str, where: str) -> int:
    return int(fetch(db_url, f"SELECT count(*) AS n FROM geo.samples WHERE {where}")[0]["n"])


def work(db_url: str, redis_url: str, ns: str, registry: Any, done: Any) -> None:
    asyncio.run(
        run_worker_until(
            db_url,
            redis_url,
            ns,
            {PLATFORM: build_connector(registry.entry(PLATFORM))},
            done,
            timeout_s=60,
            capabilities=registry.capabilities(),
            poll=PollSchedule(first_s=0.05, min_s=0.05, ratio=0.5, max_s=0.2),
        )
    )


def test_a_result_gone_past_retention_ends_the_sample_with_that_reason(
    db_url, redis_url, redis_ns, own_simulator, monkeypatch
) -> None:
    sim = start(own_simulator, monkeypatch, processing_s=[3600, 3600])
    registry = load_registry()
    assert registry.entry(PLATFORM).capabilities.result_retention_s == DAY_S
    ids = make_cloro_run(db_url, registry, "r-retention", N)
    work(
        db_url, redis_url, redis_ns, registry, lambda: count(db_url, "upstream_id IS NOT NULL") == N
    )
    assert count(db_url, "upstream_id IS NOT NULL") == N, "every task accepted before the gap"
    # No worker for 25 h: cloro deletes each task 24 h after its creation.
    httpx.post(
        f"{sim.url}/_control/services/cloro/advance", json={"seconds": DAY_S + 3600}, timeout=10
    ).raise_for_status()
    work(
        db_url,
        redis_url,
        redis_ns,
        registry,
        lambda: count(db_url, "collection_state IN ('completed', 'failed')") == N,
    )
    check_invariants(db_url, expected_samples=len(ids))
    rows = fetch(db_url, "SELECT collection_state, collection_reason, upstream_id FROM geo.samples")
    assert all(r["collection_state"] == "failed" for r in rows), rows
    assert all(
        (r["collection_reason"] or "").startswith("result_gone_upstream:not_found:retention_86400s")
        for r in rows
    ), rows
    assert all(r["upstream_id"] for r in rows)  # the task's id stays on the record
    stats = httpx.get(f"{sim.url}/_control/services/cloro/stats", timeout=10).json()
    assert stats["expired"] == N and stats["max_tasks_per_key"] == 1  # never re-sent


def test_the_rendered_html_is_fetched_with_the_answer(own_simulator, monkeypatch) -> None:
    start(own_simulator, monkeypatch)
    entry = load_registry().entry(PLATFORM)
    assert entry.options["include"]["html"] is True

    async def go() -> Any:
        conn = build_connector(entry)
        assert isinstance(conn, CloroConnector)
        req = SubmitRequest(
            sample_id=f"s{uuid.uuid4().hex[:20]}",
            attempt_no=1,
            tenant_id="acme",
            question="Which coffee chain is best in Lisbon?",
            platform=PLATFORM,
            device="web",
            region="us",
            mode="standard",
            screenshot=False,
        )
        try:
            acc = await conn.submit(req)
            for _ in range(400):
                if (await conn.poll(acc.upstream_id)).state == "completed":
                    break
                await asyncio.sleep(0.02)
            return await conn.fetch_evidence(acc.upstream_id, req)
        finally:
            await conn.aclose()

    ev = asyncio.run(go())
    assert ev.page_html is not None and b"Lisbon" in ev.page_html
    assert ev.search_queries and ev.vendor_credits == 5
