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
from typing import Any

import jinja2
import markupsafe

from geo_pipeline.jsonable import json_default
from geo_pipeline.ops.charts import rate_bars_svg
from geo_pipeline.ops.report import RunReport

FORMATS = ("json", "csv", "html")

# One row per sample; the columns an analyst filters on first, then states and evidence.
CSV_COLUMNS = (
    "run_id",
    "sample_id",
    "question_index",
    "question",
    "channel",
    "platform",
    "device",
    "region",
    "mode",
    "repeat_index",
    "submission_state",
    "collection_state",
    "evidence_state",
    "analysis_state",
    "analysis_label",
    "evidence_missing_reason",
    "collection_reason",
    "attempt_no",
    "upstream_id",
    "answer_revision",
    "validity",
    "validity_reason",
    "citation_count",
    "citation_urls",
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
        d["citation_count"] = len(s.citations)
        d["citation_urls"] = " ".join(c["normalized_url"] for c in s.citations)
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


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("geo_pipeline.ops", "templates"),
        autoescape=True,  # everything is escaped unless a template says |safe
        undefined=jinja2.StrictUndefined,
        trim_blocks=False,
    )
    env.filters["safe_url"] = safe_url
    env.filters["evidence_url"] = evidence_url
    return env


def mention_chart(report: RunReport) -> str:
    """Mention rate per channel and brand with its 95 % interval bars (inline SVG, text
    escaped, no script): clustered by question where the table has it, else Wilson."""
    return rate_bars_svg(
        {
            "channel": r["channel"],
            "brand": r["brand"],
            "rate": r.get("mention_rate"),
            "lower": r.get("rate_lower_clustered")
            if r.get("rate_lower_clustered") is not None
            else r.get("rate_lower_95"),
            "upper": r.get("rate_upper_clustered")
            if r.get("rate_upper_clustered") is not None
            else r.get("rate_upper_95"),
            "n": r.get("n"),
        }
        for r in report.mention_rates
    )


def to_html(report: RunReport) -> str:
    columns: list[str] = []
    for row in report.mention_rates:
        for key in row:
            if key not in columns and key != "run_id":
                columns.append(key)
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
            mention_columns=columns,
            mention_chart=markupsafe.Markup(mention_chart(report)) if report.mention_rates else "",
            money=report.money,
            retention=report.retention,
            generated_at=report.generated_at.isoformat(timespec="seconds"),
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
