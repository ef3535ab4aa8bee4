"""DataForSEO pingbacks and Bright Data ``notify`` end to end (issue 31, second "done when"; new
coverage): the simulator's services call our receiver (geo_pipeline.worker.webhooks, over HTTP
in this process) when a task ends, sometimes twice, sometimes never; the receiver records each
task once and wakes the worker following it (pg_notify -> worker/callbacks.py), which asks the
service itself. With callbacks on, polling is only a safety net (``callback_poll_s``).

- With the safety net longer than the test waits, the run still completes: the callbacks drove
  it, and no poll ever found a task unfinished (the simulator's request counts).
- Every callback lost: the run completes by the safety-net polls alone.
- Forged deliveries (wrong secret; a genuine secret naming a task that is still collecting or
  an unknown one) and duplicates change nothing: rows and the simulator's counts.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from geo_pipeline.connectors.factory import build_connector
from geo_pipeline.connectors.registry import load_registry
from geo_pipeline.domain.retry import RetryPolicy
from geo_pipeline_tests.integration.execution import test_cloro_webhooks as cloro_hooks
from geo_pipeline_tests.integration.execution.helpers import check_invariants, fetch
from geo_pipeline_tests.integration.execution.test_cloro_worker import make_cloro_run
from geo_pipeline_tests.integration.execution.test_worker_flow import run_worker_until

N = 10
SECRET = cloro_hooks.SECRET
receiver = cloro_hooks.receiver  # the receiver over HTTP, in a thread of this process
SERVICES = {
    # service: (platform, env, callback URL variable, profile keys of lost / duplicate, the
    # profile's "takes a while" key, the request count of a poll that found the task unfinished)
    "dataforseo": (
        "chatgpt_dataforseo",
        {"GEO_DATAFORSEO_CREDENTIALS": "sim-login:sim-password"},
        "GEO_DATAFORSEO_PINGBACK_URL",
        ("callback_lost_rate", "callback_duplicate_rate"),
        {"completion_s": [0.3, 1.0]},
    ),
    "brightdata": (
        "chatgpt_brightdata",
        {"GEO_BRIGHTDATA_API_KEY": "sim-brightdata-key"},
        "GEO_BRIGHTDATA_NOTIFY_URL",
        ("notify_lost_rate", "notify_duplicate_rate"),
        {"running_s": [0.3, 1.0]},
    ),
}
URL_ENV = {"dataforseo": "GEO_DATAFORSEO_URL", "brightdata": "GEO_BRIGHTDATA_URL"}


def setup(
    service: str, own_simulator: Any, receiver_url: str, monkeypatch: Any, **rates: float
) -> tuple[Any, str]:
    platform, env, url_var, (lost, dup), slow = SERVICES[service]
    profile = {**slow, lost: rates.get("lost", 0.0), dup: rates.get("dup", 0.0)}
    if "stuck" in rates:
        profile["stuck_rate"] = rates["stuck"]
    sim = own_simulator({"services": {service: profile}}, seed=41)
    monkeypatch.setenv(URL_ENV[service], f"{sim.url}/{service}")
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv(url_var, f"{receiver_url}/webhooks/{service}/{SECRET}")
    return sim, platform


def stats(sim: Any, service: str) -> dict[str, Any]:
    return dict(httpx.get(f"{sim.url}/_control/services/{service}/stats", timeout=10).json())


def unfinished_polls(service: str, st: dict[str, Any]) -> int:
    """Polls that found the task still working, from the simulator's request counts."""
    req = st["requests"]
    if service == "dataforseo":
        return int(req.get("task_get:40602", 0)) + int(req.get("task_get:40601", 0))
    # One progress answer per snapshot is the woken one; any more found it still collecting.
    progress = int(req.get("progress:200", 0)) - int(st["snapshots"])
    return int(req.get("snapshot:building", 0)) + progress


def run(db_url, redis_url, redis_ns, platform: str, ids: list[str], done: Any, **kw: Any) -> None:
    registry = load_registry()
    connector = build_connector(registry.entry(platform))
    assert getattr(connector, "callbacks_on", False)
    asyncio.run(
        run_worker_until(
            db_url,
            redis_url,
            redis_ns,
            {platform: connector},
            done,
            timeout_s=120,
            capabilities=registry.capabilities(),
            **kw,
        )
    )


def completed(db_url: str, n: int) -> Any:
    def done() -> bool:
        rows = fetch(
            db_url, "SELECT count(*) AS n FROM geo.samples WHERE collection_state = 'completed'"
        )
        return bool(rows[0]["n"] == n)

    return done


def snapshot_of(db_url: str) -> tuple[Any, ...]:
    """Everything a delivery must not change, counted."""
    return (
        fetch(db_url, "SELECT collection_state, count(*) AS n FROM geo.samples GROUP BY 1 ORDER BY 1"),
        fetch(db_url, "SELECT count(*) AS n FROM geo.ledger_entries")[0]["n"],
        fetch(db_url, "SELECT count(*) AS n FROM geo.state_transitions")[0]["n"],
        fetch(db_url, "SELECT count(*) AS n FROM geo.answers")[0]["n"],
    )  # fmt: skip


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_callbacks_complete_the_run_with_polling_only_as_a_safety_net(
    service, db_url, redis_url, redis_ns, own_simulator, receiver, monkeypatch
) -> None:
    sim, platform = setup(service, own_simulator, receiver, monkeypatch, dup=0.5)
    ids = make_cloro_run(db_url, load_registry(), f"r-{service}-callbacks", N, platform=platform)
    # The safety net is longer than the test waits: only the callbacks can complete the run.
    run(db_url, redis_url, redis_ns, platform, ids, completed(db_url, N), callback_poll_s=3600.0)
    assert completed(db_url, N)(), fetch(db_url, "SELECT collection_state FROM geo.samples")
    check_invariants(db_url, expected_samples=N)
    st = stats(sim, service)
    assert unfinished_polls(service, st) == 0, st["requests"]  # every poll came after its callback
    hooks = st["callbacks"]
    assert hooks.get("duplicate", 0) >= 1 and hooks.get("lost", 0) == 0, hooks
    rows = fetch(db_url, "SELECT upstream_id, deliveries FROM geo.webhook_deliveries")
    assert len(rows) == N  # one row per task however often it was delivered
    assert sum(r["deliveries"] for r in rows) == hooks["sent"]
    charges = fetch(
        db_url, "SELECT sample_id, count(*) AS n FROM geo.ledger_entries WHERE kind = 'charge' "
        "GROUP BY 1",
    )  # fmt: skip
    assert len(charges) == N and all(c["n"] == 1 for c in charges)

    # Forged and replayed deliveries change nothing: rows and the simulator's counts.
    before, sim_before = snapshot_of(db_url), stats(sim, service)["requests"]
    hooks_before = fetch(db_url, "SELECT upstream_id, deliveries FROM geo.webhook_deliveries")
    genuine = rows[0]["upstream_id"]
    if service == "dataforseo":
        wrong = httpx.get(f"{receiver}/webhooks/dataforseo/wrong", params={"id": genuine})
        replay = httpx.get(f"{receiver}/webhooks/dataforseo/{SECRET}", params={"id": genuine})
    else:
        body = {"snapshot_id": genuine, "status": "ready"}
        wrong = httpx.post(f"{receiver}/webhooks/brightdata/wrong", json=body)
        replay = httpx.post(f"{receiver}/webhooks/brightdata/{SECRET}", json=body)
    assert wrong.status_code == 401
    assert replay.status_code == 200 and replay.json()["outcome"] == "duplicate"
    after_hooks = fetch(db_url, "SELECT upstream_id, deliveries FROM geo.webhook_deliveries")
    assert {r["upstream_id"] for r in after_hooks} == {r["upstream_id"] for r in hooks_before}
    assert snapshot_of(db_url) == before
    assert stats(sim, service)["requests"] == sim_before


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_lost_callbacks_still_complete_by_polling(
    service, db_url, redis_url, redis_ns, own_simulator, receiver, monkeypatch
) -> None:
    sim, platform = setup(service, own_simulator, receiver, monkeypatch, lost=1.0)
    ids = make_cloro_run(db_url, load_registry(), f"r-{service}-lost-cb", N, platform=platform)
    run(db_url, redis_url, redis_ns, platform, ids, completed(db_url, N), callback_poll_s=0.5)
    assert completed(db_url, N)()
    check_invariants(db_url, expected_samples=N)
    st = stats(sim, service)
    assert st["callbacks"].get("lost", 0) == N and st["callbacks"].get("sent", 0) == 0
    assert fetch(db_url, "SELECT count(*) AS n FROM geo.webhook_deliveries")[0]["n"] == 0


def test_forged_ready_notify_never_fetches_a_collecting_snapshot(
    db_url, redis_url, redis_ns, own_simulator, receiver, monkeypatch
) -> None:
    """A notify with the genuine secret that says "ready" for a snapshot still collecting only
    wakes a poll: the service's own progress says running, nothing is fetched or charged, and
    the snapshot is given up (and cancelled) at the total bound like any stuck one."""
    sim, platform = setup("brightdata", own_simulator, receiver, monkeypatch, stuck=1.0)
    n = 2
    ids = make_cloro_run(db_url, load_registry(), "r-bd-forged", n, platform=platform)

    def accepted() -> bool:
        rows = fetch(db_url, "SELECT upstream_id FROM geo.samples WHERE upstream_id IS NOT NULL")
        return len(rows) == n

    def forge_then_end() -> bool:
        if not accepted():
            return False
        for r in fetch(db_url, "SELECT upstream_id FROM geo.samples"):
            httpx.post(
                f"{receiver}/webhooks/brightdata/{SECRET}",
                json={"snapshot_id": r["upstream_id"], "status": "ready"},
            )
        rows = fetch(db_url, "SELECT collection_state FROM geo.samples")
        return all(r["collection_state"] == "failed" for r in rows)

    run(
        db_url, redis_url, redis_ns, platform, ids, forge_then_end, callback_poll_s=0.5,
        retry=RetryPolicy(base_delay_s=0.05, max_delay_s=0.2, max_total_s=4.0, max_attempts=1),
    )  # fmt: skip
    rows = fetch(db_url, "SELECT collection_state, collection_reason FROM geo.samples")
    assert all(r["collection_state"] == "failed" for r in rows), rows
    assert all("poll:timed_out" in (r["collection_reason"] or "") for r in rows), rows
    st = stats(sim, "brightdata")
    assert all(v["results_fetched"] == 0 for v in st["keys"].values()), st["keys"]
    assert st["requests"].get("snapshot:200", 0) == 0
    assert st["cancelled"] == n  # the stuck snapshots were cancelled, not left on the cap
    assert (
        fetch(db_url, "SELECT count(*) AS n FROM geo.ledger_entries WHERE kind = 'charge'")[0]["n"]
        == 0
    )
