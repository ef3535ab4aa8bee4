"""The HTML report in a real browser (R7, R19): numbers visible, sanitised answer rendered,
hostile text inert, reasons shown. Screenshot saved under test-artifacts/."""

from __future__ import annotations

import pytest

from geo_pipeline.ops import export, report
from geo_pipeline_tests.ops.conftest import ARTIFACTS
from geo_pipeline_tests.ops.helpers import complete, fail, make_run

pytestmark = pytest.mark.browser

EVIL = "<img src=x onerror=\"document.title='pwned'\">"


def test_html_report_renders_in_chromium_without_running_hostile_content(
    db, tmp_path, browser_page
):
    samples = make_run(db)
    complete(db, samples[0], html="<p>瑞幸咖啡 <strong id='ok'>first</strong></p>", raw=EVIL)
    complete(db, samples[1], evidence="partial", reason="SCREENSHOT_UNAVAILABLE", html=EVIL)
    fail(db, samples[2], "PERMISSION_DENIED")
    db.execute(
        "INSERT INTO geo.citations (sample_id, revision, ordinal, relation, raw_url, "
        "normalized_url, title) VALUES (%s, 1, 0, 'cited', 'javascript:alert(1)', "
        "'javascript:alert(1)', %s)",
        (samples[0]["sample_id"], EVIL),
    )
    db.commit()
    page_file = tmp_path / "report.html"
    page_file.write_text(export.to_html(report.build_report(db, "run-ops")), encoding="utf-8")

    page = browser_page
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(page_file.as_uri())
    page.screenshot(path=str(ARTIFACTS / "report.png"), full_page=True)

    assert page.inner_text("#run-id") == "run-ops"
    assert page.inner_text("#overall").startswith("in_progress: ")  # with its reason
    cells = page.locator("#status-table tr").nth(1).locator("td").all_inner_texts()
    assert cells[:3] == ["8", "2", "1"]
    assert page.locator(".answer strong#ok").inner_text() == "first"  # sanitised HTML rendered
    assert "Evidence missing: SCREENSHOT_UNAVAILABLE" in page.inner_text("body")
    assert "Evidence missing: PERMISSION_DENIED" in page.inner_text("body")
    # The stored "sanitised" HTML of samples[1] is rendered as stored (sanitising is the
    # evidence layer's job, R19); the citation title is text, and its javascript: link is inert.
    assert page.locator("ol.citations a").get_attribute("href") == "#"
    assert EVIL in page.locator("ol.citations").inner_text()
    assert page.title() != "pwned" and dialogs == []


def test_html_report_charts_mention_rates_with_interval_bars(db, tmp_path, browser_page):
    samples = make_run(db, run_id="run-chart")
    for i, s in enumerate(samples):
        text = "瑞幸咖啡 and Starbucks" if i % 2 else "Only 瑞幸咖啡 here"
        complete(db, s, html=f"<p>{text}</p>", raw=text)
    from geo_pipeline.analysis import analyse_run

    analyse_run(db, "run-chart")
    db.commit()
    page_file = tmp_path / "report.html"
    page_file.write_text(export.to_html(report.build_report(db, "run-chart")), encoding="utf-8")

    page = browser_page
    page.goto(page_file.as_uri())
    page.screenshot(path=str(ARTIFACTS / "report-chart.png"), full_page=True)
    chart = page.locator("#mention-chart svg")
    # One bar per (channel, brand) with a rate, each with its interval whisker, under the
    # report's strict CSP (no script, no external resource).
    bars = chart.locator("rect title").all_text_contents()
    assert len(bars) == 4, bars
    assert any("瑞幸咖啡 on deepseek__web: 100" in b for b in bars), bars
    assert chart.locator("path").count() >= 4


def test_html_report_mention_rates_read_as_people_write_them(db, tmp_path, browser_page):
    """The HTML report is for people: labels, not column names; a rate as "80 % (58–92 %,
    n = 20)" saying which interval it is; the target brand marked; numbers right-aligned;
    internals (is_target, raw bounds) out of sight. The chart stays, and JSON/CSV keep the
    machine columns."""
    import csv
    import io
    import json
    import re

    from geo_pipeline.analysis import analyse_run

    samples = make_run(db, run_id="run-read")
    for i, s in enumerate(samples):
        text = "瑞幸咖啡 and Starbucks" if i % 2 else "Only 瑞幸咖啡 here"
        complete(db, s, html=f"<p>{text}</p>", raw=text)
    analyse_run(db, "run-read")
    db.commit()
    rep = report.build_report(db, "run-read")
    page_file = tmp_path / "report.html"
    page_file.write_text(export.to_html(rep), encoding="utf-8")

    page = browser_page
    page.goto(page_file.as_uri())
    page.locator("#mention-table").scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "report-readable.png"), full_page=True)

    table = page.locator("#mention-table")
    text = table.inner_text()
    for raw in ("mention_rate_lower", "mention_rate_upper", "mention_rate_interval", "is_target",
                "mention_rate", "n_effective", "valid_samples", "True", "False"):  # fmt: skip
        assert raw not in text, (raw, text)
    headers = table.locator("th").all_inner_texts()
    assert "Brand" in headers and "Channel" in headers, headers
    assert any(h.startswith("Mention rate") for h in headers), headers
    # Every rate written with its interval and its n, and the interval named.
    rates = table.locator("td.rate").all_inner_texts()
    assert rates and all(re.fullmatch(r"\d+ % \(\d+–\d+ %, n = \d+\)", r) for r in rates), rates
    assert sum(r.startswith("100 % (") for r in rates) == 2, rates  # the target, both channels
    kinds = set(table.locator("td.interval-kind").all_inner_texts())
    assert kinds and all(
        k.startswith("question-clustered, ") or k == "Wilson, 1 question" for k in kinds
    ), kinds
    # The target brand: marked with a badge and in bold; competitors are not.
    target_rows = table.locator("tr.target")
    assert target_rows.count() == 2  # one per channel
    assert target_rows.first.locator(".badge").inner_text() == "target"
    assert "瑞幸咖啡" in target_rows.first.inner_text()
    weight = target_rows.first.locator("td.brand").evaluate("e => getComputedStyle(e).fontWeight")
    assert int(weight) >= 600
    assert table.locator("tr.competitor .badge").count() == 0
    # Numbers right-aligned (a class and the stylesheet, allowed by the CSP).
    aligns = table.locator("td.num").evaluate_all(
        "es => es.map(e => getComputedStyle(e).textAlign)"
    )
    assert aligns and set(aligns) == {"right"}, aligns
    # The chart stays.
    assert page.locator("#mention-chart svg rect title").count() == 4

    # Only HTML is for people: JSON and CSV keep the machine columns.
    rows = json.loads(export.to_json(rep))["mention_rates"]
    assert {"is_target", "mention_rate_lower", "mention_rate_upper", "mention_rate"} <= set(rows[0])
    header = next(csv.reader(io.StringIO(export.to_csv(rep))))
    assert header == list(export.CSV_COLUMNS)


def test_html_report_charts_the_trend_with_flagged_changes_marked(db, tmp_path, browser_page):
    """A monitor's second day: the trend charts render under the strict CSP (no violation in
    the console), the flagged change carries its red ring and the legend explains it, and the
    caption states the q of the false discovery rate. Screenshot: report-trend.png."""
    from datetime import date

    from geo_pipeline_tests.ops.test_report_export import monitored_days

    steady = lambda q: "推荐瑞幸。" if q == 0 else "推荐星巴克。"  # noqa: E731
    monitored_days(db, {
        date(2026, 11, 1): {"kimi__web": lambda q: "推荐星巴克。", "deepseek__web": steady},
        date(2026, 11, 2): {"kimi__web": lambda q: "推荐瑞幸。", "deepseek__web": steady},
    })  # fmt: skip
    page_file = tmp_path / "report.html"
    page_file.write_text(
        export.to_html(report.build_report(db, "r-trend-20261102")), encoding="utf-8"
    )

    page = browser_page
    console: list[str] = []
    page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
    page.goto(page_file.as_uri())
    page.locator("#trend-chart").scroll_into_view_if_needed()
    page.locator("#trend-chart").screenshot(path=str(ARTIFACTS / "report-trend.png"))
    page.screenshot(path=str(ARTIFACTS / "report-trend-page.png"), full_page=True)

    charts = page.locator("#trend-chart svg")
    assert charts.count() == 2
    kimi = page.locator('#trend-chart [data-channel="kimi__web"] svg')
    assert kimi.is_visible() and kimi.bounding_box()["height"] > 200  # type: ignore[index]
    rings = kimi.locator("circle.flag-day-over-day:not(.legend)")
    assert rings.count() == 2  # Luckin and Starbucks, day 2
    assert all(t.endswith("2026-11-02: change vs the previous day flagged")
               for t in rings.locator("title").all_text_contents())  # fmt: skip
    deepseek = page.locator('#trend-chart [data-channel="deepseek__web"] svg')
    assert deepseek.locator(".flag-day-over-day:not(.legend)").count() == 0
    assert rings.first.is_visible()
    assert "change vs the previous day" in kimi.text_content()  # type: ignore[operator]
    assert page.inner_text("#trend-q") == "q = 0.05"
    assert not [m for m in console if "Content Security Policy" in m or m.startswith("error")], (
        console
    )
