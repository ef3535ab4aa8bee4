"""One change-flag rule (issue #34): the mention-change alert fires exactly on the changes
``analytics.brand_changes`` flags (question-clustered test, Benjamini-Hochberg across the day's
brand x channel family), never on an uncorrected per-test z at 5 %; its interval is the one
analysts read in ``analytics.brand_trends``, labelled with its method."""

from __future__ import annotations

from datetime import date, timedelta

from geo_pipeline.defs.operations.alerts import AlertThresholds, database_incidents


def plant_day(db, day: date, brand: str, n: int, mentions: int, question: str = "q1") -> None:
    db.execute(
        "INSERT INTO analytics.brand_metrics (run_id, tenant_id, monitor_id, scheduled_for,"
        " channel, platform, device, region, mode, question_revision, question_index, brand,"
        " is_target, samples, valid_samples, invalid_samples, analysing_samples, review_samples,"
        " n, mentions, mention_rate, domain_cited, domain_retrieved) VALUES (%s, 'acme', 'm-alert',"
        " %s, 'deepseek__web', 'deepseek', 'web', 'cn', 'standard', %s, 0, %s, %s, %s, %s, 0, 0,"
        " 0, %s, %s, %s, 0, 0)",
        (
            f"r-{day:%Y%m%d}",
            day,
            question,
            brand,
            brand == "A",
            n,
            n,
            n,
            mentions,
            mentions / n,
        ),
    )
    # the channel's row, as the refresh writes it (one question: the same counts)
    wilson = (mentions, n, mentions, n)
    db.execute(
        "INSERT INTO analytics.channel_brand_metrics (run_id, tenant_id, monitor_id,"
        " scheduled_for, channel, platform, brand, is_target, samples, valid_samples,"
        " invalid_samples, analysing_samples, review_samples, n, mentions, mention_rate,"
        " mention_rate_lower, mention_rate_upper, domain_cited) VALUES (%s, 'acme', 'm-alert',"
        " %s, 'deepseek__web', 'deepseek', %s, %s, %s, %s, 0, 0, 0, %s, %s, %s,"
        " analytics.wilson_lower(%s, %s), analytics.wilson_upper(%s, %s), 0)",
        (f"r-{day:%Y%m%d}", day, brand, brand == "A", n, n, n, mentions, mentions / n, *wilson),
    )


def test_mention_change_alerts_are_the_bh_flagged_changes(db):
    today = db.execute("SELECT current_date AS d").fetchone()["d"]
    before = today - timedelta(days=1)
    # A: 60 % -> 35 % of 200 (p ~ 5e-7), flagged under any correction.
    # B: 50 % -> 39 % of 200: z = 2.21, p = 0.027 -- "significant" for an uncorrected z at 5 %,
    #    but with six tests that day its BH q = 6 x 0.027 / 2 = 0.08 > 0.05: not flagged.
    # C..F: no change.
    days = {"A": (120, 70), "B": (100, 78), "C": (50, 50), "D": (50, 50), "E": (90, 90)}
    days["F"] = (10, 10)
    for brand, (prev, cur) in days.items():
        plant_day(db, before, brand, 200, prev)
        plant_day(db, today, brand, 200, cur)
    # and the monitor's stored trends and changes, as refresh_analytics keeps them (0049)
    db.execute("SELECT analytics.rebuild_brand_rollup('m-alert')")
    db.commit()

    flagged = {
        (r["brand"], r["comparison"])
        for r in db.execute(
            "SELECT brand, comparison FROM analytics.brand_changes"
            " WHERE monitor_id = 'm-alert' AND scheduled_for = %s AND flagged",
            (today,),
        ).fetchall()
    }
    assert ("A", "day_over_day") in flagged and ("B", "day_over_day") not in flagged

    alerts = {
        k: a
        for k, a in database_incidents(db, AlertThresholds()).items()
        if a.kind == "mention_change"
    }
    brands = sorted({k.split(":")[3] for k in alerts})
    assert brands == ["A"], sorted(alerts)
    text = next(iter(alerts.values())).text()
    assert "60.0% to 35.0%" in text
    assert "Benjamini-Hochberg" in text and "q = " in text
    trend = db.execute(
        "SELECT mention_rate_lower, mention_rate_upper FROM analytics.brand_trends"
        " WHERE monitor_id = 'm-alert' AND brand = 'A' AND scheduled_for = %s",
        (today,),
    ).fetchone()
    # the analysts' interval, with its method named
    assert f"[{trend['mention_rate_lower']:.1%}, {trend['mention_rate_upper']:.1%}]" in text
    assert "question-clustered" in text or "Wilson" in text
