"""Reconciliation of a platform whose vendor has no usage/cost API (statement_source
usage_fields), end to end through the simulator over HTTP: the real OpenAI-compatible connector
parses each answer's usage fields, the completion batch records them on the attempt in the same
transaction as its end and charge, and reconciliation prices them with the token prices of the
run's frozen price version -- a usage cost that differs from our per-answer charge is its own
explained line, and an answered attempt without usage is a line of its own, never zero."""

from __future__ import annotations

import asyncio

import pytest

from geo_pipeline.billing import ledger, reconcile
from geo_pipeline.billing.ledger import ChargeRequest
from geo_pipeline.connectors.base import Evidence, NoStatementApi, SubmitRequest
from geo_pipeline.connectors.protocols import SyncProtocolConnector
from geo_pipeline.domain.catalogue import parse_catalogue
from geo_pipeline.domain.config import normalise_and_validate
from geo_pipeline.domain.plan import build_plan, quote
from geo_pipeline.domain.usage import TokenPrices, Usage, usage_cost
from geo_pipeline.flows import complete
from geo_pipeline.flows.create_run import create_run
from geo_pipeline.store import execution as ex
from geo_pipeline_tests.fixtures.simulator import running_simulator

# fen per 1M tokens: high enough that a short simulated answer costs a few fen
TOKEN_PRICES = {
    "currency": "CNY",
    "input_per_1m": 20_000,
    "cached_input_per_1m": 5_000,
    "output_per_1m": 40_000,
    "source": "test list",
    "as_of": "2026-12-02",
}


def registry(url: str):
    return parse_catalogue(
        {
            "platforms": {
                "ds": {
                    "protocol": "openai_chat",
                    "base_url": f"{url}/openai/v1",
                    "options": {
                        "model": "deepseek",
                        "statement_source": "usage_fields",
                        "token_prices": {"ds-1": TOKEN_PRICES},
                    },
                    "devices": ["web"],
                    "regions": ["cn"],
                    "modes": ["standard"],
                    "asynchronous": False,
                    "lookup_by_key": False,
                    "prices": {"version": "ds-1", "currency": "CNY", "base": {"standard": 8}},
                }
            }
        }
    )


async def _answers(reg, requests: list[SubmitRequest]) -> list[Evidence]:
    conn = SyncProtocolConnector(reg.entry("ds"))
    try:
        out = []
        for req in requests:
            acc = await conn.submit(req)
            out.append(await conn.fetch_evidence(acc.upstream_id, req))
        return out
    finally:
        await conn.aclose()


def test_usage_fields_platform_reconciles_from_recorded_usage(db):
    with running_simulator() as sim:
        reg = registry(sim.url)
        caps = reg.capabilities()
        raw = {
            "tenant": "acme",
            "brand": {"name": "瑞幸"},
            "questions": ["哪家咖啡性价比最高？", "最好喝的拿铁是哪家？", "早餐咖啡推荐？"],
            "channels": [{"platform": "ds", "device": "web"}],
            "repeats": 1,
            "max_attempts": 1,
            "screenshot": "off",
        }
        config = normalise_and_validate(raw, caps)
        plan = build_plan(config, quote(config, {p: c.prices for p, c in caps.items()}), "r-use")
        ledger.deposit(db, "acme", 100_000, "CNY", "dep-use")
        create_run(db, plan, confirm=True, dispatch=True)
        db.commit()
        ids = [s.sample_id for s in plan.samples]
        claimed = {r["sample_id"]: r for r in ex.claim_ids(db, ids, owner="w-use", lease_s=60)}
        assert sorted(claimed) == sorted(ids)
        requests = [
            SubmitRequest(
                sid,
                int(claimed[sid]["attempt_no"]),
                "acme",
                q,
                "ds",
                "web",
                "cn",
                "standard",
                False,
            )
            for sid, q in zip(ids, raw["questions"], strict=True)
        ]
        evidence = asyncio.run(_answers(reg, requests))
        with pytest.raises(NoStatementApi, match="statement_source usage_fields"):
            conn = SyncProtocolConnector(reg.entry("ds"))
            try:
                asyncio.run(conn.fee_statement("2026-12-02"))
            finally:
                asyncio.run(conn.aclose())

    assert all(isinstance(e.usage, Usage) and e.usage.input_tokens for e in evidence)
    # The last answer came back without usage (as an unparseable body would): not priced.
    finishes = []
    for i, (req, ev) in enumerate(zip(requests, evidence, strict=True)):
        token = int(claimed[req.sample_id]["fencing_token"])
        finishes.append(
            complete.Finish(
                req.sample_id,
                token,
                "completed",
                outcome="completed",
                accept=ex.AcceptanceRecord(req.sample_id, token, ev.upstream_id),
                charge=ChargeRequest(
                    "acme",
                    "r-use",
                    req.sample_id,
                    req.attempt_no,
                    ev.upstream_id,
                    "ds",
                    "standard",
                    "completed",
                    usage=None if i == 2 else ev.usage,
                ),
            )
        )
    result = complete.finish_batch(db, owner="w-use", items=finishes)
    assert sorted(result.done) == sorted(ids) and not result.stale
    rows = {
        r["sample_id"]: r
        for r in db.execute(
            "SELECT sample_id, usage_input_tokens, usage_output_tokens, usage_cached_input_tokens,"
            " usage_source FROM geo.attempts WHERE sample_id = ANY(%s)",
            (ids,),
        ).fetchall()
    }
    for req, ev in zip(requests[:2], evidence[:2], strict=True):
        assert ev.usage is not None
        r = rows[req.sample_id]
        assert (r["usage_input_tokens"], r["usage_output_tokens"]) == (
            ev.usage.input_tokens,
            ev.usage.output_tokens,
        )
        assert r["usage_cached_input_tokens"] == 24 and r["usage_source"] == "usage"
    assert rows[requests[2].sample_id]["usage_source"] is None  # NULL, not 0

    summary = reconcile.reconcile_run(db, "r-use", registry=reg)
    lines = {r["upstream_id"]: r for r in reconcile.reconciliation_lines(db, "r-use")}
    prices = TokenPrices.from_mapping("ds-1", TOKEN_PRICES, "test")
    for ev in evidence[:2]:
        assert ev.usage is not None
        line = lines[ev.upstream_id]
        expected = usage_cost(ev.usage, prices).amount_minor
        assert expected > 0 and line["theirs_minor"] == expected and line["ours_minor"] == 8
        assert line["classification"] == ("matched" if expected == 8 else "usage_cost")
        assert line["detail"]["source"] == (
            "no cost API: reconciled against request-level usage x price version ds-1"
        )
        assert line["detail"]["usage"]["input_tokens"] == ev.usage.input_tokens
    missing = lines[evidence[2].upstream_id]
    assert missing["classification"] == "usage_missing" and missing["theirs_minor"] == 0
    assert "recorded no usage" in missing["detail"]["missing"]
    # The usage-cost differences are explained; only the unpriced answer is unexplained.
    assert summary.counts["usage_missing"] == 1
    assert summary.unexplained_difference_minor == -8 and not summary.clean
    assert reconcile.statement_sources(db, "r-use", reg) == {
        "ds": "no cost API: reconciled against request-level usage x price version ds-1"
    }


def test_usage_cost_is_exact_then_rounded_once_half_up():
    prices = TokenPrices(
        "v", "USD", input_per_1m=30, output_per_1m=250, cached_input_per_1m=3, per_1k_requests=3500
    )
    # 1,000 in (200 cached) + 2,000 out: 800*30 + 200*3 + 2000*250 = 524,600 micro-cents;
    # + 3.5 cents request fee = 4,024,600 micro-cents = 4.0246 cents -> 4
    cost = usage_cost(Usage(1000, 2000, cached_input_tokens=200), prices)
    assert (cost.amount_minor, cost.exact) == (4, "4.024600")
    half = usage_cost(Usage(0, 2000), TokenPrices("v", "USD", 0, 250))  # 0.5 cent
    assert half.amount_minor == 1
    with pytest.raises(ValueError, match="cannot be priced"):
        usage_cost(Usage(input_tokens=10), prices)
    with pytest.raises(ValueError, match="input_per_1m"):
        TokenPrices.from_mapping(
            "v", {"currency": "USD", "input_per_1m": 0.3, "output_per_1m": 1}, "p.token_prices.v"
        )
