"""One contract suite, run against every connector (R16, R17): the simulator-backed task API
connectors over HTTP, the real OpenAI-compatible protocol connector over HTTP against the
simulator's chat completions endpoint (``openai_sim``), and the in-process InstantConnector."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest

from geo_pipeline.connectors.base import (
    Acceptance,
    Connector,
    ConnectorError,
    Evidence,
    InvalidParams,
    NoStatementApi,
    NotFound,
    PollResult,
    SubmitRequest,
)
from geo_pipeline.connectors.factory import ConnectorSet
from geo_pipeline.connectors.protocols import COST_APIS, DAY_TOTAL_PREFIX
from geo_pipeline.simulator.instant import InstantConnector
from geo_pipeline_tests.fixtures.simulator import registry_with_protocols

T = TypeVar("T")

CONNECTORS = [
    ("deepseek", False),
    ("doubao", False),
    ("kimi", False),
    ("qwen", False),
    ("openai_sim", False),
    ("responses_sim", False),
    ("perplexity_sim", False),
    ("gemini_sim", False),
    ("anthropic_sim", False),
    ("deepseek", True),  # InstantConnector
]
IDS = [
    "sim-deepseek",
    "sim-doubao",
    "sim-kimi",
    "sim-qwen",
    "openai_chat-http",
    "openai_responses-http",
    "perplexity-http",
    "gemini-http",
    "anthropic-http",
    "instant-deepseek",
]
SYNC = {"openai_sim", "responses_sim", "perplexity_sim", "gemini_sim", "anthropic_sim"}


def run(coro_fn: Callable[[ConnectorSet], Awaitable[T]], url: str, instant: bool) -> T:
    async def main() -> T:
        async with ConnectorSet(
            registry_with_protocols(url), stand_in=InstantConnector if instant else None
        ) as connectors:
            return await coro_fn(connectors)

    return asyncio.run(main())


def request_for(
    conn: Connector, *, attempt: int = 1, screenshot: bool = True, **kw: Any
) -> SubmitRequest:
    caps = conn.capabilities()
    values: dict[str, Any] = {
        "sample_id": f"contract-{uuid.uuid4().hex[:12]}",
        "attempt_no": attempt,
        "tenant_id": "acme",
        "question": "国内性价比最高的连锁咖啡品牌有哪些？",
        "platform": conn.platform,
        "device": caps.devices[0],
        "region": caps.regions[0],
        "mode": caps.modes[0],
        "screenshot": screenshot,
    }
    values.update(kw)
    return SubmitRequest(**values)


async def wait_done(conn: Connector, upstream_id: str) -> PollResult:
    for _ in range(200):
        result = await conn.poll(upstream_id)
        assert result.upstream_id == upstream_id
        assert result.state in ("pending", "running", "completed", "failed")
        if result.state in ("completed", "failed"):
            return result
        await asyncio.sleep(0.02)
    raise AssertionError("the task never finished")


@pytest.mark.parametrize(("platform", "instant"), CONNECTORS, ids=IDS)
def test_capabilities_describe_the_platform(
    simulator_url: str, platform: str, instant: bool
) -> None:
    async def body(cs: ConnectorSet) -> None:
        conn = cs[platform]
        assert isinstance(conn, Connector)
        caps = conn.capabilities()
        assert caps.platform == platform == conn.platform
        assert caps.devices and caps.regions and caps.modes
        assert caps.prices.version and caps.prices.currency == "CNY"
        assert set(caps.modes) <= set(caps.prices.base)
        if platform in SYNC:
            # A synchronous API adapted to submit/poll says so, whatever the registry file claims.
            assert not caps.asynchronous and not caps.screenshot and not caps.lookup_by_key

    run(body, simulator_url, instant)


@pytest.mark.parametrize(("platform", "instant"), CONNECTORS, ids=IDS)
def test_submit_poll_fetch_round_trip(simulator_url: str, platform: str, instant: bool) -> None:
    async def body(cs: ConnectorSet) -> tuple[SubmitRequest, Acceptance, Evidence]:
        conn = cs[platform]
        req = request_for(conn)
        acc = await conn.submit(req)
        assert acc.upstream_id
        if conn.capabilities().asynchronous:
            assert acc.inline_result is None  # an acceptance, never a fabricated answer
        else:
            assert acc.inline_result  # the synchronous response, kept exactly
        assert (await wait_done(conn, acc.upstream_id)).state == "completed"
        return req, acc, await conn.fetch_evidence(acc.upstream_id, req)

    req, acc, ev = run(body, simulator_url, instant)
    assert ev.sample_id == req.sample_id and ev.upstream_id == acc.upstream_id
    assert ev.collection_state == "completed"
    assert isinstance(ev.raw_body, bytes) and ev.raw_body
    assert ev.raw_mime_type == "application/json"
    assert ev.answer_text.strip()
    # The raw body is the engine's JSON exactly as received, and the answer text came from it.
    # (Anthropic splits the text into blocks around citations, hence line by line.)
    raw_text = ev.raw_body.decode()
    for line in filter(None, ev.answer_text.split("\n")):
        assert json.dumps(line, ensure_ascii=False)[1:-1] in raw_text
    assert ev.citations, "default profiles always cite at least two sources"
    for c in ev.citations:
        assert c.url.startswith("https://")
        assert c.relation in ("cited", "retrieved")
    assert any(c.relation == "cited" for c in ev.citations)
    for c in ev.citations:
        if c.span_start is not None and c.span_end is not None:
            # Where the format gives a span, it covers the text that cites this URL.
            assert c.url in ev.answer_text[c.span_start : c.span_end]
    if acc.inline_result is not None:
        assert ev.raw_body == acc.inline_result


@pytest.mark.parametrize(("platform", "instant"), CONNECTORS, ids=IDS)
def test_same_attempt_never_creates_a_second_task(
    simulator_url: str, platform: str, instant: bool
) -> None:
    async def body(cs: ConnectorSet) -> None:
        conn = cs[platform]
        caps = conn.capabilities()
        req = request_for(conn)
        if not caps.lookup_by_key:
            with pytest.raises(NotImplementedError):
                await conn.lookup(req.idempotency_key)
            return
        assert await conn.lookup(req.idempotency_key) is None  # verified absent before submit
        first = await conn.submit(req)
        again = await conn.submit(req)
        assert again.upstream_id == first.upstream_id
        found = await conn.lookup(req.idempotency_key)
        assert found is not None and found.upstream_id == first.upstream_id
        retry = await conn.submit(request_for(conn, attempt=2, sample_id=req.sample_id))
        assert retry.upstream_id != first.upstream_id  # a new attempt is a new upstream task

    run(body, simulator_url, instant)


@pytest.mark.parametrize(("platform", "instant"), CONNECTORS, ids=IDS)
def test_unsupported_options_are_refused_before_submit(
    simulator_url: str, platform: str, instant: bool
) -> None:
    async def body(cs: ConnectorSet) -> None:
        conn = cs[platform]
        for bad in ({"mode": "telepathy"}, {"device": "fridge"}, {"region": "mars"}):
            with pytest.raises(InvalidParams):
                await conn.submit(request_for(conn, **bad))

    run(body, simulator_url, instant)


@pytest.mark.parametrize(("platform", "instant"), CONNECTORS, ids=IDS)
def test_screenshot_cancel_and_statement(simulator_url: str, platform: str, instant: bool) -> None:
    async def body(cs: ConnectorSet) -> None:
        conn = cs[platform]
        caps = conn.capabilities()
        req = request_for(conn, screenshot=True)
        acc = await conn.submit(req)
        await wait_done(conn, acc.upstream_id)
        ev = await conn.fetch_evidence(acc.upstream_id, req)
        shot = await conn.fetch_screenshot(acc.upstream_id)
        assert shot.kind == "screenshot"
        if caps.screenshot:
            assert shot.status == "available" and shot.mime_type == "image/png"
            assert shot.data is not None and shot.data.startswith(b"\x89PNG\r\n\x1a\n")
            assert ev.screenshot is not None and ev.screenshot.status == "available"
            assert ev.screenshot_used
        else:
            assert shot.status == "unavailable" and shot.data is None
            assert "SCREENSHOT_UNAVAILABLE" in ev.warnings
            assert not ev.screenshot_used
        cancel = await conn.cancel(acc.upstream_id)
        assert cancel.local_intent_recorded
        assert not cancel.upstream_cancelled  # already finished: nothing to stop
        today = (ev.captured_at.date()).isoformat()
        if platform in SYNC and conn.protocol not in COST_APIS:  # type: ignore[attr-defined]
            with pytest.raises(NoStatementApi) as exc:  # a ConnectorError and NotImplementedError
                await conn.fee_statement(today)
            assert isinstance(exc.value, ConnectorError | NotImplementedError)
            return
        if platform in SYNC:
            # A vendor cost API bills per day, never per request: day-total lines only.
            stmt = await conn.fee_statement(today)
            assert stmt.lines and all(
                line.upstream_id == f"{DAY_TOTAL_PREFIX}{platform}:{today}" for line in stmt.lines
            ), stmt.lines
            return
        stmt = await conn.fee_statement(today)
        mine = [line for line in stmt.lines if line.upstream_id == acc.upstream_id]
        items = {line.item: line.amount_minor for line in mine}
        assert items.get("base") == caps.prices.base[req.mode]
        if caps.screenshot and caps.prices.screenshot:
            assert items.get("screenshot") == caps.prices.screenshot
        assert all(line.price_version == caps.prices.version for line in mine)

    run(body, simulator_url, instant)


@pytest.mark.parametrize(("platform", "instant"), CONNECTORS, ids=IDS)
def test_unknown_upstream_id_is_not_found(simulator_url: str, platform: str, instant: bool) -> None:
    async def body(cs: ConnectorSet) -> None:
        conn = cs[platform]
        with pytest.raises(NotFound):
            await conn.poll(f"{platform}-does-not-exist")

    run(body, simulator_url, instant)
