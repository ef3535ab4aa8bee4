"""DataForSEO's LLM Scraper over HTTP: the simulator's profile against the contract (research on
answer services §2.2: errors inside HTTP 200 at two levels, billing at task_post, tasks_ready,
30-day retention) and the connector against it: errors classified at both levels (R13), our key
sent as ``tag``, an unknown outcome looked up by tag, and a look-up that cannot prove absence
raising instead of answering "absent"."""

from __future__ import annotations

import asyncio
import base64
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from geo_pipeline.connectors.base import (
    AcceptanceUnknown,
    InvalidParams,
    NoPermission,
    NotFound,
    RateLimited,
    SubmitRequest,
)
from geo_pipeline.connectors.dataforseo import DataForSeoConnector, LookupInconclusive
from geo_pipeline.connectors.factory import build_connector
from geo_pipeline.connectors.registry import load_registry
from geo_pipeline.domain.catalogue import Registry
from geo_pipeline_tests.fixtures.simulator import SimulatorProcess, start_simulator

CREDS = "sim-login:sim-password"
AUTH = {"Authorization": "Basic " + base64.b64encode(CREDS.encode()).decode()}
PLATFORM = "chatgpt_dataforseo"
SCRAPER = "/dataforseo/v3/ai_optimization/chat_gpt/llm_scraper"


@pytest.fixture(scope="module")
def sim_module() -> Iterator[SimulatorProcess]:
    sim = start_simulator(seed=6)
    yield sim
    sim.stop()


@pytest.fixture
def sim(sim_module: SimulatorProcess) -> SimulatorProcess:
    httpx.post(f"{sim_module.url}/_control/services/dataforseo/reset", timeout=10)
    return sim_module


@pytest.fixture
def registry(sim: SimulatorProcess, monkeypatch: pytest.MonkeyPatch) -> Registry:
    monkeypatch.setenv("GEO_DATAFORSEO_URL", f"{sim.url}/dataforseo")
    monkeypatch.setenv("GEO_DATAFORSEO_CREDENTIALS", CREDS)
    return load_registry()


def profile(sim: SimulatorProcess, **overrides: Any) -> None:
    httpx.post(
        f"{sim.url}/_control/services/dataforseo/profile", json=overrides, timeout=10
    ).raise_for_status()


def stats(sim: SimulatorProcess) -> dict[str, Any]:
    return dict(httpx.get(f"{sim.url}/_control/services/dataforseo/stats", timeout=10).json())


def post(sim: SimulatorProcess, tasks: Any, headers: dict[str, str] = AUTH) -> httpx.Response:
    return httpx.post(f"{sim.url}{SCRAPER}/task_post", json=tasks, headers=headers, timeout=10)


def task(tag: str, **kw: Any) -> dict[str, Any]:
    return {
        "keyword": "best coffee chain?",
        "location_code": 2840,
        "language_code": "en",
        "tag": tag,
        **kw,
    }


def request(**kw: Any) -> SubmitRequest:
    return SubmitRequest(
        sample_id=f"s{uuid.uuid4().hex[:24]}",
        attempt_no=1,
        tenant_id="acme",
        question=kw.pop("question", "Which coffee chain is best?"),
        platform=PLATFORM,
        device="web",
        region=kw.pop("region", "us"),
        mode="standard",
        screenshot=False,
    )


def connector(registry: Registry) -> DataForSeoConnector:
    conn = build_connector(registry.entry(PLATFORM))
    assert isinstance(conn, DataForSeoConnector)
    return conn


async def follow(conn: DataForSeoConnector, upstream_id: str) -> str:
    for _ in range(400):
        state = (await conn.poll(upstream_id)).state
        if state in ("completed", "failed"):
            return state
        await asyncio.sleep(0.02)
    raise AssertionError("never finished")


# ------------------------------------------------------------------ the simulator's profile
def test_errors_live_inside_http_200_at_two_levels(sim: SimulatorProcess) -> None:
    resp = post(sim, [task("a:1"), {"keyword": "x", "tag": "b:1"}])
    assert resp.status_code == 200
    body = resp.json()
    assert body["status_code"] == 20000 and body["tasks_error"] == 1
    ok, bad = body["tasks"]
    assert ok["status_code"] == 20100 and ok["data"]["tag"] == "a:1" and ok["cost"] > 0
    assert bad["status_code"] == 40501 and "location" in bad["status_message"]
    profile(sim, rate_limited_rate=1.0)
    limited = post(sim, [task("c:1")])
    assert limited.status_code == 200 and limited.json()["status_code"] == 40202
    assert stats(sim)["tasks"] == 1  # billed at task_post, only the one created
    unauth = post(sim, [task("d:1")], headers={"Authorization": "Basic bm9wZQ=="})
    assert unauth.status_code == 401 and unauth.json()["status_code"] == 40100


def test_ready_get_and_retention(sim: SimulatorProcess) -> None:
    # The task takes 10 minutes of the service's clock, which the test advances: not ready before,
    # ready after, whatever the machine's speed.
    profile(sim, completion_s=[600, 600])
    tid = post(sim, [task("r:1")]).json()["tasks"][0]["id"]
    get = lambda: httpx.get(f"{sim.url}{SCRAPER}/task_get/advanced/{tid}", headers=AUTH).json()  # noqa: E731
    assert get()["tasks"][0]["status_code"] in (40601, 40602)
    assert not httpx.get(f"{sim.url}{SCRAPER}/tasks_ready", headers=AUTH).json()["tasks"][0][
        "result"
    ]
    httpx.post(f"{sim.url}/_control/services/dataforseo/advance", json={"seconds": 601})
    ready: list[Any] = []
    for _ in range(200):
        ready = httpx.get(f"{sim.url}{SCRAPER}/tasks_ready", headers=AUTH).json()["tasks"][0][
            "result"
        ]
        if ready:
            break
        asyncio.run(asyncio.sleep(0.02))
    assert [(r["id"], r["tag"]) for r in ready] == [(tid, "r:1")]
    done = get()["tasks"][0]
    assert done["status_code"] == 20000
    result = done["result"][0]
    assert result["markdown"] and result["sources"] and "fan_out_queries" in result
    # Collected: no longer ready; still fetchable for 30 days, then 40403 inside a 200.
    assert not httpx.get(f"{sim.url}{SCRAPER}/tasks_ready", headers=AUTH).json()["tasks"][0][
        "result"
    ]
    httpx.post(f"{sim.url}/_control/services/dataforseo/advance", json={"seconds": 31 * 86400})
    assert get()["tasks"][0]["status_code"] == 40403
    assert stats(sim)["keys"]["r:1"] == {
        "submit_calls": 1,
        "tasks_created": 1,
        "tasks_billed": 1,
        "results_fetched": 1,
    }


# ------------------------------------------------------------------ the connector
def test_round_trip_with_tag_and_citations(sim: SimulatorProcess, registry: Registry) -> None:
    async def go() -> Any:
        conn = connector(registry)
        req = request(region="gb")
        try:
            acc = await conn.submit(req)
            assert await follow(conn, acc.upstream_id) == "completed"
            return req, await conn.fetch_evidence(acc.upstream_id, req)
        finally:
            await conn.aclose()

    req, ev = asyncio.run(go())
    assert ev.collection_state == "completed" and ev.answer_text
    assert any(c.relation == "cited" for c in ev.citations) and ev.web_search_used
    got = stats(sim)["keys"][req.idempotency_key]  # our key is the task's tag
    assert got["tasks_created"] == 1 and got["results_fetched"] == 1


def test_errors_are_classified_at_both_levels(sim: SimulatorProcess, registry: Registry) -> None:
    async def submit(req: SubmitRequest) -> None:
        conn = connector(registry)
        try:
            await conn.submit(req)
        finally:
            await conn.aclose()

    profile(sim, us_only=True)
    with pytest.raises(InvalidParams, match="40501"):  # per task, inside a 200
        asyncio.run(submit(request(region="de")))
    profile(sim, us_only=False, rate_limited_rate=1.0)
    with pytest.raises(RateLimited, match="40202"):  # top level, inside a 200
        asyncio.run(submit(request()))
    profile(sim, rate_limited_rate=0.0, login="other")
    with pytest.raises(NoPermission):
        asyncio.run(submit(request()))
    profile(sim, login="sim-login", fail_rate=1.0)

    async def failed() -> Any:
        conn = connector(registry)
        try:
            acc = await conn.submit(request())
            await follow(conn, acc.upstream_id)
            return await conn.poll(acc.upstream_id)
        finally:
            await conn.aclose()

    polled = asyncio.run(failed())
    assert polled.state == "failed" and "40103" in (polled.error or "")
    assert stats(sim)["tasks"] == 1  # the failed one was billed at post; the refused ones not


def test_lost_answer_is_found_by_its_tag(sim: SimulatorProcess, registry: Registry) -> None:
    profile(sim, lost_rate=1.0, completion_s=[5.0, 5.0])
    req = request()

    async def go() -> Any:
        conn = connector(registry)
        try:
            with pytest.raises(AcceptanceUnknown):
                await conn.submit(req)
            return await conn.lookup(req.idempotency_key)  # not ready: found by id_list
        finally:
            await conn.aclose()

    found = asyncio.run(go())
    assert found is not None
    assert stats(sim)["keys"][req.idempotency_key]["tasks_created"] == 1


def test_a_lookup_that_cannot_prove_absence_raises(
    sim: SimulatorProcess, registry: Registry
) -> None:
    async def lookup(**options: Any) -> Any:
        conn = connector(registry)
        conn.id_list_lookup = options.get("id_list", True)
        try:
            return await conn.lookup("never-sent:1")
        finally:
            await conn.aclose()

    assert asyncio.run(lookup()) is None  # id_list answered in full: verified absent
    with pytest.raises(LookupInconclusive, match="absence is unproven"):
        asyncio.run(lookup(id_list=False))  # tasks_ready alone lists only finished tasks
    profile(sim, id_list_per_min=0)
    with pytest.raises(RateLimited, match="40202"):  # id_list's 10 calls/min
        asyncio.run(lookup())


def test_unknown_task_is_not_found(sim: SimulatorProcess, registry: Registry) -> None:
    async def go() -> None:
        conn = connector(registry)
        try:
            await conn.poll(str(uuid.uuid4()))
        finally:
            await conn.aclose()

    with pytest.raises(NotFound, match="40401"):
        asyncio.run(go())
