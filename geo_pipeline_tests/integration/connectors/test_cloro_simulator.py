"""The simulator's cloro profile over HTTP, against cloro's contract (research on answer services
§2.1): its envelope, authentication, validation, 409 on a reused key, task states, billing only
on COMPLETED, refusals, 24 h retention and html expiry, whole-queue cancel, per-key counts."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from geo_pipeline_tests.fixtures.simulator import SimulatorProcess, start_simulator

KEY = "sim-cloro-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
DAY_S = 24 * 3600


@pytest.fixture(scope="module")
def sim_module() -> Iterator[SimulatorProcess]:
    sim = start_simulator(seed=3)
    yield sim
    sim.stop()


@pytest.fixture
def sim(sim_module: SimulatorProcess) -> SimulatorProcess:
    httpx.post(f"{sim_module.url}/_control/services/cloro/reset", timeout=10).raise_for_status()
    return sim_module


def body(key: str | None = None, **payload: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "taskType": "CHATGPT",
        "payload": {"prompt": "Which coffee chain is best?", "country": "US", **payload},
    }
    if key is not None:
        out["idempotencyKey"] = key
    return out


def post(sim: SimulatorProcess, data: Any, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.post(
        f"{sim.url}/cloro/v1/async/task",
        json=data,
        headers=AUTH if headers is None else headers,
        timeout=10,
    )


def get(sim: SimulatorProcess, task_id: str) -> httpx.Response:
    return httpx.get(f"{sim.url}/cloro/v1/async/task/{task_id}", headers=AUTH, timeout=10)


def control(sim: SimulatorProcess, what: str, **data: Any) -> dict[str, Any]:
    resp = httpx.post(f"{sim.url}/_control/services/cloro/{what}", json=data, timeout=10)
    resp.raise_for_status()
    return dict(resp.json())


def stats(sim: SimulatorProcess) -> dict[str, Any]:
    resp = httpx.get(f"{sim.url}/_control/services/cloro/stats", timeout=10)
    resp.raise_for_status()
    return dict(resp.json())


def wait_for(cond: Callable[[], Any], timeout_s: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.02)
    raise AssertionError("condition not reached")


def finished(sim: SimulatorProcess, task_id: str) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        data = get(sim, task_id).json()
        return data if data["task"]["status"] in ("COMPLETED", "FAILED") else None

    return dict(wait_for(done))


def key() -> str:
    return f"s{uuid.uuid4().hex[:16]}:1"


def test_authentication_is_a_case_sensitive_bearer(sim: SimulatorProcess) -> None:
    codes = {}
    for name, headers in {
        "missing": {},
        "lowercase": {"Authorization": f"bearer {KEY}"},
        "wrong": {"Authorization": "Bearer nope"},
    }.items():
        resp = post(sim, body(key()), headers)
        assert resp.status_code == 401, (name, resp.text)
        assert resp.json()["success"] is False
        codes[name] = resp.json()["error"]["code"]
    assert codes == {
        "missing": "MISSING_API_KEY",
        "lowercase": "INVALID_API_KEY_FORMAT",
        "wrong": "INVALID_OR_EXPIRED_API_KEY",
    }
    assert stats(sim)["tasks"] == 0


def test_validation_names_every_bad_field(sim: SimulatorProcess) -> None:
    bad = {
        "taskType": "BING",
        "priority": 11,
        "extra": 1,
        "payload": {"prompt": "", "country": "us"},
    }
    resp = post(sim, bad)
    assert resp.status_code == 400
    err = resp.json()["error"]
    assert err["code"] == "VALIDATION_ERROR"
    assert {d["field"] for d in err["details"]} == {
        "taskType",
        "priority",
        "extra",
        "payload.prompt",
        "payload.country",
    }


def test_submit_poll_complete_and_bill_on_completion(sim: SimulatorProcess) -> None:
    control(sim, "profile", queued_s=[0.3, 0.3], processing_s=[0.3, 0.3])
    k = key()
    resp = post(sim, body(k, include={"html": True, "markdown": True, "searchQueries": True}))
    assert resp.status_code == 200
    created = resp.json()
    assert created["success"] is True
    assert created["task"]["status"] == "QUEUED"
    assert created["task"]["idempotencyKey"] == k
    assert created["credits"] == {"creditsToCharge": 5, "creditsCharged": None}
    tid = created["task"]["id"]
    first = get(sim, tid).json()
    assert first["task"]["status"] in ("QUEUED", "PROCESSING")
    assert first["credits"]["creditsCharged"] is None and "response" not in first
    assert stats(sim)["keys"][k]["tasks_billed"] == 0  # nothing billed before COMPLETED
    done = finished(sim, tid)
    assert done["task"]["status"] == "COMPLETED"
    assert done["credits"] == {"creditsToCharge": 5, "creditsCharged": 5}
    assert done["task"]["latencyMs"] >= 250  # excludes the queued time (0.3 s of 0.6 s)
    result = done["response"]
    assert result["text"] and result["markdown"] and result["model"] == "gpt-5"
    assert result["sources"] and set(result["sources"][0]) >= {"position", "url", "label"}
    assert result["searchQueries"]
    assert result["html"].endswith(f"/cloro/html/{tid}")
    counts = stats(sim)["keys"][k]
    assert counts == {
        "submit_calls": 1,
        "tasks_created": 1,
        "tasks_billed": 1,
        "credits_charged": 5,
        "results_fetched": 1,
        "conflicts": 0,
    }


def test_reused_key_is_409_naming_the_key_not_the_task(sim: SimulatorProcess) -> None:
    k = key()
    assert post(sim, body(k)).status_code == 200
    again = post(sim, body(k))
    assert again.status_code == 409
    err = again.json()["error"]
    assert err["code"] == "RESOURCE_ALREADY_EXISTS"
    assert err["details"] == {"field": "idempotencyKey", "value": k}
    assert "task" not in again.json()
    counts = stats(sim)["keys"][k]
    assert counts["tasks_created"] == 1 and counts["submit_calls"] == 2 and counts["conflicts"] == 1


def test_failed_costs_nothing_and_refusal_is_billed(sim: SimulatorProcess) -> None:
    control(sim, "profile", fail_rate=1.0)
    kf = key()
    failed = finished(sim, post(sim, body(kf)).json()["task"]["id"])
    assert failed["task"]["status"] == "FAILED"
    assert failed["credits"]["creditsCharged"] == 0
    assert failed["response"]["error"]["message"] == "Maximum retries exceeded"
    control(sim, "profile", fail_rate=0.0, refusal_rate=1.0)
    kr = key()
    refused = finished(sim, post(sim, body(kr)).json()["task"]["id"])
    assert refused["task"]["status"] == "COMPLETED"
    assert refused["response"]["sources"] == []
    assert len(refused["response"]["text"]) < 160
    assert refused["credits"]["creditsCharged"] == 5
    got = stats(sim)["keys"]
    assert (got[kf]["tasks_billed"], got[kr]["tasks_billed"]) == (0, 1)


def test_retention_24h_frees_the_key_and_html_expires(sim: SimulatorProcess) -> None:
    k = key()
    tid = post(sim, body(k, include={"html": True})).json()["task"]["id"]
    html_url = finished(sim, tid)["response"]["html"]
    assert httpx.get(html_url, timeout=10).status_code == 200
    control(sim, "advance", seconds=DAY_S + 1)
    assert httpx.get(html_url, timeout=10).status_code in (403, 404)
    gone = get(sim, tid)
    assert gone.status_code == 404
    assert gone.json()["error"]["code"] == "RESOURCE_NOT_FOUND"
    # The key was bound to the deleted record only: the same key now opens a SECOND task (why a
    # connector must never re-send an old key blindly after the retention).
    assert post(sim, body(k)).status_code == 200
    assert stats(sim)["keys"][k]["tasks_created"] == 2


def test_queue_delete_drops_only_queued_tasks(sim: SimulatorProcess) -> None:
    control(sim, "profile", queued_s=[0.0, 0.0], processing_s=[30.0, 30.0])
    running = post(sim, body(key())).json()["task"]["id"]
    wait_for(lambda: get(sim, running).json()["task"]["status"] == "PROCESSING")
    control(sim, "profile", queued_s=[30.0, 30.0])
    queued = [post(sim, body(key())).json()["task"]["id"] for _ in range(3)]
    status = httpx.get(f"{sim.url}/cloro/v1/async/status", headers=AUTH, timeout=10).json()
    assert (status["queuedTasks"], status["processingTasks"]) == (3, 1)
    resp = httpx.delete(f"{sim.url}/cloro/v1/async/queue", headers=AUTH, timeout=10)
    assert resp.json() == {"success": True, "cleared": 3}
    assert all(get(sim, t).status_code == 404 for t in queued)
    assert get(sim, running).json()["task"]["status"] == "PROCESSING"


def test_lost_response_still_creates_the_task(sim: SimulatorProcess) -> None:
    control(sim, "profile", lost_rate=1.0)
    k = key()
    with pytest.raises(httpx.HTTPError):
        post(sim, body(k))
    assert stats(sim)["keys"][k]["tasks_created"] == 1
    control(sim, "profile", lost_rate=0.0)
    assert post(sim, body(k)).status_code == 409


def test_the_simulators_reset_also_resets_the_services(sim: SimulatorProcess) -> None:
    control(sim, "profile", fail_rate=1.0)
    assert post(sim, body(key())).status_code == 200
    sim.reset()  # POST /_control/reset: every task and counter, start-up profiles
    assert stats(sim)["tasks"] == 0 and stats(sim)["keys"] == {}
    tid = post(sim, body(key())).json()["task"]["id"]
    assert finished(sim, tid)["task"]["status"] == "COMPLETED"  # fail_rate back to 0
