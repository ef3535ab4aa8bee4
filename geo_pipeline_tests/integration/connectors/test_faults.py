"""1,000 tasks through a simulator process with every fault kind enabled: each fault must surface
from the connector as the right typed error (R13), counted against the simulator's own record of
which faults it injected, and no attempt may ever create a second upstream task (R9, R12)."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from geo_pipeline.connectors.base import (
    AcceptanceUnknown,
    ConnectorError,
    InvalidParams,
    NoPermission,
    RateLimited,
    SubmitRequest,
    TransientError,
    Unparseable,
    UpstreamFailed,
)
from geo_pipeline.connectors.factory import ConnectorSet
from geo_pipeline_tests.fixtures.simulator import (
    PROTOCOL_PLATFORMS,
    SimulatorProcess,
    registry_for,
    registry_with_protocols,
)

PLATFORMS = ("deepseek", "doubao", "kimi", "qwen")
FAULTY = {
    "defaults": {
        "completion_s": [0.0, 0.05],
        "rate_limited_rate": 0.05,
        "retry_after_s": 0.25,
        "transient_rate": 0.05,
        "response_lost_rate": 0.05,
        "invalid_params_rate": 0.03,
        "permission_error_rate": 0.03,
        "upstream_failure_rate": 0.05,
        "poll_error_rate": 0.05,
        "unparseable_rate": 0.05,
        "screenshot_late_rate": 0.2,
        "screenshot_never_rate": 0.1,
        "screenshot_delay_s": [0.8, 1.2],  # long enough to be seen pending under load
        "bad_answer_rate": 0.15,
        "hostile_rate": 0.15,
    }
}


async def drive(cs: ConnectorSet, n_tasks: int) -> tuple[Counter[str], dict[str, Any]]:
    seen: Counter[str] = Counter()
    evidence_kinds: Counter[str] = Counter()
    sem = asyncio.Semaphore(48)

    def note(where: str, exc: ConnectorError) -> None:
        seen[f"{where}:{type(exc).__name__}"] += 1

    async def one(i: int) -> None:
        platform = PLATFORMS[i % len(PLATFORMS)]
        conn = cs[platform]
        caps = conn.capabilities()
        req = SubmitRequest(
            sample_id=f"fault-{i:05d}",
            attempt_no=1,
            tenant_id="acme",
            question=("国内性价比最高的连锁咖啡品牌有哪些？", "Best value coffee chain in China?")[
                i % 2
            ],
            platform=platform,
            device=caps.devices[0],
            region=caps.regions[0],
            mode=caps.modes[i % len(caps.modes)],
            screenshot=caps.screenshot,
        )
        async with sem:
            upstream_id = None
            for _ in range(20):  # the same attempt, re-sent only when nothing was accepted
                try:
                    upstream_id = (await conn.submit(req)).upstream_id
                    break
                except RateLimited as exc:
                    note("submit", exc)
                    assert exc.retry_after_s == 0.25  # Retry-After reaches the retry policy
                except TransientError as exc:
                    note("submit", exc)
                    assert exc.status in (500, 502, 503)
                except AcceptanceUnknown as exc:
                    note("submit", exc)
                    # R12: no response is not 'not executed' - look the key up before anything.
                    found = await conn.lookup(req.idempotency_key)
                    assert found is not None, "a lost response still created the task"
                    upstream_id = found.upstream_id
                    break
                except (InvalidParams, NoPermission) as exc:
                    note("submit", exc)
                    return  # no retry for these classes
            assert upstream_id is not None
            state = None
            for _ in range(400):
                try:
                    polled = await conn.poll(upstream_id)
                except TransientError as exc:
                    note("poll", exc)
                    continue  # keep the id, keep polling (R13)
                state = polled.state
                if state in ("completed", "failed"):
                    break
                await asyncio.sleep(0.01)
            if state == "failed":
                seen["poll:failed"] += 1
                try:
                    await conn.fetch_evidence(upstream_id, req)
                except UpstreamFailed as exc:
                    note("fetch", exc)
                return
            assert state == "completed"
            try:
                ev = await conn.fetch_evidence(upstream_id, req)
            except Unparseable as exc:
                note("fetch", exc)
                assert exc.raw and exc.raw.startswith(b"{")  # kept exactly as received
                return
            seen["fetch:ok"] += 1
            text = ev.answer_text
            if not text:
                evidence_kinds["empty"] += 1
            elif "<script>" in text or "onerror=" in text or "javascript:" in text:
                evidence_kinds["hostile"] += 1
            elif "登录" in text or "log in" in text:
                evidence_kinds["login"] += 1
            elif "captcha" in text:
                evidence_kinds["captcha"] += 1
            elif "502 Bad Gateway" in text:
                evidence_kinds["error_page"] += 1
            if ev.provider_truncated:
                evidence_kinds["truncated"] += 1
            for w in ev.warnings:
                evidence_kinds[w] += 1
            if ev.screenshot is not None and ev.screenshot.status != "unavailable":
                shot = None
                for _ in range(200):
                    shot = await conn.fetch_screenshot(upstream_id)
                    if shot.status != "pending":
                        break
                    await asyncio.sleep(0.05)
                assert shot is not None and shot.status == "available"
                assert shot.data is not None and shot.data.startswith(b"\x89PNG")
                evidence_kinds["screenshot_fetched"] += 1

    await asyncio.gather(*(one(i) for i in range(n_tasks)))
    return seen, dict(evidence_kinds)


def injected(stats: dict[str, Any], fault: str) -> int:
    return sum(n for name, n in stats["faults"].items() if name.endswith(":" + fault))


def test_every_fault_kind_surfaces_as_its_typed_error(
    own_simulator: Callable[..., SimulatorProcess],
) -> None:
    sim = own_simulator(FAULTY, seed=11)

    async def main() -> tuple[Counter[str], dict[str, Any]]:
        async with ConnectorSet(registry_for(sim.url)) as cs:
            return await drive(cs, 1000)

    seen, kinds = asyncio.run(main())
    stats = sim.stats()

    # Each injected fault, as counted by the simulator, reached the caller as its typed error.
    assert seen["submit:RateLimited"] == injected(stats, "rate_limited") > 0
    assert seen["submit:TransientError"] == injected(stats, "transient") > 0
    assert seen["submit:AcceptanceUnknown"] == injected(stats, "response_lost") > 0
    assert seen["submit:InvalidParams"] == injected(stats, "invalid_params") > 0
    assert seen["submit:NoPermission"] == injected(stats, "permission") > 0
    assert seen["poll:TransientError"] == injected(stats, "poll_error") > 0
    assert seen["fetch:Unparseable"] == injected(stats, "unparseable") > 0
    assert seen["poll:failed"] == seen["fetch:UpstreamFailed"] > 0
    assert seen["fetch:ok"] > 500

    # Bad and hostile answers arrive as evidence (judged later, R19/R22), never as errors.
    for kind in ("empty", "hostile", "login", "captcha", "error_page", "truncated"):
        assert kinds.get(kind, 0) > 0, kind
    assert kinds.get("SCREENSHOT_PENDING", 0) > 0
    assert kinds.get("SCREENSHOT_UNAVAILABLE", 0) > 0
    assert kinds.get("screenshot_fetched", 0) > 0

    # No attempt ever created two upstream tasks, however often it was re-sent.
    assert stats["max_tasks_per_key"] == 1
    per_key = [v for plat in stats["keys"].values() for v in plat.values()]
    assert len(per_key) == 1000
    assert any(v["submit_calls"] > 1 for v in per_key)  # re-sends happened and were harmless


@pytest.mark.parametrize("platform", sorted(PROTOCOL_PLATFORMS))
def test_real_protocol_faults_map_to_typed_errors(
    own_simulator: Callable[..., SimulatorProcess], platform: str
) -> None:
    """Each real-protocol connector over HTTP: the vendor's error bodies with their statuses, an
    error object inside HTTP 200, a refusal/filter inside HTTP 200, and a lost response."""
    sim = own_simulator(
        {
            "platforms": {
                "deepseek": {
                    "rate_limited_rate": 0.1,
                    "retry_after_s": 2,
                    "transient_rate": 0.1,
                    "invalid_params_rate": 0.05,
                    "permission_error_rate": 0.05,
                    "error_in_200_rate": 0.2,
                    "response_lost_rate": 0.05,
                }
            }
        },
        seed=5,
    )

    async def main() -> Counter[str]:
        seen: Counter[str] = Counter()
        async with ConnectorSet(registry_with_protocols(sim.url)) as cs:
            conn = cs[platform]
            for i in range(200):
                req = SubmitRequest(
                    f"oa-{i}",
                    1,
                    "acme",
                    f"咖啡推荐 {i}？",
                    "openai_sim",
                    "web",
                    "cn",
                    "standard",
                    False,
                )
                try:
                    acc = await conn.submit(req)
                except RateLimited as exc:
                    assert exc.retry_after_s == 2.0
                    seen["RateLimited"] += 1
                    continue
                except ConnectorError as exc:
                    seen[type(exc).__name__] += 1
                    continue
                polled = await conn.poll(acc.upstream_id)
                seen[f"poll:{polled.state}"] += 1
                if polled.state == "failed":
                    assert polled.error  # the refusal/filter the engine reported, named
                    ev = await conn.fetch_evidence(acc.upstream_id, req)
                    assert ev.collection_state == "failed" and ev.raw_body == acc.inline_result
                else:
                    ev = await conn.fetch_evidence(acc.upstream_id, req)
                    assert ev.raw_body == acc.inline_result
        return seen

    seen = asyncio.run(main())
    stats = sim.stats()
    assert seen["RateLimited"] == injected(stats, "rate_limited") > 0
    assert seen["NoPermission"] == injected(stats, "permission") > 0
    assert seen["InvalidParams"] == injected(stats, "invalid_params") > 0
    assert seen["AcceptanceUnknown"] == injected(stats, "response_lost") > 0
    errors_in_200 = injected(stats, "error_in_200")
    # An error inside HTTP 200 is either an error object (-> TransientError, type server_error)
    # or a content_filter finish (-> accepted, poll says failed).
    assert (
        seen["TransientError"] - injected(stats, "transient") + seen["poll:failed"] == errors_in_200
    )
    assert seen["poll:failed"] > 0 and seen["poll:completed"] > 60
