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
    assert page.inner_text("#overall").startswith("in_progress")
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
