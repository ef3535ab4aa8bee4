"""Creating a run, with the plan checks that gate its dispatch, costs PostgreSQL work in
proportion to the run's samples (issue #39): measured by the rows and buffers the database
touched and the statements sent, at two sizes 10x apart, never by the clock.

The checks once counted each batch's samples with a correlated subquery, once per channel:
channels x batches x samples row visits, which made a 100,000-sample run take minutes.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from geo_pipeline.billing import ledger
from geo_pipeline.connectors.registry import load_registry
from geo_pipeline.domain.config import normalise_and_validate
from geo_pipeline.domain.plan import build_plan, quote
from geo_pipeline.flows.create_run import check_plan, create_run
from geo_pipeline.store.work import Work, measured

CAPS = load_registry().capabilities()
PRICES = {p: c.prices for p, c in CAPS.items()}
# 10x the data may cost at most 10^1.1 (about 12.6x) the work: linear, with room for the
# logarithms of index descents; a per-batch rescan of the run is 100x.
MAX_EXPONENT = 1.1


def plan_of(questions: int, run_id: str, tenant: str = "growth") -> Any:
    """bench/plan.py's shape: 20 channel settings (targets) over 6 channels, 10 repeats, cap
    100: 200 samples per question, one batch per 100 samples."""
    raw = {
        "tenant": tenant,
        "brand": {"name": "瑞幸咖啡", "aliases": ["Luckin"]},
        "questions": [f"question {i}: which coffee chain is best value?" for i in range(questions)],
        "channels": [
            {
                "platform": "deepseek",
                "device": d,
                "regions": ["cn", "global"],
                "modes": ["standard", "deep_thinking", "web_search"],
            }
            for d in ("web", "app")
        ]
        + [
            {"platform": "doubao", "device": d, "modes": ["standard", "deep_thinking"]}
            for d in ("web", "app")
        ]
        + [
            {"platform": "kimi", "device": "web", "modes": ["standard", "web_search"]},
            {"platform": "qwen", "device": "web", "modes": ["standard", "deep_thinking"]},
        ],
        "repeats": 10,
        "submit_cap": 100,
    }
    n = normalise_and_validate(raw, CAPS)
    return build_plan(n, quote(n, PRICES), run_id)


def exponent(small: int, large: int, size_ratio: float) -> float:
    return math.log(max(large, 1) / max(small, 1)) / math.log(size_ratio)


def assert_linear(what: str, small: Work, large: Work) -> None:
    for field in ("rows_read", "buffers", "statements"):
        a, b = getattr(small, field), getattr(large, field)
        slope = exponent(a, b, 10)
        assert slope <= MAX_EXPONENT, (
            f"{what}: {field} grew {b / max(a, 1):.1f}x for 10x the samples "
            f"({a:,} -> {b:,}, exponent {slope:.2f} > {MAX_EXPONENT})"
        )


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
