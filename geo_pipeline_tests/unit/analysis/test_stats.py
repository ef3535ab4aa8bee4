"""Wilson interval and two-proportion z test against values worked out by hand."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from geo_pipeline.domain.stats import Z_95, significant_change, two_proportion_z, wilson_interval


def test_wilson_known_values():
    # 3 of 3: centre (1 + z²/6)/(1 + z²/3), half-width z·sqrt(z²/36)/(1 + z²/3).
    z2 = Z_95**2
    lo, hi = wilson_interval(3, 3)
    assert lo == pytest.approx((1 + z2 / 6 - Z_95 * Z_95 / 6) / (1 + z2 / 3))
    assert lo == pytest.approx(0.43850, abs=1e-5)
    assert hi == 1.0
    lo, hi = wilson_interval(5, 10)
    assert (lo, hi) == (pytest.approx(0.23659, abs=1e-5), pytest.approx(0.76341, abs=1e-5))
    lo, hi = wilson_interval(0, 4)
    assert lo == 0.0 and hi == pytest.approx(0.48990, abs=1e-5)
    assert wilson_interval(0, 0) is None


def test_wilson_rejects_impossible_counts():
    with pytest.raises(ValueError):
        wilson_interval(4, 3)


@given(st.integers(0, 500).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))))
def test_wilson_contains_the_point_estimate(xn):
    x, n = xn
    iv = wilson_interval(x, n)
    if n == 0:
        assert iv is None
        return
    lo, hi = iv
    assert 0.0 <= lo <= x / n + 1e-12 and x / n - 1e-12 <= hi <= 1.0


def test_two_proportion_z_by_hand():
    # 40/100 -> 60/100: pooled 0.5, se = sqrt(0.25 * 0.02) = 0.0707..., z = 0.2 / se = 2.828...
    assert two_proportion_z(40, 100, 60, 100) == pytest.approx(0.2 / math.sqrt(0.005))
    assert significant_change(40, 100, 60, 100)
    # One answer flipping between two days of 5 samples is not a trend.
    assert not significant_change(2, 5, 3, 5)
    assert two_proportion_z(0, 5, 0, 5) is None and not significant_change(0, 5, 0, 5)
    assert two_proportion_z(1, 0, 1, 5) is None


def test_an_interval_always_contains_its_rate_exactly_at_0_and_1():
    """At a rate of 0 the Wilson lower bound is exactly 0, at 1 the upper bound exactly 1 (it was
    5.6e-17 above a rate of 0 for n = 3: an interval that excluded the rate it was drawn around,
    found by the brand dashboard's test reading analytics.brand_trends)."""
    from geo_pipeline.domain.stats import clustered_wilson, wilson_bounds, wilson_interval

    for n in (1, 2, 3, 3.7, 5, 7, 10, 11.3, 12, 24, 36, 100, 1000):
        assert wilson_bounds(0.0, n)[0] == 0.0, n
        assert wilson_bounds(1.0, n)[1] == 1.0, n
        for df in (0, 1, 2, 9):
            assert clustered_wilson(0.0, n, df)[0] == 0.0, (n, df)
            assert clustered_wilson(1.0, n, df)[1] == 1.0, (n, df)
        if float(n).is_integer():
            assert wilson_interval(0, int(n)) is not None
            assert wilson_interval(0, int(n))[0] == 0.0  # type: ignore[index]
            assert wilson_interval(int(n), int(n))[1] == 1.0  # type: ignore[index]
    for rate in (0.01, 0.3, 0.5, 0.97):
        lo, hi = wilson_bounds(rate, 3.0)
        assert lo <= rate <= hi
