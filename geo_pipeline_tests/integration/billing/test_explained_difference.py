"""One "explained difference" (issue #34): the reconciliation summary, the blocking check
``zero_unexplained_difference``, the R26 gauge and the reconciliation alert leave out the same
lines -- timing (pending), a newer price list (price_change), the vendor's day total
(in_day_total) and token usage x price (usage_cost) -- so a token-billed engine's usage-cost
line never fails the blocking check or raises an alert that the summary calls explained."""

from __future__ import annotations

from geo_pipeline.billing import ledger, reconcile
from geo_pipeline.defs.billing import checks
from geo_pipeline.defs.operations.alerts import AlertThresholds, database_incidents
from geo_pipeline.domain import billing as rules
from geo_pipeline.store import business_gauges
from geo_pipeline_tests.integration.billing.helpers import create


def _plant(db, run_id: str, *lines: tuple[str, str, int, int]) -> None:
    for upstream_id, cls, ours, theirs in lines:
        db.execute(
            "INSERT INTO geo.reconciliation_lines (run_id, upstream_id, platform, classification,"
            " ours_minor, theirs_minor, currency, fee_class) "
            "VALUES (%s, %s, 'doubao', %s, %s, %s, 'CNY', 'completed')",
            (run_id, upstream_id, cls, ours, theirs),
        )
    db.commit()


def test_summary_check_gauge_and_alert_agree_on_what_is_explained(db):
    ledger.deposit(db, "acme", 100_000, "CNY", "dep-explained")
    create(db, "r-mixed")
    create(db, "r-usage")
    _plant(
        db,
        "r-mixed",
        ("u-mismatch", "amount_mismatch", 6, 20),  # +14: nobody explains it
        ("u-usage", "usage_cost", 1, 3),  # +2: tokens x price explain it
        ("u-pending", "pending", 8, 0),  # timing
        ("u-match", "matched", 8, 8),
    )
    _plant(db, "r-usage", ("u-usage-2", "usage_cost", 8, 13))  # +5, explained

    summary = reconcile.stored_summary(db, "r-mixed")
    assert summary.unexplained_difference_minor == 14
    assert summary.usage_cost_difference_minor == 2

    check = checks.zero_unexplained(db, "r-mixed")
    assert not check.passed
    assert check.metadata["unexplained_difference_minor"].value == 14
    assert check.metadata["unexplained_lines"].value == 1
    assert checks.zero_unexplained(db, "r-usage").passed  # explained lines only: passes
    assert reconcile.stored_summary(db, "r-usage").clean

    gauge = business_gauges.refresh(db)["reconciliation"]
    assert gauge == {"CNY": 14}  # 14 of r-mixed; the usage costs (2 + 5) are explained

    incidents = database_incidents(db, AlertThresholds())
    recon = {k: a for k, a in incidents.items() if a.kind == "reconciliation"}
    assert sorted(recon) == ["reconciliation:r-mixed:CNY"]
    assert recon["reconciliation:r-mixed:CNY"].details["lines"] == 1


def test_the_predicate_names_every_classification_once():
    explained = {c for c in rules.ALL_CLASSIFICATIONS if rules.is_explained(c)}
    assert explained == {
        "matched",
        "pending",
        "price_change",
        "in_day_total",
        "usage_cost",
        "apportioned",
        "credit_cost",
        "no_vendor_bill",
    }
    assert not rules.is_explained("usage_missing")
    assert not rules.is_explained("credits_missing")
    assert not rules.is_explained("amount_mismatch")
