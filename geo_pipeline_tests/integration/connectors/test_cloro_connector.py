"""The cloro connector over HTTP against the simulator's cloro profile: registered like the real
engines (disabled until GEO_CLORO_API_KEY is set), capabilities that tell the truth (scraped,
country, whole-queue cancel, 24 h retention), a round trip to evidence, and 409 on our own key
treated as *accepted* -- never a new key (R12), judged by the simulator's per-key counts."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from geo_pipeline.connectors.base import (
    AcceptanceUnknown,
    AlreadyAccepted,
    InvalidParams,
    NoPermission,
    SubmitRequest,
)
from geo_pipeline.connectors.cloro import CloroConnector
from geo_pipeline.connectors.factory import build_connector
from geo_pipeline.connectors.registry import load_registry
from geo_pipeline.domain.catalogue import PlatformDisabled, Registry
from geo_pipeline_tests.fixtures.simulator import SimulatorProcess, start_simulator

KEY = "sim-cloro-key"


@pytest.fixture(scope="module")
def sim_module() -> Iterator[SimulatorProcess]:
    sim = start_simulator(seed=4)
    yield sim
    sim.stop()


@pytest.fixture
def sim(sim_module: SimulatorProcess) -> SimulatorProcess:
    httpx.post(f"{sim_module.url}/_control/services/cloro/reset", timeout=10).raise_for_status()
    return sim_module


@pytest.fixture
def registry(sim: SimulatorProcess, monkeypatch: pytest.MonkeyPatch) -> Registry:
    monkeypatch.setenv("GEO_CLORO_URL", f"{sim.url}/cloro")
    monkeypatch.setenv("GEO_CLORO_API_KEY", KEY)
    return load_registry()


def profile(sim: SimulatorProcess, **overrides: Any) -> None:
    httpx.post(
        f"{sim.url}/_control/services/cloro/profile", json=overrides, timeout=10
    ).raise_for_status()


def counts(sim: SimulatorProcess) -> dict[str, Any]:
    return dict(httpx.get(f"{sim.url}/_control/services/cloro/stats", timeout=10).json())


def request(platform: str = "chatgpt_cloro", region: str = "us", **kw: Any) -> SubmitRequest:
    return SubmitRequest(
        sample_id=kw.pop("sample_id", f"s{uuid.uuid4().hex[:20]}"),
        attempt_no=kw.pop("attempt_no", 1),
        tenant_id="acme",
        question=kw.pop("question", "Which coffee chain is best in New York?"),
        platform=platform,
        device="web",
        region=region,
        mode="standard",
        screenshot=kw.pop("screenshot", False),
    )


def connector(registry: Registry, platform: str = "chatgpt_cloro") -> CloroConnector:
    conn = build_connector(registry.entry(platform))
    assert isinstance(conn, CloroConnector)
    return conn


async def follow(conn: CloroConnector, upstream_id: str) -> str:
    for _ in range(400):
        state = (await conn.poll(upstream_id)).state
        if state in ("completed", "failed"):
            return state
        await asyncio.sleep(0.02)
    raise AssertionError("the task never finished")


def test_disabled_until_the_key_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GEO_CLORO_API_KEY", raising=False)
    reg = load_registry()
    assert {"chatgpt_cloro", "aimode_cloro"} <= set(reg.disabled)
    with pytest.raises(PlatformDisabled, match="GEO_CLORO_API_KEY"):
        reg.entry("chatgpt_cloro")


def test_capabilities_tell_the_truth(registry: Registry) -> None:
    caps = registry.entry("chatgpt_cloro").capabilities
    assert caps.access == "scraped"
    assert caps.idempotency_keys and not caps.lookup_by_key
    assert not caps.cancellable and caps.cancel_scope == "queue"
    assert caps.result_retention_s == 24 * 3600
    assert caps.prices.retry_fee_rule == "free_after_failure"  # FAILED costs 0
    assert "us" in caps.regions and caps.devices == ("web",)
    # The API engines say what they are, too.
    assert registry.every_entry()["deepseek_api"].capabilities.access == "api"


def test_round_trip_to_evidence(sim: SimulatorProcess, registry: Registry) -> None:
    async def go() -> Any:
        conn = connector(registry)
        req = request(region="gb")
        try:
            acc = await conn.submit(req)
            assert await follow(conn, acc.upstream_id) == "completed"
            return req, acc, await conn.fetch_evidence(acc.upstream_id, req)
        finally:
            await conn.aclose()

    req, _acc, ev = asyncio.run(go())
    assert ev.collection_state == "completed" and ev.answer_text
    assert ev.citations and ev.citations[0].id == "1" and ev.citations[0].title
    assert ev.web_search_used  # searchQueries (the fan-out) came back
    assert b'"searchQueries"' in ev.raw_body and b'"creditsCharged":5' in ev.raw_body.replace(
        b" ", b""
    )
    assert "REFUSAL_SUSPECTED" not in ev.warnings
    got = counts(sim)["keys"][req.idempotency_key]
    assert (got["tasks_created"], got["tasks_billed"], got["results_fetched"]) == (1, 1, 1)


def test_refusal_is_completed_billed_and_flagged(sim: SimulatorProcess, registry: Registry) -> None:
    profile(sim, refusal_rate=1.0)

    async def go() -> Any:
        conn = connector(registry, "aimode_cloro")
        req = request("aimode_cloro")
        try:
            acc = await conn.submit(req)
            await follow(conn, acc.upstream_id)
            return await conn.fetch_evidence(acc.upstream_id, req)
        finally:
            await conn.aclose()

    ev = asyncio.run(go())
    assert ev.collection_state == "completed" and not ev.citations
    assert "REFUSAL_SUSPECTED" in ev.warnings
    assert counts(sim)["credits_charged"] == 4  # AI Mode: 4 credits, billed all the same


def test_failed_task_polls_failed(sim: SimulatorProcess, registry: Registry) -> None:
    profile(sim, fail_rate=1.0)

    async def go() -> Any:
        conn = connector(registry)
        try:
            acc = await conn.submit(request())
            await follow(conn, acc.upstream_id)
            return await conn.poll(acc.upstream_id)
        finally:
            await conn.aclose()

    polled = asyncio.run(go())
    assert polled.state == "failed" and "Maximum retries exceeded" in (polled.error or "")
    assert counts(sim)["credits_charged"] == 0


def test_lost_response_then_resend_is_accepted_never_a_second_task(
    sim: SimulatorProcess, registry: Registry
) -> None:
    """The request reached cloro and the answer was lost: our re-send under the SAME key gets
    409. The connector says 'accepted, id unknown' and sends nothing under a new key."""
    profile(sim, lost_rate=1.0)
    req = request()

    async def go() -> None:
        conn = connector(registry)
        try:
            with pytest.raises(AcceptanceUnknown):
                await conn.submit(req)
            profile(sim, lost_rate=0.0)
            with pytest.raises(AlreadyAccepted, match="409"):
                await conn.submit(req)
        finally:
            await conn.aclose()

    asyncio.run(go())
    got = counts(sim)["keys"][req.idempotency_key]
    assert got["tasks_created"] == 1 and got["submit_calls"] == 2 and got["conflicts"] == 1


def test_resend_of_a_task_this_process_saw_reads_it(
    sim: SimulatorProcess, registry: Registry
) -> None:
    req = request()

    async def go() -> tuple[str, str]:
        conn = connector(registry)
        try:
            first = await conn.submit(req)
            again = await conn.submit(req)  # 409 on our key: the task we know, read back
            return first.upstream_id, again.upstream_id
        finally:
            await conn.aclose()

    first, again = asyncio.run(go())
    assert first == again
    assert counts(sim)["keys"][req.idempotency_key]["tasks_created"] == 1


def test_errors_are_classified(sim: SimulatorProcess, registry: Registry, monkeypatch) -> None:
    async def submit(req: SubmitRequest) -> None:
        conn = connector(registry)
        try:
            await conn.submit(req)
        finally:
            await conn.aclose()

    with pytest.raises(InvalidParams, match="region"):
        asyncio.run(submit(request(region="zz")))  # refused before anything is sent (R16)
    with pytest.raises(InvalidParams, match="400"):
        asyncio.run(submit(request(question="x" * 10_001)))
    monkeypatch.setenv("GEO_CLORO_API_KEY", "wrong")
    with pytest.raises(NoPermission, match="401"):
        asyncio.run(submit(request()))
    assert counts(sim)["tasks"] == 0


def test_cancel_says_one_task_cannot_be_stopped(sim: SimulatorProcess, registry: Registry) -> None:
    async def go() -> Any:
        conn = connector(registry)
        try:
            acc = await conn.submit(request())
            return acc, await conn.cancel(acc.upstream_id)
        finally:
            await conn.aclose()

    _acc, res = asyncio.run(go())
    assert res.local_intent_recorded and not res.upstream_cancelled
    assert "whole queue" in res.detail
    assert counts(sim)["cleared"] == 0  # nobody emptied the organisation's queue
