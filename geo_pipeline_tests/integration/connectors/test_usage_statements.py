"""Statements from vendors' cost APIs, through the simulator over HTTP (R23): OpenAI's
organization costs and Anthropic's cost report are day totals, so a run's tasks of that day are
reconciled on one day-total line; a vendor without a cost API says so per platform."""

from __future__ import annotations

import asyncio
from datetime import UTC, date, datetime

import pytest

from geo_pipeline.billing import ledger, reconcile
from geo_pipeline.billing.ledger import ChargeRequest
from geo_pipeline.connectors.base import NoStatementApi, SubmitRequest
from geo_pipeline.connectors.protocols import SyncProtocolConnector, parse_cost_report
from geo_pipeline.domain.catalogue import parse_catalogue
from geo_pipeline.domain.config import normalise_and_validate
from geo_pipeline.domain.plan import build_plan, quote
from geo_pipeline.flows.create_run import create_run
from geo_pipeline_tests.clock import clear_of_midnight
from geo_pipeline_tests.fixtures.simulator import running_simulator


def registry(url: str):
    common = {
        "devices": ["web"],
        "regions": ["cn"],
        "modes": ["standard"],
        "asynchronous": False,
        "lookup_by_key": False,
    }
    return parse_catalogue(
        {
            "platforms": {
                # The simulator bills a call the standard base price of the model's profile:
                # deepseek 8, kimi 10 (CNY); these lists quote the same.
                "oa": {
                    **common,
                    "protocol": "openai_chat",
                    "base_url": f"{url}/openai/v1",
                    "options": {"model": "deepseek"},
                    "prices": {"version": "oa-1", "currency": "CNY", "base": {"standard": 8}},
                },
                "an": {
                    **common,
                    "protocol": "anthropic",
                    "base_url": f"{url}/anthropic/v1",
                    "options": {"model": "kimi"},
                    "prices": {"version": "an-1", "currency": "CNY", "base": {"standard": 10}},
                },
                "pp": {
                    **common,
                    "protocol": "perplexity",
                    "base_url": f"{url}/perplexity",
                    "options": {"model": "qwen"},
                    "prices": {"version": "pp-1", "currency": "CNY", "base": {"standard": 5}},
                },
            }
        }
    )


def test_cost_report_shapes_parse_to_day_totals():
    raw = (
        b'{"object":"page","data":[{"object":"bucket","start_time":1764633600,'
        b'"end_time":1764720000,"results":[{"object":"organization.costs.result",'
        b'"amount":{"value":0.0615,"currency":"usd"},"line_item":"gpt-5, input",'
        b'"project_id":null},{"object":"organization.costs.result","amount":{"value":0.02,'
        b'"currency":"usd"},"line_item":"web search tool calls","project_id":null}]}],'
        b'"has_more":false,"next_page":null}'
    )
    day = date(2025, 12, 2)
    lines = parse_cost_report("openai_responses", raw, day, "oai", "")
    assert [(x.upstream_id, x.item, x.amount_minor, x.currency) for x in lines] == [
        ("day-total:oai:2025-12-02", "base", 6, "USD"),  # 6.15 cents, rounded half up once
        ("day-total:oai:2025-12-02", "web_search", 2, "USD"),
    ]
    only_gpt5 = parse_cost_report("openai_responses", raw, day, "oai", "gpt-5")
    assert [x.amount_minor for x in only_gpt5] == [6]
    anthropic = (
        b'{"data":[{"starting_at":"2025-12-02T00:00:00Z","ending_at":"2025-12-03T00:00:00Z",'
        b'"results":[{"currency":"USD","amount":"123.45","workspace_id":null,'
        b'"description":"Claude Sonnet 4.5 usage","cost_type":"tokens","model":'
        b'"claude-sonnet-4-5","service_tier":"standard","token_type":null},'
        b'{"currency":"USD","amount":"1000","workspace_id":null,"description":"web search",'
        b'"cost_type":"web_search","model":null,"service_tier":null,"token_type":null}]}],'
        b'"has_more":false,"next_page":null}'
    )
    got = parse_cost_report("anthropic", anthropic, day, "claude", "claude-sonnet-4-5")
    assert [(x.item, x.amount_minor) for x in got] == [("base", 123), ("web_search", 1000)]


async def _call(reg, platform: str, n: int) -> list[str]:
    conn = SyncProtocolConnector(reg.entry(platform))
    try:
        ids = []
        for i in range(n):
            req = SubmitRequest(
                f"s-{platform}-{i}",
                1,
                "acme",
                "哪家咖啡好？",
                platform,
                "web",
                "cn",
                "standard",
                False,
            )
            ids.append((await conn.submit(req)).upstream_id)
        return ids
    finally:
        await conn.aclose()


async def _statement(reg, platform: str, day: str):
    conn = SyncProtocolConnector(reg.entry(platform))
    try:
        return await conn.fee_statement(day)
    finally:
        await conn.aclose()


def test_reconciliation_from_cost_apis_of_two_protocols(db):
    clear_of_midnight()  # the run's charges and the statement of `day` fall on one day (UTC)
    with running_simulator() as sim:
        reg = registry(sim.url)
        caps = reg.capabilities()
        raw = {
            "tenant": "acme",
            "brand": {"name": "瑞幸"},
            "questions": ["哪家咖啡性价比最高？", "最好喝的拿铁？"],
            "channels": [{"platform": "oa", "device": "web"}, {"platform": "an", "device": "web"}],
            "repeats": 1,
            "max_attempts": 1,
            "screenshot": "off",
        }
        config = normalise_and_validate(raw, caps)
        plan = build_plan(config, quote(config, {p: c.prices for p, c in caps.items()}), "r-cost")
        ledger.deposit(db, "acme", 100_000, "CNY", "dep")
        create_run(db, plan, dispatch=False)
        db.commit()
        by_platform = {p: [s for s in plan.samples if s.platform == p] for p in ("oa", "an")}
        for platform, samples in by_platform.items():
            ids = asyncio.run(_call(reg, platform, len(samples)))
            for sample, upstream_id in zip(samples, ids, strict=True):
                db.execute(
                    "INSERT INTO geo.upstream_requests (idempotency_key, sample_id, attempt_no,"
                    " platform, state, upstream_id, accepted_at)"
                    " VALUES (%s, %s, 1, %s, 'accepted', %s, now())",
                    (f"{sample.sample_id}:1", sample.sample_id, platform, upstream_id),
                )
                db.commit()
                ledger.post_charge(
                    db,
                    ChargeRequest(
                        "acme",
                        "r-cost",
                        sample.sample_id,
                        1,
                        upstream_id,
                        platform,
                        "standard",
                        "completed",
                    ),
                )
                db.commit()

        day = datetime.now(UTC).date().isoformat()
        assert reconcile.statement_days_needed(db, "r-cost") == {"an": [day], "oa": [day]}
        oa = asyncio.run(_statement(reg, "oa", day))
        an = asyncio.run(_statement(reg, "an", day))
        assert [(x.upstream_id, x.item, x.amount_minor) for x in oa.lines] == [
            (f"day-total:oa:{day}", "base", 16)
        ]
        assert [(x.item, x.amount_minor, x.currency) for x in an.lines] == [("base", 20, "CNY")]
        with pytest.raises(NoStatementApi, match="pp: perplexity offers no cost API"):
            asyncio.run(_statement(reg, "pp", day))
        stats = sim.stats(keys=False)["requests"]
        assert stats.get("openai:costs:200") == 1 and stats.get("anthropic:cost_report:200") == 1

    for statement in (oa, an):
        reconcile.import_statement(db, statement)
    db.commit()
    s = reconcile.reconcile_run(db, "r-cost")
    rows = {r["upstream_id"]: r for r in reconcile.reconciliation_lines(db, "r-cost")}
    assert rows[f"day-total:oa:{day}"]["classification"] == "apportioned"
    assert (
        rows[f"day-total:an:{day}"]["ours_minor"],
        rows[f"day-total:an:{day}"]["theirs_minor"],
    ) == (20, 20)
    tasks = [r for u, r in rows.items() if not u.startswith("day-total:")]
    assert len(tasks) == 4 and {r["classification"] for r in tasks} == {"in_day_total"}
    assert {r["detail"]["charged_minor"] for r in tasks if r["platform"] == "oa"} == {8}
    assert s.counts["in_day_total"] == 4 and s.counts["apportioned"] == 2
    assert s.clean and s.ours_total_minor == s.theirs_total_minor == 36

    # A day total above what our runs expect: the run keeps its share (16), and the 3 nobody of
    # ours expects is one unexplained line of its own.
    from geo_pipeline.connectors.base import FeeLine, FeeStatement

    reconcile.import_statement(
        db, FeeStatement("oa", day, "CNY", (FeeLine(f"day-total:oa:{day}", "base", 19, "CNY"),))
    )
    s = reconcile.reconcile_run(db, "r-cost")
    rows = {r["upstream_id"]: r for r in reconcile.reconciliation_lines(db, "r-cost")}
    line = rows[f"day-total:oa:{day}"]
    assert line["classification"] == "apportioned" and line["difference_minor"] == 0
    assert line["detail"]["this_run_minor"] == 16 and line["detail"]["other_runs_minor"] == 0
    extra = rows[f"day-total:oa:{day}:not-ours"]
    assert extra["classification"] == "amount_mismatch" and extra["difference_minor"] == 3
    assert s.unexplained_difference_minor == 3
