"""The repeats planner promises what the published intervals deliver: for each design of the
coverage simulation (``test_honest_stats``: its scenarios, its seeded runs, its beta question
effect; imported, not copied), the planner's expected 95 % half-width at the true rate and ICC
is within ``TOLERANCE`` of the mean half-width of the question-clustered interval over the
simulated runs. The table in docs/analysts.md ("Planning repeats") is ``agreement_table()``."""

from __future__ import annotations

import pytest

from geo_pipeline.domain.precision import Prior, expected_half_width
from geo_pipeline_tests.unit.analysis.test_honest_stats import RUNS, SCENARIOS, SMALL, coverage

# Relative difference allowed between the planner and the simulated mean half-width.
TOLERANCE = 0.15
# The planner may be wider than the simulation (a plan that buys a little more precision than
# promised), but it may understate the half-width by at most this much.
MAX_UNDERSTATEMENT = 0.05


def agreement(q: int, r: int, rate: float, icc: float) -> tuple[float, float, float]:
    """(planned half-width, simulated mean half-width, planned / simulated - 1)."""
    planned = expected_half_width(q, r, Prior(rate, icc, "the simulation's truth"))
    _, _, simulated = coverage(q, r, rate, icc)
    return planned, simulated, planned / simulated - 1


def agreement_table() -> str:
    lines = [
        "| questions | repeats | true rate | ICC | planner ± | simulated mean ± | difference |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for sc in SCENARIOS + SMALL:
        planned, simulated, rel = agreement(*sc)
        lines.append(
            f"| {sc[0]} | {sc[1]} | {sc[2]:.2f} | {sc[3]:.2f} | {planned:.3f} | {simulated:.3f} "
            f"| {rel:+.1%} |"
        )
    return "\n".join(lines)


@pytest.mark.parametrize("q, r, rate, icc", SCENARIOS + SMALL)
def test_planner_half_width_agrees_with_the_coverage_simulation(q, r, rate, icc):
    assert RUNS >= 1000
    planned, simulated, rel = agreement(q, r, rate, icc)
    assert abs(rel) <= TOLERANCE, (planned, simulated, rel)
    assert rel >= -MAX_UNDERSTATEMENT, (planned, simulated, rel)


def test_a_wrong_prior_is_caught_by_the_same_comparison():
    """The comparison can fail: planning with ICC 0 (answers treated as independent) where the
    truth is ICC 0.2 understates the half-width by far more than the tolerance."""
    q, r, rate, icc = SCENARIOS[0]
    naive = expected_half_width(q, r, Prior(rate, 0.0, "independent answers"))
    _, _, simulated = coverage(q, r, rate, icc)
    assert naive / simulated - 1 < -TOLERANCE
