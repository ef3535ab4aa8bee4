"""The repeats planner's arithmetic (its agreement with a seeded simulation of the published
intervals is test_planner_agreement.py)."""

from __future__ import annotations

import numpy as np
import pytest

from geo_pipeline.domain.money import Money
from geo_pipeline.domain.precision import (
    DEFAULT_PRIOR,
    Prior,
    estimate_prior,
    expected_half_width,
    plan_repeats,
)
from geo_pipeline.domain.stats import wilson_interval


def test_one_question_is_wilson_and_repeats_help_less_than_questions():
    lo, hi = wilson_interval(5, 10)  # type: ignore[misc]
    assert expected_half_width(1, 10, Prior(0.5, 0.3, "t")) == pytest.approx((hi - lo) / 2)
    prior = Prior(0.3, 0.2, "t")
    assert expected_half_width(20, 5, prior) < expected_half_width(10, 10, prior)
    assert expected_half_width(10, 10, prior) < expected_half_width(10, 5, prior)
    with pytest.raises(ValueError):
        expected_half_width(0, 3, prior)


def test_plan_repeats_costs_and_targets():
    plans = plan_repeats(
        questions=10,
        repeats=2,
        channels={"deepseek__web": Prior(0.3, 0.05, "runs"), "kimi__web": None},
        price_per_sample={"deepseek__web": Money(5, "CNY"), "kimi__web": Money(12, "CNY")},
        target_half_width=0.15,
    )
    ds, kimi = plans
    assert ds.samples == 20 and ds.cost == Money(100, "CNY")
    assert ds.repeats_needed is not None and ds.repeats_needed > 2
    assert expected_half_width(10, ds.repeats_needed, ds.prior) <= 0.15
    assert expected_half_width(10, ds.repeats_needed - 1, ds.prior) > 0.15
    assert ds.cost_needed == Money(5 * 10 * ds.repeats_needed, "CNY")
    assert "needs" in ds.advice
    # No prior: the stated one, and with ICC 0.2 and 10 questions repeats cannot reach +-0.15.
    assert kimi.prior == DEFAULT_PRIOR and kimi.repeats_needed is None
    assert kimi.cost_needed is None and "add questions" in kimi.advice
    with pytest.raises(ValueError):
        plan_repeats(questions=1, repeats=1, channels={}, price_per_sample={},
                     target_half_width=0.7)  # fmt: skip


def test_estimate_prior_recovers_rate_and_icc():
    rng = np.random.default_rng(3)
    s = (1 - 0.2) / 0.2
    x = rng.binomial(10, rng.beta(0.3 * s, 0.7 * s, 400))
    prior = estimate_prior([(int(v), 10) for v in x], "sim")
    assert prior is not None
    assert prior.rate == pytest.approx(0.3, abs=0.03) and prior.icc == pytest.approx(0.2, abs=0.05)
    assert estimate_prior([(3, 5)], "one question") is None
    assert estimate_prior([(2, 4), (2, 4)], "same").icc == 0.0  # type: ignore[union-attr]
