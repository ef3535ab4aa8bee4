"""The R26 reconciliation gauge and alert count unexplained differences by size (issue #34).

One definition: the unexplained difference a person has to look at is the sum of
|theirs - ours| over the lines THE predicate (``domain.billing.EXPLAINED``) leaves unexplained.
Signed sums cancel: a run billed 5 too much and another billed 5 too little read 0 on a gauge
that summed theirs - ours, and one run with +5 and -5 lines raised no alert -- while the
blocking check ``zero_unexplained_difference`` failed both runs. The direction stays in the
words (``domain.words.difference_text``) and in the signed figures beside it."""

from __future__ import annotations

from geo_pipeline.billing import ledger
from geo_pipeline.defs.billing import checks
from geo_pipeline.defs.operations.alerts import AlertThresholds, database_incidents
from geo_pipeline.store import business_gauges
from geo_pipeline_tests.integration.billing.helpers import create
from geo_pipeline_tests.integration.billing.test_explained_difference import _plant


def test_opposite_unexplained_differences_do_not_cancel(db):
    ledger.deposit(db, "acme", 100_000, "CNY", "dep-abs")
    create(db, "r-over")
    create(db, "r-under")
    create(db, "r-both")
    _plant(db, "r-over", ("u-over", "amount_mismatch", 8, 13))  # +5
    _plant(db, "r-under", ("u-under", "amount_mismatch", 13, 8))  # -5
    _plant(
        db,
        "r-both",
        ("u-both-1", "amount_mismatch", 8, 11),  # +3
        ("u-both-2", "missing_theirs", 3, 0),  # -3
    )
    for run_id in ("r-over", "r-under", "r-both"):
        assert not checks.zero_unexplained(db, run_id).passed

    # |+5| + |-5| + |+3| + |-3|: what there is to explain, never 0.
    assert business_gauges.refresh(db)["reconciliation"] == {"CNY": 16}

    recon = {
        k: a for k, a in database_incidents(db, AlertThresholds()).items()
        if a.kind == "reconciliation"
    }  # fmt: skip
    assert sorted(recon) == [
        "reconciliation:r-both:CNY",
        "reconciliation:r-over:CNY",
        "reconciliation:r-under:CNY",
    ]
    both = recon["reconciliation:r-both:CNY"]
    assert both.details["lines"] == 2
    assert both.details["unexplained |theirs - ours| (minor units)"] == 6
    assert both.details["difference (theirs - ours, minor units)"] == 0


def test_the_report_says_what_is_left_to_explain_when_lines_cancel(db):
    """+3 and -3 on one run: the blocking check fails it and the gauge counts 6, so the words
    must not say "unexplained difference: none" (they did: the net of the lines is 0)."""
    from geo_pipeline.billing import reconcile
    from geo_pipeline.ops import report

    ledger.deposit(db, "acme", 100_000, "CNY", "dep-abs-words")
    create(db, "r-cancel")
    _plant(
        db,
        "r-cancel",
        ("u-c-1", "amount_mismatch", 8, 11),  # +3
        ("u-c-2", "missing_theirs", 3, 0),  # -3
    )
    summary = reconcile.stored_summary(db, "r-cancel")
    assert summary.unexplained_difference_minor == 0  # the net, theirs - ours
    assert summary.unexplained_absolute_minor == 6  # what the gauge adds up
    assert not summary.clean and not checks.zero_unexplained(db, "r-cancel").passed
    said = report.build_report(db, "r-cancel").money["reconciliation_words"][0]
    assert said == (
        "unexplained difference: the lines cancel out in sum, but 0.06 CNY of differences are "
        "left to explain (|theirs \u2212 ours| summed over 2 unexplained lines)"
    ), said
