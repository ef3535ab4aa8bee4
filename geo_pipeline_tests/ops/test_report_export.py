"""Run reports and ``runs export`` (R7, R19, R6) on a real database."""

from __future__ import annotations

import csv
import io
import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from datetime import date

from geo_pipeline.ops import export, report
from geo_pipeline.store import status
from geo_pipeline_tests.ops.helpers import add_evidence, complete, fail, make_run
from geo_pipeline_tests.processes import outcome

EVIL = '<img src=x onerror="alert(1)">'


def _scenario(db, tmp_path):
    samples = make_run(db)
    deep = [s for s in samples if s["platform"] == "deepseek"]
    kimi = [s for s in samples if s["platform"] == "kimi"]
    complete(db, deep[0], html="<p>瑞幸咖啡 is <strong>cheap</strong></p>", raw="raw " + EVIL)
    complete(db, deep[1], evidence="partial", reason="SCREENSHOT_UNAVAILABLE")
    complete(db, kimi[0])
    fail(db, kimi[1], "INVALID_PARAMS")
    db.execute(
        "INSERT INTO geo.citations (sample_id, revision, ordinal, relation, raw_url, "
        "normalized_url, registrable_domain, title) VALUES "
        "(%s, 1, 0, 'cited', 'https://a.example/x?utm_source=y', 'https://a.example/x', "
        "'a.example', %s), (%s, 1, 1, 'cited', 'javascript:alert(2)', 'javascript:alert(2)', "
        "null, 'bad')",
        (deep[0]["sample_id"], EVIL, deep[0]["sample_id"]),
    )
    evidence_dir = tmp_path / "evidence"
    key = f"acme/run-ops/{deep[0]['sample_id']}/1/thumbnail.png"
    (evidence_dir / key).parent.mkdir(parents=True)
    (evidence_dir / key).write_bytes(b"png")
    add_evidence(db, deep[0], "thumbnail", key, b"png")
    add_evidence(db, deep[0], "screenshot", key.replace("thumbnail", "screenshot"), b"PNG")
    db.commit()
    return samples, deep, kimi, evidence_dir


def test_report_counts_come_from_the_aggregation_service(db, tmp_path):
    samples, deep, kimi, _ = _scenario(db, tmp_path)
    rep = report.build_report(db, "run-ops")
    # the status in words, derived from the same counts (and the invalid answers of the samples)
    words = {"text", "invalid_answers", "invalid_in_review", "invalid_text"}
    assert {k: v for k, v in rep.status.items() if k not in words} == status.run_status(
        db, "run-ops"
    ).as_dict()
    # with its reason, per channel (issue #34)
    assert rep.status["text"].startswith("in_progress: ")
    assert "1 required screenshot missing on deepseek__" in rep.status["text"], rep.status["text"]
    assert rep.status["total"] == len(samples) == 8
    assert rep.status["collection"] == {"completed": 3, "failed": 1, "queued": 4}
    # the failed sample's evidence is failed for its collection's reason (issue #34)
    assert rep.status["evidence_reasons"] == {"SCREENSHOT_UNAVAILABLE": 1, "INVALID_PARAMS": 1}
    by_id = {s.row["sample_id"]: s for s in rep.samples}
    assert by_id[deep[1]["sample_id"]].evidence_missing_reason == "SCREENSHOT_UNAVAILABLE"
    assert by_id[kimi[1]["sample_id"]].evidence_missing_reason == "INVALID_PARAMS"
    # R6: answered but not analysed yet is "analysing", never "not mentioned".
    assert by_id[deep[0]["sample_id"]].analysis_label == "analysing"
    assert by_id[kimi[2]["sample_id"]].analysis_label == "-"
    assert rep.money["quoted_max_minor"] > 0 and rep.money["charged_minor"] == 0
    assert rep.mention_rates_source is None or rep.mention_rates_source.startswith("analytics.")


def test_html_shows_sanitised_answer_escapes_the_rest_and_gives_reasons(db, tmp_path):
    _, _, _, evidence_dir = _scenario(db, tmp_path)
    rep = report.build_report(db, "run-ops", link_for=report.local_link_for(str(evidence_dir)))
    page = export.to_html(rep)
    assert "<p>瑞幸咖啡 is <strong>cheap</strong></p>" in page  # the sanitised HTML, rendered
    assert "raw <img" not in page and 'onerror="alert(1)"' not in page  # raw never, title escaped
    assert "&lt;img src=x onerror=&#34;alert(1)&#34;&gt;" in page
    assert 'href="javascript:' not in page and 'href="#"' in page
    assert "Evidence missing: SCREENSHOT_UNAVAILABLE" in page
    assert "Evidence missing: INVALID_PARAMS" in page
    assert (evidence_dir / "acme").as_uri() in page  # the thumbnail links to the local file


def test_csv_and_json_have_one_row_per_sample(db, tmp_path):
    samples, deep, _, _ = _scenario(db, tmp_path)
    rep = report.build_report(db, "run-ops")
    rows = list(csv.DictReader(io.StringIO(export.to_csv(rep))))
    assert len(rows) == len(samples)
    row = next(r for r in rows if r["sample_id"] == deep[0]["sample_id"])
    assert (
        row["cited_count"] == "2"
        and row["retrieved_count"] == "0"
        and row["thumbnail_key"].endswith("thumbnail.png")
    )
    data = json.loads(export.to_json(rep))
    assert data["status"]["total"] == 8 and len(data["samples"]) == 8
    assert all("raw_text" not in s for s in data["samples"])


def test_cli_export_writes_each_format_and_refuses_unknown_runs(db, db_url, tmp_path):
    _scenario(db, tmp_path)
    env = {"GEO_DATABASE_URL": db_url, "PATH": "/usr/bin:/bin"}
    for fmt in export.FORMATS:
        out = tmp_path / f"r.{fmt}"
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "geo_pipeline.cli.main",
                "runs",
                "export",
                "run-ops",
                "--format",
                fmt,
                "--out",
                str(out),
                "--json",
            ],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        assert proc.returncode == 0, outcome(proc)
        assert json.loads(proc.stdout)["samples"] == 8 and out.stat().st_size > 100
    proc = subprocess.run(
        [sys.executable, "-m", "geo_pipeline.cli.main", "runs", "export", "nope"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert proc.returncode != 0 and "no run with id 'nope'" in proc.stderr, outcome(proc)
    assert "Traceback" not in proc.stderr, outcome(proc)


# --------------------------------------------------------------------------- the trend over days
SVG = "{http://www.w3.org/2000/svg}"
TREND_QUESTIONS = ["哪个咖啡品牌最好？", "上班族早上买咖啡推荐哪个品牌？", "性价比最高的咖啡？"]


def monitored_days(db, answers_by_day):
    """A monitor's runs, one a day, on kimi and deepseek (3 questions x 4 repeats), analysed;
    ``answers_by_day``: day -> channel -> question index -> the answer. Returns the run ids."""
    from geo_pipeline.analysis import analyse_run
    from geo_pipeline_tests.integration.analysis.helpers import make_run as make_monitor_run
    from geo_pipeline_tests.integration.analysis.helpers import store_answer

    db.execute("INSERT INTO geo.tenants (tenant_id, name) VALUES ('acme', 'acme') "
               "ON CONFLICT DO NOTHING")  # fmt: skip
    run_ids = []
    for day, by_channel in answers_by_day.items():
        run_id = f"r-trend-{day:%Y%m%d}"
        samples = make_monitor_run(
            db, run_id, questions=TREND_QUESTIONS, repeats=4, monitor="m-trend",
            scheduled_for=day,
            channels=[{"platform": "kimi", "device": "web"},
                      {"platform": "deepseek", "device": "web"}],
        )  # fmt: skip
        for s in samples:
            store_answer(db, s["sample_id"], by_channel[s["channel"]](s["question_index"]))
        analyse_run(db, run_id)
        db.commit()
        run_ids.append(run_id)
    return run_ids


def trend_svgs(html: str) -> dict[str, ET.Element]:
    """The trend charts of an HTML report by channel, parsed (well-formed SVG or it raises)."""
    figure = html.split('<figure id="trend-chart">', 1)[1].split("</figure>", 1)[0]
    return {
        channel: ET.fromstring(svg)
        for channel, svg in re.findall(
            r'<div class="trend-channel" data-channel="([^"]+)">(<svg.*?</svg>)</div>', figure, re.S
        )
    }


def test_html_report_marks_the_flagged_change_of_a_monitors_trend(db):
    """Two days of a monitor; on kimi every answer switches from Starbucks to Luckin on day 2,
    on deepseek nothing changes. The report of day 2 draws one chart per channel and marks
    exactly the (channel, brand, day) analytics.brand_changes flagged; the caption says the q."""
    day1, day2 = date(2026, 11, 1), date(2026, 11, 2)
    steady = lambda q: "推荐瑞幸。" if q == 0 else "推荐星巴克。"  # noqa: E731
    monitored_days(db, {
        day1: {"kimi__web": lambda q: "推荐星巴克。", "deepseek__web": steady},
        day2: {"kimi__web": lambda q: "推荐瑞幸。", "deepseek__web": steady},
    })  # fmt: skip
    flagged = {
        (r["channel"], r["brand"], r["scheduled_for"].isoformat())
        for r in db.execute(
            "SELECT channel, brand, scheduled_for FROM analytics.brand_changes"
            " WHERE monitor_id = 'm-trend' AND flagged"
        ).fetchall()
    }
    # The planted change is what the view flags (BH across the day's brand x channel family).
    assert flagged == {
        ("kimi__web", "瑞幸咖啡", "2026-11-02"),
        ("kimi__web", "星巴克", "2026-11-02"),
    }

    rep = report.build_report(db, "r-trend-20261102")
    assert rep.trend_fdr_q == 0.05
    assert {r["scheduled_for"] for r in rep.trends} == {day1, day2}
    html = export.to_html(rep)
    charts = trend_svgs(html)
    assert set(charts) == {"kimi__web", "deepseek__web"}
    marked = set()
    for channel, root in charts.items():
        assert root.find(f"{SVG}title") is not None and root.find(f"{SVG}desc") is not None
        for el in root.iter():
            if "flag-day-over-day" in (el.get("class") or "") and "legend" not in el.get("class"):
                brand_day = el.find(f"{SVG}title").text.split(": ")[0]  # type: ignore[union-attr]
                brand, day = brand_day.rsplit(", ", 1)
                marked.add((channel, brand, day))
    assert marked == flagged
    assert len([el for el in charts["deepseek__web"].iter() if el.get("class") == "point"]) == 6
    caption = html.split('id="trend-caption">', 1)[1].split("</figcaption>", 1)[0]
    assert "q = 0.05" in caption and "2026-11-01 to 2026-11-02, 2 days" in caption
    # The data table says the same: flagged exactly on the flagged rows.
    table = html.split('<table id="trend-table">', 1)[1].split("</table>", 1)[0]
    rows = re.findall(r"<tr><td>([^<]*)</td><td>([^<]*)</td><td>([^<]*)</td>(.*?)</tr>", table)
    assert len(rows) == 2 * 3 * 2  # channels x brands x days
    assert {(c, b, d) for c, b, d, rest in rows if '"flag-dod">flagged<' in rest} == flagged
    # JSON carries the same rows; a run outside a monitor has no trend section.
    assert len(json.loads(export.to_json(rep))["trends"]) == 12


def test_one_day_of_a_monitor_is_said_not_drawn(db):
    monitored_days(db, {date(2026, 11, 1): {"kimi__web": lambda q: "推荐瑞幸。",
                                            "deepseek__web": lambda q: "推荐星巴克。"}})  # fmt: skip
    html = export.to_html(report.build_report(db, "r-trend-20261101"))
    charts = trend_svgs(html)
    assert set(charts) == {"kimi__web", "deepseek__web"}
    for root in charts.values():
        assert "Only one day of data (2026-11-01)" in "".join(root.itertext())
        assert not [el for el in root.iter() if el.get("class") == "point"]
    assert "one day only, no trend yet" in html
    plain = export.to_html(report.build_report(db, make_run(db)[0]["run_id"]))
    assert 'id="trend-chart"' not in plain


def test_a_derived_display_is_rendered_from_the_text_and_the_raw_never_shown(db, tmp_path):
    """The worker records new answers with their display derived (sanitized_html = ''): the
    report renders the text with the worker's renderer and sanitiser, never shows it raw."""
    samples = make_run(db)
    text = "**瑞幸咖啡** is cheap " + EVIL
    complete(db, samples[0], html="", raw=text)
    rep = report.build_report(db, "run-ops")
    page = export.to_html(rep)
    assert "<strong>瑞幸咖啡</strong> is cheap" in page
    assert 'onerror="alert(1)"' not in page and "<img src=x" not in page
    row = next(s for s in rep.as_dict()["samples"] if s["sample_id"] == samples[0]["sample_id"])
    assert "display_source" not in row and "**" not in str(row)
