"""``runs export``: a run's report as JSON, CSV or HTML (R7).

Everything comes from :func:`geo_pipeline.ops.report.build_report`, i.e. the one aggregation
service plus the analyst views, so an export can never disagree with ``runs show``.
The HTML page renders only the sanitised answer (R19); every other value is escaped by Jinja's
autoescape. A citation is a live link only when it is http(s): an engine's answer can cite
``javascript:``, ``data:`` or ``file:///etc/passwd`` as easily as a web page. The report's own
evidence links may also be ``file://`` (a local evidence directory, see
``report.local_link_for``). The CSV never starts a cell with a formula character (OWASP CSV
injection): a spreadsheet would run ``=HYPERLINK(...)`` from a question or an engine's answer.
"""

from __future__ import annotations

import csv
import io
import json
import re
from datetime import datetime
from typing import Any

import jinja2
import markupsafe

from geo_pipeline.analysis import ui_api
from geo_pipeline.analysis.charts import rate_bars_svg
from geo_pipeline.domain.vocabulary import EXPORT_FORMATS
from geo_pipeline.domain.words import (
    ACCESS_UNKNOWN,
    INDEX_NOTE,
    PENDING_SCREENSHOT_NOTE,
    access_text,
    channel_label,
    channel_status_said,
    definitions_text,
    evidence_reason_text,
    evidence_words_text,
    modes_text,
    money_exact_text,
    money_text,
    no_screenshots_text,
    percent_text,
    reconciliation_rows,
    status_text,
    status_words_text,
)
from geo_pipeline.domain.words import rate_text as words_rate_text
from geo_pipeline.jsonable import json_default
from geo_pipeline.ops.report import RunReport, channel_modes, trend_section

FORMATS = EXPORT_FORMATS

# One row per sample; the columns an analyst filters on first, then states and evidence.
CSV_COLUMNS = (
    "run_id",
    "sample_id",
    "question_index",
    "question",
    "channel",
    "access",
    "platform",
    "device",
    "region",
    "mode",
    "repeat_index",
    "submission_state",
    "collection_state",
    # THE evidence word (domain.words.evidence_status), the one the counts use: a late
    # screenshot is "pending". The stored geo.samples.evidence_state (which says "partial" for
    # it) is not a column of its own: one quantity, one column (issue #34).
    "evidence_status",
    "analysis_state",
    "analysis_label",
    "evidence_missing_reason",
    "collection_reason",
    "attempt_no",
    "upstream_id",
    "answer_revision",
    "validity",
    "validity_reason",
    # What the answer mentions, as the rates count it (analytics.sample_brand_facts): the target
    # brand (true/false; empty while not known: analysing, invalid) and the competitors named,
    # "; "-separated in order of first mention. A rate traced to its answers.
    "brand_mentioned",
    "competitors_mentioned",
    # Sources apart, as the analyst views keep them (geo.citations.relation): cited = the answer
    # points at it; retrieved = the engine read it without citing it. One name, one meaning.
    "cited_count",
    "retrieved_count",
    "citation_urls",
    # The fan-out of the answer (issue 31): whether the engine searched, and its queries.
    "web_search_used",
    "search_queries",
    "screenshot_key",
    "thumbnail_key",
)

_WEB_SCHEMES = ("http://", "https://")
# Links the report makes to evidence it stored itself: a local evidence directory is file://.
_EVIDENCE_SCHEMES = (*_WEB_SCHEMES, "file://")


def safe_url(value: Any) -> str:
    """A citation's URL if it is http(s), else an inert '#' (the URL is still shown as text)."""
    text = "" if value is None else str(value).strip()
    return text if text.lower().startswith(_WEB_SCHEMES) else "#"


def evidence_url(value: Any) -> str:
    """A link to the report's own stored evidence: http(s), or file:// for a local directory."""
    text = "" if value is None else str(value).strip()
    return text if text.lower().startswith(_EVIDENCE_SCHEMES) else "#"


# OWASP "CSV injection": a cell starting with one of these is a formula to Excel, LibreOffice or
# Google Sheets; a leading apostrophe makes it text (shown without the apostrophe).
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: Any) -> Any:
    """A value as a CSV cell: text that a spreadsheet would read as a formula is prefixed with a
    single quote; numbers stay numbers (a negative amount is not text a person wrote)."""
    if value is None:
        return ""
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


def to_json(report: RunReport) -> str:
    return json.dumps(report.as_dict(), default=json_default, ensure_ascii=False, indent=2)


def csv_rows(report: RunReport) -> list[dict[str, Any]]:
    rows = []
    for s in report.samples:
        d = s.as_dict()
        d["run_id"] = report.run["run_id"]
        d["access"] = report.channels.get(str(d["channel"]), {}).get("access")
        d["search_queries"] = " | ".join(d.get("search_queries") or [])
        d["cited_count"] = sum(1 for c in s.citations if c.get("relation") == "cited")
        d["retrieved_count"] = sum(1 for c in s.citations if c.get("relation") == "retrieved")
        d["citation_urls"] = " ".join(c["normalized_url"] for c in s.citations)
        d["competitors_mentioned"] = "; ".join(d.get("competitors_mentioned") or [])
        d["screenshot_key"] = s.screenshot["storage_key"] if s.screenshot else None
        d["thumbnail_key"] = s.thumbnail["storage_key"] if s.thumbnail else None
        rows.append({k: d.get(k) for k in CSV_COLUMNS})
    return rows


def to_csv(report: RunReport) -> str:
    buf = io.StringIO()
    # RFC 4180 line ends: with "\n" alone, a value holding "\r" went out unquoted and split the row.
    writer = csv.DictWriter(buf, fieldnames=list(CSV_COLUMNS), lineterminator="\r\n")
    writer.writeheader()
    for row in csv_rows(report):
        writer.writerow({k: csv_cell(v) for k, v in row.items()})
    return buf.getvalue()


def when(value: Any) -> str:
    """A moment as the page writes every moment: ISO 8601 to the second (one format)."""
    if isinstance(value, datetime):
        return value.isoformat(timespec="seconds")
    return "" if value is None else str(value)


# A cell that reads as a number: a count, a share, an amount with its currency, a rate with its
# interval ("80 % (58–92 %, n = 20)"), x of n ("3/4 (75 %)"), with the minus of human text or a
# plus.
_NUMERIC = re.compile(r"^[\u2212+-]?[0-9][0-9.,]*(/[0-9][0-9,]*)?( ?%| [A-Z]{3})?( [(/].*)?$")


def numeric_cell(value: Any) -> bool:
    """Whether a table cell is a number (right-aligned in every table of the page)."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int | float):
        return True
    return bool(_NUMERIC.match(str(value or "").strip()))


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("geo_pipeline.ops", "templates"),
        autoescape=True,  # everything is escaped unless a template says |safe
        undefined=jinja2.StrictUndefined,
        trim_blocks=False,
    )
    env.filters["safe_url"] = safe_url
    env.filters["when"] = when
    env.filters["evidence_url"] = evidence_url
    env.filters["money"] = money_text  # major units with the currency, where a person reads
    env.filters["money_exact"] = money_exact_text  # ... with a vendor's exact amount beside it
    env.filters["evidence_reason"] = evidence_reason_text  # THE words, as the terminal says
    env.tests["numeric"] = numeric_cell  # right-aligned, as every number of the page
    return env


def mention_chart(report: RunReport) -> str:
    """Mention rate per channel and brand with its 95 % interval bars (inline SVG, text
    escaped, no script): THE interval of the analyst table (question-clustered where pooled)."""
    return rate_bars_svg(
        {
            "channel": r["channel"],
            "brand": r["brand"],
            "rate": r.get("mention_rate"),
            "lower": r.get("mention_rate_lower"),
            "upper": r.get("mention_rate_upper"),
            "n": r.get("n"),
        }
        for r in report.mention_rates
    )


# The mention table of the HTML report, for people: (label, key of mention_row, numeric).
# JSON and CSV keep the analyst table's own column names; only the HTML page uses these.
MENTION_TABLE = (
    ("Channel", "channel", False),
    ("Access", "access_kind", False),
    ("Brand", "brand", False),
    ("Mention rate (95 % interval, n)", "rate", True),
    ("Interval", "interval_kind", False),
    ("Effective n", "n_effective", True),
    ("Mentions", "mentions", True),
    ("Samples", "samples", True),
    ("Valid answers", "valid_samples", True),
    ("Invalid answers", "invalid_samples", True),
    ("Still analysing", "analysing_samples", True),
    # a sample whose collection failed (no answer): neither analysing nor in any rate
    ("Failed samples", "failed_samples", True),
    ("In review", "review_samples", True),
    ("Average rank", "avg_rank", True),
    ("Citation rate", "citation_rate", True),
)


def percent(value: Any) -> str:
    """A share in [0, 1] as a whole percentage (no unit): 0.8 -> "80"."""
    return percent_text(value)


def rate_text(rate: Any, lower: Any, upper: Any, n: Any) -> str:
    """THE rate format (domain.words.rate_text): "80 % (58–92 %, n = 20)"."""
    return words_rate_text(rate, lower, upper, n)


def mention_row(row: dict[str, Any]) -> dict[str, Any]:
    """One row of the analyst table as the report shows it: the rate written with THE interval
    (``mention_rate_lower/upper``: question-clustered where questions are pooled), its method and
    its effective n, as the terminal report, the JSON export and the Dagster metadata show them."""
    lower, upper = row.get("mention_rate_lower"), row.get("mention_rate_upper")

    def number(key: str, digits: int = 0) -> str:
        v = row.get(key)
        return "" if v is None else f"{float(v):.{digits}f}"

    citation = row.get("citation_rate")
    return {
        "channel": row.get("channel"),
        "access_kind": row.get("access") or "",
        "brand": row.get("brand"),
        "target": bool(row.get("is_target")),
        "rate": rate_text(row.get("mention_rate"), lower, upper, row.get("n")),
        "interval_kind": row.get("mention_rate_interval") or "",
        "n_effective": number("n_effective", 1),
        **{
            k: number(k)
            for k in (
                "mentions",
                "samples",
                "valid_samples",
                "invalid_samples",
                "analysing_samples",
                "failed_samples",
                "review_samples",
            )
        },
        "avg_rank": number("avg_rank", 2),
        "citation_rate": (
            "n/a (no domains configured)"
            if row.get("domains_configured") is False
            else ""
            if citation is None
            else f"{percent(citation)} %"
        ),
    }


def to_html(report: RunReport) -> str:
    return (
        _environment()
        .get_template("report.html")
        .render(
            run=report.run,
            status=report.status,
            channels=report.channels,
            samples=report.samples,
            mention_rates=report.mention_rates,
            mention_rates_source=report.mention_rates_source,
            mention_table=MENTION_TABLE,
            definitions=definitions_text(),
            pending_note=PENDING_SCREENSHOT_NOTE,
            evidence_words=evidence_words_text(report.status["evidence"]),
            status_words=status_words_text(
                [str(report.status["overall"])]
                + [str(c["overall"]) for c in report.channels.values()]
            ),
            modes_words=modes_text(channel_modes(report.samples)),
            index_note=INDEX_NOTE,
            access_note=access_text(),
            channel_labels=[
                channel_label(ch, str(c.get("access", ACCESS_UNKNOWN)))
                for ch, c in report.channels.items()
            ],
            channel_status={
                ch: status_text(c) for ch, c in report.channels.items() if channel_status_said(c)
            },
            reconciliation_display=reconciliation_rows(
                report.money.get("reconciliation") or [], str(report.money["currency"]).strip()
            ),
            no_screenshots=no_screenshots_text(report.channels_without_screenshots)
            if report.channels_without_screenshots
            else "",
            trend_note=report.trend_note,
            mention_rows=[mention_row(r) for r in report.mention_rates],
            mention_chart=markupsafe.Markup(mention_chart(report)) if report.mention_rates else "",
            money=report.money,
            retention=report.retention,
            trend=trend_section(report),
            ui_api_heading=ui_api.section_heading(
                [c.get("access") for c in report.channels.values()]
            ),
            ui_api_titles=ui_api.SECTION_TITLES,
            ui_api_notes=ui_api.SECTION_NOTES,
            ui_api_rows=ui_api.display_rows(report.ui_api)
            if report.ui_api
            else {k: [] for k in ui_api.SECTION_TITLES},
            generated_at=when(report.generated_at),
        )
    )


def render(report: RunReport, fmt: str) -> str:
    if fmt == "json":
        return to_json(report)
    if fmt == "csv":
        return to_csv(report)
    if fmt == "html":
        return to_html(report)
    raise ValueError(f"unknown export format {fmt!r}; choose one of {', '.join(FORMATS)}")
