"""The Bright Data connector over HTTP against the simulator's Bright Data profile: registered
like the real engines (disabled until GEO_BRIGHTDATA_API_KEY is set), capabilities that tell the
truth (scraped, no key, one snapshot cancellable, 30-day retention), trigger -> progress ->
snapshot to evidence, "building" inside HTTP 200, failed snapshots and errored records billed
nothing, the dataset's cap held by a stuck snapshot until it is cancelled, and the unreliable
search flag -- judged by the simulator's own per-input counts."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from geo_pipeline.connectors.base import NotFound, RateLimited, SubmitRequest, TransientError
from geo_pipeline.connectors.brightdata import BrightDataConnector
from geo_pipeline.connectors.factory import build_connector
from geo_pipeline.connectors.registry import load_registry
from geo_pipeline.domain.catalogue import PlatformDisabled, Registry
from geo_pipeline_tests.fixtures.simulator import SimulatorProcess, start_simulator

KEY = "sim-brightdata-key"
PLATFORM = "chatgpt_brightdata"
CONTROL = "/_control/services/brightdata"


@pytest.fixture(scope="module")
def sim_module() -> Iterator[SimulatorProcess]:
    sim = start_simulator(seed=5)
    yield sim
    sim.stop()


@pytest.fixture
def sim(sim_module: SimulatorProcess) -> SimulatorProcess:
    httpx.post(f"{sim_module.url}{CONTROL}/reset", timeout=10).raise_for_status()
    return sim_module


@pytest.fixture
def registry(sim: SimulatorProcess, monkeypatch: pytest.MonkeyPatch) -> Registry:
    monkeypatch.setenv("GEO_BRIGHTDATA_URL", f"{sim.url}/brightdata")
    monkeypatch.setenv("GEO_BRIGHTDATA_API_KEY", KEY)
    return load_registry()


def profile(sim: SimulatorProcess, **overrides: Any) -> None:
    httpx.post(f"{sim.url}{CONTROL}/profile", json=overrides, timeout=10).raise_for_status()


def advance(sim: SimulatorProcess, seconds: float) -> None:
    httpx.post(f"{sim.url}{CONTROL}/advance", json={"seconds": seconds}, timeout=10)


def counts(sim: SimulatorProcess) -> dict[str, Any]:
    return dict(httpx.get(f"{sim.url}{CONTROL}/stats", timeout=10).json())


def request(region: str = "us", **kw: Any) -> SubmitRequest:
    return SubmitRequest(
        sample_id=kw.pop("sample_id", f"s{uuid.uuid4().hex[:20]}"),
        attempt_no=1,
        tenant_id="acme",
        question=kw.pop("question", f"Which coffee chain is best? {uuid.uuid4().hex[:6]}"),
        platform=PLATFORM,
        device="web",
        region=region,
        mode="standard",
        screenshot=kw.pop("screenshot", False),
    )


def input_of(req: SubmitRequest) -> str:
    return f"{req.region.upper()}|{req.question}"


def connector(registry: Registry) -> BrightDataConnector:
    conn = build_connector(registry.entry(PLATFORM))
    assert isinstance(conn, BrightDataConnector)
    return conn


async def follow(conn: BrightDataConnector, upstream_id: str) -> str:
    for _ in range(400):
        state = (await conn.poll(upstream_id)).state
        if state in ("completed", "failed"):
            return state
        await asyncio.sleep(0.02)
    raise AssertionError("the snapshot never finished")


def test_disabled_until_the_key_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GEO_BRIGHTDATA_API_KEY", raising=False)
    reg = load_registry()
    assert PLATFORM in reg.disabled
    with pytest.raises(PlatformDisabled, match="GEO_BRIGHTDATA_API_KEY"):
        reg.entry(PLATFORM)


def test_capabilities_tell_the_truth(registry: Registry) -> None:
    caps = registry.entry(PLATFORM).capabilities
    assert caps.access == "scraped"
    assert not caps.idempotency_keys and not caps.lookup_by_key and not caps.recoverable
    assert caps.cancellable and caps.cancel_scope == "task"
    assert caps.result_retention_s == 30 * 24 * 3600
    assert caps.prices.retry_fee_rule == "free_after_failure"


def test_round_trip_to_evidence(sim: SimulatorProcess, registry: Registry) -> None:
    async def go() -> Any:
        conn = connector(registry)
        req = request(region="gb")
        try:
            acc = await conn.submit(req)
            assert acc.upstream_id.startswith("s_")
            assert await follow(conn, acc.upstream_id) == "completed"
            return req, await conn.fetch_evidence(acc.upstream_id, req)
        finally:
            await conn.aclose()

    req, ev = asyncio.run(go())
    assert ev.collection_state == "completed" and ev.answer_text
    assert ev.citations and ev.citations[0].id == "1" and ev.citations[0].title
    assert ev.search_queries and ev.web_search_used  # the fan-out
    assert ev.page_html and b"answer_html" in ev.raw_body  # the rendered answer, archived
    got = counts(sim)["keys"][input_of(req)]
    assert got == {
        "trigger_calls": 1,
        "snapshots_created": 1,
        "records_billed": 1,
        "results_fetched": 1,
        "cancelled": 0,
    }


def test_building_inside_http_200_is_not_an_answer(
    sim: SimulatorProcess, registry: Registry
) -> None:
    profile(sim, running_s=[3600, 3600])

    async def go() -> Any:
        conn = connector(registry)
        req = request()
        try:
            acc = await conn.submit(req)
            assert (await conn.poll(acc.upstream_id)).state in ("pending", "running")
            with pytest.raises(TransientError, match="building"):
                await conn.fetch_evidence(acc.upstream_id, req)
            advance(sim, 3700)
            assert (await conn.poll(acc.upstream_id)).state == "completed"
            return await conn.fetch_evidence(acc.upstream_id, req)
        finally:
            await conn.aclose()

    assert asyncio.run(go()).collection_state == "completed"
    assert counts(sim)["requests"]["snapshot:building"] == 1


def test_failed_snapshots_and_errored_records_bill_nothing(
    sim: SimulatorProcess, registry: Registry
) -> None:
    async def one() -> tuple[str, Any]:
        conn = connector(registry)
        req = request()
        try:
            acc = await conn.submit(req)
            state = await follow(conn, acc.upstream_id)
            if state == "failed":
                return state, None
            return state, await conn.fetch_evidence(acc.upstream_id, req)
        finally:
            await conn.aclose()

    profile(sim, fail_rate=1.0)
    state, _ = asyncio.run(one())
    assert state == "failed"
    profile(sim, fail_rate=0.0, record_error_rate=1.0)
    state, ev = asyncio.run(one())
    assert state == "completed" and ev.collection_state == "failed"
    assert any(w.startswith("RECORD_ERROR:") for w in ev.warnings)
    stats = counts(sim)
    assert stats["snapshots"] == 2 and stats["records_billed"] == 0


def test_a_stuck_snapshot_holds_the_cap_until_cancelled(
    sim: SimulatorProcess, registry: Registry
) -> None:
    profile(sim, stuck_rate=1.0, concurrency_cap=1)

    async def go() -> None:
        conn = connector(registry)
        try:
            first = await conn.submit(request())
            assert (await conn.poll(first.upstream_id)).state in ("pending", "running")
            with pytest.raises(RateLimited):
                await conn.submit(request())  # the abandoned snapshot holds the dataset's cap
            assert (await conn.cancel(first.upstream_id)).upstream_cancelled
            assert (await conn.poll(first.upstream_id)).state == "failed"
            await conn.submit(request())  # the slot is free again
        finally:
            await conn.aclose()

    asyncio.run(go())
    stats = counts(sim)
    assert stats["cancelled"] == 1 and stats["records_billed"] == 0
    assert stats["requests"]["trigger:429"] == 1


def test_search_flag_that_disagrees_is_flagged_and_queries_decide(
    sim: SimulatorProcess, registry: Registry
) -> None:
    profile(sim, search_flag_wrong_rate=1.0)

    async def go() -> Any:
        conn = connector(registry)
        req = request()
        try:
            acc = await conn.submit(req)
            await follow(conn, acc.upstream_id)
            return await conn.fetch_evidence(acc.upstream_id, req)
        finally:
            await conn.aclose()

    ev = asyncio.run(go())
    assert ev.search_queries and ev.web_search_used
    assert "SEARCH_FLAG_DISAGREES" in ev.warnings
    assert b'"web_search_triggered":false' in ev.raw_body.replace(b" ", b"")


def test_a_snapshot_past_retention_is_gone(sim: SimulatorProcess, registry: Registry) -> None:
    async def go() -> None:
        conn = connector(registry)
        try:
            acc = await conn.submit(request())
            await follow(conn, acc.upstream_id)
            advance(sim, 31 * 24 * 3600)
            with pytest.raises(NotFound):
                await conn.poll(acc.upstream_id)
        finally:
            await conn.aclose()

    asyncio.run(go())
    assert counts(sim)["expired"] == 1
