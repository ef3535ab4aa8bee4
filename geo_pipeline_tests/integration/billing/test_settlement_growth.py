"""Settling a run (its status, then reconciling every charge against the imported statements)
costs PostgreSQL work in proportion to the run's charges (issue #39): rows and buffers touched
and statements sent at 400 and 4,000 charges, never the clock."""

from __future__ import annotations

from typing import Any

from geo_pipeline.billing import ledger
from geo_pipeline.flows.settle import settle_run
from geo_pipeline.store.work import measured
from geo_pipeline_tests.growth import assert_linear, charged_run


def test_settling_a_run_grows_linearly_with_its_charges(db: Any) -> None:
    ledger.deposit(db, "growth", 10**12, "CNY", "growth-deposit")
    db.commit()
    charged_run(db, 10, "history")  # the indexes at their working depth for both sizes
    work = {}
    for questions in (2, 20):  # 400 and 4,000 charges
        plan = charged_run(db, questions, f"settle-{questions}")
        with measured(db) as w:
            settled = settle_run(db, plan.run_id, registry=None)
        # Every task reconciles: our charge and the statement's line agree.
        assert settled.summary.lines == len(plan.samples), settled.summary
        assert settled.summary.counts["matched"] == len(plan.samples), settled.summary.counts
        work[questions] = w
    assert_linear("settle_run", work[2], work[20])


def test_settling_sends_the_same_statements_whatever_the_run_size(db: Any) -> None:
    """The reconciliation lines of a run are one set-based insert, not a statement per line."""
    ledger.deposit(db, "growth", 10**12, "CNY", "growth-deposit")
    db.commit()
    statements = {}
    for questions in (1, 5):  # 200 and 1,000 charges
        plan = charged_run(db, questions, f"stmts-{questions}")
        with measured(db) as w:
            settled = settle_run(db, plan.run_id, registry=None)
        assert settled.summary.counts["matched"] == len(plan.samples), settled.summary.counts
        statements[questions] = w.statements
    assert statements[1] > 0
    assert statements[5] == statements[1], statements
