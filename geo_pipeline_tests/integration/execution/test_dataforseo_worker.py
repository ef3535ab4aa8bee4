"""The worker on DataForSEO (no idempotency key) through the simulator over HTTP, on real
PostgreSQL and Redis: answers lost after the task was posted (and billed) are found again by our
tag, never re-sent; when the look-up cannot prove anything, the sample stays uncertain. Judged by
the simulator's per-tag counts."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from geo_pipeline.connectors.factory import build_connector
from geo_pipeline.connectors.registry import load_registry
from geo_pipeline.domain.retry import PollSchedule
from geo_pipeline_tests.integration.execution.helpers import check_invariants, fetch
from geo_pipeline_tests.integration.execution.test_cloro_worker import make_cloro_run
from geo_pipeline_tests.integration.execution.test_worker_flow import run_worker_until

PLATFORM = "chatgpt_dataforseo"
N = 16


def dfs_stats(sim: Any) -> dict[str, Any]:
    resp = httpx.get(f"{sim.url}/_control/services/dataforseo/stats", timeout=10)
    resp.raise_for_status()
    return dict(resp.json())


def start(own_simulator: Any, monkeypatch: pytest.MonkeyPatch, **profile: Any) -> Any:
    sim = own_simulator({"services": {"dataforseo": profile}}, seed=13)
    monkeypatch.setenv("GEO_DATAFORSEO_URL", f"{sim.url}/dataforseo")
    monkeypatch.setenv("GEO_DATAFORSEO_CREDENTIALS", "sim-login:sim-password")
    return sim


def run(db_url: str, redis_url: str, ns: str, run_id: str, done: Any) -> tuple[dict, list[str]]:
    registry = load_registry()
    ids = make_cloro_run(db_url, registry, run_id, N, platform=PLATFORM)
    report = asyncio.run(
        run_worker_until(
            db_url,
            redis_url,
            ns,
            {PLATFORM: build_connector(registry.entry(PLATFORM))},
            done(len(ids)),
            timeout_s=90,
            capabilities=registry.capabilities(),
            poll=PollSchedule(first_s=0.05, min_s=0.05, ratio=0.5, max_s=0.2),
            # quiet period = submit timeout + lease: a "not found" is believed after 3 s.
            submit_timeout_s=1.0,
            lease_s=2.0,
        )
    )
    return report, ids


def test_lost_answers_are_found_by_tag_and_never_sent_twice(
    db_url, redis_url, redis_ns, own_simulator, monkeypatch
) -> None:
    sim = start(own_simulator, monkeypatch, lost_rate=0.3)

    def done(n: int) -> Any:
        return lambda: (
            fetch(
                db_url, "SELECT count(*) AS n FROM geo.samples WHERE collection_state = 'completed'"
            )[0]["n"]
            == n
        )

    report, ids = run(db_url, redis_url, redis_ns, "r-dfs-lost", done)
    check_invariants(db_url, expected_samples=len(ids))
    found = fetch(
        db_url, "SELECT count(*) AS n FROM geo.upstream_requests WHERE resolved_by = 'lookup'"
    )[0]["n"]
    assert found >= 1, "with 30 % lost answers some acceptances come from the tag look-up"
    keys = dfs_stats(sim)["keys"]
    # One task per sample, billed once at post, and each billed task's result was collected.
    assert max(v["tasks_created"] for v in keys.values()) == 1
    assert max(v["submit_calls"] for v in keys.values()) == 1  # never re-sent
    per_sample = {k.rsplit(":", 1)[0] for k in keys}
    assert per_sample == set(ids)
    assert all(v["results_fetched"] >= 1 for v in keys.values())
    charges = fetch(
        db_url,
        "SELECT sample_id, count(*) AS n FROM geo.ledger_entries WHERE kind = 'charge' GROUP BY 1",
    )
    assert len(charges) == len(ids) and all(c["n"] == 1 for c in charges)
    assert report["resent"] == 0


def test_a_lookup_that_proves_nothing_leaves_the_sample_uncertain(
    db_url, redis_url, redis_ns, own_simulator, monkeypatch
) -> None:
    # Every answer lost, tasks still running (not in tasks_ready) and id_list refused (its
    # 10 calls/min spent): nothing can prove absence, so nothing may be sent again.
    sim = start(
        own_simulator, monkeypatch, lost_rate=1.0, completion_s=[600, 600], id_list_per_min=0
    )

    def done(n: int) -> Any:
        def check() -> bool:
            rows = fetch(
                db_url,
                "SELECT count(*) AS n FROM geo.samples WHERE submission_state = 'uncertain' "
                "AND collection_reason LIKE '%lookup%'",
            )
            return bool(rows[0]["n"] == n)

        return check

    _, ids = run(db_url, redis_url, redis_ns, "r-dfs-blind", done)
    keys = dfs_stats(sim)["keys"]
    assert {k.rsplit(":", 1)[0] for k in keys} == set(ids)
    assert all(v["submit_calls"] == 1 and v["tasks_created"] == 1 for v in keys.values())
    rows = fetch(db_url, "SELECT attempt_no, collection_state FROM geo.samples")
    assert all(r["attempt_no"] == 1 and r["collection_state"] == "queued" for r in rows)
    # A failed look-up is an expected answer (uncertain), not a worker error handed back.
    errors = fetch(
        db_url, "SELECT count(*) AS n FROM geo.state_transitions WHERE reason LIKE 'worker_error%'"
    )
    assert errors[0]["n"] == 0
