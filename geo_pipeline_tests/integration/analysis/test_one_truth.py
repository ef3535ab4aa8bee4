"""One truth for every number (issue #34): one run -- a channel pooling three questions, an
invalid answer, a missing required screenshot, a usage-cost reconciliation line beside an
unexplained one -- and every place a person or a machine reads it (the terminal report, the HTML
report, the JSON export, the analyst table, the Dagster asset metadata, the R26 gauge, the
blocking check and the alert) shows the same value for each quantity: rate, interval bounds, n,
interval method, status with its reason, invalid answers, the quote and the difference."""

from __future__ import annotations

import json

from geo_pipeline.analysis import analyse_run
from geo_pipeline.billing import reconcile
from geo_pipeline.cli.ops import _rate
from geo_pipeline.defs.analysis.metadata import (
    brand_metadata_keys,
    rate_plots,
    visibility_table_metadata,
)
from geo_pipeline.defs.billing import checks
from geo_pipeline.defs.operations.alerts import AlertThresholds, database_incidents
from geo_pipeline.domain.words import status_text
from geo_pipeline.ops import export, report
from geo_pipeline.store import business_gauges
from geo_pipeline.store import status as statusmod
from geo_pipeline.store.queries import fetch_all
from geo_pipeline_tests.integration.analysis.helpers import make_run, store_answer

LUCKIN = "瑞幸咖啡"
QUESTIONS = ["哪个咖啡品牌最好？", "上班族早上买咖啡推荐哪个品牌？", "性价比最高的咖啡？"]
HITS = [3, 1, 2]  # of 3 answers per question, how many name Luckin


def test_every_view_of_one_run_shows_the_same_numbers(db):
    samples = make_run(
        db,
        "r-one",
        questions=QUESTIONS,
        channels=[{"platform": "kimi", "device": "web"}],
        repeats=3,
    )
    for s in samples:
        sid, q, rep_i = s["sample_id"], s["question_index"], s["repeat_index"]
        if (q, rep_i) == (2, 2):
            store_answer(db, sid, "请先登录", validity="invalid", reason="login_page")
        elif (q, rep_i) == (1, 2):
            store_answer(db, sid, "推荐星巴克。", evidence="partial")
            db.execute(
                "UPDATE geo.samples SET evidence_reason = 'SCREENSHOT_UNAVAILABLE'"
                " WHERE sample_id = %s",
                (sid,),
            )
        else:
            store_answer(db, sid, "推荐瑞幸。" if rep_i < HITS[q] else "推荐星巴克。")
    db.commit()
    analyse_run(db, "r-one")
    db.execute(
        "INSERT INTO geo.reconciliation_lines (run_id, upstream_id, platform, classification,"
        " ours_minor, theirs_minor, currency, fee_class) VALUES"
        " ('r-one', 'u-usage', 'kimi', 'usage_cost', 1, 3, 'CNY', 'completed'),"
        " ('r-one', 'u-mismatch', 'kimi', 'amount_mismatch', 10, 24, 'CNY', 'completed')"
    )
    db.commit()

    rep = report.build_report(db, "r-one")
    exported = json.loads(export.to_json(rep))
    html = export.to_html(rep)

    # ---- the rate, its interval, n and the interval's method
    table = {
        r["brand"]: r
        for r in db.execute(
            "SELECT * FROM analytics.channel_brand_metrics WHERE run_id = 'r-one'"
        ).fetchall()
    }
    view = table[LUCKIN]
    assert view["questions"] == 3 and view["mention_rate_interval"] == (
        "question-clustered, 3 questions"
    )
    terminal = next(r for r in rep.mention_rates if r["brand"] == LUCKIN)
    as_json = next(r for r in exported["mention_rates"] if r["brand"] == LUCKIN)
    dagster_rows = fetch_all(
        db, "dagster.channel_visibility", {"run_id": "r-one", "channel": "kimi__web"}
    )
    plots = rate_plots(dagster_rows)
    key = brand_metadata_keys(r["brand"] for r in dagster_rows)[LUCKIN]
    typed = next(
        r.data for r in visibility_table_metadata(dagster_rows).records if r.data["brand"] == LUCKIN
    )
    # The reports carry the view's bounds unrounded and round once, to a whole percent, where a
    # person reads them: rounded to 3 decimals first, 0.625045 read "62 %" (sixth read).
    lower, upper = view["mention_rate_lower"], view["mention_rate_upper"]
    assert (float(terminal["mention_rate_lower"]), float(terminal["mention_rate_upper"])) == (
        lower,
        upper,
    )
    assert (as_json["mention_rate_lower"], as_json["mention_rate_upper"]) == (lower, upper)
    lo4, hi4 = round(view["mention_rate_lower"], 4), round(view["mention_rate_upper"], 4)
    got = (plots[f"mention_rate_lower/{key}"].value, plots[f"mention_rate_upper/{key}"].value)
    assert got == (lo4, hi4)  # the Dagster Plots keep 4 decimals, the reports every digit
    assert (typed["lower_95"], typed["upper_95"]) == (lo4, hi4)
    # one rate format in the terminal, the HTML table and the chart (F10)
    pct = lambda v: f"{v * 100:.0f}"  # noqa: E731
    assert _rate(terminal) == (
        f"{pct(view['mention_rate'])} % ({pct(lower)}–{pct(upper)} %, n = {view['n']})"
    )
    row = export.mention_row(terminal)
    assert row["rate"] in html and row["interval_kind"] == view["mention_rate_interval"]
    assert view["n"] == terminal["n"] == as_json["n"] == typed["n"] == 8  # the invalid one out
    assert (
        terminal["mention_rate_interval"] == as_json["mention_rate_interval"] == typed["interval"]
    )
    assert float(terminal["n_effective"]) == round(view["n_effective"], 1)

    # ---- status with its reason, invalid answers with theirs
    channels = {
        ch: statusmod.partition_status(db, "r-one", ch).as_dict()
        for ch in statusmod.channels_of_run(db, "r-one")
    }
    words = status_text(statusmod.run_status(db, "r-one").as_dict(), channels)  # = runs show
    assert words == (
        "partial: 1 required screenshot missing on kimi__web; "
        "1 answer invalid (login_page) on kimi__web, in no rate"
    )
    assert rep.status["text"] == exported["status"]["text"] == words and words in html
    assert rep.status["invalid_answers"] == exported["status"]["invalid_answers"]
    assert rep.status["invalid_answers"] == {"login_page": 1} and "login_page x1" in html
    assert view["invalid_samples"] == 1

    # ---- the quote and the difference
    quoted = db.execute(
        "SELECT q.estimated_max_minor FROM geo.runs r JOIN geo.quote_snapshots q"
        " USING (quote_id) WHERE r.run_id = 'r-one'"
    ).fetchone()["estimated_max_minor"]
    assert rep.money["quoted_max_minor"] == exported["money"]["quoted_max_minor"] == quoted
    summary = reconcile.stored_summary(db, "r-one")
    check = checks.zero_unexplained(db, "r-one")
    gauge = business_gauges.refresh(db)["reconciliation"]["CNY"]
    alert = database_incidents(db, AlertThresholds())["reconciliation:r-one:CNY"]
    assert summary.unexplained_difference_minor == 14 and summary.explained_difference_minor == 2
    assert check.metadata["unexplained_difference_minor"].value == 14 and not check.passed
    assert gauge == 14
    assert alert.details["difference (theirs - ours, minor units)"] == 14
    assert rep.money["reconciliation_unexplained_minor"] == 14
    assert exported["money"]["reconciliation_unexplained_minor"] == 14
    assert rep.money["reconciliation_explained_minor"] == 2
    said = "unexplained difference: the platforms billed 0.14 CNY more than we charged"
    assert said in rep.money["reconciliation_words"] and said in html
