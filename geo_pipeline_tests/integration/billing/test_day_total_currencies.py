"""A vendor day total never adds two currencies (issue #34): when the day's charges on one
platform were booked in two currencies (a CNY tenant and a USD tenant calling the same vendor
account), the CNY day total is apportioned across the CNY runs only. The USD run's charges are
shown beside it, per currency, and never summed into a CNY figure (they used to be: its 8 USD
cents read as 8 CNY fen of "other runs" and took a CNY share of the total)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from geo_pipeline.billing import ledger, reconcile
from geo_pipeline.billing.ledger import ChargeRequest
from geo_pipeline.domain.catalogue import parse_catalogue
from geo_pipeline.domain.config import normalise_and_validate
from geo_pipeline.domain.plan import build_plan, quote
from geo_pipeline.flows.create_run import create_run
from geo_pipeline_tests.clock import clear_of_midnight
from geo_pipeline_tests.fixtures.simulator import running_simulator
from geo_pipeline_tests.integration.billing.test_day_total_apportion import (
    _call,
    _day_lines,
    _statement,
)


def _registry(url: str, currency: str):
    return parse_catalogue(
        {
            "platforms": {
                "oa": {
                    "devices": ["web"],
                    "regions": ["cn"],
                    "modes": ["standard"],
                    "asynchronous": False,
                    "lookup_by_key": False,
                    "protocol": "openai_chat",
                    "base_url": f"{url}/openai/v1",
                    "options": {"model": "deepseek"},
                    "prices": {
                        "version": f"oa-{currency}",
                        "currency": currency,
                        "base": {"standard": 8},
                    },
                }
            }
        }
    )


def _run(db, reg, tenant: str, run_id: str, questions: list[str]) -> None:
    raw = {
        "tenant": tenant,
        "brand": {"name": "瑞幸"},
        "questions": questions,
        "channels": [{"platform": "oa", "device": "web"}],
        "repeats": 1,
        "max_attempts": 1,
        "screenshot": "off",
    }
    caps = reg.capabilities()
    config = normalise_and_validate(raw, caps)
    plan = build_plan(config, quote(config, {p: c.prices for p, c in caps.items()}), run_id)
    create_run(db, plan, dispatch=False)
    db.commit()
    ids = asyncio.run(_call(reg, [s.sample_id for s in plan.samples]))
    for sample, upstream_id in zip(plan.samples, ids, strict=True):
        db.execute(
            "INSERT INTO geo.upstream_requests (idempotency_key, sample_id, attempt_no,"
            " platform, state, upstream_id, accepted_at)"
            " VALUES (%s, %s, 1, 'oa', 'accepted', %s, now())",
            (f"{sample.sample_id}:1", sample.sample_id, upstream_id),
        )
        db.commit()
        ledger.post_charge(
            db,
            ChargeRequest(
                tenant, run_id, sample.sample_id, 1, upstream_id, "oa", "standard", "completed"
            ),
        )
        db.commit()


def test_a_day_with_charges_in_two_currencies_is_never_summed(db, monkeypatch):
    clear_of_midnight()  # the run's charges and the statement of `day` fall on one day (UTC)
    # The test registry quotes in CNY only; this world has a USD tenant on the same platform.
    monkeypatch.setattr(ledger, "deposit_currencies", lambda: {"CNY", "USD"})
    ledger.deposit(db, "acme", 100_000, "CNY", "dep-cur-cny")
    ledger.deposit(db, "beta", 100_000, "USD", "dep-cur-usd")
    with running_simulator() as sim:
        cny, usd = _registry(sim.url, "CNY"), _registry(sim.url, "USD")
        _run(db, cny, "acme", "r-cur-cny", ["哪家咖啡性价比最高？", "最好喝的拿铁？"])  # 16 CNY
        _run(db, usd, "beta", "r-cur-usd", ["哪家咖啡最好？"])  # 8, booked in USD
        day = datetime.now(UTC).date().isoformat()
        statement = asyncio.run(_statement(cny, day))
    assert [(x.amount_minor, x.currency) for x in statement.lines] == [(24, "CNY")]
    reconcile.import_statement(db, statement)
    db.commit()
    reconcile.reconcile_run(db, "r-cur-cny")
    lines = _day_lines(db, "r-cur-cny")

    share = lines[f"day-total:oa:{day}"]
    # Apportioned across the CNY runs only: this run is all of them.
    assert (share["classification"], share["ours_minor"], share["theirs_minor"]) == (
        "apportioned", 16, 16,
    )  # fmt: skip
    detail = share["detail"]
    assert detail["other_runs_minor"] == 0, detail  # no USD amount inside a CNY figure
    assert detail["expected_all_runs_minor"] == 16, detail
    assert detail["other_currency_charges"] == {"USD": {"runs": 1, "charged_minor": 8}}, detail
    # What the CNY runs do not expect (the USD tenant's call on the same account) is one
    # unexplained line of the day, in CNY, with the other currency's charges named beside it.
    not_ours = lines[f"day-total:oa:{day}:not-ours"]
    assert (not_ours["theirs_minor"], not_ours["currency"].strip()) == (8, "CNY")
    assert not_ours["detail"]["other_currency_charges"] == {"USD": {"runs": 1, "charged_minor": 8}}

    # The USD run: a CNY total is not comparable with USD charges; nothing of it is counted.
    reconcile.reconcile_run(db, "r-cur-usd")
    usd_line = _day_lines(db, "r-cur-usd")[f"day-total:oa:{day}"]
    assert (usd_line["theirs_minor"], usd_line["currency"].strip()) == (0, "USD")
    assert usd_line["classification"] == "amount_mismatch"

    # A re-issued day total in two currencies: shown per currency, never one summed figure
    # (it read "27 CNY,USD").
    from geo_pipeline.connectors.base import FeeLine, FeeStatement

    uid = f"day-total:oa:{day}"
    reconcile.import_statement(
        db,
        FeeStatement(
            "oa", day, "CNY",
            (FeeLine(uid, "base", 24, "CNY"), FeeLine(uid, "base", 3, "USD")),
        ),
    )  # fmt: skip
    db.commit()
    reconcile.reconcile_run(db, "r-cur-cny")
    mixed = _day_lines(db, "r-cur-cny")[uid]
    assert (mixed["classification"], mixed["theirs_minor"]) == ("amount_mismatch", 0)
    assert mixed["detail"]["day_total_by_currency"] == {"CNY": 24, "USD": 3}, mixed["detail"]
    assert "day_total_minor" not in mixed["detail"] and "theirs_items" not in mixed["detail"]
    assert mixed["detail"]["other_currency_total"] == "24 CNY, 3 USD"
