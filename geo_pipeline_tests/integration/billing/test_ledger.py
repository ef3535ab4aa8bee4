"""The ledger against the real database (R15, R23, R24): run lifecycle, charges by the platforms'
rules, over-reservation, close, refunds, and the database's own guards."""

from __future__ import annotations

import psycopg
import pytest

from geo_pipeline.billing import ledger
from geo_pipeline.billing.ledger import ChargeRequest
from geo_pipeline.domain.money import Money, MoneyError
from geo_pipeline.flows.create_run import create_run
from geo_pipeline.store import runs as runstore
from geo_pipeline_tests.integration.billing.helpers import create, make_plan


def charge(plan, i=0, attempt=1, outcome="completed", upstream=None, **used):
    s = plan.samples[i]
    return ChargeRequest(
        tenant_id=plan.config.tenant,
        run_id=plan.run_id,
        sample_id=s.sample_id,
        attempt_no=attempt,
        upstream_id=upstream or f"u-{s.sample_id}-{attempt}",
        platform=s.platform,
        mode=s.mode,
        upstream_outcome=outcome,
        **used,
    )


def kinds(db, run_id):
    return [(e["kind"], e["amount_minor"]) for e in ledger.run_ledger(db, run_id)["entries"]]


def test_creation_posts_estimate_and_reserves_estimated_max(db):
    ledger.deposit(db, "acme", 1000, "CNY", "dep-1")
    plan = create(db, "r1")
    est = plan.quote.estimated_max.amount_minor
    assert est > 0
    assert kinds(db, "r1") == [("estimate", est), ("reserve", est)]
    b = ledger.balances(db, "acme")
    assert (b.available, b.reserved, b.spent) == (
        Money(1000 - est, "CNY"),
        Money(est, "CNY"),
        Money(0, "CNY"),
    )
    assert runstore.get_run(db, "r1")["confirmed_at"] is not None
    rules_ = {r["platform"]: r["retry_fee_rule"] for r in ledger.run_ledger(db, "r1")["fee_rules"]}
    assert rules_ == {"doubao": "charged"}


def test_insufficient_funds_rolls_back_the_whole_run(db):
    ledger.deposit(db, "acme", 10, "CNY", "dep-1")
    plan = make_plan("r-short")
    needed = plan.quote.estimated_max.amount_minor
    with pytest.raises(ledger.InsufficientFunds) as err:
        create_run(db, plan, confirm=True, dispatch=True)
    db.rollback()
    msg = str(err.value)
    assert "has 10 CNY minor units available" in msg
    assert f"needs {needed}" in msg
    assert f"billing deposit --tenant acme --amount {needed - 10} --currency CNY" in msg
    with pytest.raises(runstore.RunNotFound):
        runstore.get_run(db, "r-short")
    assert db.execute("SELECT count(*) AS n FROM geo.samples").fetchone()["n"] == 0
    assert db.execute("SELECT count(*) AS n FROM geo.outbox").fetchone()["n"] == 0
    assert ledger.balances(db, "acme").available == Money(10, "CNY")
    assert (
        db.execute(
            "SELECT count(*) AS n FROM geo.ledger_entries WHERE run_id IS NOT NULL"
        ).fetchone()["n"]
        == 0
    )


def test_unconfirmed_run_then_confirm_is_idempotent(db):
    plan = create(db, "r2", confirm=False)
    est = plan.quote.estimated_max.amount_minor
    assert kinds(db, "r2") == [("estimate", est)]
    assert runstore.get_run(db, "r2")["confirmed_at"] is None
    with pytest.raises(ledger.InsufficientFunds):
        ledger.confirm_run(db, "r2")
    ledger.deposit(db, "acme", est, "CNY", "dep-1")
    assert ledger.confirm_run(db, "r2") == Money(est, "CNY")
    assert ledger.confirm_run(db, "r2") == Money(est, "CNY")
    assert kinds(db, "r2") == [("estimate", est), ("reserve", est)]
    assert ledger.balances(db, "acme").available == Money(0, "CNY")
    assert runstore.get_run(db, "r2")["confirmed_at"] is not None


def test_charge_at_quoted_prices_and_duplicates_post_nothing(db):
    ledger.deposit(db, "acme", 10_000, "CNY", "dep-1")
    plan = create(db, "r3")  # doubao standard: base 6, screenshot 2, rule 'charged'
    first = ledger.post_charge(db, charge(plan, screenshot_used=True))
    assert isinstance(first, int)
    for _ in range(5):  # duplicate callbacks / replayed completions
        assert ledger.post_charge(db, charge(plan, screenshot_used=True)) is None
    assert ledger.post_charge(db, charge(plan, 1)) is not None  # no screenshot: base only
    charges = [(k, a) for k, a in kinds(db, "r3") if k == "charge"]
    assert charges == [("charge", 8), ("charge", 6)]
    # 'charged': a retry after an upstream failure is billed again
    assert ledger.post_charge(db, charge(plan, 1, attempt=2, outcome="failed")) is not None
    assert ledger.balances(db, "acme").spent == Money(8 + 6 + 6, "CNY")


def test_free_after_failure_and_free_rules(db):
    ledger.deposit(db, "acme", 10_000, "CNY", "dep-1")
    channels = [
        {"platform": "deepseek", "device": "web", "modes": ["deep_thinking"]},
        {"platform": "kimi", "device": "web"},
    ]
    plan = create(db, "r4", channels=channels, questions=1)
    ds, km = plan.samples  # deepseek deep_thinking (free_after_failure), kimi (free)
    assert (ds.platform, km.platform) == ("deepseek", "kimi")
    # deepseek: a failed upstream task is free (a zero entry records the decision) ...
    assert ledger.post_charge(db, charge(plan, 0, 1, "failed")) is None
    # ... a completed retry is charged, deep thinking surcharge only because it was used
    assert ledger.post_charge(db, charge(plan, 0, 2, deep_thinking_used=True)) is not None
    # kimi 'free': only the first charged attempt of a sample is billed
    assert ledger.post_charge(db, charge(plan, 1, 1, "failed")) is not None
    assert ledger.post_charge(db, charge(plan, 1, 2)) is None
    entries = [e for e in ledger.run_ledger(db, "r4")["entries"] if e["kind"] == "charge"]
    got = [(e["sample_id"], e["attempt_no"], e["amount_minor"]) for e in entries]
    assert got == [
        (ds.sample_id, 1, 0),
        (ds.sample_id, 2, 8 + 12),
        (km.sample_id, 1, 10),
        (km.sample_id, 2, 0),
    ]
    assert entries[0]["details"]["free_reason"].startswith("free_after_failure")
    assert entries[3]["details"]["free_reason"].startswith("free:")


def test_charge_beyond_reservation_posts_flagged_adjustment(db):
    ledger.deposit(db, "acme", 10_000, "CNY", "dep-1")
    plan = create(db, "r5", questions=1, max_attempts=1, screenshot="off")
    est = plan.quote.estimated_max.amount_minor
    assert est == 6  # one doubao answer, no retries, no screenshot
    assert ledger.post_charge(db, charge(plan)) is not None  # uses the whole reservation
    # A second attempt the quote did not foresee: recorded, never silently.
    assert ledger.post_charge(db, charge(plan, 0, 2)) is not None
    review = ledger.entries_for_review(db, "r5")
    assert [(r["amount_minor"], r["details"]["review"]) for r in review] == [
        (6, ledger.REVIEW_OVER_RESERVATION)
    ]
    t = ledger.run_ledger(db, "r5")["totals"]
    assert (t["charged_minor"], t["overrun_minor"], t["reservation_left_minor"]) == (12, 6, 0)
    b = ledger.balances(db, "acme")
    assert (b.available.amount_minor, b.reserved.amount_minor, b.spent.amount_minor) == (
        10_000 - 12,
        0,
        12,
    )
    assert ledger.account_drift(db) == []


def test_database_refuses_a_charge_without_reservation(db):
    ledger.deposit(db, "acme", 10_000, "CNY", "dep-1")
    create(db, "r6", confirm=False)
    with pytest.raises(psycopg.errors.CheckViolation, match="charges_within_reservation"):
        db.execute(
            "INSERT INTO geo.ledger_entries (tenant_id, kind, amount_minor, currency, run_id,"
            " idempotency_key) VALUES ('acme', 'charge', 5, 'CNY', 'r6', 'sneaky')"
        )
    db.rollback()


def test_ledger_and_run_accounts_refuse_edits(db):
    ledger.deposit(db, "acme", 10_000, "CNY", "dep-1")
    create(db, "r7")
    for sql in (
        "UPDATE geo.ledger_entries SET amount_minor = 1",
        "DELETE FROM geo.ledger_entries",
        "UPDATE geo.run_accounts SET reserved_minor = 10**6",
        "DELETE FROM geo.run_accounts",
        "INSERT INTO geo.run_accounts (run_id, tenant_id, currency) VALUES ('r7', 'acme', 'CNY')",
    ):
        with pytest.raises(psycopg.errors.RestrictViolation):
            db.execute(sql.replace("10**6", "1000000"))
        db.rollback()


def test_close_releases_the_rest_and_never_refunds(db):
    ledger.deposit(db, "acme", 10_000, "CNY", "dep-1")
    plan = create(db, "r8")
    est = plan.quote.estimated_max.amount_minor
    db.execute("UPDATE geo.runs SET cancel_requested_at = now() WHERE run_id = 'r8'")
    db.commit()
    ledger.post_charge(db, charge(plan, screenshot_used=True))
    with pytest.raises(ledger.RunNotBillable, match="queued or running"):
        ledger.close_run(db, "r8")
    result = ledger.close_run(db, "r8", force=True)
    assert result.closed_now and result.released == Money(est - 8, "CNY")
    again = ledger.close_run(db, "r8", force=True)
    assert not again.closed_now and again.released == result.released
    t = ledger.run_ledger(db, "r8")["totals"]
    assert (
        t["reserved_total_minor"] + t["overrun_minor"] == t["charged_minor"] + t["released_minor"]
    )
    assert t["refunded_minor"] == 0  # a local cancel refunds nothing (R24)
    assert runstore.get_run(db, "r8")["closed_at"] is not None
    # A late charge after close is still recorded and flagged; the invariant still holds.
    ledger.post_charge(db, charge(plan, 1))
    t = ledger.run_ledger(db, "r8")["totals"]
    assert (
        t["reserved_total_minor"] + t["overrun_minor"] == t["charged_minor"] + t["released_minor"]
    )
    assert len(ledger.entries_for_review(db, "r8")) == 1
    assert ledger.balances(db, "acme").reserved == Money(0, "CNY")


def test_refunds_never_exceed_charges_and_are_idempotent(db):
    ledger.deposit(db, "acme", 10_000, "CNY", "dep-1")
    plan = create(db, "r9")
    ledger.post_charge(db, charge(plan, upstream="up-1", screenshot_used=True))  # 8
    r1 = ledger.refund(db, "r9", "up-1", 5, "statement shows 3", "refund-1")
    assert ledger.refund(db, "r9", "up-1", 5, "statement shows 3", "refund-1") == r1
    with pytest.raises(ledger.IdempotencyConflict):
        ledger.refund(db, "r9", "up-1", 4, "other", "refund-1")
    with pytest.raises(ledger.RefundExceedsCharges, match="charged 8, already refunded 5"):
        ledger.refund(db, "r9", "up-1", 4, "too much", "refund-2")
    ledger.refund(db, "r9", "up-1", 3, "rest", "refund-3")
    with pytest.raises(ledger.RefundExceedsCharges):
        ledger.refund(db, "r9", "up-unknown", 1, "never charged", "refund-4")
    b = ledger.balances(db, "acme")
    assert b.spent == Money(0, "CNY")
    assert b.available + b.reserved == Money(10_000, "CNY")
    # a goodwill credit linked to the run moves available money, not the reservation
    ledger.adjust(db, "acme", 25, "CNY", "goodwill for r9", "adj-r9", run_id="r9")
    b2 = ledger.balances(db, "acme")
    assert b2.available == b.available + Money(25, "CNY") and b2.reserved == b.reserved
    assert b2 == ledger.balances_from_entries(db, "acme")
    assert ledger.account_drift(db) == []


def test_money_is_never_a_float(db):
    with pytest.raises(MoneyError):
        ledger.deposit(db, "acme", 10.5, "CNY", "dep-f")  # type: ignore[arg-type]
    ledger.deposit(db, "acme", 100, "CNY", "dep-1")
    create(db, "r10", confirm=False)
    with pytest.raises(MoneyError):
        ledger.adjust(db, "acme", 1.0, "CNY", "x", "adj-f")  # type: ignore[arg-type]
    with pytest.raises(MoneyError):
        ledger.refund(db, "r10", "u", 0.5, "x", "ref-f")  # type: ignore[arg-type]
    # and every amount the database holds is an integer type
    types = {
        r["data_type"]
        for r in db.execute(
            "SELECT data_type FROM information_schema.columns WHERE table_schema = 'geo'"
            " AND (column_name LIKE '%%minor%%')"
        ).fetchall()
    }
    assert types == {"bigint"}


def test_deposit_idempotency_and_currency(db):
    a = ledger.deposit(db, "acme", 100, "CNY", "dep-1")
    assert ledger.deposit(db, "acme", 100, "CNY", "dep-1") == a
    with pytest.raises(ledger.IdempotencyConflict):
        ledger.deposit(db, "acme", 200, "CNY", "dep-1")
    # A currency no registered platform quotes in could never pay for a run (EUR: none does;
    # USD is quoted since the simulated ChatGPT API and the answer services price in it) ...
    assert "EUR" not in ledger.deposit_currencies()
    with pytest.raises(ledger.BillingError, match="currency EUR is not one any platform quotes"):
        ledger.deposit(db, "acme", 100, "EUR", "dep-2")
    # ... and a quoted currency other than the tenant's cannot be booked on its one-currency ledger.
    assert "USD" in ledger.deposit_currencies()
    with pytest.raises(ledger.BillingError, match="acme is billed in CNY; a deposit in USD cannot"):
        ledger.deposit(db, "acme", 100, "USD", "dep-2u")
    with pytest.raises(ledger.BillingError, match="at most 1000000000000000 minor units"):
        ledger.deposit(db, "acme", 2**63 - 1, "CNY", "dep-huge")
    with pytest.raises(ledger.BillingError, match="positive"):
        ledger.deposit(db, "acme", 0, "CNY", "dep-3")
    with pytest.raises(ledger.BillingError, match="not a tenant id"):
        ledger.deposit(db, "Bad Tenant!", 10, "CNY", "dep-4")
    assert ledger.balances(db, "acme").available == Money(100, "CNY")
    ledger.adjust(db, "acme", -30, "CNY", "goodwill reversal", "adj-1")
    assert ledger.balances(db, "acme").available == Money(70, "CNY")
    with pytest.raises(ledger.BillingError, match="no tenant"):
        ledger.balances(db, "nobody")


def test_close_of_a_terminal_run_counts_uncertain_samples_without_blocking(db):
    ledger.deposit(db, "acme", 10_000, "CNY", "dep-1")
    plan = create(db, "r11")
    s = plan.samples[0]
    db.execute(
        "UPDATE geo.samples SET submission_state = 'submitting' WHERE sample_id = %s",
        (s.sample_id,),
    )
    db.execute(
        "UPDATE geo.samples SET submission_state = 'uncertain' WHERE sample_id = %s",
        (s.sample_id,),
    )
    db.execute("UPDATE geo.samples SET collection_state = 'failed' WHERE run_id = 'r11'")
    db.commit()
    result = ledger.close_run(db, "r11")  # no force needed: nothing is queued or running
    assert result.closed_now
    assert result.released == plan.quote.estimated_max
    release = [e for e in ledger.run_ledger(db, "r11")["entries"] if e["kind"] == "release"]
    assert release[0]["details"]["uncertain_samples"] == 1
    assert release[0]["details"]["forced"] is False


def test_a_sample_parked_uncertain_does_not_block_the_close(db):
    # What a worker leaves for an operator: collection queued (due in days), submission
    # uncertain. Before, run_activity counted it as active and the run could never close.
    ledger.deposit(db, "acme", 10_000, "CNY", "dep-1")
    plan = create(db, "r12")
    s = plan.samples[0]
    for state in ("submitting", "uncertain"):
        db.execute(
            "UPDATE geo.samples SET submission_state = %s WHERE sample_id = %s",
            (state, s.sample_id),
        )
    db.execute(
        "UPDATE geo.samples SET collection_state = 'failed' "
        "WHERE run_id = 'r12' AND sample_id <> %s",
        (s.sample_id,),
    )
    db.commit()
    result = ledger.close_run(db, "r12")
    assert result.closed_now
    release = [e for e in ledger.run_ledger(db, "r12")["entries"] if e["kind"] == "release"]
    assert release[0]["details"]["uncertain_samples"] == 1


def test_a_run_quoted_in_another_currency_than_the_tenant_is_refused(db, monkeypatch):
    # A tenant funded in USD while some platform quoted in USD (the registry changed since).
    monkeypatch.setattr(ledger, "deposit_currencies", lambda: {"CNY", "USD"})
    ledger.deposit(db, "acme", 10_000, "USD", "dep-usd")
    with pytest.raises(ledger.BillingError, match="billed in USD, but run r12 is quoted in CNY"):
        create_run(db, make_plan("r12"), confirm=True, dispatch=False)
    db.rollback()
    with pytest.raises(runstore.RunNotFound):
        runstore.get_run(db, "r12")
