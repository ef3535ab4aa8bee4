"""The worker on Bright Data (no key, no look-up) through the simulator over HTTP, on real
PostgreSQL and Redis. Answers lost after the snapshot was created park the sample for review and
are never triggered again; a snapshot that never finishes is given up at the total bound and
cancelled upstream (it would hold the dataset's cap), billed nothing. Judged by the simulator's
own per-input counts."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from geo_pipeline.connectors.factory import build_connector
from geo_pipeline.connectors.registry import load_registry
from geo_pipeline.domain.retry import PollSchedule, RetryPolicy
from geo_pipeline_tests.integration.execution.helpers import check_invariants, fetch
from geo_pipeline_tests.integration.execution.test_cloro_worker import make_cloro_run, settled
from geo_pipeline_tests.integration.execution.test_worker_flow import run_worker_until

PLATFORM = "chatgpt_brightdata"
N = 16


def bd_stats(sim: Any) -> dict[str, Any]:
    resp = httpx.get(f"{sim.url}/_control/services/brightdata/stats", timeout=10)
    resp.raise_for_status()
    return dict(resp.json())


def start(own_simulator: Any, monkeypatch: pytest.MonkeyPatch, **profile: Any) -> Any:
    sim = own_simulator({"services": {"brightdata": profile}}, seed=17)
    monkeypatch.setenv("GEO_BRIGHTDATA_URL", f"{sim.url}/brightdata")
    monkeypatch.setenv("GEO_BRIGHTDATA_API_KEY", "sim-brightdata-key")
    return sim


def questions_of(db_url: str) -> dict[str, str]:
    rows = fetch(
        db_url,
        "SELECT s.sample_id, s.region, q.text FROM geo.samples s JOIN geo.question_revisions q "
        "USING (question_revision)",
    )
    return {r["sample_id"]: f"{r['region'].upper()}|{r['text']}" for r in rows}


def run(db_url: str, redis_url: str, ns: str, run_id: str, timeout_s: float = 90, **kw: Any):
    registry = load_registry()
    ids = make_cloro_run(db_url, registry, run_id, N, platform=PLATFORM)
    report = asyncio.run(
        run_worker_until(
            db_url,
            redis_url,
            ns,
            {PLATFORM: build_connector(registry.entry(PLATFORM))},
            settled(db_url, len(ids)),
            timeout_s=timeout_s,
            capabilities=registry.capabilities(),
            poll=PollSchedule(first_s=0.05, min_s=0.05, ratio=0.5, max_s=0.2),
            **kw,
        )
    )
    return report, ids


def test_lost_answers_wait_for_review_and_are_never_triggered_again(
    db_url, redis_url, redis_ns, own_simulator, monkeypatch
) -> None:
    sim = start(own_simulator, monkeypatch, lost_rate=0.3)
    report, ids = run(db_url, redis_url, redis_ns, "r-bd-lost")
    check_invariants(db_url, expected_samples=len(ids))
    rows = fetch(
        db_url,
        "SELECT sample_id, attempt_no, collection_state, submission_state, "
        "coalesce(submission_reason, '') || ' ' || coalesce(collection_reason, '') AS why "
        "FROM geo.samples",
    )
    completed = [r for r in rows if r["collection_state"] == "completed"]
    parked = [r for r in rows if r["submission_state"] == "uncertain"]
    assert completed and parked, "with 30 % lost answers both outcomes should occur"
    assert len(completed) + len(parked) == N
    assert all("acceptance_unknown:no_lookup" in r["why"] for r in parked), parked
    assert all(r["attempt_no"] == 1 for r in rows)
    stats = bd_stats(sim)
    keys = stats["keys"]
    inputs = questions_of(db_url)
    assert set(keys) == set(inputs.values())
    # What Bright Data saw: one trigger and one snapshot per sample, never two.
    assert max(v["trigger_calls"] for v in keys.values()) == 1
    assert stats["max_snapshots_per_input"] == 1
    # One charge per billed record: every completed sample is charged once, for a record Bright
    # Data billed; the parked ones are billed upstream, not by us (reconciliation names them).
    charges = fetch(
        db_url,
        "SELECT sample_id, count(*) AS n FROM geo.ledger_entries WHERE kind = 'charge' GROUP BY 1",
    )
    assert {c["sample_id"] for c in charges} == {r["sample_id"] for r in completed}
    assert all(c["n"] == 1 for c in charges)
    assert all(keys[inputs[r["sample_id"]]]["records_billed"] == 1 for r in completed)
    assert report["resent"] == 0


def test_a_snapshot_that_never_finishes_is_cancelled_at_the_total_bound(
    db_url, redis_url, redis_ns, own_simulator, monkeypatch
) -> None:
    sim = start(own_simulator, monkeypatch, stuck_rate=0.5)
    _, ids = run(
        db_url,
        redis_url,
        redis_ns,
        "r-bd-stuck",
        retry=RetryPolicy(base_delay_s=0.05, max_delay_s=0.2, max_total_s=3.0),
    )
    check_invariants(db_url, expected_samples=len(ids))
    rows = fetch(db_url, "SELECT sample_id, collection_state, collection_reason FROM geo.samples")
    timed_out = [r for r in rows if r["collection_state"] == "failed"]
    assert timed_out, "with half the snapshots stuck some samples must time out"
    assert all("timed_out" in (r["collection_reason"] or "") for r in timed_out), timed_out
    stats = bd_stats(sim)
    # Every abandoned snapshot was cancelled upstream: none still holds the dataset's cap, and
    # none was billed; the completed ones were billed once each.
    assert stats["collecting"] == {}
    assert stats["cancelled"] == len(timed_out)
    completed = [r for r in rows if r["collection_state"] == "completed"]
    assert stats["records_billed"] == len(completed)
    charged = fetch(
        db_url,
        "SELECT coalesce(sum(amount_minor), 0) AS s FROM geo.ledger_entries "
        "WHERE kind = 'charge' AND sample_id = ANY(%s)",
        ([r["sample_id"] for r in timed_out],),
    )
    assert charged[0]["s"] == 0
