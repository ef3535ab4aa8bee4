"""analytics.t_critical_95 / t_two_sided_p / normal_two_sided_p in PostgreSQL: bounded
everywhere (no float8 underflow at any df or t), equal to domain.stats, and within the stated
errors of the 30-digit reference table over df = 1 ... 10^6. A pooled rate over 500 questions
is refreshed (df = 499: it raised "value out of range: underflow" before migration 0024)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from geo_pipeline.analysis import analyse_run
from geo_pipeline.domain.stats import normal_two_sided_p, t_critical, t_two_sided_p
from geo_pipeline_tests.integration.analysis.helpers import make_run, store_answer

REFERENCE = json.loads(
    (Path(__file__).parents[2] / "unit" / "analysis" / "t_reference.json").read_text("utf-8")
)
CRITICAL = {int(df): float(t) for df, t in REFERENCE["critical_95"].items()}
TAILS = {
    int(df): {float(t): float(p) for t, p in row.items()}
    for df, row in REFERENCE["two_sided_p"].items()
}


def test_sql_critical_values_over_df_1_to_a_million(db):
    rows = db.execute(
        "SELECT df, analytics.t_critical_95(df) AS t FROM unnest(%s::int[]) AS df",
        (sorted(CRITICAL),),
    ).fetchall()
    for row in rows:
        df = row["df"]
        assert row["t"] == pytest.approx(CRITICAL[df], abs=1e-13 if df <= 100 else 1e-8), df
        assert row["t"] == pytest.approx(t_critical(df), abs=1e-12), df


def test_sql_tails_over_df_1_to_a_million(db):
    for df, row in TAILS.items():
        got = db.execute(
            "SELECT t, analytics.t_two_sided_p(t, %s) AS p FROM unnest(%s::float8[]) AS t",
            (df, list(row)),
        ).fetchall()
        for r in got:
            p = row[r["t"]]
            assert r["p"] == pytest.approx(p, abs=1e-14 if df <= 100 else 6e-8), (df, r["t"])
            assert r["p"] == pytest.approx(t_two_sided_p(r["t"], df), abs=1e-12), (df, r["t"])


@pytest.mark.parametrize("t", [40.0, 1e10, 1e200, -1e300])
@pytest.mark.parametrize("df", [1, 2, 3, 4, 99, 100, 101, 500, 10**6])
def test_no_underflow_for_extreme_statistics(db, t, df):
    row = db.execute(
        "SELECT analytics.t_two_sided_p(%s, %s) AS p, analytics.normal_two_sided_p(%s) AS z",
        (t, df, t),
    ).fetchone()
    assert row["p"] == pytest.approx(t_two_sided_p(t, df), abs=1e-12)
    assert 0.0 <= row["p"] < 0.02  # Cauchy: P(|T| >= 40) = 0.0159
    assert row["z"] == normal_two_sided_p(t) == 0.0


def test_a_rate_pooled_over_500_questions_is_refreshed(db):
    questions = [f"question {i}: which coffee brand?" for i in range(500)]  # the most allowed
    samples = make_run(db, "r-500q", questions=questions,
                       channels=[{"platform": "kimi", "device": "web"}], repeats=1)  # fmt: skip
    for s in samples:
        luckin = s["question_index"] % 3 == 0
        store_answer(db, s["sample_id"], "推荐瑞幸。" if luckin else "推荐星巴克。")
    analyse_run(db, "r-500q")
    row = db.execute(
        "SELECT n, questions, mention_rate, mention_rate_lower AS lo,"
        " mention_rate_upper AS hi FROM analytics.channel_brand_metrics"
        " WHERE run_id = 'r-500q' AND brand = '瑞幸咖啡'"
    ).fetchone()
    assert row["n"] == 500 and row["questions"] == 500
    assert row["lo"] < row["mention_rate"] < row["hi"]
