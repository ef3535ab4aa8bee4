"""The simulator's HTTP API as other parts code against it (docs/simulator.md), over a real
process: idempotency, validation, auth, rate limits, screenshots, cancel, lost responses and the
fee statement rules (R12, R13, R15, R23)."""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import httpx
import pytest

from geo_pipeline.connectors.base import AcceptanceUnknown, NoPermission, SubmitRequest
from geo_pipeline.connectors.simulator import SimulatorConnector
from geo_pipeline_tests.clock import clear_of_midnight
from geo_pipeline_tests.fixtures.simulator import SimulatorProcess, registry_for, start_simulator
from geo_pipeline_tests.processes import outcome

BODY = {
    "question": "咖啡哪家好？",
    "device": "web",
    "region": "cn",
    "mode": "standard",
    "screenshot": False,
    "tenant": "acme",
}


@pytest.fixture(scope="module")
def sim_module() -> Iterator[SimulatorProcess]:
    sim = start_simulator(seed=3)
    yield sim
    sim.stop()


@pytest.fixture
def sim(sim_module: SimulatorProcess) -> SimulatorProcess:
    sim_module.reset()  # every test starts from the start-up profiles and no tasks
    return sim_module


def key() -> str:
    return f"api-{uuid.uuid4().hex[:10]}:1"


def submit(sim: SimulatorProcess, platform: str, k: str, **over: object) -> httpx.Response:
    return httpx.post(
        f"{sim.url}/v1/{platform}/tasks",
        json={**BODY, **over},
        headers={"Idempotency-Key": k},
        timeout=10,
    )


def today() -> str:
    return datetime.now(UTC).date().isoformat()


def test_same_idempotency_key_returns_the_same_task(sim: SimulatorProcess) -> None:
    k = key()
    first = submit(sim, "deepseek", k)
    again = submit(sim, "deepseek", k)
    assert first.status_code == 202 and again.status_code == 200
    assert first.json()["task_id"] == again.json()["task_id"]
    assert first.json()["status"] == "accepted" and first.json()["accepted_at"].endswith("Z")
    looked = httpx.get(f"{sim.url}/v1/deepseek/tasks", params={"idempotency_key": k}, timeout=10)
    assert looked.status_code == 200 and looked.json()["task_id"] == first.json()["task_id"]
    missing = httpx.get(
        f"{sim.url}/v1/deepseek/tasks", params={"idempotency_key": "nope:1"}, timeout=10
    )
    assert missing.status_code == 404
    stats = sim.stats()
    assert stats["keys"]["deepseek"][k] == {"submit_calls": 2, "tasks_created": 1}


def test_invalid_requests_are_400_with_a_message(sim: SimulatorProcess) -> None:
    bad = submit(sim, "doubao", key(), region="global", mode="web_search")
    assert bad.status_code == 400
    err = bad.json()["error"]
    assert (
        err["type"] == "invalid_request" and "region" in err["message"] and "mode" in err["message"]
    )
    no_key = httpx.post(f"{sim.url}/v1/doubao/tasks", json=BODY, timeout=10)
    assert no_key.status_code == 400 and "Idempotency-Key" in no_key.json()["error"]["message"]
    assert sim.stats()["tasks"] == 0


def test_auth_required_by_profile(sim: SimulatorProcess, monkeypatch: pytest.MonkeyPatch) -> None:
    sim.set_profile("qwen", require_auth=True, api_key="sim-test-key")
    assert submit(sim, "qwen", key()).status_code == 401
    wrong = httpx.post(
        f"{sim.url}/v1/qwen/tasks",
        json=BODY,
        headers={"Idempotency-Key": key(), "Authorization": "Bearer other"},
        timeout=10,
    )
    assert wrong.status_code == 403
    # The connector reads the key from the environment variable the registry names (D2).
    entry = dataclasses.replace(
        registry_for(sim.url).entry("qwen"), api_key_env="GEO_TEST_QWEN_KEY"
    )
    req = SubmitRequest(
        f"auth-{uuid.uuid4().hex[:8]}", 1, "acme", "咖啡？", "qwen", "web", "cn", "standard", False
    )

    async def attempt() -> str:
        conn = SimulatorConnector(entry)
        try:
            return (await conn.submit(req)).upstream_id
        finally:
            await conn.aclose()

    monkeypatch.delenv("GEO_TEST_QWEN_KEY", raising=False)
    with pytest.raises(NoPermission):
        asyncio.run(attempt())
    monkeypatch.setenv("GEO_TEST_QWEN_KEY", "sim-test-key")
    assert asyncio.run(attempt()).startswith("qwen-")


def test_token_bucket_rate_limit_answers_429_with_retry_after(sim: SimulatorProcess) -> None:
    # A bucket of two tokens refilled once per 100 s: however slow the machine, exactly two pass.
    sim.set_profile("kimi", submit_rate_per_s=0.01, submit_burst=2)
    codes = [submit(sim, "kimi", key()) for _ in range(6)]
    assert [r.status_code for r in codes] == [202, 202, 429, 429, 429, 429]
    assert all(50 <= float(r.headers["Retry-After"]) <= 100 for r in codes[2:])
    assert codes[2].json()["error"]["type"] == "rate_limited"


def test_screenshot_late_never_and_not_requested(sim: SimulatorProcess) -> None:
    sim.set_profile("deepseek", screenshot_late_rate=1.0, screenshot_delay_s=[2.5, 2.5])
    late = submit(sim, "deepseek", key(), screenshot=True).json()["task_id"]
    first = httpx.get(f"{sim.url}/v1/deepseek/tasks/{late}/screenshot", timeout=10)
    assert first.status_code == 202 and float(first.headers["Retry-After"]) > 0
    result = httpx.get(f"{sim.url}/v1/deepseek/tasks/{late}/result", timeout=10).json()
    assert result["screenshot"] == {"status": "pending"}  # the text is there before the picture
    for _ in range(100):  # until it arrives (2.5 s after the text), bounded
        png = httpx.get(f"{sim.url}/v1/deepseek/tasks/{late}/screenshot", timeout=10)
        if png.status_code != 202:
            break
        time.sleep(0.1)
    assert png.status_code == 200 and png.headers["content-type"] == "image/png"
    assert png.content.startswith(b"\x89PNG")
    again = httpx.get(f"{sim.url}/v1/deepseek/tasks/{late}/screenshot", timeout=10)
    assert again.content == png.content  # deterministic bytes

    sim.set_profile("deepseek", screenshot_late_rate=0.0, screenshot_never_rate=1.0)
    never = submit(sim, "deepseek", key(), screenshot=True).json()["task_id"]
    gone = httpx.get(f"{sim.url}/v1/deepseek/tasks/{never}/screenshot", timeout=10)
    assert gone.status_code == 410 and gone.json()["error"]["reason"] == "capture_failed"
    plain = submit(sim, "deepseek", key()).json()["task_id"]
    assert (
        httpx.get(f"{sim.url}/v1/deepseek/tasks/{plain}/screenshot", timeout=10).status_code == 404
    )


def test_cancel_per_profile(sim: SimulatorProcess) -> None:
    sim.set_profile("*", completion_s=[5, 5])
    running = submit(sim, "doubao", key()).json()["task_id"]
    assert httpx.get(f"{sim.url}/v1/doubao/tasks/{running}/result", timeout=10).status_code == 409
    out = httpx.post(f"{sim.url}/v1/doubao/tasks/{running}/cancel", timeout=10).json()
    assert out["cancelled"] is True
    polled = httpx.get(f"{sim.url}/v1/doubao/tasks/{running}", timeout=10).json()
    assert polled["status"] == "failed" and polled["error"] == "cancelled"
    kimi = submit(sim, "kimi", key()).json()["task_id"]
    assert (
        httpx.post(f"{sim.url}/v1/kimi/tasks/{kimi}/cancel", timeout=10).json()["cancelled"]
        is False
    )


def test_lost_response_is_acceptance_unknown_then_found_by_key(sim: SimulatorProcess) -> None:
    """The 'hold' variant: the answer is withheld, the client's read timeout fires (R12)."""
    sim.set_profile("qwen", response_lost_rate=1.0, lost_mode="hold", lost_hold_s=3)
    base = registry_for(sim.url).entry("qwen")
    entry = dataclasses.replace(base, options={"submit_timeout_s": 0.5})
    req = SubmitRequest(
        f"lost-{uuid.uuid4().hex[:8]}", 1, "acme", "咖啡？", "qwen", "web", "cn", "standard", False
    )

    async def go() -> tuple[str | None, str | None]:
        async with httpx.AsyncClient() as client:
            conn = SimulatorConnector(entry, client)
            with pytest.raises(AcceptanceUnknown):
                await conn.submit(req)
            found = await conn.lookup(req.idempotency_key)
            other = await conn.lookup("never-sent:1")
            return (found.upstream_id if found else None), (other.upstream_id if other else None)

    found, other = asyncio.run(go())
    assert found is not None and found.startswith("qwen-") and other is None


def _lines(sim: SimulatorProcess, platform: str) -> list[dict[str, object]]:
    resp = httpx.get(f"{sim.url}/v1/{platform}/statements/{today()}", timeout=10)
    assert resp.status_code == 200
    body = resp.json()
    assert body["platform"] == platform and body["date"] == today() and body["currency"] == "CNY"
    return list(body["lines"])


@pytest.mark.parametrize(
    ("platform", "rule", "charged_ids"),
    [
        ("doubao", "charged", {"a1", "a2"}),  # every accepted attempt, failed or not
        ("deepseek", "free_after_failure", {"a2"}),  # the failed attempt is free
        ("kimi", "free", {"a1"}),  # only the first accepted attempt of a sample
    ],
)
def test_statement_honours_retry_fee_rule(
    sim: SimulatorProcess, platform: str, rule: str, charged_ids: set[str]
) -> None:
    clear_of_midnight()  # the tasks' charges and the statement of today() fall on one day
    prices = httpx.get(f"{sim.url}/v1/{platform}/prices", timeout=10).json()
    assert prices["retry_fee_rule"] == rule
    sample = f"fee-{uuid.uuid4().hex[:8]}"
    sim.set_profile(platform, upstream_failure_rate=1.0)
    a1 = submit(sim, platform, f"{sample}:1").json()["task_id"]
    sim.set_profile(platform, upstream_failure_rate=0.0)
    a2 = submit(sim, platform, f"{sample}:2").json()["task_id"]
    assert httpx.get(f"{sim.url}/v1/{platform}/tasks/{a1}", timeout=10).json()["status"] == "failed"
    ids = {"a1": a1, "a2": a2}
    lines = _lines(sim, platform)
    charged = {
        name for name, tid in ids.items() if any(line["upstream_id"] == tid for line in lines)
    }
    assert charged == charged_ids
    for line in lines:
        assert isinstance(line["amount_minor"], int)
        assert line["price_version"] == prices["version"]
        if line["item"] == "base":
            assert line["amount_minor"] == prices["base"]["standard"]


def test_statement_surcharges_and_discrepancies(sim: SimulatorProcess) -> None:
    clear_of_midnight()  # the tasks' charges and the statement of today() fall on one day
    prices = httpx.get(f"{sim.url}/v1/deepseek/prices", timeout=10).json()
    tid = submit(sim, "deepseek", key(), mode="deep_thinking", screenshot=True).json()["task_id"]
    items = {
        line["item"]: line["amount_minor"]
        for line in _lines(sim, "deepseek")
        if line["upstream_id"] == tid
    }
    assert items == {
        "base": prices["base"]["deep_thinking"],
        "deep_thinking": prices["deep_thinking"],
        "screenshot": prices["screenshot"],
    }

    sim.set_profile("deepseek", statement_amount_mismatch_rate=1.0)
    mismatched = {
        line["item"]: line["amount_minor"]
        for line in _lines(sim, "deepseek")
        if line["upstream_id"] == tid
    }
    assert all(mismatched[i] > items[i] for i in items)
    sim.set_profile(
        "deepseek",
        statement_amount_mismatch_rate=0.0,
        statement_missing_line_rate=1.0,
        statement_extra_line_rate=1.0,
    )
    lines = _lines(sim, "deepseek")
    assert not any(line["upstream_id"] == tid for line in lines)
    assert any(str(line["upstream_id"]).startswith("unknown-") for line in lines)


def test_openai_compatible_endpoint_shapes(sim: SimulatorProcess) -> None:
    ok = httpx.post(
        f"{sim.url}/openai/v1/chat/completions",
        json={"model": "kimi", "messages": [{"role": "user", "content": "Best coffee?"}]},
        timeout=10,
    )
    body = ok.json()
    assert ok.status_code == 200 and body["object"] == "chat.completion"
    assert (
        body["choices"][0]["finish_reason"] == "stop" and body["choices"][0]["message"]["content"]
    )
    assert (
        body["usage"]["total_tokens"]
        == body["usage"]["prompt_tokens"] + body["usage"]["completion_tokens"]
    )
    unknown = httpx.post(
        f"{sim.url}/openai/v1/chat/completions", json={"model": "gpt-x", "messages": []}, timeout=10
    )
    assert unknown.status_code == 404
    assert set(unknown.json()["error"]) == {"message", "type", "param", "code"}
    assert unknown.json()["error"]["code"] == "model_not_found"


def test_control_rejects_unknown_profile_keys(sim: SimulatorProcess) -> None:
    resp = httpx.post(
        f"{sim.url}/_control/profiles/deepseek", json={"transient_rat": 0.1}, timeout=10
    )
    assert resp.status_code == 400 and "transient_rat" in resp.json()["error"]["message"]
    resp = httpx.post(
        f"{sim.url}/_control/profiles/deepseek", json={"transient_rate": 2}, timeout=10
    )
    assert resp.status_code == 400
    profiles = httpx.get(f"{sim.url}/_control/profiles", timeout=10).json()["profiles"]
    assert profiles["deepseek"]["transient_rate"] == 0.0 and "api_key" not in profiles["deepseek"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--profiles", "/nonexistent/sim.yaml"], "cannot read simulator profiles"),
        (["--set", "deepseek.transient_rate=7"], "a rate is a probability"),
        (["--set", "nosuch.transient_rate=0.1"], "unknown platforms"),
    ],
)
def test_cli_refuses_bad_profiles_with_a_message(args: list[str], message: str) -> None:
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "geo_pipeline.cli.main", "simulator", "--port", "0", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0, outcome(proc)
    assert message in proc.stderr, outcome(proc)
    assert "Traceback" not in proc.stderr, outcome(proc)


@pytest.mark.parametrize("transport", ["aiohttp", "httpcore"])
def test_both_http_transports_classify_send_failures_alike(
    sim: SimulatorProcess, transport: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R12 hinges on 'did the request leave?': refused connection -> TransientError (not sent);
    held or dropped response -> AcceptanceUnknown (maybe accepted), whichever transport runs."""
    from geo_pipeline.connectors.base import TransientError
    from geo_pipeline.connectors.http import new_client

    monkeypatch.setenv("GEO_HTTP_TRANSPORT", transport)
    base = registry_for(sim.url).entry("doubao")
    fast = dataclasses.replace(base, options={"submit_timeout_s": 0.5})
    dead = dataclasses.replace(base, base_url="http://127.0.0.1:9")  # discard port: refused

    def req() -> SubmitRequest:
        return SubmitRequest(
            f"tr-{uuid.uuid4().hex[:8]}",
            1,
            "acme",
            "咖啡？",
            "doubao",
            "web",
            "cn",
            "standard",
            False,
        )

    async def go() -> None:
        async with new_client() as client:
            with pytest.raises(TransientError):
                await SimulatorConnector(dead, client).submit(req())
            conn = SimulatorConnector(fast, client)
            for mode in ("hold", "drop"):
                sim.set_profile("doubao", response_lost_rate=1.0, lost_mode=mode, lost_hold_s=2)
                r = req()
                with pytest.raises(AcceptanceUnknown):
                    await conn.submit(r)
                found = await conn.lookup(r.idempotency_key)
                assert found is not None
            sim.set_profile("doubao", response_lost_rate=0.0)
            ok = await conn.submit(req())  # the pool recovers after dropped connections
            assert ok.upstream_id.startswith("doubao-")

    asyncio.run(go())


def test_stats_count_the_faults_injected_once_each(sim: SimulatorProcess) -> None:
    """The demo says which of its documented faults occurred (issue #34, a fourth newcomer's
    read: a run without a hostile answer said nothing of it): the stats count each injected
    answer, screenshot and statement fault once per task, however often it is fetched."""
    clear_of_midnight()  # the task's statement line is in today()'s statement
    sim.set_profile("kimi", hostile_rate=1.0, completion_s=[0.0, 0.0], accept_delay_s=[0.0, 0.0])
    sim.set_profile("deepseek", screenshot_never_rate=1.0, statement_amount_mismatch_rate=1.0,
                    completion_s=[0.0, 0.0], accept_delay_s=[0.0, 0.0])  # fmt: skip
    hostile = submit(sim, "kimi", key()).json()["task_id"]
    submit(sim, "deepseek", key(), screenshot=True)
    for _ in range(2):  # fetched twice, counted once
        for _ in range(100):  # until the task has completed, bounded
            got = httpx.get(f"{sim.url}/v1/kimi/tasks/{hostile}/result", timeout=10)
            if got.status_code == 200:
                break
            time.sleep(0.05)
        assert got.status_code == 200, got.text
        _lines(sim, "deepseek")
    injected = sim.stats(keys=False).get("injected")
    assert injected == {
        "deepseek:screenshot_never": 1,
        "deepseek:statement_mismatch": 1,  # one base line, no screenshot billed
        "kimi:answer_hostile": 1,
    }, injected
