"""Exports of hostile content (R19): a CSV cell never starts a spreadsheet formula, and the HTML
report makes only http(s) citations live links. Built from a report value, no database."""

from __future__ import annotations

import csv
import io
import re
from datetime import UTC, datetime

import pytest

from geo_pipeline.domain.words import QUOTE_NOTE
from geo_pipeline.ops import export
from geo_pipeline.ops.report import RunReport, SampleReport

STATUS = {
    "overall": "complete",
    "access": "api",
    "analysing": False,
    "total": 1,
    "collection": {"completed": 1},
    "evidence": {"stored": 1},
    "uncertain": 0,
    "evidence_reasons": {},
    "failure_reasons": {},
}


def _report(question: str, citations: list[dict], thumbnail: dict | None = None) -> RunReport:
    row = {
        "sample_id": "s1",
        "question_index": 0,
        "question": question,
        "channel": "kimi__web",
        "platform": "kimi",
        "device": "web",
        "region": "cn",
        "mode": "standard",
        "repeat_index": 0,
        "submission_state": "accepted",
        "collection_state": "completed",
        "evidence_state": "stored",
        "analysis_state": "accepted",
        "collection_reason": None,
        "evidence_reason": None,
        "attempt_no": 1,
        "upstream_id": "-u1",
        "answer_revision": 1,
        "validity": "valid",
        "validity_reason": None,
        "sanitized_html": "<p>ok</p>",
        "screenshot_policy": "optional",
    }
    sample = SampleReport(row=row, citations=citations, thumbnail=thumbnail)
    return RunReport(
        run={"run_id": "r1", "tenant_id": "acme", "created_at": "2026-12-01"},
        status=STATUS,
        channels={"kimi__web": STATUS},
        samples=[sample],
        mention_rates=[],
        mention_rates_source=None,
        money={
            "currency": "CNY",
            "quoted_max_minor": 1,
            "reserved_minor": 1,
            "charged_minor": 1,
            "released_minor": 0,
            "refunded_minor": 0,
            "display": {
                k: "0.01 CNY" for k in ("quoted_max", "reserved", "charged", "released", "refunded")
            }
            | {"unexplained": "0.00 CNY", "explained": "0.00 CNY"},
            "reconciliation_words": ["not reconciled yet"],
            "reconciliation_unexplained_minor": 0,
            "reconciliation_explained_minor": 0,
            "reconciliation_pending_ours_minor": 0,
            "reconciliation": [],
            "quote_note": QUOTE_NOTE,
        },
        generated_at=datetime(2026, 12, 1, tzinfo=UTC),
    )


def _cite(url: str, title: str = "t") -> dict:
    return {"relation": "cited", "normalized_url": url, "title": title, "registrable_domain": None}


@pytest.mark.parametrize(
    "cell",
    ['=HYPERLINK("http://evil")', "+1+cmd|' /C calc'!A0", "-2+3", "@SUM(A1)", "\t=1", "\r=1"],
)
def test_csv_cells_that_would_start_a_formula_are_quoted_with_an_apostrophe(cell):
    rows = list(
        csv.DictReader(io.StringIO(export.to_csv(_report(cell, [_cite("https://a.example/")]))))
    )
    (row,) = rows
    assert row["question"] == "'" + cell
    assert row["upstream_id"] == "'-u1"
    assert row["question_index"] == "0" and row["attempt_no"] == "1"  # numbers stay numbers


def test_csv_leaves_ordinary_text_alone():
    (row,) = csv.DictReader(io.StringIO(export.to_csv(_report("Best coffee? a=b", []))))
    assert (
        row["question"] == "Best coffee? a=b"
        and row["cited_count"] == "0"
        and row["retrieved_count"] == "0"
    )


def test_only_http_and_https_citations_are_live_links():
    page = export.to_html(
        _report(
            "q",
            [
                _cite("file:///etc/passwd", "local"),
                _cite("FILE:///C:/secret", "local2"),
                _cite("javascript:alert(1)", "js"),
                _cite("data:text/html,<b>x</b>", "data"),
                _cite("ftp://a.example/x", "ftp"),
                _cite("https://a.example/x", "good"),
                _cite("http://b.example/y", "good2"),
            ],
        )
    )
    hrefs = re.findall(r'<a href="([^"]*)"', page)
    assert hrefs == ["#", "#", "#", "#", "#", "https://a.example/x", "http://b.example/y"]
    assert "file:///etc/passwd" in page  # still shown to the reader, as text


def test_the_reports_own_local_evidence_links_stay_live():
    thumb = {"link": "file:///tmp/evidence/acme/r1/s1/1/thumbnail.png", "storage_key": "k"}
    page = export.to_html(_report("q", [], thumbnail=thumb))
    assert 'src="file:///tmp/evidence/acme/r1/s1/1/thumbnail.png"' in page
