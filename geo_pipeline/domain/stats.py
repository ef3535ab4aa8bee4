"""Honest statistics for mention rates: Wilson score intervals and the two-proportion z test.

Pure. The SQL functions ``analytics.wilson_lower/upper`` and ``analytics.two_proportion_z``
(sql/migrations/0004_analytics.sql) compute the same numbers inside PostgreSQL; a test holds
them equal. A rate is never reported without its sample size, and a one-sample flip between
two days is not a trend: the day-over-day view flags a change only when ``|z| >= Z_95``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache

# Two-sided 95%: the 0.975 quantile of the standard normal distribution.
Z_95 = 1.959963984540054


def wilson_interval(successes: int, n: int, z: float = Z_95) -> tuple[float, float] | None:
    """Wilson score interval of a binomial proportion; None when there is no sample.

    Unlike the normal approximation it stays inside [0, 1] and is honest for small n and for
    rates of 0 % or 100 %: 3 mentions in 3 answers gives (0.44, 1.0), not (1.0, 1.0)."""
    if n < 0 or successes < 0 or successes > n:
        raise ValueError(f"need 0 <= successes <= n, got {successes}/{n}")
    if n == 0:
        return None
    p = successes / n
    z2 = z * z
    denom = 1 + z2 / n
    centre = (p + z2 / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / denom
    return _contain(p, centre - half, centre + half)


def two_proportion_z(x1: int, n1: int, x2: int, n2: int) -> float | None:
    """Pooled two-proportion z statistic for p2 - p1; None when undefined (an empty sample, or
    both proportions 0 or both 1, where there is no variance to test against)."""
    if n1 <= 0 or n2 <= 0:
        return None
    pooled = (x1 + x2) / (n1 + n2)
    var = pooled * (1 - pooled) * (1 / n1 + 1 / n2)
    if var <= 0:
        return None
    return (x2 / n2 - x1 / n1) / math.sqrt(var)


def significant_change(x1: int, n1: int, x2: int, n2: int, z_crit: float = Z_95) -> bool:
    """True when the change from x1/n1 to x2/n2 is significant at the two-sided 5 % level."""
    z = two_proportion_z(x1, n1, x2, n2)
    return z is not None and abs(z) >= z_crit


# ------------------------------------------------------------------ question-clustered rates
# Answers to one question are correlated (that is why a question is asked several times), so a
# rate pooled over questions has fewer independent observations than answers. The interval
# below is Wilson on the effective sample size n / deff (Kish), with deff from the between-
# question variance of the ratio estimator, and the Korn-Graubard degrees-of-freedom factor
# (z / t_{k-1})^2 for k questions. The SQL functions of sql/migrations/0021_honest_numbers.sql
# compute the same numbers; a test holds them equal, and a seeded simulation checks coverage.


# Numerical Recipes' erfc fit, highest power first (Horner): erfc(x) ~ t exp(-x^2 + poly(t)).
_ERFC_FIT = (0.17087277, -0.82215223, 1.48851587, -1.13520398, 0.27886807, -0.18628806,
             0.09678418, 0.37409196, 1.00002368, -1.26551223)  # fmt: skip


def normal_two_sided_p(z: float) -> float:
    """P(|Z| >= |z|) for a standard normal Z, by the Chebyshev fit of erfc in Numerical Recipes
    (fractional error below 1.2e-7 everywhere), the same arithmetic as
    ``analytics.normal_two_sided_p`` (PostgreSQL 15 has no erfc); 0 where p < 1e-293
    (|z| / sqrt 2 > 26), where PostgreSQL's exp would raise an underflow."""
    x = abs(z) / math.sqrt(2.0)
    if x > 26:
        return 0.0
    t = 1.0 / (1.0 + 0.5 * x)
    poly = 0.0
    for coefficient in _ERFC_FIT:
        poly = poly * t + coefficient
    return min(1.0, t * math.exp(-x * x + poly))


# Student's t, bounded everywhere (the one definition; analytics.t_two_sided_p and
# analytics.t_critical_95 of sql/migrations/0024_bounded_t.sql do the same arithmetic, and a
# test holds them equal). Up to T_SERIES_MAX_DF degrees of freedom the tail is Abramowitz &
# Stegun's finite series (exact: <= 50 terms); above it, Hill's (1970, CACM algorithm 395)
# normalising transform, whose own error there is below 1e-15 absolute, so the Numerical
# Recipes erfc fit (5.6e-8 absolute) is what bounds it. Errors measured against
# geo_pipeline_tests/unit/analysis/t_reference.json (30 digits, df = 1 ... 10^6), and tested:
#   t_two_sided_p: df <= 100: < 1e-14 absolute; df > 100: < 6e-8 absolute and < 2e-7
#                  relative where p > 1e-12.
#   t_critical:    df = 1, 2 closed forms; 3 <= df <= 100: < 1e-13 (two Newton steps on the
#                  exact tail from Hill's start); df > 100: < 1e-8 (Hill 1970, CACM
#                  algorithm 396, alone).
# Work per call is bounded by ~3 x T_SERIES_MAX_DF / 2 loop steps whatever df is; the old
# bisection over a series of df / 2 terms grew with df and underflowed float8 in PostgreSQL
# from df ~ 500.
T_SERIES_MAX_DF = 100


def _t_series_p(t: float, df: int) -> float:
    """P(|T| >= |t|), Abramowitz & Stegun 26.7.3-4: a finite series in cos(theta),
    theta = atan(t / sqrt(df)); exact, df / 2 terms. A term below 1e-270 ends it (the rest
    are smaller still; cos(theta)^2 >= 3.7e-33 even at theta = pi / 2, so the next product
    stays a normal float: PostgreSQL raises on float8 underflow)."""
    theta = math.atan(abs(t) / math.sqrt(df))
    s, c2 = math.sin(theta), math.cos(theta) ** 2
    if df % 2 == 1:
        term = total = math.cos(theta)
        for k in range(3, df - 1, 2):
            if term < 1e-270:
                break
            term *= c2 * (k - 1) / k
            total += term
        inside = 2.0 / math.pi * (theta + (s * total if df > 1 else 0.0))
    else:
        term = total = 1.0
        for k in range(2, df - 1, 2):
            if term < 1e-270:
                break
            term *= c2 * (k - 1) / k
            total += term
        inside = s * total
    return min(1.0, max(0.0, 1.0 - inside))


def t_two_sided_p(t: float, df: int) -> float:
    """P(|T| >= |t|) for Student's t with integer df >= 1: exact up to T_SERIES_MAX_DF,
    Hill's normalising transform above (errors in the comment above)."""
    if df < 1:
        raise ValueError(f"need df >= 1, got {df}")
    if df <= T_SERIES_MAX_DF:
        return _t_series_p(t, df)
    a = df - 0.5
    b = 48.0 * a * a
    y = a * math.log(1.0 + min(abs(t), 1e100) ** 2 / df)
    y = (((((-0.4 * y - 3.3) * y - 24.0) * y - 85.5) / (0.8 * y * y + 100.0 + b) + y + 3.0)
         / b + 1.0) * math.sqrt(y)  # fmt: skip
    return normal_two_sided_p(y)


def _t_density(t: float, df: int) -> float:
    """The density of Student's t; its constant Gamma((df+1)/2) / (sqrt(df pi) Gamma(df/2))
    by the recurrence c(df + 2) = c(df) (df + 1) / sqrt(df (df + 2)) from c(1) = 1 / pi,
    c(2) = 1 / sqrt(8) (df / 2 steps: used for df <= T_SERIES_MAX_DF only)."""
    c, k = (1.0 / math.pi, 1) if df % 2 == 1 else (1.0 / math.sqrt(8.0), 2)
    while k < df:
        c = c * (k + 1) / math.sqrt(k * (k + 2.0))
        k += 2
    return c * (1.0 + t * t / df) ** (-(df + 1) / 2.0)


def _hill_t_quantile_95(df: int) -> float:
    """Hill (1970), CACM algorithm 396, for the two-sided p = 0.05: exact for df = 1, 2;
    error 3e-6 at df = 3, falling to 1e-9 at 150 and 1e-13 at 2000."""
    p = 0.05
    if df == 1:
        return 1.0 / math.tan(p * math.pi / 2)
    if df == 2:
        return math.sqrt(2.0 / (p * (2.0 - p)) - 2.0)
    a = 1.0 / (df - 0.5)
    b = 48.0 / (a * a)
    c = ((20700.0 * a / b - 98.0) * a - 16.0) * a + 96.36
    d = ((94.5 / (b + c) - 3.0) / b + 1.0) * math.sqrt(a * math.pi / 2) * df
    y = (d * p) ** (2.0 / df)
    if y > 0.05 + a:
        x = -Z_95  # the normal quantile of p / 2
        y = x * x
        if df < 5:
            c += 0.3 * (df - 4.5) * (x + 0.6)
        c = (((0.05 * d * x - 5.0) * x - 7.0) * x - 2.0) * x + b + c
        y = (((((0.4 * y + 6.3) * y + 36.0) * y + 94.5) / c - y - 3.0) / b + 1.0) * x
        y = a * y * y
        y = math.exp(y) - 1.0 if y > 0.1 else ((y + 4.0) * y + 12.0) * y * y / 24.0 + y
    else:
        y = ((1.0 / (((df + 6.0) / (df * y) - 0.089 * d - 0.822) * (df + 2.0) * 3.0)
              + 0.5 / (df + 4.0)) * y - 1.0) * (df + 1.0) / (df + 2.0) + 1.0 / y  # fmt: skip
    return math.sqrt(df * y)


@cache
def t_critical(df: int) -> float:
    """The two-sided 5 % critical value t with P(|T| >= t) = 0.05: Hill's approximation,
    refined by two Newton steps on the exact tail up to T_SERIES_MAX_DF df (errors in the
    comment above); t_critical(1) = 12.706, t_critical(9) = 2.262, t_critical(10**6) = 1.960."""
    if df < 1:
        raise ValueError(f"need df >= 1, got {df}")
    t = _hill_t_quantile_95(df)
    if 3 <= df <= T_SERIES_MAX_DF:
        for _ in range(2):
            t += (_t_series_p(t, df) - 0.05) / (2.0 * _t_density(t, df))
    return t


def wilson_bounds(rate: float, n: float, z: float = Z_95) -> tuple[float, float]:
    """Wilson score interval of a proportion ``rate`` observed on a (possibly fractional,
    effective) sample size ``n > 0``."""
    z2 = z * z
    denom = 1 + z2 / n
    centre = (rate + z2 / (2 * n)) / denom
    half = z * math.sqrt(max(0.0, rate * (1 - rate)) / n + z2 / (4 * n * n)) / denom
    return _contain(rate, centre - half, centre + half)


def _contain(rate: float, lower: float, upper: float) -> tuple[float, float]:
    """The bounds inside [0, 1] and around the rate: at a rate of 0 (or 1) the Wilson bound is
    exactly 0 (or 1) in real numbers, but rounding left it 1e-17 beyond, an interval that
    excluded its own rate. The SQL functions clamp the same way (migration 0042)."""
    return max(0.0, min(rate, lower)), min(1.0, max(rate, upper))


def design_effect_from_sums(
    k: int, x: float, m: float, sxx: float, sxm: float, smm: float
) -> float:
    """Kish design effect of the pooled rate x / m over k questions (clusters), from the sums
    over questions of x_q, m_q, x_q^2, x_q m_q and m_q^2 (one pass, as SQL aggregates it):

        p = x / m,  V_cluster = k / (k - 1) * sum_q (x_q - p m_q)^2 / m^2,
        V_binomial = p (1 - p) / m,  deff = max(1, V_cluster / V_binomial).

    1 for one question or a rate of 0 or 1 (no variance to compare). Never below 1: a pooled
    rate is never reported as more precise than independent answers would make it."""
    if k < 2 or m <= 0:
        return 1.0
    p = x / m
    v_binomial = p * (1 - p) / m
    if v_binomial <= 0:
        return 1.0
    spread = max(0.0, sxx - 2 * p * sxm + p * p * smm)
    v_cluster = k / (k - 1) * spread / (m * m)
    return max(1.0, v_cluster / v_binomial)


def clustered_wilson(
    rate: float, n_effective: float, df: int, z: float = Z_95
) -> tuple[float, float]:
    """Wilson on the effective n, widened for the df of the variance estimate (Korn and
    Graubard 1998): n* = n_effective * (z / t_df)^2; df = 0 (one question) is plain Wilson."""
    n_star = n_effective if df < 1 else n_effective * (z / t_critical(df)) ** 2
    return wilson_bounds(rate, n_star, z)


@dataclass(frozen=True, slots=True)
class ClusteredRate:
    """A rate pooled over questions with its honest interval. ``questions`` counts questions
    with at least one answer in ``n``; ``df = questions - 1``."""

    successes: int
    n: int
    questions: int
    design_effect: float
    n_effective: float
    rate: float | None
    lower: float | None
    upper: float | None

    @property
    def df(self) -> int:
        return max(0, self.questions - 1)


def clustered_rate(per_question: Iterable[tuple[int, int]], z: float = Z_95) -> ClusteredRate:
    """The pooled rate of (successes, n) pairs, one per question, with the design-effect-
    adjusted Wilson interval. One question gives exactly ``wilson_interval``."""
    pairs = [(x, m) for x, m in per_question if m > 0]
    for x, m in pairs:
        if x < 0 or x > m:
            raise ValueError(f"need 0 <= successes <= n, got {x}/{m}")
    k = len(pairs)
    x_sum = sum(x for x, _ in pairs)
    m_sum = sum(m for _, m in pairs)
    if m_sum == 0:
        return ClusteredRate(0, 0, 0, 1.0, 0.0, None, None, None)
    deff = design_effect_from_sums(
        k,
        x_sum,
        m_sum,
        sum(x * x for x, _ in pairs),
        sum(x * m for x, m in pairs),
        sum(m * m for _, m in pairs),
    )
    rate = x_sum / m_sum
    n_eff = m_sum / deff
    lower, upper = clustered_wilson(rate, n_eff, max(0, k - 1), z)
    return ClusteredRate(x_sum, m_sum, k, deff, n_eff, rate, lower, upper)


# ------------------------------------------------------------------ change detection
@dataclass(frozen=True, slots=True)
class ChangeTest:
    """Whether a brand's rate moved between two periods: ``z`` on the question-clustered
    variance, compared with Student's t on ``df = questions - 1`` (df = 0: the pooled binomial
    variance and the normal distribution)."""

    prev_rate: float
    rate: float
    z: float | None
    df: int
    p_value: float | None


def clustered_change(
    prev: Mapping[str, tuple[int, int]], cur: Mapping[str, tuple[int, int]]
) -> ChangeTest | None:
    """Test of cur - prev where each maps question -> (successes, n). The same question in both
    periods is one cluster, so a question effect shared by both periods cancels (a paired
    design). Variance: the cluster-robust one over the k questions asked in either period,

        u_q = (x2_q - p2 m2_q) / M2 - (x1_q - p1 m1_q) / M1,  V = k / (k - 1) sum_q u_q^2,

    with Student's t on k - 1 df; for one question (or V = 0, every question moving exactly
    with the total) the pooled binomial p(1 - p)(1/M1 + 1/M2) with the normal distribution, the
    classic test. None when a period has no answers; p_value None when there is no variance."""
    m1 = sum(m for _, m in prev.values())
    m2 = sum(m for _, m in cur.values())
    if m1 <= 0 or m2 <= 0:
        return None
    x1 = sum(x for x, _ in prev.values())
    x2 = sum(x for x, _ in cur.values())
    p1, p2 = x1 / m1, x2 / m2
    pooled = (x1 + x2) / (m1 + m2)
    v = pooled * (1 - pooled) * (1 / m1 + 1 / m2)
    questions = [q for q in set(prev) | set(cur) if prev.get(q, (0, 0))[1] + cur.get(q, (0, 0))[1]]
    k = len(questions)
    df = 0
    if k >= 2:
        u2 = 0.0
        for q in questions:
            a1, b1 = prev.get(q, (0, 0))
            a2, b2 = cur.get(q, (0, 0))
            u2 += ((a2 - p2 * b2) / m2 - (a1 - p1 * b1) / m1) ** 2
        if u2 > 0:
            v, df = k / (k - 1) * u2, k - 1
    if v <= 0:
        return ChangeTest(p1, p2, None, df, None)
    z = (p2 - p1) / math.sqrt(v)
    p_value = t_two_sided_p(z, df) if df >= 1 else normal_two_sided_p(z)
    return ChangeTest(p1, p2, z, df, p_value)


def benjamini_hochberg(p_values: Sequence[float | None]) -> list[float | None]:
    """Benjamini-Hochberg adjusted p-values (q-values) of one family, in input order; None
    entries are not tests and do not count in the family size. Flag where q <= the FDR."""
    tested = sorted((p, i) for i, p in enumerate(p_values) if p is not None)
    m = len(tested)
    out: list[float | None] = [None] * len(p_values)
    running = 1.0
    for rank in range(m, 0, -1):
        p, i = tested[rank - 1]
        running = min(running, m * p / rank)
        out[i] = min(1.0, running)
    return out
