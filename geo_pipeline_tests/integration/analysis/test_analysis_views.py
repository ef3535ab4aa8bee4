"""A run of planted answers: analyse it, refresh the analyst tables, and check counts, rates,
Wilson bounds, share of voice and source domains against values worked out by hand here."""

from __future__ import annotations

import math
from datetime import date

import pytest

from geo_pipeline.analysis import analyse_run, refresh_analytics
from geo_pipeline.domain.mentions import DETECTOR_VERSION
from geo_pipeline.domain.stats import wilson_interval
from geo_pipeline_tests.integration.analysis.helpers import make_run, store_answer

Z = 1.959963984540054
LUCKIN, SB, MANNER = "瑞幸咖啡", "星巴克", "Manner Coffee"


def wilson_by_hand(x: int, n: int) -> tuple[float, float]:
    p = x / n
    centre = p + Z * Z / (2 * n)
    half = Z * math.sqrt(p * (1 - p) / n + Z * Z / (4 * n * n))
    return (centre - half) / (1 + Z * Z / n), (centre + half) / (1 + Z * Z / n)


@pytest.fixture
def planted(db):
    samples = make_run(
        db,
        "r-planted",
        questions=["国内性价比最高的连锁咖啡品牌有哪些？", "上班族早上买咖啡推荐哪个品牌？"],
        channels=[
            {"platform": "deepseek", "device": "web"},
            {"platform": "doubao", "device": "web"},
        ],
        repeats=5,
    )
    by = {(s["channel"], s["question_index"], s["repeat_index"]): s["sample_id"] for s in samples}
    ds = "deepseek__web"
    # deepseek, question 0
    store_answer(
        db, by[ds, 0, 0], "推荐瑞幸咖啡，其次是星巴克。", citations=[("cited", "luckincoffee.com")]
    )
    store_answer(
        db,
        by[ds, 0, 1],
        "Starbucks is nicer; Luckin is cheaper.",
        citations=[("cited", "starbucks.com"), ("retrieved", "luckincoffee.com")],
    )
    store_answer(db, by[ds, 0, 2], "I would pick Manner for flat whites.")
    store_answer(db, by[ds, 0, 3], "请登录后继续", validity="invalid", reason="login_page")
    # (ds, 0, 4) never completes: its analysis stays pending -- unknown, not "not mentioned".
    # deepseek, question 1
    store_answer(
        db,
        by[ds, 1, 0],
        "星巴克，星巴克，还是星巴克。",
        citations=[("cited", "zhihu.com"), ("cited", "zhihu.com")],
    )
    store_answer(db, by[ds, 1, 1], "没有特别推荐的品牌。", citations=[("cited", "zhihu.com")])
    store_answer(db, by[ds, 1, 2], "我每天都喝咖啡。")  # only an ambiguous alias: review
    store_answer(
        db, by[ds, 1, 3], "瑞幸的优惠活动很多，比如", validity="invalid", reason="truncated"
    )
    store_answer(db, by[ds, 1, 4], "Luckin!", citations=[("retrieved", "luckincoffee.com")])
    # doubao, question 0: one answer
    store_answer(db, by["doubao__web", 0, 0], "瑞幸。")
    return by


def metric(db, channel, q, brand):
    return db.execute(
        "SELECT m.* FROM analytics.brand_metrics m WHERE run_id = 'r-planted' AND channel = %s"
        " AND question_index = %s AND brand = %s",
        (channel, q, brand),
    ).fetchone()


def test_planted_run_counts_rates_and_wilson_bounds(db, planted):
    summary = analyse_run(db, "r-planted")
    assert summary.detector_version == DETECTOR_VERSION
    assert (summary.analysed, summary.accepted, summary.review, summary.failed) == (10, 7, 2, 1)
    assert summary.waiting_evidence == 10  # 1 on deepseek + 9 on doubao

    m = metric(db, "deepseek__web", 0, LUCKIN)
    assert (m["samples"], m["valid_samples"], m["invalid_samples"]) == (5, 3, 1)
    assert (m["analysing_samples"], m["review_samples"], m["n"], m["mentions"]) == (1, 0, 3, 2)
    lo, hi = wilson_by_hand(2, 3)
    assert m["mention_rate"] == pytest.approx(2 / 3, abs=1e-12)
    assert m["mention_rate_lower"] == pytest.approx(lo, abs=1e-12)
    assert m["mention_rate_upper"] == pytest.approx(hi, abs=1e-12)
    assert m["avg_rank"] == pytest.approx(1.5)  # first in answer 0, second in answer 1
    assert (m["domain_cited"], m["domain_retrieved"]) == (1, 1)
    assert m["citation_rate"] == pytest.approx(1 / 3)
    assert m["is_target"] is True

    sb = metric(db, "deepseek__web", 0, SB)
    assert (sb["n"], sb["mentions"], sb["avg_rank"], sb["domain_cited"]) == (3, 2, 1.5, 1)
    manner = metric(db, "deepseek__web", 0, MANNER)
    assert (manner["n"], manner["mentions"], manner["avg_rank"]) == (3, 1, 1.0)
    lo, hi = wilson_by_hand(1, 3)
    assert (manner["mention_rate_lower"], manner["mention_rate_upper"]) == (
        pytest.approx(lo, abs=1e-12),
        pytest.approx(hi, abs=1e-12),
    )

    # Question 1: two answers in review (ambiguous alias, doubtful truncation) are not in n; the
    # truncated one is an invalid answer, counted once, in invalid_samples (issue #34).
    q1 = metric(db, "deepseek__web", 1, LUCKIN)
    assert (q1["samples"], q1["valid_samples"], q1["invalid_samples"]) == (5, 4, 1)
    assert (q1["review_samples"], q1["analysing_samples"], q1["n"], q1["mentions"]) == (1, 0, 3, 1)
    assert (q1["domain_cited"], q1["domain_retrieved"]) == (0, 1)
    sb1 = metric(db, "deepseek__web", 1, SB)
    assert (sb1["n"], sb1["mentions"]) == (3, 1)

    # doubao: 1 known answer of 10 samples; 9 analysing. 1/1: Wilson lower = 1/(1 + z²).
    d = metric(db, "doubao__web", 0, LUCKIN)
    assert (d["samples"], d["n"], d["mentions"], d["analysing_samples"]) == (5, 1, 1, 4)
    assert d["mention_rate_lower"] == pytest.approx(1 / (1 + Z * Z), abs=1e-12)
    assert d["mention_rate_upper"] == 1.0
    none = metric(db, "doubao__web", 1, LUCKIN)
    assert (none["n"], none["mentions"], none["analysing_samples"]) == (0, 0, 5)
    assert none["mention_rate"] is None and none["mention_rate_lower"] is None

    ch = db.execute(
        "SELECT * FROM analytics.channel_brand_metrics WHERE run_id = 'r-planted'"
        " AND channel = 'deepseek__web' AND brand = %s",
        (LUCKIN,),
    ).fetchone()
    assert (ch["samples"], ch["n"], ch["mentions"], ch["invalid_samples"]) == (10, 6, 3, 2)
    lo, hi = wilson_by_hand(3, 6)
    assert ch["mention_rate_wilson_lower"] == pytest.approx(lo, abs=1e-12)  # named Wilson
    assert ch["mention_rate_interval"] == "question-clustered, 2 questions"
    assert ch["mention_rate_lower"] <= lo + 1e-12  # THE interval: clustered, never narrower


def test_share_of_voice_names_its_denominators(db, planted):
    analyse_run(db, "r-planted")
    rows = {
        r["brand"]: r
        for r in db.execute(
            "SELECT * FROM analytics.share_of_voice WHERE run_id = 'r-planted'"
            " AND channel = 'deepseek__web'"
        ).fetchall()
    }
    # Known answers on deepseek: q0 r0-r2, q1 r0, r1, r4 = 6; 5 mention a tracked brand.
    # Mentions: 瑞幸咖啡 1 + 1 + 1 = 3; 星巴克 1 + 1 + 3 = 5; Manner 1 -> 9 in all.
    assert {
        b: (r["n"], r["answers_mentioning_brand"], r["answers_mentioning_any_tracked_brand"])
        for b, r in rows.items()
    } == {LUCKIN: (6, 3, 5), SB: (6, 3, 5), MANNER: (6, 1, 5)}
    assert rows[LUCKIN]["share_of_answers_mentioning_any_brand"] == pytest.approx(3 / 5)
    assert rows[MANNER]["share_of_answers_mentioning_any_brand"] == pytest.approx(1 / 5)
    assert {b: (r["brand_mentions"], r["all_tracked_mentions"]) for b, r in rows.items()} == {
        LUCKIN: (3, 9),
        SB: (5, 9),
        MANNER: (1, 9),
    }
    assert rows[SB]["share_of_all_tracked_mentions"] == pytest.approx(5 / 9)


def test_source_domains_per_engine_over_valid_answers(db, planted):
    analyse_run(db, "r-planted")
    rows = {
        (r["registrable_domain"], r["relation"]): (r["citations"], r["answers"], r["valid_answers"])
        for r in db.execute(
            "SELECT * FROM analytics.source_domains WHERE run_id = 'r-planted'"
            " AND platform = 'deepseek'"
        ).fetchall()
    }
    # Valid answers on deepseek: q0 r0-r2 and q1 r0, r1, r2, r4 = 7 (the truncated one is invalid).
    assert rows == {
        ("luckincoffee.com", "cited"): (1, 1, 7),
        ("luckincoffee.com", "retrieved"): (2, 2, 7),
        ("starbucks.com", "cited"): (1, 1, 7),
        ("zhihu.com", "cited"): (3, 2, 7),
    }


def test_pending_analysis_is_unknown_not_unmentioned(db, planted):
    analyse_run(db, "r-planted")
    facts = db.execute(
        "SELECT mention_status, mentioned FROM analytics.sample_brand_facts"
        " WHERE sample_id = %s AND brand = %s",
        (planted["deepseek__web", 0, 4], LUCKIN),
    ).fetchone()
    assert facts == {"mention_status": "analysing", "mentioned": None}
    sf = db.execute(
        "SELECT mention_status, target_mentioned, validity, analysis_state"
        " FROM analytics.sample_facts WHERE sample_id = %s",
        (planted["deepseek__web", 0, 3],),
    ).fetchone()
    assert sf == {
        "mention_status": "excluded",
        "target_mentioned": None,
        "validity": "invalid",
        "analysis_state": "failed",
    }
    # A known "no": the brand-less answer says mentioned = false, not NULL.
    no = db.execute(
        "SELECT mentioned, mention_count FROM analytics.sample_brand_facts"
        " WHERE sample_id = %s AND brand = %s",
        (planted["deepseek__web", 1, 1], LUCKIN),
    ).fetchone()
    assert no == {"mentioned": False, "mention_count": 0}
    # Nothing counts a pending sample as not mentioned.
    not_mentioned = db.execute(
        "SELECT count(*) AS c FROM analytics.sample_brand_facts WHERE run_id = 'r-planted'"
        " AND brand = %s AND mentioned = false",
        (LUCKIN,),
    ).fetchone()["c"]
    assert not_mentioned == 3  # q0 r2, q1 r0, q1 r1


def test_analysis_is_idempotent_and_a_new_detector_version_keeps_history(db, planted):
    first = analyse_run(db, "r-planted")
    again = analyse_run(db, "r-planted")
    assert first.analysed == 10 and again.analysed == 0
    n_mentions = db.execute("SELECT count(*) AS c FROM geo.mentions").fetchone()["c"]
    assert n_mentions == 9 * 3  # nine answers ran the detector (not the login page), 3 brands

    newer = analyse_run(db, "r-planted", detector_version="mentions-test-next")
    assert newer.analysed == 10 and newer.reanalysed == 10
    versions = db.execute(
        "SELECT detector_version, count(*) AS c FROM geo.analysis_results GROUP BY 1 ORDER BY 1"
    ).fetchall()
    assert [(v["detector_version"], v["c"]) for v in versions] == [
        (DETECTOR_VERSION, 10),
        ("mentions-test-next", 10),
    ]
    cur = db.execute(
        "SELECT DISTINCT detector_version FROM analytics.sample_facts"
        " WHERE run_id = 'r-planted' AND detector_version IS NOT NULL"
    ).fetchall()
    assert [r["detector_version"] for r in cur] == ["mentions-test-next"]
    # Each re-analysed sample went accepted/review/failed -> pending -> its state again, logged.
    log = db.execute(
        "SELECT count(*) AS c FROM geo.state_transitions WHERE layer = 'analysis'"
        " AND to_state = 'pending' AND actor = 'analysis:mentions-test-next'"
    ).fetchone()["c"]
    assert log == 10
    m = metric(db, "deepseek__web", 0, LUCKIN)
    assert (m["n"], m["mentions"]) == (3, 2)


def test_later_evidence_is_analysed_by_the_next_run_of_the_analyser(db, planted):
    analyse_run(db, "r-planted")
    store_answer(db, planted["deepseek__web", 0, 4], "Luckin, then Manner.")
    s = analyse_run(db, "r-planted", channel="deepseek__web")
    assert (s.analysed, s.accepted) == (1, 1)
    m = metric(db, "deepseek__web", 0, LUCKIN)
    assert (m["n"], m["mentions"], m["analysing_samples"]) == (4, 3, 0)


def test_sql_statistics_functions_equal_the_python_ones(db):
    for n in (1, 2, 3, 7, 10, 100, 1001):
        for x in sorted({0, 1, n // 3, n // 2, n - 1, n}):
            row = db.execute(
                "SELECT analytics.wilson_lower(%s, %s) AS lo, analytics.wilson_upper(%s, %s) AS hi",
                (x, n, x, n),
            ).fetchone()
            lo, hi = wilson_interval(x, n)
            assert row["lo"] == pytest.approx(lo, abs=1e-12) and row["hi"] == pytest.approx(
                hi, abs=1e-12
            )
    row = db.execute(
        "SELECT analytics.wilson_lower(0, 0) AS lo, analytics.two_proportion_z(40, 100, 60, 100) AS z,"
        " analytics.two_proportion_z(0, 5, 0, 5) AS z0"
    ).fetchone()
    assert row["lo"] is None and row["z0"] is None
    assert row["z"] == pytest.approx(0.2 / math.sqrt(0.005), abs=1e-12)


def test_day_over_day_flags_only_significant_changes(db):
    # Monitor m1, one channel, 10 samples a day. Day 1: 2/10, day 2: 9/10, day 3: 8/10.
    plan = {date(2026, 11, 1): 2, date(2026, 11, 2): 9, date(2026, 11, 3): 8}
    for day, hits in plan.items():
        run_id = f"r-m1-{day:%Y%m%d}"
        samples = make_run(
            db,
            run_id,
            questions=["哪个咖啡品牌最好？"],
            channels=[{"platform": "kimi", "device": "web"}],
            repeats=10,
            monitor="m1",
            scheduled_for=day,
        )
        for i, s in enumerate(samples):
            store_answer(db, s["sample_id"], "推荐瑞幸。" if i < hits else "推荐星巴克。")
        analyse_run(db, run_id)
    rows = db.execute(
        "SELECT * FROM analytics.brand_changes WHERE monitor_id = 'm1' AND brand = %s"
        " AND comparison = 'day_over_day' ORDER BY scheduled_for",
        (LUCKIN,),
    ).fetchall()
    assert [(r["prev_n"], r["n"]) for r in rows] == [(10, 10), (10, 10)]  # day 1 has no before
    # One question: the pooled two-proportion z with the normal distribution (df = 0).
    # Day 2 vs 1: pooled 11/20, se = sqrt(.55 * .45 * .2), z = .7 / se = 3.146...
    z2 = 0.7 / math.sqrt(0.55 * 0.45 * 0.2)
    assert rows[0]["z"] == pytest.approx(z2, abs=1e-12) and rows[0]["df"] == 0
    assert rows[0]["flagged"] is True and rows[0]["rate_change"] == pytest.approx(0.7)
    # Day 3 vs 2: 9/10 -> 8/10, z = -0.1 / sqrt(.85 * .15 * .2) = -0.626: no trend.
    z3 = -0.1 / math.sqrt(0.85 * 0.15 * 0.2)
    assert rows[1]["z"] == pytest.approx(z3, abs=1e-12) and rows[1]["flagged"] is False
    # The uncorrected view is gone (issue #34): one change-flag rule.
    gone = db.execute("SELECT to_regclass('analytics.brand_day_over_day') AS v").fetchone()
    assert gone["v"] is None


def test_refresh_of_all_runs_equals_refresh_per_run(db, planted):
    analyse_run(db, "r-planted")
    before = db.execute("SELECT * FROM analytics.brand_metrics ORDER BY 1, 5, 9, 10, 12").fetchall()
    counts = refresh_analytics(db, None)
    after = db.execute("SELECT * FROM analytics.brand_metrics ORDER BY 1, 5, 9, 10, 12").fetchall()
    strip = lambda rows: [{k: v for k, v in r.items() if k != "refreshed_at"} for r in rows]  # noqa: E731
    assert strip(before) == strip(after)
    # 2 channels x 2 questions x 3 brands (one region, one mode each)
    assert counts["brand_metrics"] == len(after) == 12


def test_materialised_tables_agree_with_the_sample_brand_facts_view(db, planted):
    """The refresh computes from per-sample rows for speed; the live per-sample x brand view is
    the definition. Both must give the same counts for every cell."""
    analyse_run(db, "r-planted")
    from_view = db.execute(
        "SELECT channel, region, mode, question_revision, brand, count(*)::int AS samples,"
        " count(*) FILTER (WHERE validity = 'valid')::int AS valid_samples,"
        " count(*) FILTER (WHERE mention_status = 'known')::int AS n,"
        " count(*) FILTER (WHERE mentioned)::int AS mentions,"
        " count(*) FILTER (WHERE domain_cited)::int AS domain_cited"
        " FROM analytics.sample_brand_facts WHERE run_id = 'r-planted'"
        " GROUP BY 1, 2, 3, 4, 5 ORDER BY 1, 2, 3, 4, 5"
    ).fetchall()
    from_table = db.execute(
        "SELECT channel, region, mode, question_revision, brand, samples, valid_samples, n,"
        " mentions, domain_cited FROM analytics.brand_metrics WHERE run_id = 'r-planted'"
        " ORDER BY 1, 2, 3, 4, 5"
    ).fetchall()
    assert from_view == from_table and len(from_table) == 12


def test_two_analysers_at_once_split_the_work(db, db_url):
    import threading

    import psycopg
    from psycopg.rows import dict_row

    samples = make_run(
        db,
        "r-twice",
        questions=["哪个咖啡品牌最好？"],
        channels=[{"platform": "kimi", "device": "web"}],
        repeats=20,
    )
    for s in samples:
        store_answer(db, s["sample_id"], "推荐瑞幸。")
    results = []

    def analyser():
        with psycopg.connect(db_url, row_factory=dict_row) as conn:
            results.append(analyse_run(conn, "r-twice", chunk_size=3, refresh=False))

    threads = [threading.Thread(target=analyser) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(r.analysed for r in results) == 20
    per_sample = db.execute(
        "SELECT count(*) AS c FROM geo.analysis_results r JOIN geo.samples s USING (sample_id)"
        " WHERE s.run_id = 'r-twice' GROUP BY sample_id"
    ).fetchall()
    assert len(per_sample) == 20 and {r["c"] for r in per_sample} == {1}
    moves = db.execute(
        "SELECT count(*) AS c FROM geo.state_transitions WHERE run_id = 'r-twice'"
        " AND layer = 'analysis'"
    ).fetchone()["c"]
    assert moves == 20  # pending -> accepted once each
