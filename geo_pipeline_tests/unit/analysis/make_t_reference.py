"""Generate t_reference.json: Student's t two-sided 5 % critical values and two-sided tail
probabilities at 30 significant digits, the reference table the t tests check against.

Method: P(|T| >= t) = I_x(df / 2, 1 / 2) with x = df / (df + t^2) (Abramowitz & Stegun 26.7.1
with 26.5.27), the regularized incomplete beta evaluated by mpmath at 40 digits; the critical
value is the root of P(|T| >= t) = 0.05 found by mpmath.findroot (secant) from the normal
quantile, then checked to have that p to 1e-30. Run once (it is committed; mpmath is not a
dependency of the project):

    pip install mpmath   # into any scratch environment
    python geo_pipeline_tests/unit/analysis/make_t_reference.py
"""

from __future__ import annotations

import json
from pathlib import Path

import mpmath as mp  # type: ignore[import-not-found]

mp.mp.dps = 40

DFS = [*range(1, 31), 35, 40, 45, 50, 60, 70, 80, 90, 100, 120, 150, 200, 250, 300, 400, 499,
       500, 501, 750, 1000, 1500, 2000, 3000, 5000, 7500, 10_000, 20_000, 50_000, 99_999,
       100_000, 100_001, 200_000, 500_000, 1_000_000]  # fmt: skip
TS = ["0", "0.1", "0.5", "1", "1.5", "1.96", "2", "2.5", "3", "4", "5", "7", "10", "30"]


def two_sided_p(t: mp.mpf, df: int) -> mp.mpf:
    if t == 0:
        return mp.mpf(1)
    x = mp.mpf(df) / (df + t * t)
    return mp.betainc(mp.mpf(df) / 2, mp.mpf(1) / 2, 0, x, regularized=True)


def critical(df: int, alpha: str = "0.05") -> mp.mpf:
    a = mp.mpf(alpha)
    start = mp.sqrt(2) * mp.erfinv(1 - a)
    root = mp.findroot(lambda t: two_sided_p(t, df) - a, (start, start * mp.mpf("1.01")))
    assert abs(two_sided_p(root, df) - a) < mp.mpf("1e-30"), df
    return root


def main() -> None:
    table = {
        "method": __doc__.split("\n\n")[1].replace("\n", " "),
        "critical_95": {str(df): mp.nstr(critical(df), 30) for df in DFS},
        "two_sided_p": {
            str(df): {t: mp.nstr(two_sided_p(mp.mpf(t), df), 30) for t in TS} for df in DFS
        },
    }
    out = Path(__file__).with_name("t_reference.json")
    out.write_text(json.dumps(table, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
