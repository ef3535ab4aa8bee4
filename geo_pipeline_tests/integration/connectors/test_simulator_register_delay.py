"""The simulator's register delay (``register_delay_s``): a created task is found by an
idempotency-key lookup only after the delay, while a re-submit with the key gets the same task at
once; and the stats a chaos checker compares with the database (tasks per key and per sample,
every created task id and whether its answer was paid), for the task API and synchronous calls."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import httpx
import pytest

from geo_pipeline_tests.fixtures.simulator import SimulatorProcess, start_simulator

BODY = {
    "question": "咖啡哪家好？",
    "device": "web",
    "region": "cn",
    "mode": "standard",
    "screenshot": False,
    "tenant": "acme",
}
DELAY_S = 1.5


@pytest.fixture(scope="module")
def sim_module() -> Iterator[SimulatorProcess]:
    sim = start_simulator(seed=5)
    yield sim
    sim.stop()


@pytest.fixture
def sim(sim_module: SimulatorProcess) -> SimulatorProcess:
    sim_module.reset()
    return sim_module


def sample() -> str:
    return f"s{uuid.uuid4().hex[:24]}"


def submit(sim: SimulatorProcess, platform: str, k: str) -> httpx.Response:
    return httpx.post(
        f"{sim.url}/v1/{platform}/tasks", json=BODY, headers={"Idempotency-Key": k}, timeout=10
    )


def lookup(sim: SimulatorProcess, platform: str, k: str) -> httpx.Response:
    return httpx.get(f"{sim.url}/v1/{platform}/tasks", params={"idempotency_key": k}, timeout=10)


def full_stats(sim: SimulatorProcess) -> dict[str, object]:
    resp = httpx.get(f"{sim.url}/_control/stats", params={"tasks": 1}, timeout=30)
    resp.raise_for_status()
    return dict(resp.json())


def test_lookup_lags_a_submit_but_a_resubmit_does_not(sim: SimulatorProcess) -> None:
    # An hour's delay: the lookup misses the task whatever the machine's speed.
    sim.set_profile("deepseek", register_delay_s=[3600, 3600])
    k = f"{sample()}:1"
    first = submit(sim, "deepseek", k)
    assert first.status_code == 202
    task_id = first.json()["task_id"]
    # Not yet in the lookup index: a client that trusts this 404 would open a second task.
    assert lookup(sim, "deepseek", k).status_code == 404
    again = submit(sim, "deepseek", k)
    assert again.status_code == 200 and again.json()["task_id"] == task_id
    # The task itself exists: polling it by id works before the lookup finds it.
    assert httpx.get(f"{sim.url}/v1/deepseek/tasks/{task_id}", timeout=10).status_code == 200
    assert lookup(sim, "deepseek", k).status_code == 404
    stats = sim.stats()
    assert stats["keys"]["deepseek"][k] == {"submit_calls": 2, "tasks_created": 1}
    assert stats["faults"]["deepseek:lookup_lagged"] >= 2


def test_lookup_finds_the_task_once_the_delay_has_passed(sim: SimulatorProcess) -> None:
    sim.set_profile("deepseek", register_delay_s=[DELAY_S, DELAY_S])
    k = f"{sample()}:1"
    t0 = time.monotonic()
    first = submit(sim, "deepseek", k)
    assert first.status_code == 202
    found = lookup(sim, "deepseek", k)
    while found.status_code == 404:  # the simulator's own delay ends it; pytest's timeout bounds it
        time.sleep(0.05)
        found = lookup(sim, "deepseek", k)
    assert found.status_code == 200 and found.json()["task_id"] == first.json()["task_id"]
    # Never found sooner than the delay after the submit was sent.
    assert time.monotonic() - t0 >= DELAY_S
    assert sim.stats()["keys"]["deepseek"][k] == {"submit_calls": 1, "tasks_created": 1}


def test_default_is_no_delay_and_other_platforms_are_untouched(sim: SimulatorProcess) -> None:
    sim.set_profile("deepseek", register_delay_s=[DELAY_S, DELAY_S])
    k = f"{sample()}:1"
    assert submit(sim, "doubao", k).status_code == 202
    assert lookup(sim, "doubao", k).status_code == 200


def test_lost_response_then_early_lookup_misses_the_task(sim: SimulatorProcess) -> None:
    # The double-execution hole: the response is lost, the lookup says 404, yet the task runs.
    sim.set_profile(
        "qwen", register_delay_s=[DELAY_S, DELAY_S], response_lost_rate=1.0, lost_mode="drop"
    )
    k = f"{sample()}:1"
    with pytest.raises(httpx.HTTPError):
        submit(sim, "qwen", k)
    assert lookup(sim, "qwen", k).status_code == 404
    stats = full_stats(sim)
    assert stats["keys"]["qwen"][k]["tasks_created"] == 1  # type: ignore[index]
    ((task_id, paid),) = stats["task_ids"]["qwen"][k]  # type: ignore[index]
    assert task_id.startswith("qwen-") and paid in (None, True)


def test_profile_refuses_a_bad_delay(sim: SimulatorProcess) -> None:
    resp = httpx.post(
        f"{sim.url}/_control/profiles/deepseek", json={"register_delay_s": [2, 1]}, timeout=10
    )
    assert resp.status_code == 400 and "register_delay_s" in resp.json()["error"]["message"]


def test_stats_per_sample_and_task_ids(sim: SimulatorProcess) -> None:
    s1, s2 = sample(), sample()
    ids = {}
    for k in (f"{s1}:1", f"{s1}:2", f"{s2}:1"):
        ids[k] = submit(sim, "kimi", k).json()["task_id"]
    submit(sim, "kimi", f"{s2}:1")  # a re-submit: no new task
    stats = full_stats(sim)
    assert stats["tasks_per_sample"]["kimi"] == {s1: 2, s2: 1}  # type: ignore[index]
    assert stats["max_tasks_per_sample"] == 2
    listed = stats["task_ids"]["kimi"]  # type: ignore[index]
    assert {k: [tid for tid, _ in v] for k, v in listed.items()} == {k: [v] for k, v in ids.items()}
    # Instant tasks have completed by now: each is a paid answer.
    assert all(paid is True for v in listed.values() for _, paid in v)
    # Without ?tasks=1 the (large) list is not sent.
    assert "task_ids" not in sim.stats()


def test_sync_calls_count_every_task_per_key(sim: SimulatorProcess) -> None:
    s = sample()
    k = f"{s}:1"
    body = {"model": "deepseek", "messages": [{"role": "user", "content": "咖啡哪家好？"}]}
    url = f"{sim.url}/openai/v1/chat/completions"
    first = httpx.post(url, json=body, headers={"Idempotency-Key": k}, timeout=10)
    second = httpx.post(url, json=body, headers={"Idempotency-Key": k}, timeout=10)
    assert first.status_code == second.status_code == 200
    rid = first.json()["id"]
    stats = full_stats(sim)
    # A synchronous API has no idempotency: the same key twice is two paid answers.
    assert stats["keys"]["openai/deepseek"][k] == {"submit_calls": 2, "tasks_created": 2}  # type: ignore[index]
    assert stats["tasks_per_sample"]["openai/deepseek"] == {s: 2}  # type: ignore[index]
    assert stats["task_ids"]["openai/deepseek"][k] == [[rid, True], [f"{rid}#2", True]]  # type: ignore[index]


def test_sync_lost_response_is_still_a_paid_task(sim: SimulatorProcess) -> None:
    sim.set_profile("deepseek", response_lost_rate=1.0, lost_mode="drop")
    k = f"{sample()}:1"
    body = {"model": "deepseek", "messages": [{"role": "user", "content": "咖啡哪家好？"}]}
    with pytest.raises(httpx.HTTPError):
        httpx.post(
            f"{sim.url}/openai/v1/chat/completions",
            json=body,
            headers={"Idempotency-Key": k},
            timeout=10,
        )
    stats = full_stats(sim)
    ((_rid, paid),) = stats["task_ids"]["openai/deepseek"][k]  # type: ignore[index]
    assert paid is True  # the client never heard, the platform billed
