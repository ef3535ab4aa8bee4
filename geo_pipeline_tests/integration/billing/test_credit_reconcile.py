"""Credits -> money, one conversion path (issue 31): a service that bills credits (cloro, through
the simulator's cloro profile over HTTP, on real PostgreSQL and Redis) is quoted, charged and
reconciled with one price version that maps its credits to money. The quote's per-answer price
is the credits x credit price rounded up; reconciliation prices the credits cloro reported for
each task (creditsCharged) with the same credit price.

- With a credit price at which one answer's credits are a whole number of cents, the vendor's
  amount equals ours on every line: matched, difference 0.
- With cloro's real entry-plan price (5 credits x $30/37,500 = 0.4 cent, charged as 1 cent),
  every line is a ``credit_cost`` line explained by that arithmetic: nothing unexplained.
- FAILED tasks cost 0 on both sides; canned refusals are billed on both sides.
"""

from __future__ import annotations

import asyncio
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from geo_pipeline.billing import reconcile
from geo_pipeline.connectors.factory import build_connector
from geo_pipeline.connectors.registry import load_registry
from geo_pipeline.domain.catalogue import Registry
from geo_pipeline.domain.retry import PollSchedule
from geo_pipeline_tests.integration.execution.helpers import fetch
from geo_pipeline_tests.integration.execution.test_cloro_worker import make_cloro_run
from geo_pipeline_tests.integration.execution.test_worker_flow import run_worker_until

PLATFORM = "chatgpt_cloro"
N = 12
BUNDLED = Path(load_registry.__code__.co_filename).with_name("registry.yaml")
REAL_PRICE = "credit_price: {minor: 3000, per_credits: 37500}"


def registry_with(tmp_path: Path, credit_price: str) -> Registry:
    text = BUNDLED.read_text(encoding="utf-8")
    assert REAL_PRICE in text
    path = tmp_path / "registry.yaml"
    path.write_text(text.replace(REAL_PRICE, credit_price), encoding="utf-8")
    return load_registry(path)


@pytest.fixture
def cloro_sim(own_simulator, monkeypatch: pytest.MonkeyPatch):
    sim = own_simulator({"services": {"cloro": {"fail_rate": 0.25, "refusal_rate": 0.25}}}, seed=23)
    monkeypatch.setenv("GEO_CLORO_URL", f"{sim.url}/cloro")
    monkeypatch.setenv("GEO_CLORO_API_KEY", "sim-cloro-key")
    return sim


def run_and_reconcile(
    db_url: str, redis_url: str, ns: str, registry: Registry, run_id: str
) -> tuple[Any, list[dict[str, Any]]]:
    ids = make_cloro_run(db_url, registry, run_id, N)

    def done() -> bool:
        rows = fetch(
            db_url,
            "SELECT count(*) AS n FROM geo.samples WHERE collection_state IN "
            "('completed', 'failed')",
        )
        return bool(rows[0]["n"] == len(ids))

    asyncio.run(
        run_worker_until(
            db_url,
            redis_url,
            ns,
            {PLATFORM: build_connector(registry.entry(PLATFORM))},
            done,
            timeout_s=90,
            capabilities=registry.capabilities(),
            poll=PollSchedule(first_s=0.05, min_s=0.05, ratio=0.5, max_s=0.2),
        )
    )
    assert done(), "every sample must end"
    with psycopg.connect(db_url, row_factory=dict_row) as conn:  # type: ignore[arg-type]
        summary = reconcile.reconcile_run(conn, run_id, registry)  # type: ignore[arg-type]
        conn.commit()
    lines = fetch(
        db_url,
        "SELECT upstream_id, classification, ours_minor, theirs_minor, detail "
        "FROM geo.reconciliation_lines WHERE run_id = %s",
        (run_id,),
    )
    return summary, lines


def test_vendor_credits_priced_with_the_quoted_version_match_our_charges(
    db_url, redis_url, redis_ns, cloro_sim, tmp_path
) -> None:
    # 5 credits x 1/5 cent = exactly 1 cent: the per-answer price and the vendor's amount agree.
    registry = registry_with(tmp_path, "credit_price: {minor: 1, per_credits: 5}")
    assert registry.entry(PLATFORM).capabilities.prices.base == {"standard": 1}
    summary, lines = run_and_reconcile(db_url, redis_url, redis_ns, registry, "r-credits-exact")
    assert lines and {r["classification"] for r in lines} == {"matched"}, lines
    assert summary.theirs_total_minor == summary.ours_total_minor > 0
    assert summary.unexplained_difference_minor == 0 and summary.clean
    billed = [r for r in lines if r["detail"].get("credits")]
    assert billed and all(r["detail"]["credits"] == 5 for r in billed)
    assert all(r["theirs_minor"] == 1 for r in billed)
    # FAILED tasks: nothing reported, nothing charged, nothing billed upstream.
    failed = [r for r in lines if r["ours_minor"] == 0]
    assert failed, "with a 25 % fail rate some attempts failed"
    assert all(r["theirs_minor"] == 0 for r in failed)
    # The simulator's own count of credits equals what reconciliation priced.
    import httpx

    stats = httpx.get(f"{cloro_sim.url}/_control/services/cloro/stats", timeout=10).json()
    assert stats["credits_charged"] == sum(r["detail"].get("credits", 0) for r in lines)


def test_real_credit_price_differences_are_explained_by_the_arithmetic(
    db_url, redis_url, redis_ns, cloro_sim, tmp_path
) -> None:
    registry = load_registry(BUNDLED)
    summary, lines = run_and_reconcile(db_url, redis_url, redis_ns, registry, "r-credits-real")
    billed = [r for r in lines if r["ours_minor"] > 0]
    assert billed and all(r["classification"] == "credit_cost" for r in billed), lines
    assert all(r["detail"]["cost_exact_minor"] == "0.400000" for r in billed)
    assert all(r["detail"]["price_version"] == "cloro-2026-12-credits" for r in billed)
    assert summary.unexplained_difference_minor == 0
    # 0.4 cent billed vs our 1 cent, each: the exact total rounded once (half away from zero),
    # never the sum of per-line roundings (-1 each)
    exact = Decimal("0.4") * len(billed) - len(billed)
    assert summary.credit_cost_difference_minor == int(exact.quantize(Decimal(1), ROUND_HALF_UP))
    assert summary.explained_difference_exact_minor == exact
    assert summary.explained_difference_minor == summary.theirs_total_minor - (
        summary.ours_total_minor
    )
