"""SerpApi over HTTP: the simulator's profile (research on answer services §2.4: the 1-hour cache
that makes repeats free and identical, overviews present only sometimes, the 4-minute
page_token) and the connector against it: no_cache on every request, an empty overview as a
valid "no overview" observation, the page_token follow-up made at once."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from geo_pipeline.connectors.base import NoPermission, SubmitRequest
from geo_pipeline.connectors.factory import build_connector
from geo_pipeline.connectors.registry import load_registry
from geo_pipeline.connectors.serpapi import NO_AI_OVERVIEW, SerpApiConnector
from geo_pipeline.domain.catalogue import Registry
from geo_pipeline_tests.fixtures.simulator import SimulatorProcess, start_simulator

KEY = "sim-serpapi-key"


@pytest.fixture(scope="module")
def sim_module() -> Iterator[SimulatorProcess]:
    sim = start_simulator(seed=8)
    yield sim
    sim.stop()


@pytest.fixture
def sim(sim_module: SimulatorProcess) -> SimulatorProcess:
    httpx.post(f"{sim_module.url}/_control/services/serpapi/reset", timeout=10)
    return sim_module


@pytest.fixture
def registry(sim: SimulatorProcess, monkeypatch: pytest.MonkeyPatch) -> Registry:
    monkeypatch.setenv("GEO_SERPAPI_URL", f"{sim.url}/serpapi")
    monkeypatch.setenv("GEO_SERPAPI_API_KEY", KEY)
    return load_registry()


def profile(sim: SimulatorProcess, **overrides: Any) -> None:
    httpx.post(f"{sim.url}/_control/services/serpapi/profile", json=overrides, timeout=10)


def stats(sim: SimulatorProcess) -> dict[str, Any]:
    return dict(httpx.get(f"{sim.url}/_control/services/serpapi/stats", timeout=10).json())


def search(sim: SimulatorProcess, **params: str) -> httpx.Response:
    return httpx.get(
        f"{sim.url}/serpapi/search.json", params={"api_key": KEY, **params}, timeout=10
    )


def request(platform: str, question: str = "best coffee chain?") -> SubmitRequest:
    return SubmitRequest(
        sample_id=f"s{uuid.uuid4().hex[:24]}",
        attempt_no=1,
        tenant_id="acme",
        question=question,
        platform=platform,
        device="web",
        region="us",
        mode="standard",
        screenshot=False,
    )


def collect(registry: Registry, platform: str, req: SubmitRequest) -> Any:
    async def go() -> Any:
        conn = build_connector(registry.entry(platform))
        assert isinstance(conn, SerpApiConnector)
        try:
            acc = await conn.submit(req)
            assert acc.inline_result is not None
            assert (await conn.poll(acc.upstream_id)).state == "completed"
            return await conn.fetch_evidence(acc.upstream_id, req)
        finally:
            await conn.aclose()

    return asyncio.run(go())


def test_cache_makes_repeats_one_free_page_unless_no_cache(sim: SimulatorProcess) -> None:
    first = search(sim, engine="google_ai_mode", q="q1").json()
    again = search(sim, engine="google_ai_mode", q="q1").json()
    assert again == first  # one cached page: a repeat would count the same answer twice
    fresh = search(sim, engine="google_ai_mode", q="q1", no_cache="true").json()
    assert fresh["search_metadata"]["id"] != first["search_metadata"]["id"]
    assert stats(sim)["queries"]["q1"] == {"searches": 3, "cache_hits": 1, "billed": 2}
    bad = search(sim, engine="google_ai_mode", q="q1", no_cache="true", **{"async": "true"})
    assert bad.status_code == 400 and "no_cache" in bad.json()["error"]
    assert search(sim, engine="google_ai_mode", q="q1", api_key="nope").status_code == 401


def test_overview_only_sometimes_and_page_token_expires(sim: SimulatorProcess) -> None:
    profile(sim, ai_overview_rate=0.5)
    pages = [search(sim, engine="google", q="q2", no_cache="true").json() for _ in range(20)]
    with_overview = sum("ai_overview" in p for p in pages)
    assert 0 < with_overview < 20  # the same query: an overview only sometimes
    assert all(
        "ai_overview" not in search(sim, engine="google", q="q3", hl="de").json() for _ in range(3)
    )  # only with hl=en
    profile(sim, ai_overview_rate=1.0, page_token_rate=1.0)
    token = search(sim, engine="google", q="q4", no_cache="true").json()["ai_overview"][
        "page_token"
    ]
    httpx.post(f"{sim.url}/_control/services/serpapi/advance", json={"seconds": 241}, timeout=10)
    late = search(sim, engine="google_ai_overview", page_token=token)
    assert late.status_code == 400 and "expired" in late.json()["error"]


def test_ai_mode_answer_with_references(sim: SimulatorProcess, registry: Registry) -> None:
    ev = collect(registry, "aimode_serpapi", request("aimode_serpapi"))
    assert ev.collection_state == "completed" and ev.answer_text and ev.citations
    assert not ev.warnings


def test_repeats_are_never_served_from_the_cache(sim: SimulatorProcess, registry: Registry) -> None:
    q = "same question, asked three times"
    pages = [collect(registry, "aimode_serpapi", request("aimode_serpapi", q)) for _ in range(3)]
    assert len({p.upstream_id for p in pages}) == 3
    assert stats(sim)["queries"][q] == {"searches": 3, "billed": 3}


def test_no_overview_is_a_valid_observation(sim: SimulatorProcess, registry: Registry) -> None:
    profile(sim, ai_overview_rate=0.0)
    ev = collect(registry, "aioverview_serpapi", request("aioverview_serpapi"))
    assert ev.collection_state == "completed"
    assert ev.answer_text == "" and ev.citations == () and ev.warnings == (NO_AI_OVERVIEW,)


def test_page_token_overview_is_followed_at_once(sim: SimulatorProcess, registry: Registry) -> None:
    profile(sim, ai_overview_rate=1.0, page_token_rate=1.0)
    ev = collect(registry, "aioverview_serpapi", request("aioverview_serpapi", "q5"))
    assert ev.answer_text and ev.citations and not ev.warnings
    assert stats(sim)["queries"]["q5"]["follow_ups"] == 1


def test_a_bad_key_is_no_permission(
    sim: SimulatorProcess, registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GEO_SERPAPI_API_KEY", "wrong")
    with pytest.raises(NoPermission):
        collect(registry, "aimode_serpapi", request("aimode_serpapi"))
