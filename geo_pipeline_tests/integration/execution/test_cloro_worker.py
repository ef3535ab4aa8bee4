"""The worker on a scraped channel (cloro, through the simulator's cloro profile over HTTP) on
real PostgreSQL and Redis, with answers lost after cloro created the task: the re-send under the
same key gets 409, the sample waits for review as 'accepted, id unknown', and nothing is ever
sent under a new key. Judged by the simulator's own per-key counts, not by our database."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import psycopg
import pytest
from psycopg.rows import dict_row

from geo_pipeline.billing import ledger
from geo_pipeline.connectors.factory import build_connector
from geo_pipeline.connectors.registry import load_registry
from geo_pipeline.domain.catalogue import Registry
from geo_pipeline.domain.config import normalise_and_validate
from geo_pipeline.domain.plan import build_plan, quote
from geo_pipeline.domain.retry import PollSchedule
from geo_pipeline.flows.create_run import create_run
from geo_pipeline_tests.integration.execution.helpers import check_invariants, fetch
from geo_pipeline_tests.integration.execution.test_worker_flow import run_worker_until

PLATFORM = "chatgpt_cloro"
N = 24


def make_cloro_run(
    db_url: str, registry: Registry, run_id: str, questions: int, platform: str = PLATFORM
) -> list[str]:
    """A confirmed, dispatched run of ``questions`` on one scraped channel, paid in USD."""
    caps = registry.capabilities()
    raw = {
        "tenant": "acme",
        "brand": {"name": "Luckin", "aliases": ["瑞幸"]},
        "questions": [f"Which coffee chain is best? ({run_id} {i})" for i in range(questions)],
        "channels": [{"platform": platform, "device": "web"}],
        "repeats": 1,
        "max_attempts": 3,
        "screenshot": "off",
    }
    config = normalise_and_validate(raw, caps)
    plan = build_plan(config, quote(config, {p: c.prices for p, c in caps.items()}), run_id)
    with psycopg.connect(db_url, row_factory=dict_row) as conn:
        ledger.deposit(conn, "acme", 10**8, "USD", f"dep-{run_id}")  # type: ignore[arg-type]
        conn.commit()
        create_run(conn, plan, confirm=True, dispatch=True)  # type: ignore[arg-type]
        conn.commit()
    return [s.sample_id for s in plan.samples]


def settled(db_url: str, n: int) -> Any:
    """Every sample terminal, or waiting for review because cloro holds its task."""

    def done() -> bool:
        rows = fetch(
            db_url,
            "SELECT count(*) AS n FROM geo.samples WHERE collection_state IN "
            "('completed', 'failed') OR (submission_state = 'uncertain' AND lease_owner IS NULL "
            "AND next_attempt_at > now() + interval '1 day')",
        )
        return bool(rows[0]["n"] == n)

    return done


@pytest.fixture
def cloro_sim(own_simulator, monkeypatch: pytest.MonkeyPatch):
    sim = own_simulator({"services": {"cloro": {"lost_rate": 0.3}}}, seed=11)
    monkeypatch.setenv("GEO_CLORO_URL", f"{sim.url}/cloro")
    monkeypatch.setenv("GEO_CLORO_API_KEY", "sim-cloro-key")
    return sim


def test_lost_answers_go_to_review_never_to_a_new_key(db_url, redis_url, redis_ns, cloro_sim):
    registry = load_registry()
    ids = make_cloro_run(db_url, registry, "r-cloro-lost", N)
    conn = build_connector(registry.entry(PLATFORM))
    report = asyncio.run(
        run_worker_until(
            db_url,
            redis_url,
            redis_ns,
            {PLATFORM: conn},
            settled(db_url, len(ids)),
            timeout_s=60,
            capabilities=registry.capabilities(),
            poll=PollSchedule(first_s=0.05, min_s=0.05, ratio=0.5, max_s=0.2),
        )
    )
    check_invariants(db_url, expected_samples=len(ids))
    rows = fetch(
        db_url,
        "SELECT sample_id, attempt_no, collection_state, submission_state, upstream_id, "
        "coalesce(submission_reason, '') || ' ' || coalesce(collection_reason, '') AS why "
        "FROM geo.samples",
    )
    completed = [r for r in rows if r["collection_state"] == "completed"]
    parked = [r for r in rows if r["submission_state"] == "uncertain"]
    assert len(completed) + len(parked) == N, rows
    assert completed and parked, "with 30 % lost answers both outcomes should occur"
    assert all("accepted_upstream:id_unknown" in r["why"] for r in parked), parked
    assert all(r["attempt_no"] == 1 for r in rows)  # never a new attempt (a new key)
    assert report["uncertain"] >= len(parked)

    stats = cloro_sim_stats(cloro_sim)
    keys = stats["keys"]
    # What cloro saw: one task per sample, never two; each parked sample's re-send met a 409.
    assert set(keys) == {f"{sid}:1" for sid in ids}
    assert max(v["tasks_created"] for v in keys.values()) == 1
    assert all(keys[f"{r['sample_id']}:1"]["conflicts"] >= 1 for r in parked)
    # One charge per billed task: each completed sample is charged once, for a task cloro
    # billed; the parked ones are billed upstream and not by us (reconciliation names them).
    charges = fetch(
        db_url,
        "SELECT sample_id, upstream_id, count(*) AS n FROM geo.ledger_entries "
        "WHERE kind = 'charge' GROUP BY 1, 2",
    )
    assert {c["sample_id"] for c in charges} == {r["sample_id"] for r in completed}
    assert all(c["n"] == 1 for c in charges)
    assert all(keys[f"{r['sample_id']}:1"]["tasks_billed"] == 1 for r in completed)


def cloro_sim_stats(sim) -> dict[str, Any]:
    resp = httpx.get(f"{sim.url}/_control/services/cloro/stats", timeout=10)
    resp.raise_for_status()
    return dict(resp.json())
