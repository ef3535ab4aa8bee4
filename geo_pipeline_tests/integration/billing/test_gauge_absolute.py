"""The R26 reconciliation gauge and alert count unexplained differences by size (issue #34).

One definition: the unexplained difference a person has to look at is the sum of
|theirs - ours| over the lines THE predicate (``domain.billing.EXPLAINED``) leaves unexplained.
Signed sums cancel: a run billed 5 too much and another billed 5 too little read 0 on a gauge
that summed theirs - ours, and one run with +5 and -5 lines raised no alert -- while the
blocking check ``zero_unexplained_difference`` failed both runs. The direction stays in the
words (``domain.words.difference_text``) and in the signed figures beside it."""

from __future__ import annotations

from geo_pipeline.billing import ledger
from geo_pipeline.defs import checks
from geo_pipeline.defs.alerts import AlertThresholds, database_incidents
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
