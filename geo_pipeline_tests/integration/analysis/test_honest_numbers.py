"""The question-clustered columns, brand_changes and brand_trends in PostgreSQL equal the
pure functions of geo_pipeline.domain.stats on the same counts."""

from __future__ import annotations

from datetime import date

import pytest

from geo_pipeline.analysis import analyse_run
from geo_pipeline.analysis.precision import planning_priors
from geo_pipeline.domain.precision import estimate_prior
from geo_pipeline.domain.stats import (
    benjamini_hochberg,
    clustered_change,
    clustered_rate,
    design_effect_from_sums,
    normal_two_sided_p,
    t_critical,
    t_two_sided_p,
    wilson_interval,
)
from geo_pipeline_tests.integration.analysis.helpers import make_run, store_answer

LUCKIN, SB = "瑞幸咖啡", "星巴克"
QUESTIONS = ["哪个咖啡品牌最好？", "上班族早上买咖啡推荐哪个品牌？", "性价比最高的咖啡？"]
# day -> per question, how many of 4 answers name Luckin (the others name Starbucks).
DAYS = {
    date(2026, 11, 1): [1, 0, 2],
    date(2026, 11, 2): [4, 3, 4],
    date(2026, 11, 3): [4, 2, 3],
}


def test_sql_functions_equal_the_python_ones(db):
    for df in (1, 2, 3, 4, 9, 10, 57):
        row = db.execute("SELECT analytics.t_critical_95(%s) AS t", (df,)).fetchone()
        assert row["t"] == pytest.approx(t_critical(df), abs=1e-12)
        for t in (0.0, 0.3, 1.0, 2.0, 4.5, -3.0):
            row = db.execute("SELECT analytics.t_two_sided_p(%s, %s) AS p", (t, df)).fetchone()
            assert row["p"] == pytest.approx(t_two_sided_p(t, df), abs=1e-12)
    for z in (0.0, 0.5, 1.96, 3.0, -4.2, 7.0):
        row = db.execute("SELECT analytics.normal_two_sided_p(%s) AS p", (z,)).fetchone()
        assert row["p"] == pytest.approx(normal_two_sided_p(z), rel=1e-12)
    for pairs in ([(3, 5)], [(0, 5), (5, 5), (1, 5), (4, 5)], [(2, 4), (2, 4)], [(0, 3), (0, 6)],
                  [(1, 10), (7, 12), (3, 3)]):  # fmt: skip
        c = clustered_rate(pairs)
        sums = (len(pairs), sum(x for x, _ in pairs), sum(m for _, m in pairs),
                sum(x * x for x, _ in pairs), sum(x * m for x, m in pairs),
                sum(m * m for _, m in pairs))  # fmt: skip
        row = db.execute(
            "SELECT d, analytics.clustered_wilson_lower(%s, %s / d, %s) AS lo,"
            " analytics.clustered_wilson_upper(%s, %s / d, %s) AS hi"
            " FROM (SELECT analytics.design_effect(%s, %s, %s, %s, %s, %s) AS d) s",
            (c.rate, c.n, c.df, c.rate, c.n, c.df, *sums),
        ).fetchone()
        assert row["d"] == pytest.approx(design_effect_from_sums(*sums), abs=1e-12)
        assert row["d"] == pytest.approx(c.design_effect, abs=1e-12)
        assert (row["lo"], row["hi"]) == pytest.approx((c.lower, c.upper), abs=1e-12)
    # At 0 and 1 the SQL bounds are the rate exactly, as in Python (they were 4.4e-17 above 0).
    for n in (1, 3, 3.7, 7, 10, 12, 24, 100, 1000):
        for df in (0, 1, 2, 9):
            row = db.execute(
                "SELECT analytics.clustered_wilson_lower(0, %s, %s) AS lo,"
                " analytics.clustered_wilson_upper(1, %s, %s) AS hi",
                (n, df, n, df),
            ).fetchone()
            assert (row["lo"], row["hi"]) == (0.0, 1.0), (n, df)


@pytest.fixture
def monitored(db):
    for day, hits in DAYS.items():
        run_id = f"r-h-{day:%Y%m%d}"
        samples = make_run(db, run_id, questions=QUESTIONS,
                           channels=[{"platform": "kimi", "device": "web"}], repeats=4,
                           monitor="m-h", scheduled_for=day)  # fmt: skip
        for s in samples:
            luckin = s["repeat_index"] < hits[s["question_index"]]
            store_answer(db, s["sample_id"], "推荐瑞幸。" if luckin else "推荐星巴克。")
        analyse_run(db, run_id)


def test_channel_metrics_carry_clustered_intervals_and_effective_n(db, monitored):
    rows = db.execute(
        "SELECT * FROM analytics.channel_brand_metrics WHERE monitor_id = 'm-h'"
        " ORDER BY scheduled_for, brand"
    ).fetchall()
    assert len(rows) == 9  # 3 days x 3 tracked brands
    for r in rows:
        day = r["scheduled_for"]
        if r["brand"] == LUCKIN:
            pairs = [(h, 4) for h in DAYS[day]]
        elif r["brand"] == SB:
            pairs = [(4 - h, 4) for h in DAYS[day]]
        else:
            pairs = [(0, 4)] * 3
        c = clustered_rate(pairs)
        assert (r["n"], r["questions"]) == (12, 3)
        assert r["design_effect"] == pytest.approx(c.design_effect, abs=1e-12)
        assert r["n_effective"] == pytest.approx(c.n_effective, abs=1e-12)
        assert r["mention_rate_lower"] == pytest.approx(c.lower, abs=1e-12)
        assert r["mention_rate_upper"] == pytest.approx(c.upper, abs=1e-12)
        # Plain Wilson on the raw n, named as such, never wider than the clustered interval.
        lo, hi = wilson_interval(r["mentions"], r["n"])  # type: ignore[misc]
        assert r["mention_rate_wilson_lower"] == pytest.approx(lo, abs=1e-12)
        assert r["mention_rate_lower"] <= lo + 1e-12 and r["mention_rate_upper"] >= hi - 1e-12
        assert r["citation_rate_lower"] == pytest.approx(0.0, abs=1e-12)
    bm = db.execute(
        "SELECT n, n_effective FROM analytics.brand_metrics WHERE monitor_id = 'm-h'"
    ).fetchall()
    assert bm and all(r["n_effective"] == r["n"] for r in bm)
    sov = db.execute(
        "SELECT * FROM analytics.share_of_voice WHERE run_id = 'r-h-20261101' AND brand = %s",
        (LUCKIN,),
    ).fetchone()
    # Every answer names exactly one of Luckin / Starbucks: the share's denominator is 4 a question.
    c = clustered_rate([(h, 4) for h in DAYS[date(2026, 11, 1)]])
    assert sov["questions"] == 3 and sov["share_n_effective"] == pytest.approx(c.n_effective)
    assert (sov["share_of_answers_lower"], sov["share_of_answers_upper"]) == pytest.approx(
        (c.lower, c.upper)
    )


def test_brand_changes_are_clustered_tests_with_bh_across_the_family(db, monitored):
    rows = db.execute(
        "SELECT * FROM analytics.brand_changes WHERE monitor_id = 'm-h'"
        " ORDER BY scheduled_for, comparison, channel, brand"
    ).fetchall()
    per_q = {day: {LUCKIN: {q: (h, 4) for q, h in enumerate(hits)},
                   SB: {q: (4 - h, 4) for q, h in enumerate(hits)},
                   "Manner Coffee": {q: (0, 4) for q in range(3)}}
             for day, hits in DAYS.items()}  # fmt: skip
    days = sorted(DAYS)
    dod = [r for r in rows if r["comparison"] == "day_over_day"]
    assert [r["scheduled_for"] for r in dod] == [days[1]] * 3 + [days[2]] * 3
    for day in days[1:]:
        fam = [r for r in dod if r["scheduled_for"] == day]
        prev = days[days.index(day) - 1]
        expected = {b: clustered_change({str(q): v for q, v in per_q[prev][b].items()},
                                        {str(q): v for q, v in per_q[day][b].items()})
                    for b in per_q[day]}  # fmt: skip
        qvals = benjamini_hochberg([expected[r["brand"]].p_value for r in fam])  # type: ignore[union-attr]
        for r, q in zip(fam, qvals, strict=True):
            e = expected[r["brand"]]
            assert e is not None and r["df"] == e.df and r["prev_from"] == prev
            assert r["z"] == pytest.approx(e.z, abs=1e-12) if e.z is not None else r["z"] is None
            assert (
                r["p_value"] == pytest.approx(e.p_value, abs=1e-12)
                if e.p_value
                else r["p_value"] is None
            )
            assert (
                r["q_value"] == pytest.approx(q, abs=1e-12)
                if q is not None
                else r["q_value"] is None
            )
            assert r["family_size"] == sum(1 for v in qvals if v is not None)
            assert r["fdr_q"] == 0.05 and str(day) in r["family"] and "day_over_day" in r["family"]
            assert r["flagged"] == (q is not None and q <= 0.05)
    # Rolling 7 days on day 3: days 1-3 against nothing before: no test.
    assert not [r for r in rows if r["comparison"] == "rolling_7d"]
    # Luckin's jump on day 2 (3/12 -> 11/12) is flagged; day 3's dip is not.
    flags = {(r["scheduled_for"], r["brand"]): r["flagged"] for r in dod}
    assert flags[days[1], LUCKIN] and not flags[days[2], LUCKIN]


def test_brand_trends_days_and_rolling_windows(db, monitored):
    rows = db.execute(
        "SELECT * FROM analytics.brand_trends WHERE monitor_id = 'm-h' AND brand = %s"
        " ORDER BY scheduled_for", (LUCKIN,),
    ).fetchall()  # fmt: skip
    assert [r["scheduled_for"] for r in rows] == sorted(DAYS)
    for i, r in enumerate(rows):
        day = r["scheduled_for"]
        c = clustered_rate([(h, 4) for h in DAYS[day]])
        assert (r["n"], r["mentions"], r["questions"]) == (12, c.successes, 3)
        assert r["run_ids"] == [f"r-h-{day:%Y%m%d}"]
        assert (r["mention_rate_lower"], r["mention_rate_upper"]) == pytest.approx(
            (c.lower, c.upper), abs=1e-12
        )
        window = sorted(DAYS)[: i + 1]
        w = clustered_rate([(sum(DAYS[d][q] for d in window), 4 * len(window)) for q in range(3)])
        assert (r["n_7d"], r["mentions_7d"]) == (w.n, w.successes)
        assert r["n_effective_7d"] == pytest.approx(w.n_effective, abs=1e-9)
        assert r["mention_rate_7d_lower"] == pytest.approx(w.lower, abs=1e-12)
    assert [r["flagged_day_over_day"] for r in rows] == [False, True, False]


def test_planning_priors_from_the_monitor_runs(db, monitored):
    priors = planning_priors(db, "m-h", last_runs=2)
    pairs = [(DAYS[date(2026, 11, 2)][q] + DAYS[date(2026, 11, 3)][q], 8) for q in range(3)]
    expected = estimate_prior(pairs, "x")
    assert expected is not None
    assert priors["kimi__web"].rate == pytest.approx(expected.rate)
    assert priors["kimi__web"].icc == pytest.approx(expected.icc)


def test_one_mention_rate_interval_under_one_name_everywhere(db, monitored):
    """Issue #34: ``mention_rate_lower/upper`` means one thing -- the question-clustered 95 %
    interval wherever questions are pooled (Wilson on one question, where they coincide) -- in
    analytics.channel_brand_metrics, analytics.brand_trends, the terminal report's query and the
    Dagster plots; plain Wilson is named as such; each row says its method and effective n."""
    from geo_pipeline.defs.analysis.metadata import PLOTTED_RATES, brand_metadata_keys, rate_plots
    from geo_pipeline.store.queries import fetch_all

    chan = {
        (r["scheduled_for"], r["brand"]): r
        for r in db.execute(
            "SELECT * FROM analytics.channel_brand_metrics WHERE monitor_id = 'm-h'"
        ).fetchall()
    }
    trends = {
        (r["scheduled_for"], r["brand"]): r
        for r in db.execute("SELECT * FROM analytics.brand_trends WHERE monitor_id = 'm-h'")
    }
    assert set(chan) == set(trends)
    for key, c in chan.items():
        t = trends[key]
        assert (c["mention_rate_lower"], c["mention_rate_upper"]) == pytest.approx(
            (t["mention_rate_lower"], t["mention_rate_upper"]), abs=1e-12
        )
        assert c["n_effective"] == pytest.approx(t["n_effective"], abs=1e-12)
        lo, hi = wilson_interval(c["mentions"], c["n"])  # type: ignore[misc]
        assert (c["mention_rate_wilson_lower"], c["mention_rate_wilson_upper"]) == pytest.approx(
            (lo, hi), abs=1e-12
        )
        assert c["mention_rate_interval"] == "question-clustered, 3 questions"
        assert t["mention_rate_interval"] == c["mention_rate_interval"]  # the same label
    run = "r-h-20261102"
    report = {r["brand"]: r for r in fetch_all(db, "ops.report_mention_rates", {"run_id": run})}
    table = fetch_all(db, "dagster.channel_visibility", {"run_id": run, "channel": "kimi__web"})
    plots = rate_plots(table)
    keys = brand_metadata_keys(r["brand"] for r in table)
    assert "mention_rate_lower" in PLOTTED_RATES
    for r in table:
        c = chan[(date(2026, 11, 2), r["brand"])]
        rep = report[r["brand"]]
        assert rep["mention_rate_interval"] == "question-clustered, 3 questions"
        assert float(rep["mention_rate_lower"]) == pytest.approx(c["mention_rate_lower"], abs=1e-12)
        assert float(rep["mention_rate_upper"]) == pytest.approx(c["mention_rate_upper"], abs=1e-12)
        if c["mention_rate"] is not None:
            got = plots[f"mention_rate_lower/{keys[r['brand']]}"].value
            assert got == round(c["mention_rate_lower"], 4)
