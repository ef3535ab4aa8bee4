"""The review queue through the CLI: what waits for a person, and a decision recorded as a
guarded transition that names the operator and that the analyst tables pick up."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from geo_pipeline.analysis import analyse_run
from geo_pipeline.cli.main import cli
from geo_pipeline_tests.integration.analysis.helpers import make_run, store_answer

LUCKIN = "瑞幸咖啡"


@pytest.fixture
def queued(db, db_url, monkeypatch):
    monkeypatch.setenv("GEO_DATABASE_URL", db_url)
    samples = make_run(
        db,
        "r-review",
        questions=["哪个咖啡品牌最好？"],
        channels=[{"platform": "deepseek", "device": "web"}],
        repeats=5,
    )
    ids = [s["sample_id"] for s in samples]
    store_answer(db, ids[0], "我每天都喝咖啡，瑞幸也不错。")  # ambiguous alias -> review
    store_answer(db, ids[1], "瑞幸的优惠活动很多，比如", validity="invalid", reason="truncated")
    store_answer(db, ids[2], "推荐瑞幸。")  # accepted: not in the queue
    store_answer(db, ids[3], "Error 502", validity="invalid", reason="error_page")  # failed
    # A parse failure kept raw (R13): collection completed, reason says unparseable.
    store_answer(db, ids[4], "{not json", validity="invalid", reason="error_page")
    db.execute(
        "UPDATE geo.samples SET collection_reason = 'unparseable: bad JSON' WHERE sample_id = %s",
        (ids[4],),
    )
    db.commit()
    analyse_run(db, "r-review")
    return ids


def run_cli(*args):
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result


def test_list_shows_every_kind_of_waiting_sample(queued):
    result = run_cli("review", "list", "--run", "r-review", "--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    got = {(r["sample_id"], r["subject"]) for r in rows}
    assert got == {(queued[0], "analysis"), (queued[1], "analysis"), (queued[4], "parse_failure")}
    by = {r["sample_id"]: r for r in rows}
    assert by[queued[0]]["reason"] == "ambiguous_alias:咖啡"
    assert by[queued[1]]["reason"] == "invalid_answer_needs_review:truncated"
    assert "unparseable" in by[queued[4]]["reason"]
    assert by[queued[1]]["evidence"] == "geo.answers revision 1"
    table = run_cli("review", "list")
    assert table.exit_code == 0 and "3 waiting for review" in table.output


def test_resolve_records_the_decision_and_the_views_pick_it_up(db, queued):
    before = db.execute(
        "SELECT n, mentions, review_samples FROM analytics.brand_metrics"
        " WHERE run_id = 'r-review' AND brand = %s",
        (LUCKIN,),
    ).fetchone()
    # the truncated answer a person is to confirm is an invalid answer until then: counted once,
    # in invalid_samples, not also in review_samples (issue #34)
    assert before == {"n": 1, "mentions": 1, "review_samples": 1}

    result = run_cli(
        "review",
        "resolve",
        queued[0],
        "--verdict",
        "accepted",
        "--note",
        "咖啡 here is the drink, not Manner",
        "--actor",
        "alice",
        "--json",
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert (out["subject"], out["analysis_state"], out["actor"]) == (
        "analysis",
        "accepted",
        "alice",
    )
    result = run_cli(
        "review",
        "resolve",
        queued[1],
        "--verdict",
        "valid",
        "--note",
        "ends mid-list but names the brand",
        "--actor",
        "bob",
    )
    assert result.exit_code == 0, result.output
    assert "analysis is now accepted" in result.output

    db.rollback()
    after = db.execute(
        "SELECT n, mentions, review_samples, valid_samples FROM analytics.brand_metrics"
        " WHERE run_id = 'r-review' AND brand = %s",
        (LUCKIN,),
    ).fetchone()
    assert after == {"n": 3, "mentions": 3, "review_samples": 0, "valid_samples": 3}
    log = db.execute(
        "SELECT sample_id, from_state, to_state, actor, reason FROM geo.state_transitions"
        " WHERE layer = 'analysis' AND actor LIKE 'operator:%%' ORDER BY transition_id"
    ).fetchall()
    assert [(r["sample_id"], r["from_state"], r["to_state"], r["actor"]) for r in log] == [
        (queued[0], "review", "accepted", "operator:alice"),
        (queued[1], "review", "accepted", "operator:bob"),
    ]
    assert log[0]["reason"] == "operator:alice: 咖啡 here is the drink, not Manner"
    decisions = db.execute(
        "SELECT sample_id, subject, verdict, actor FROM geo.review_decisions ORDER BY decision_id"
    ).fetchall()
    assert [tuple(d.values()) for d in decisions] == [
        (queued[0], "analysis", "accepted", "alice"),
        (queued[1], "validity", "valid", "bob"),
    ]
    sf = db.execute(
        "SELECT validity, validity_judged, validity_reviewed FROM analytics.sample_facts"
        " WHERE sample_id = %s",
        (queued[1],),
    ).fetchone()
    assert sf == {"validity": "valid", "validity_judged": "invalid", "validity_reviewed": "valid"}
    remaining = json.loads(run_cli("review", "list", "--run", "r-review", "--json").output)
    assert [r["sample_id"] for r in remaining] == [queued[4]]


def test_judging_a_concluded_answer_valid_reopens_it_for_the_next_analysis(db, queued):
    result = run_cli(
        "review",
        "resolve",
        queued[4],
        "--verdict",
        "valid",
        "--note",
        "raw text is fine",
        "--actor",
        "carol",
    )
    assert result.exit_code == 0, result.output
    db.rollback()
    state = db.execute(
        "SELECT analysis_state FROM geo.samples WHERE sample_id = %s", (queued[4],)
    ).fetchone()
    assert state["analysis_state"] == "pending"
    s = analyse_run(db, "r-review")
    assert (s.analysed, s.accepted) == (1, 1)


def test_errors_are_messages_not_tracebacks(queued):
    wrong = run_cli(
        "review", "resolve", queued[2], "--verdict", "failed", "--note", "x", "--actor", "a"
    )
    assert wrong.exit_code == 1
    assert (
        "is not waiting for an analysis review" in wrong.output and "Traceback" not in wrong.output
    )
    missing = run_cli("review", "resolve", "s" + "0" * 24, "--verdict", "valid", "--note", "x")
    assert missing.exit_code == 1 and "no sample with id" in missing.output
    bad = run_cli("review", "resolve", queued[0], "--verdict", "maybe", "--note", "x")
    assert bad.exit_code == 2
