"""examples/services.yaml end to end (issue 31, first "done when"): one scraped channel per
answer-scraping service (cloro, DataForSEO, Bright Data, SerpApi) plus the same engines through
their APIs, run through the simulator over HTTP (a real simulator process, the real connectors,
real PostgreSQL and Redis) with EVERY pathology of each service profile switched on
(examples/services-simulator.yaml), then reconciled.

Judged from the SIMULATOR's own counts (per key, per tag, per input, per query), not from our
database: 0 samples executed twice upstream, 0 lost results (every result a service billed is
either our completed, charged answer or a sample waiting for review), every unknown outcome
resolved by look-up or sent to review, one charge per billed task, and a reconciliation with no
unexplained difference and every line explained."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
import yaml
from psycopg.rows import dict_row

from geo_pipeline.billing import ledger, reconcile
from geo_pipeline.connectors.factory import build_connector
from geo_pipeline.connectors.registry import load_registry
from geo_pipeline.domain.billing import EXPLAINED
from geo_pipeline.domain.config import normalise_and_validate
from geo_pipeline.domain.plan import build_plan, quote
from geo_pipeline.domain.retry import PollSchedule, RetryPolicy
from geo_pipeline.flows.create_run import create_run
from geo_pipeline_tests.integration.execution.helpers import check_invariants, fetch
from geo_pipeline_tests.integration.execution.test_worker_flow import run_worker_until

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
RUN = "r-services-example"
# Review reasons an unknown outcome may end in, per service (docs/answer-services.md).
REVIEW = {
    "chatgpt_cloro": "accepted_upstream:id_unknown",
    "chatgpt_brightdata": "acceptance_unknown:no_lookup",
    "aimode_serpapi": "acceptance_unknown:no_lookup",
    "chatgpt_api": "acceptance_unknown:no_lookup",
    "aimode_api": "acceptance_unknown:no_lookup",
}


@pytest.fixture
def sim(own_simulator, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("GEO_CONNECTORS_FILE", str(EXAMPLES / "services-registry.yaml"))
    sim = own_simulator(EXAMPLES / "services-simulator.yaml", seed=31)
    for name, value in {
        "GEO_SIMULATOR_URL": sim.url,
        "GEO_CLORO_URL": f"{sim.url}/cloro",
        "GEO_CLORO_API_KEY": "sim-cloro-key",
        "GEO_DATAFORSEO_URL": f"{sim.url}/dataforseo",
        "GEO_DATAFORSEO_CREDENTIALS": "sim-login:sim-password",
        "GEO_BRIGHTDATA_URL": f"{sim.url}/brightdata",
        "GEO_BRIGHTDATA_API_KEY": "sim-brightdata-key",
        "GEO_SERPAPI_URL": f"{sim.url}/serpapi",
        "GEO_SERPAPI_API_KEY": "sim-serpapi-key",
    }.items():
        monkeypatch.setenv(name, value)
    return sim


def stats(sim: Any, service: str) -> dict[str, Any]:
    return dict(httpx.get(f"{sim.url}/_control/services/{service}/stats", timeout=10).json())


def settled(db_url: str, n: int) -> Any:
    """Every sample ended, or waiting for review (parked for a day or more)."""

    def done() -> bool:
        rows = fetch(
            db_url,
            "SELECT count(*) AS n FROM geo.samples WHERE collection_state IN "
            "('completed', 'failed') OR (submission_state = 'uncertain' AND lease_owner IS NULL "
            "AND next_attempt_at > now() + interval '1 day')",
        )
        return bool(rows[0]["n"] == n)

    return done


def test_example_runs_with_every_service_pathology(db_url, redis_url, redis_ns, sim) -> None:
    registry = load_registry()
    caps = registry.capabilities()
    raw = yaml.safe_load((EXAMPLES / "services.yaml").read_text(encoding="utf-8"))
    config = normalise_and_validate(raw, caps)
    plan = build_plan(config, quote(config, {p: c.prices for p, c in caps.items()}), RUN)
    platforms = sorted({s.platform for s in plan.samples})
    assert {caps[p].access for p in platforms} == {"scraped", "api"}
    with psycopg.connect(db_url, row_factory=dict_row) as conn:
        ledger.deposit(conn, raw["tenant"], 10**8, "USD", f"dep-{RUN}")  # type: ignore[arg-type]
        conn.commit()
        create_run(conn, plan, confirm=True, dispatch=True)  # type: ignore[arg-type]
        conn.commit()
    n = len(plan.samples)
    connectors = {p: build_connector(registry.entry(p)) for p in platforms}
    asyncio.run(
        run_worker_until(
            db_url,
            redis_url,
            redis_ns,
            connectors,
            settled(db_url, n),
            timeout_s=240,
            capabilities=caps,
            poll=PollSchedule(first_s=0.05, min_s=0.05, ratio=0.5, max_s=0.3),
            # A stuck Bright Data snapshot is given up (and cancelled) after this bound.
            retry=RetryPolicy(base_delay_s=0.05, max_delay_s=0.3, max_total_s=15.0),
            # DataForSEO's "absent" is believed after submit timeout + lease since the send.
            submit_timeout_s=5.0,
            lease_s=5.0,
        )
    )
    assert settled(db_url, n)(), "every sample ends or waits for review"
    check_invariants(db_url, expected_samples=n)
    rows = fetch(
        db_url,
        "SELECT s.sample_id, s.platform, s.attempt_no, s.collection_state, s.submission_state, "
        "s.region, q.text, coalesce(s.submission_reason, '') || ' ' || "
        "coalesce(s.collection_reason, '') AS why "
        "FROM geo.samples s JOIN geo.question_revisions q USING (question_revision)",
    )
    by_id = {r["sample_id"]: r for r in rows}
    charge_rows = fetch(
        db_url,
        "SELECT sample_id, attempt_no, amount_minor, details->>'upstream_outcome' AS outcome, "
        "details->>'free_reason' AS free_reason FROM geo.ledger_entries WHERE kind = 'charge' "
        "ORDER BY entry_id",
    )
    # Every finished attempt posts a charge entry, a free one (0) included: e.g. a cloro task that
    # FAILED (0 credits, free_after_failure). A free entry says why it is free; what a sample was
    # *billed* is its entries above 0.
    for r in charge_rows:
        assert r["amount_minor"] > 0 or r["free_reason"], r
    charges = Counter(r["sample_id"] for r in charge_rows)
    billed_entries = Counter(r["sample_id"] for r in charge_rows if r["amount_minor"] > 0)
    parked = {r["sample_id"] for r in rows if r["submission_state"] == "uncertain"}
    # Every unknown outcome resolved (by look-up) or sent to review, with its reason.
    for sid in parked:
        r = by_id[sid]
        assert r["platform"] in REVIEW, r
        assert REVIEW[r["platform"]] in r["why"], r

    # ---- cloro: per idempotency key (sample:attempt)
    cl = stats(sim, "cloro")
    per_sample: Counter[str] = Counter()
    for key, v in cl["keys"].items():
        sid = key.rsplit(":", 1)[0]
        assert v["tasks_created"] <= 1, (key, v)  # never two tasks under one key
        per_sample[sid] += v["tasks_billed"]
    for sid, billed in per_sample.items():
        assert billed <= 1, (sid, billed)  # never two billed answers for one sample
        if billed:  # 0 lost results: a billed answer is ours or waits for review
            assert by_id[sid]["collection_state"] == "completed" or sid in parked, by_id[sid]
    assert cl["requests"].get("submit:lost", 0) >= 1, "lost answers must have happened"

    # ---- DataForSEO: per tag (sample:attempt); billed at task_post
    dfs = stats(sim, "dataforseo")
    for tag, v in dfs["keys"].items():
        assert v["tasks_created"] == v["submit_calls"] == 1, (tag, v)  # never re-posted
        sid = tag.rsplit(":", 1)[0]
        assert by_id[sid]["platform"] == "chatgpt_dataforseo"
    dfs_tasks = Counter(t.rsplit(":", 1)[0] for t in dfs["keys"])
    for sid, tasks in dfs_tasks.items():
        # one charge per billed task (a failed task is billed at task_post: charged rule)
        assert charges[sid] == tasks, (sid, tasks, charges[sid], by_id[sid])
    looked_up = fetch(
        db_url,
        "SELECT count(*) AS n FROM geo.upstream_requests u JOIN geo.samples s USING (sample_id) "
        "WHERE s.platform = 'chatgpt_dataforseo' AND u.resolved_by = 'lookup'",
    )[0]["n"]
    assert dfs["requests"].get("task_post:lost", 0) >= 1
    assert looked_up >= 1, "a lost DataForSEO answer is resolved by the tag look-up"

    # ---- Bright Data: per input (COUNTRY|prompt); billed per record
    bd = stats(sim, "brightdata")
    inputs = {
        f"{r['region'].upper()}|{r['text']}": r
        for r in rows
        if r["platform"] == "chatgpt_brightdata"
    }
    for key, v in bd["keys"].items():
        r = inputs[key]
        assert v["records_billed"] <= 1, (key, v)
        if v["records_billed"]:
            assert r["collection_state"] == "completed" or r["sample_id"] in parked, r
            assert billed_entries[r["sample_id"]] <= 1, [
                x for x in charge_rows if x["sample_id"] == r["sample_id"]
            ]
    assert sum(bd["collecting"].values()) == 0, "no snapshot left holding the cap"
    assert bd["cancelled"] >= 1, "a stuck snapshot must have been cancelled"

    # ---- SerpApi: per query; no cache hits (no_cache on every request)
    sp = stats(sim, "serpapi")
    assert sp["cache_hits"] == 0
    texts = {r["text"]: r for r in rows if r["platform"] == "aimode_serpapi"}
    for q, v in sp["queries"].items():
        r = texts[q]
        assert v.get("searches", 0) <= r["attempt_no"], (q, v, r)

    # ---- one billed charge per sample at most for the services that bill only a success.
    # Counting entries, free ones included, failed CI run 1 of 2026-12-07 (and 1 of 19 runs
    # alone) on one cloro sample, "('sd512cd04437047a403d69cc6', 2)"; in every passing run that
    # sample ends parked at attempt 3 with one entry of 0 (a FAILED task), so a second FAILED
    # task gives the two entries. The amounts of that failure were not printed; they are now.
    for sid, n_billed in billed_entries.items():
        if by_id[sid]["platform"] != "chatgpt_dataforseo":
            assert n_billed <= 1, (
                sid,
                by_id[sid],
                [r for r in charge_rows if r["sample_id"] == sid],
                fetch(
                    db_url,
                    "SELECT * FROM geo.state_transitions WHERE sample_id = %s ORDER BY 1",
                    (sid,),
                ),
            )

    # ---- reconciliation: no unexplained difference, every line explained
    with psycopg.connect(db_url, row_factory=dict_row) as conn:
        summary = reconcile.reconcile_run(conn, RUN, registry)  # type: ignore[arg-type]
        conn.commit()
    lines = fetch(
        db_url,
        "SELECT platform, upstream_id, classification, ours_minor, theirs_minor, detail "
        "FROM geo.reconciliation_lines WHERE run_id = %s",
        (RUN,),
    )
    assert lines
    unexplained = [r for r in lines if r["classification"] not in EXPLAINED]
    assert not unexplained, unexplained
    assert summary.unexplained_difference_minor == 0, summary
