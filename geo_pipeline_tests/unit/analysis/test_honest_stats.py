"""Question-clustered intervals and change detection (domain.stats), proved by seeded
simulation: answers to one question share a per-question rate drawn from a beta distribution
(the question effect), as real engines answer one question alike and two questions differently.
The coverage table in docs/analysts.md is ``coverage_table()`` printed."""

from __future__ import annotations

import math

import numpy as np
import pytest

from geo_pipeline.domain.stats import (
    benjamini_hochberg,
    clustered_change,
    clustered_rate,
    normal_two_sided_p,
    t_critical,
    t_two_sided_p,
    two_proportion_z,
    wilson_interval,
)

# (questions, repeats, true rate, ICC) of realistic runs; ICC = 1 / (a + b + 1) of the beta.
SCENARIOS = [
    (10, 5, 0.30, 0.20),
    (20, 3, 0.50, 0.10),
    (8, 10, 0.20, 0.30),
    (30, 3, 0.40, 0.25),
    (40, 5, 0.10, 0.20),
    (10, 10, 0.05, 0.10),
]
# Small designs where the clustered interval is conservative (documented, not asserted 93-97).
SMALL = [(12, 4, 0.15, 0.10), (5, 10, 0.50, 0.20), (6, 8, 0.30, 0.05), (5, 3, 0.30, 0.10)]
RUNS = 1500


def beta_rates(rng: np.random.Generator, mean: np.ndarray | float, icc: float, size=None):
    s = (1 - icc) / icc
    return rng.beta(np.multiply(mean, s), np.multiply(1 - np.asarray(mean), s), size=size)


def coverage(k: int, r: int, mu: float, icc: float, runs: int = RUNS, seed: int = 20261129):
    """(clustered coverage, Wilson coverage, mean clustered half-width) over ``runs`` runs."""
    rng = np.random.default_rng(seed)
    hits_c = hits_w = 0
    half = 0.0
    for _ in range(runs):
        x = rng.binomial(r, beta_rates(rng, mu, icc, k))
        c = clustered_rate([(int(v), r) for v in x])
        assert c.lower is not None and c.upper is not None
        hits_c += c.lower <= mu <= c.upper
        lo, hi = wilson_interval(int(x.sum()), k * r)  # type: ignore[misc]
        hits_w += lo <= mu <= hi
        half += (c.upper - c.lower) / 2
    return hits_c / runs, hits_w / runs, half / runs


def coverage_table() -> str:
    lines = [
        "| questions | repeats | true rate | ICC | clustered (this) | plain Wilson |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for sc in SCENARIOS + SMALL:
        c, w, _ = coverage(*sc)
        lines.append(f"| {sc[0]} | {sc[1]} | {sc[2]:.2f} | {sc[3]:.2f} | {c:.1%} | {w:.1%} |")
    return "\n".join(lines)


def test_one_question_is_plain_wilson():
    for x, n in [(0, 1), (3, 5), (7, 7), (12, 40)]:
        c = clustered_rate([(x, n)])
        assert (c.lower, c.upper) == pytest.approx(wilson_interval(x, n), abs=1e-15)
        assert (c.design_effect, c.n_effective, c.df) == (1.0, n, 0)


def test_design_effect_by_hand():
    # 4 questions x 5: 0, 5, 1, 4 mentions. p = .5; sum (x - p m)^2 = 6.25+6.25+2.25+2.25 = 17;
    # V = 4/3 * 17 / 400 = .05667; V_binomial = .25 / 20 = .0125; deff = 4.533.
    c = clustered_rate([(0, 5), (5, 5), (1, 5), (4, 5)])
    assert c.design_effect == pytest.approx((4 / 3 * 17 / 400) / 0.0125)
    assert c.n_effective == pytest.approx(20 / c.design_effect)
    assert c.lower is not None and c.upper is not None
    assert c.upper - c.lower > 2 * (wilson_interval(10, 20)[1] - 0.5)  # type: ignore[index]
    # Identical questions: no between-question variance, deff 1 (never below).
    same = clustered_rate([(2, 5), (2, 5), (2, 5)])
    assert same.design_effect == 1.0 and same.n_effective == 15
    # All 0: deff 1, still an interval (widened for 2 df).
    zero = clustered_rate([(0, 5), (0, 5), (0, 5)])
    assert (
        zero.lower == pytest.approx(0.0, abs=1e-12)
        and zero.upper is not None
        and zero.upper > wilson_interval(0, 15)[1]
    )  # type: ignore[index]
    assert clustered_rate([]).rate is None and clustered_rate([(0, 0)]).n == 0
    with pytest.raises(ValueError):
        clustered_rate([(3, 2)])


def test_t_and_normal_tails_against_tables():
    assert t_critical(1) == pytest.approx(12.7062, abs=1e-4)
    assert t_critical(4) == pytest.approx(2.7764, abs=1e-4)
    assert t_critical(9) == pytest.approx(2.2622, abs=1e-4)
    assert t_critical(30) == pytest.approx(2.0423, abs=1e-4)
    assert t_two_sided_p(0.0, 5) == pytest.approx(1.0)
    assert t_two_sided_p(1.0, 1) == pytest.approx(0.5)  # Cauchy: P(|T| > 1) = 1/2
    assert t_two_sided_p(2.0, 2) == pytest.approx(1 - 2 / math.sqrt(6))  # 1 - t/sqrt(2+t^2)
    for z in [i / 4 for i in range(0, 33)]:
        exact = math.erfc(z / math.sqrt(2))
        assert normal_two_sided_p(z) == pytest.approx(exact, rel=2e-7)
        assert normal_two_sided_p(-z) == normal_two_sided_p(z)
    assert t_two_sided_p(2.5, 200_000) == pytest.approx(normal_two_sided_p(2.5), rel=1e-4)


def test_benjamini_hochberg_by_hand():
    # m = 4 tests (None is no test): sorted .01 .03 .04 .2 -> .04 .0533 .0533 .2
    q = benjamini_hochberg([0.01, 0.04, None, 0.03, 0.2])
    assert q[2] is None
    assert q == pytest.approx([0.04, 4 * 0.04 / 3, None, 4 * 0.04 / 3, 0.2])
    assert benjamini_hochberg([]) == []
    assert benjamini_hochberg([0.9, 0.95]) == [0.95, 0.95]


def test_clustered_change_single_question_is_the_classic_z():
    c = clustered_change({"q": (2, 10)}, {"q": (9, 10)})
    assert c is not None and c.df == 0
    assert c.z == pytest.approx(two_proportion_z(2, 10, 9, 10))
    assert c.p_value == pytest.approx(normal_two_sided_p(c.z))  # type: ignore[arg-type]
    assert clustered_change({}, {"q": (1, 2)}) is None
    flat = clustered_change({"a": (0, 5), "b": (0, 5)}, {"a": (0, 5), "b": (0, 5)})
    assert flat is not None and flat.p_value is None


def test_clustered_change_pairs_questions():
    # A question effect shared by both days cancels: q1 always ~0.9, q2 ~0.1; day 2 moves
    # 4 of 5 questions up by 0.1 or 0.2, one down by 0.0: paired on questions this is a
    # consistent move; pooled as if independent it is noise.
    prev = {f"q{i}": (x, 10) for i, x in enumerate([9, 1, 8, 2, 5])}
    cur = {f"q{i}": (x, 10) for i, x in enumerate([10, 2, 9, 4, 5])}
    c = clustered_change(prev, cur)
    assert c is not None and c.df == 4 and c.p_value is not None
    assert c.rate - c.prev_rate == pytest.approx(0.1)
    classic = normal_two_sided_p(two_proportion_z(25, 50, 30, 50))  # type: ignore[arg-type]
    assert c.p_value < 0.05 < classic


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_clustered_intervals_cover_95_percent_and_wilson_does_not(scenario):
    clustered, wilson, _ = coverage(*scenario)
    assert 0.93 <= clustered <= 0.97, (scenario, clustered)
    assert wilson < 0.94 and wilson < clustered - 0.01, (scenario, wilson)


@pytest.mark.parametrize("scenario", SMALL)
def test_small_designs_never_under_cover(scenario):
    clustered, wilson, _ = coverage(*scenario, runs=1000)
    assert clustered >= 0.93 and clustered >= wilson


def null_families(families: int, tests: int, k: int, r: int, icc_q: float, icc_day: float,
                  seed: int):  # fmt: skip
    """Days of ``tests`` brand x channel rates that do not change: each question keeps its rate
    (beta around the brand's rate) and wobbles day to day (beta around it, icc_day). Returns
    (share of families with any BH flag, share of tests flagged, share flagged by the plain
    per-test z at 5 %)."""
    rng = np.random.default_rng(seed)
    any_flag = flagged = naive = 0
    for _ in range(families):
        p_values: list[float | None] = []
        for _ in range(tests):
            question = beta_rates(rng, rng.uniform(0.1, 0.6), icc_q, k).clip(0.01, 0.99)
            d1 = rng.binomial(r, beta_rates(rng, question, icc_day))
            d2 = rng.binomial(r, beta_rates(rng, question, icc_day))
            c = clustered_change(
                {str(i): (int(d1[i]), r) for i in range(k)},
                {str(i): (int(d2[i]), r) for i in range(k)},
            )
            assert c is not None
            p_values.append(c.p_value)
            z = two_proportion_z(int(d1.sum()), k * r, int(d2.sum()), k * r)
            naive += z is not None and abs(z) >= 1.959963984540054
        n_flags = sum(1 for q in benjamini_hochberg(p_values) if q is not None and q <= 0.05)
        flagged += n_flags
        any_flag += n_flags > 0
    return any_flag / families, flagged / (families * tests), naive / (families * tests)


@pytest.mark.parametrize(
    "design", [(10, 5, 0.2, 0.1), (20, 3, 0.1, 0.1), (6, 8, 0.3, 0.05)], ids=str
)
def test_under_no_change_flags_stay_within_the_fdr(design):
    # Under no change every flag is false, so the FDR is the share of days with any flag.
    days_flagged, tests_flagged, naive = null_families(1000, 12, *design, seed=7)
    assert days_flagged <= 0.05, days_flagged
    assert tests_flagged <= 0.05 / 12 + 0.002
    # The per-test z on the raw n flags more than its 5 % (question wobble is not binomial).
    assert naive > 0.05
