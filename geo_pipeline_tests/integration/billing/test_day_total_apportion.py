"""A vendor cost API's account-wide day total, apportioned once across the day's runs (issue #34).

Two runs call one OpenAI-protocol platform of the simulator on the same day, and one call more
is made outside any run (other usage on the account). The simulator's ``/organization/costs``
reports one total for the day. Each run's day line takes its share of that total (in proportion
to its expected cost, explained by apportionment); the part of the total that no run of ours
expects is one unexplained line, reported once -- never the whole day's difference per run.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from geo_pipeline.billing import ledger, reconcile
from geo_pipeline.billing.ledger import ChargeRequest
from geo_pipeline.connectors.base import FeeLine, FeeStatement, SubmitRequest
from geo_pipeline.connectors.protocols import SyncProtocolConnector
from geo_pipeline.defs.billing import checks
from geo_pipeline.domain.catalogue import parse_catalogue
from geo_pipeline.domain.config import normalise_and_validate
from geo_pipeline.domain.plan import build_plan, quote
from geo_pipeline.flows.create_run import create_run
from geo_pipeline.store import business_gauges
from geo_pipeline_tests.clock import clear_of_midnight
from geo_pipeline_tests.fixtures.simulator import running_simulator


def _registry(url: str):
    # The simulator bills a deepseek call its standard base price, 8 CNY minor; quoted the same.
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
                    "prices": {"version": "oa-1", "currency": "CNY", "base": {"standard": 8}},
                }
            }
        }
    )


async def _call(reg, sample_ids: list[str]) -> list[str]:
    conn = SyncProtocolConnector(reg.entry("oa"))
    try:
        out = []
        for sid in sample_ids:
            req = SubmitRequest(
                sid, 1, "acme", "哪家咖啡好？", "oa", "web", "cn", "standard", False
            )
            out.append((await conn.submit(req)).upstream_id)
        return out
    finally:
        await conn.aclose()


async def _statement(reg, day: str):
    conn = SyncProtocolConnector(reg.entry("oa"))
    try:
        return await conn.fee_statement(day)
    finally:
        await conn.aclose()


def _run(db, reg, run_id: str, questions: list[str]) -> None:
    caps = reg.capabilities()
    raw = {
        "tenant": "acme",
        "brand": {"name": "瑞幸"},
        "questions": questions,
        "channels": [{"platform": "oa", "device": "web"}],
        "repeats": 1,
        "max_attempts": 1,
        "screenshot": "off",
    }
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
                "acme", run_id, sample.sample_id, 1, upstream_id, "oa", "standard", "completed"
            ),
        )
        db.commit()


def _day_lines(db, run_id: str) -> dict[str, dict]:
    return {
        r["upstream_id"]: r
        for r in reconcile.reconciliation_lines(db, run_id)
        if r["upstream_id"].startswith("day-total:")
    }


def test_day_total_is_apportioned_once_across_the_days_runs(db):
    clear_of_midnight()  # the run's charges and the statement of `day` fall on one day (UTC)
    ledger.deposit(db, "acme", 100_000, "CNY", "dep-apportion")
    with running_simulator() as sim:
        reg = _registry(sim.url)
        _run(db, reg, "r-day-a", ["哪家咖啡性价比最高？", "最好喝的拿铁？"])  # 2 answers: 16
        _run(db, reg, "r-day-b", ["哪家咖啡最好？"])  # 1 answer: 8
        asyncio.run(_call(reg, ["not-ours-1"]))  # someone else on the account: 8 more
        day = datetime.now(UTC).date().isoformat()
        statement = asyncio.run(_statement(reg, day))
    assert [(x.upstream_id, x.amount_minor) for x in statement.lines] == [
        (f"day-total:oa:{day}", 32)
    ]
    reconcile.import_statement(db, statement)
    db.commit()
    a = reconcile.reconcile_run(db, "r-day-a")
    b = reconcile.reconcile_run(db, "r-day-b")
    lines_a, lines_b = _day_lines(db, "r-day-a"), _day_lines(db, "r-day-b")

    # Each run's share of the day: its expected cost, explained by apportionment.
    share_a, share_b = lines_a[f"day-total:oa:{day}"], lines_b[f"day-total:oa:{day}"]
    assert (share_a["classification"], share_a["ours_minor"], share_a["theirs_minor"]) == (
        "apportioned",
        16,
        16,
    )
    assert (share_b["classification"], share_b["ours_minor"], share_b["theirs_minor"]) == (
        "apportioned",
        8,
        8,
    )
    # The 8 nobody of ours expects: one line, on one run (the day's first), not on every run.
    not_ours = [
        (run_id, r)
        for run_id, lines in (("r-day-a", lines_a), ("r-day-b", lines_b))
        for r in lines.values()
        if r["classification"] != "apportioned"
    ]
    assert [
        (run, r["upstream_id"], r["theirs_minor"], r["difference_minor"]) for run, r in not_ours
    ] == [("r-day-a", f"day-total:oa:{day}:not-ours", 8, 8)]
    assert share_a["theirs_minor"] + share_b["theirs_minor"] + not_ours[0][1]["theirs_minor"] == 32
    assert a.unexplained_difference_minor + b.unexplained_difference_minor == 8
    assert b.clean and b.unexplained_difference_minor == 0
    assert checks.zero_unexplained(db, "r-day-b").passed
    assert not checks.zero_unexplained(db, "r-day-a").passed
    assert business_gauges.refresh(db)["reconciliation"] == {"CNY": 8}

    # A re-issued day total below what the runs expect (20 < 24): each run's share is still
    # its expected cost, and the shortfall of 4 -- the vendor billed less than the answers we
    # charged for -- is one unexplained line of the day, on its first run, counted once.
    # Reconciling one run of the day rewrites the other (reconciled) run's day lines with the
    # same split: the stale +8 "not ours" line on r-day-a is replaced, not kept beside it.
    reconcile.import_statement(
        db, FeeStatement("oa", day, "CNY", (FeeLine(f"day-total:oa:{day}", "base", 20, "CNY"),))
    )
    db.commit()
    b = reconcile.reconcile_run(db, "r-day-b")
    a = reconcile.stored_summary(db, "r-day-a")
    lines_a, lines_b = _day_lines(db, "r-day-a"), _day_lines(db, "r-day-b")
    assert list(lines_b) == [f"day-total:oa:{day}"]
    assert sorted(lines_a) == [f"day-total:oa:{day}", f"day-total:oa:{day}:not-ours"]
    assert lines_a[f"day-total:oa:{day}"]["theirs_minor"] == 16
    assert lines_b[f"day-total:oa:{day}"]["theirs_minor"] == 8
    assert lines_a[f"day-total:oa:{day}:not-ours"]["theirs_minor"] == -4
    assert b.clean and not a.clean and a.unexplained_difference_minor == -4  # theirs - ours
    assert checks.zero_unexplained(db, "r-day-b").passed
    assert not checks.zero_unexplained(db, "r-day-a").passed
    # The gauge sums |theirs - ours| (test_gauge_absolute.py): the shortfall reads 4.
    assert business_gauges.refresh(db)["reconciliation"] == {"CNY": 4}
    # And reconciling it again changes nothing.
    assert reconcile.reconcile_run(db, "r-day-a").as_dict() == a.as_dict()
