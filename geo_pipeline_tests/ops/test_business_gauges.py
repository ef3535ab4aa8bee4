"""The database-wide gauges of R26 (evidence-missing rate, reconciliation difference)."""

from __future__ import annotations

from prometheus_client import REGISTRY

from geo_pipeline.store import business_gauges as business
from geo_pipeline_tests.ops.helpers import complete, make_run


def test_gauges_follow_the_database(db):
    samples = make_run(db)
    complete(db, samples[0])
    complete(db, samples[1], evidence="partial", reason="SCREENSHOT_UNAVAILABLE")
    complete(db, samples[2])
    complete(db, samples[3], evidence="partial", reason="SCREENSHOT_UNAVAILABLE")
    db.execute(
        "INSERT INTO geo.reconciliation_lines (run_id, upstream_id, platform, classification, "
        "ours_minor, theirs_minor, currency) VALUES "
        "('run-ops', 'u1', 'deepseek', 'amount_mismatch', 8, 12, 'CNY'), "
        "('run-ops', 'u2', 'deepseek', 'pending', 8, 0, 'CNY'), "
        "('run-ops', 'u3', 'deepseek', 'matched', 8, 8, 'CNY')"
    )
    db.commit()
    values = business.refresh(db)
    assert values["evidence_missing_rate"] == 0.5 and values["completed"] == 4
    assert values["reconciliation"] == {"CNY": 4}  # the pending line is explained by timing
    assert REGISTRY.get_sample_value("geo_evidence_missing_rate") == 0.5
    assert (
        REGISTRY.get_sample_value("geo_reconciliation_difference_minor", {"currency": "CNY"}) == 4
    )
