"""Stance per mention stored beside the mention facts (migration 0048), re-computed for a new
stance version without losing the old one, and the analyst's stance rates with n and the
project's clustered interval (the Python twin, domain.stats.clustered_rate, as reference)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from geo_pipeline.analysis import analyse_run
from geo_pipeline.analysis.stance import restance_run
from geo_pipeline.connectors.registry import load_registry
from geo_pipeline.domain.config import normalise_and_validate
from geo_pipeline.domain.plan import build_plan, quote
from geo_pipeline.domain.stance import STANCE_VERSION, MentionStance, Span
from geo_pipeline.domain.stats import clustered_rate
from geo_pipeline.flows.create_run import create_run
from geo_pipeline_tests.integration.analysis.helpers import BRAND, COMPETITORS, store_answer

LUCKIN, SB = "瑞幸咖啡", "星巴克"
Q0, Q1 = "which coffee brand is best?", "which coffee is cheapest?"
ANSWERS = {  # (question index, repeat) -> answer; Luckin's stance by the baseline's rules
    (0, 0): "推荐瑞幸咖啡，价格实惠。",  # recommended
    (0, 1): "Luckin is good, but the queues are long.",  # cautioned
    (0, 2): "星巴克是一家美国连锁品牌。",  # Luckin not mentioned
    (1, 0): "不推荐瑞幸。",  # negative
    (1, 1): "瑞幸比星巴克便宜。",  # recommended; Starbucks cautioned
    (1, 2): "Luckin has stores in many cities.",  # neutral
}


def tagged_run(conn: Any, run_id: str) -> dict[tuple[int, int], str]:
    raw = {
        "tenant": "acme",
        "brand": BRAND,
        "competitors": COMPETITORS,
        "questions": [Q0, Q1],
        "question_tags": {Q0: {"topic": "quality"}, Q1: {"topic": "price"}},
        "channels": [{"platform": "deepseek", "device": "web"}],
        "repeats": 3,
    }
    caps = load_registry().capabilities()
    config = normalise_and_validate(raw, caps)
    plan = build_plan(config, quote(config, {p: c.prices for p, c in caps.items()}), run_id)
    create_run(conn, plan, confirm=False, dispatch=False)
    rows = conn.execute(
        "SELECT sample_id, question_index, repeat_index FROM geo.samples WHERE run_id = %s",
        (run_id,),
    ).fetchall()
    conn.commit()
    return {(r["question_index"], r["repeat_index"]): r["sample_id"] for r in rows}


@dataclass
class AllNeutral:
    version: str = "stance-test-2"

    def detect(self, text: str, spans: dict[str, list[Span]]) -> dict[str, MentionStance]:
        return {b: MentionStance(b, "neutral", ("other",)) for b in spans}


@pytest.fixture
def analysed(db: Any) -> dict[tuple[int, int], str]:
    by = tagged_run(db, "r-stance")
    for key, text in ANSWERS.items():
        store_answer(db, by[key], text)
    analyse_run(db, "r-stance")
    db.commit()
    return by


def test_stance_stored_per_mentioned_brand_with_the_version(db, analysed) -> None:
    rows = db.execute(
        "SELECT sample_id, brand, stance_version, stance, attributes FROM geo.mention_stances"
    ).fetchall()
    got = {(r["sample_id"], r["brand"]): (r["stance"], r["attributes"]) for r in rows}
    assert {r["stance_version"] for r in rows} == {STANCE_VERSION}
    by = analysed
    assert got == {
        (by[0, 0], LUCKIN): ("recommended", ["price"]),
        (by[0, 1], LUCKIN): ("cautioned", []),
        (by[0, 2], SB): ("neutral", []),
        (by[1, 0], LUCKIN): ("negative", []),
        (by[1, 1], LUCKIN): ("recommended", ["price"]),
        (by[1, 1], SB): ("cautioned", ["price"]),
        (by[1, 2], LUCKIN): ("neutral", ["availability"]),
    }
    # Every stance row judges a stored mention row that says "mentioned".
    orphans = db.execute(
        "SELECT count(*) AS n FROM geo.mention_stances s LEFT JOIN geo.mentions m"
        " USING (sample_id, detector_version, answer_revision, brand)"
        " WHERE m.mentioned IS NOT TRUE"
    ).fetchone()
    assert orphans["n"] == 0


def test_stance_rates_have_n_and_the_clustered_interval(db, analysed) -> None:
    rows = db.execute(
        "SELECT * FROM analytics.stance_rates WHERE run_id = 'r-stance' AND brand = %s"
        " AND stance_version = %s",
        (LUCKIN, STANCE_VERSION),
    ).fetchall()
    by_stance = {r["stance"]: r for r in rows}
    assert set(by_stance) == {"recommended", "neutral", "cautioned", "negative"}
    # Luckin is mentioned in 2 answers of Q0 and 3 of Q1.
    expected = {
        "recommended": [(1, 2), (1, 3)],
        "cautioned": [(1, 2), (0, 3)],
        "negative": [(0, 2), (1, 3)],
        "neutral": [(0, 2), (1, 3)],
    }
    for stance, pairs in expected.items():
        ref = clustered_rate(pairs)
        r = by_stance[stance]
        assert (r["n"], r["stance_count"], r["questions"]) == (5, ref.successes, 2), stance
        assert r["stance_rate"] == pytest.approx(ref.rate)
        assert r["stance_rate_lower"] == pytest.approx(ref.lower)
        assert r["stance_rate_upper"] == pytest.approx(ref.upper)
        assert r["interval_method"] == "question-clustered, 2 questions"
    # Per tag: each topic holds one question -> Wilson on that question's answers.
    tag = db.execute(
        "SELECT * FROM analytics.stance_rates_by_tag WHERE run_id = 'r-stance' AND brand = %s"
        " AND tag = 'topic' AND value = 'price' AND stance = 'recommended'",
        (LUCKIN,),
    ).fetchone()
    ref = clustered_rate([(1, 3)])
    assert (tag["n"], tag["stance_count"], tag["interval_method"]) == (3, 1, "Wilson, 1 question")
    assert (tag["stance_rate_lower"], tag["stance_rate_upper"]) == (
        pytest.approx(ref.lower),
        pytest.approx(ref.upper),
    )


def test_restance_adds_a_version_and_keeps_history(db, analysed) -> None:
    first = restance_run(db, "r-stance", AllNeutral())
    assert (first.answers, first.stances) == (6, 7)  # 6 answers name a brand
    again = restance_run(db, "r-stance", AllNeutral())
    assert (again.answers, again.stances) == (0, 0)
    versions = db.execute(
        "SELECT stance_version, count(*) AS n FROM geo.mention_stances GROUP BY 1 ORDER BY 1"
    ).fetchall()
    assert [(v["stance_version"], v["n"]) for v in versions] == [
        (STANCE_VERSION, 7),
        ("stance-test-2", 7),
    ]
    neutral = db.execute(
        "SELECT n, stance_count FROM analytics.stance_rates WHERE run_id = 'r-stance'"
        " AND brand = %s AND stance_version = 'stance-test-2' AND stance = 'neutral'",
        (LUCKIN,),
    ).fetchone()
    assert (neutral["n"], neutral["stance_count"]) == (5, 5)
