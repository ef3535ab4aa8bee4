"""Honest statistics for mention rates: Wilson score intervals and the two-proportion z test.

Pure. The SQL functions ``analytics.wilson_lower/upper`` and ``analytics.two_proportion_z``
(sql/migrations/0004_analytics.sql) compute the same numbers inside PostgreSQL; a test holds
them equal. A rate is never reported without its sample size, and a one-sample flip between
two days is not a trend: the day-over-day view flags a change only when ``|z| >= Z_95``.
"""

from __future__ import annotations

import math

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
    return max(0.0, centre - half), min(1.0, centre + half)


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
