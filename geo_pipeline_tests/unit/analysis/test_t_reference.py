"""Student's t (domain.stats) against a 30-digit reference table over df = 1 ... 10^6
(t_reference.json, generated once by make_t_reference.py with mpmath), within the errors the
implementation states, and with work bounded whatever df is."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from geo_pipeline.domain import stats
from geo_pipeline.domain.stats import t_critical, t_two_sided_p

REFERENCE = json.loads(Path(__file__).with_name("t_reference.json").read_text(encoding="utf-8"))
CRITICAL = {int(df): float(t) for df, t in REFERENCE["critical_95"].items()}
TAILS = {
    int(df): {float(t): float(p) for t, p in row.items()}
    for df, row in REFERENCE["two_sided_p"].items()
}
# The errors stated beside the implementation (geo_pipeline/domain/stats.py).
SERIES_MAX_DF = 100


def critical_tolerance(df: int) -> float:
    return 1e-13 if df <= SERIES_MAX_DF else 1e-8


def test_reference_spans_df_1_to_a_million():
    assert min(CRITICAL) == 1 and max(CRITICAL) == 10**6
    assert {500, 1000, 100_000} <= set(CRITICAL)


@pytest.mark.parametrize("df", sorted(CRITICAL))
def test_critical_value_against_reference(df):
    assert t_critical(df) == pytest.approx(CRITICAL[df], abs=critical_tolerance(df))


@pytest.mark.parametrize("df", sorted(TAILS))
def test_two_sided_p_against_reference(df):
    for t, p in TAILS[df].items():
        got = t_two_sided_p(t, df)
        assert t_two_sided_p(-t, df) == got
        if df <= SERIES_MAX_DF:
            assert got == pytest.approx(p, abs=1e-14), (t, df)
        else:
            assert got == pytest.approx(p, abs=6e-8), (t, df)
            if p > 1e-12:
                assert got == pytest.approx(p, rel=2e-7), (t, df)


def test_work_is_bounded_whatever_df():
    """Count the Python bytecode lines executed by one critical value and one tail: the same
    budget at df = 10^6 as at df = 100 (the old bisection ran 100 x df / 2 series steps)."""

    def lines_for(df: int) -> int:
        count = 0

        def tracer(frame, event, arg):
            nonlocal count
            if event == "line":
                count += 1
            return tracer

        t_critical.cache_clear()
        sys.settrace(tracer)
        try:
            t_critical(df)
            t_two_sided_p(2.0, df)
        finally:
            sys.settrace(None)
        return count

    budget = lines_for(SERIES_MAX_DF)
    for df in (500, 10_000, 10**6):
        assert lines_for(df) <= budget, df


def test_closed_forms_for_one_and_two_df():
    assert t_critical(1) == pytest.approx(math.tan(math.pi / 2 * 0.95), rel=1e-15)
    assert t_critical(2) == pytest.approx(math.sqrt(2 * 0.95**2 / (1 - 0.95**2)), rel=1e-15)
    assert stats.t_two_sided_p(1.0, 1) == pytest.approx(0.5, abs=1e-15)
