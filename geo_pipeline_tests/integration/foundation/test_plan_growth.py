"""Creating a run, with the plan checks that gate its dispatch, costs PostgreSQL work in
proportion to the run's samples (issue #39): measured by the rows and buffers the database
touched and the statements sent, at two sizes 10x apart, never by the clock.

The checks once counted each batch's samples with a correlated subquery, once per channel:
channels x batches x samples row visits, which made a 100,000-sample run take minutes.
"""

from __future__ import annotations

from typing import Any

import pytest

from geo_pipeline.billing import ledger
from geo_pipeline.flows.create_run import check_plan, create_run
from geo_pipeline.store.work import measured
from geo_pipeline_tests.growth import assert_linear, plan_of


@pytest.fixture(autouse=True)
def funded(db: Any) -> None:
    """A funded tenant and a run of history: the indexes then have their working depth at
    both sizes (on an empty table a B-tree's first levels make the small size look cheap)."""
    ledger.deposit(db, "growth", 10**12, "CNY", "growth-deposit")
    db.commit()
    create_run(db, plan_of(50, "history-0"), dispatch=False)
    db.commit()


def test_create_run_with_its_plan_checks_grows_linearly(db: Any) -> None:
    work = {}
    for questions in (5, 50):  # 1,000 and 10,000 samples
        plan = plan_of(questions, f"grow-{questions}")
        assert len(plan.samples) == 200 * questions
        with measured(db) as w:
            assert create_run(db, plan) == (plan.run_id, True)
        work[questions] = w
    assert_linear("create_run", work[5], work[50])


def test_plan_checks_alone_grow_linearly(db: Any) -> None:
    """The checks by themselves (what `runs create --run-id` and `billing confirm` re-run)."""
    work = {}
    for questions in (5, 50):
        plan = plan_of(questions, f"chk-{questions}")
        create_run(db, plan, dispatch=False)
        db.commit()
        with measured(db) as w:
            checks = check_plan(db, plan.config, plan.run_id)
        assert checks and all(c.passed for c in checks)
        assert w.rows_read >= len(plan.samples)  # each sample is read (at least) once
        work[questions] = w
    assert_linear("check_plan", work[5], work[50])


def test_plan_checks_do_not_read_other_runs(db: Any) -> None:
    """A run's checks read that run's rows: 10x more history leaves their work unchanged
    (bounded by the index descents' extra level, far below 10x)."""
    target = plan_of(5, "alone")
    create_run(db, target, dispatch=False)
    db.commit()
    with measured(db) as before:
        check_plan(db, target.config, target.run_id)
    create_run(db, plan_of(50, "history"), dispatch=False)
    db.commit()
    with measured(db) as after:
        check_plan(db, target.config, target.run_id)
    assert after.rows_read <= 2 * before.rows_read, (before, after)
    assert after.statements == before.statements, (before, after)
