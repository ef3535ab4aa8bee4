"""The run report (R7): what a run collected, how complete its evidence is, what the brand's
mention rates are, and what it cost against its quote.

Every count of sample states comes from the one aggregation service
(:mod:`geo_pipeline.store.status`); mention rates come from the analyst views of the
``analytics`` schema (and, for a monitor's run, its trend over days with the changes flagged
after false-discovery-rate control); per-sample detail (the sanitised answer, citations, where
the screenshot and thumbnail are stored) and money come from named read-only queries. The
report never counts sample states itself, so it can never disagree with ``runs show``, the
Dagster assets or an export.

Invariants: a sample whose analysis is still pending is shown as "analysing", never as "not
mentioned" (R6); a sample whose evidence is partial or failed always carries its reason (R6, R21);
only ``geo.answers.sanitized_html`` is ever rendered, never the raw answer (R19).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import markupsafe

from geo_pipeline.analysis import ui_api
from geo_pipeline.analysis.charts import trend_charts
from geo_pipeline.analysis.trends import brand_trends, relation_exists
from geo_pipeline.billing import reconcile
from geo_pipeline.domain.billing import is_explained
from geo_pipeline.domain.words import (
    ACCESS_UNKNOWN,
    QUOTE_NOTE,
    channel_label,
    current_warnings,
    difference_text,
    evidence_status_of,
    exact_minor_text,
    explained_total_text,
    invalid_answers_text,
    money_text,
    reconciliation_rows,
    reconciliation_text,
    status_text,
    trend_note,
)
from geo_pipeline.evidence.display import fill_displays
from geo_pipeline.evidence.warc import split_record_key
from geo_pipeline.settings import settings
from geo_pipeline.store import run_platforms
from geo_pipeline.store import runs as runstore
from geo_pipeline.store import status as statusmod
from geo_pipeline.store.db import Conn
from geo_pipeline.store.queries import fetch_all

# The analyst table of mention rates per run x channel x brand (built by the analysis work).
MENTION_RATE_TABLE = "analytics.channel_brand_metrics"

# A function that turns a stored evidence object into a link a reader may follow (an authorised
# download URL, a local file URL in the demo). Without one, the report shows the storage key and
# the command that downloads it after authorisation (R20: a key is not a permission).
EVIDENCE_URL_ENV = "GEO_EVIDENCE_URL"
LinkFor = Callable[[dict[str, Any]], str | None]


@dataclass
class SampleReport:
    """One sample as a reader sees it: identity, state layers, reasons, answer, evidence."""

    row: dict[str, Any]
    citations: list[dict[str, Any]] = field(default_factory=list)
    screenshot: dict[str, Any] | None = None
    thumbnail: dict[str, Any] | None = None
    # Whether the channel's service ever gives a screenshot (registry ``screenshot``): where it
    # never does, that is said once per report, not as a warning on each answer.
    gives_screenshots: bool = True

    @property
    def evidence_missing_reason(self) -> str | None:
        """Why evidence is incomplete, or None when it is all stored (or not yet due)."""
        r = self.row
        if r["collection_state"] == "failed":
            return r["collection_reason"] or "COLLECTION_FAILED"
        if r["evidence_state"] in ("partial", "failed"):
            return r["evidence_reason"] or "UNSPECIFIED"
        return None

    @property
    def evidence_status(self) -> str:
        """THE evidence word (domain.words.evidence_status): what the status counts say."""
        return evidence_status_of(self.row)

    @property
    def analysis_label(self) -> str:
        """R6: pending analysis of an answer that exists reads "analysing", not "not mentioned"."""
        state = self.row["analysis_state"]
        if state == "pending":
            return "analysing" if self.row["evidence_state"] in ("stored", "partial") else "-"
        # an answer judged invalid reads "invalid", the word of the status and the rate tables
        # (analysis_state keeps the stored 'failed' for machines)
        return "invalid" if state == "failed" else str(state)

    @property
    def attempts_text(self) -> str:
        """ "attempts N", and for a retried sample which attempt was billed and why another was
        not: "attempts 2" beside a charging fee rule and one charge per sample read as a
        contradiction (issue #34)."""
        text = f"attempts {self.row['attempt_no']}"
        tried = list(self.row.get("attempt_billing") or [])
        if len(tried) < 2:
            return text
        parts = []
        for a in tried:
            n, charged = a["attempt_no"], a.get("charged_minor")
            why = a["outcome"] + (f", {a['error_class']}" if a.get("error_class") else "")
            if charged:
                parts.append(f"attempt {n} billed")
            elif charged is None:
                parts.append(
                    f"attempt {n} not billed (it ended {why} before the platform ran a task: "
                    "only a task the platform ran is charged)"
                )
            else:
                parts.append(f"attempt {n} free ({why}: the platform's fee rule bills nothing)")
        return f"{text}: " + "; ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.row.items()}
        out["attempts_text"] = self.attempts_text
        out["evidence_status"] = self.evidence_status
        out["evidence_missing_reason"] = self.evidence_missing_reason
        out["analysis_label"] = self.analysis_label
        # the warnings as they stand now (a screenshot that arrived is no longer pending)
        out["warnings"] = current_warnings(
            self.row.get("warnings"), self.evidence_status, self.gives_screenshots
        )
        out["citations"] = self.citations
        out["screenshot"] = self.screenshot
        out["thumbnail"] = self.thumbnail
        return out


@dataclass
class RunReport:
    run: dict[str, Any]
    status: dict[str, Any]
    channels: dict[str, dict[str, Any]]
    samples: list[SampleReport]
    mention_rates: list[dict[str, Any]]
    mention_rates_source: str | None
    money: dict[str, Any]
    generated_at: datetime
    retention: list[dict[str, Any]] = field(default_factory=list)
    # The monitor's days up to this run's (empty outside a monitor), and the false discovery
    # rate q at which analytics.brand_changes flagged their changes.
    trends: list[dict[str, Any]] = field(default_factory=list)
    trend_fdr_q: float | None = None
    # Scraped vs API apart (issue 31): fan_out_channels, fan_out, citation_gap and
    # ui_api_agreement, the rows of their analytics views (analysis/ui_api.py).
    ui_api: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    # Why there is no trend (None when there is one), and the channels whose service never gives
    # a screenshot: each said once, in the terminal, the HTML and the JSON alike.
    trend_note: str | None = None
    channels_without_screenshots: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "status": self.status,
            "channels": self.channels,
            "samples": [s.as_dict() for s in self.samples],
            "mention_rates": self.mention_rates,
            "mention_rates_source": self.mention_rates_source,
            "money": self.money,
            "generated_at": self.generated_at,
            "retention": self.retention,
            "trends": self.trends,
            "trend_fdr_q": self.trend_fdr_q,
            "trend_note": self.trend_note,
            "channels_without_screenshots": self.channels_without_screenshots,
            **self.ui_api,
        }


def local_link_for(evidence_url: str | None = None) -> LinkFor | None:
    """Links for a local evidence directory (``GEO_EVIDENCE_URL`` = ``file://DIR`` or a path):
    the reader of a local report already has the files, so a ``file://`` link authorises
    nothing new. For object storage None: the report shows keys and the download command."""
    url = evidence_url if evidence_url is not None else (settings().evidence_url or "")
    if not url or ("://" in url and not url.startswith("file://")):
        return None
    root = Path(url.removeprefix("file://")).expanduser().resolve()

    def link(obj: dict[str, Any]) -> str | None:
        path = root / str(obj["storage_key"])
        return path.as_uri() if path.is_file() else None

    return link


def mention_rates(conn: Conn, run_id: str) -> tuple[list[dict[str, Any]], str | None]:
    """Mention rates with THE 95 % interval (question-clustered where questions are pooled; its
    method and effective n beside it) per channel and brand from the analyst table, and the
    table's name so a reader knows where the numbers come from. Empty (and None) on a database
    whose analyst tables do not exist yet."""
    if not relation_exists(conn, MENTION_RATE_TABLE):
        return [], None
    rows = fetch_all(conn, "ops.report_mention_rates", {"run_id": run_id})
    for r in rows:
        for key, value in r.items():
            if isinstance(value, Decimal):
                r[key] = float(value)
    return rows, MENTION_RATE_TABLE


def _pct(value: float | None) -> str:
    return "" if value is None else f"{value * 100:.0f} %"


def trend_section(report: RunReport) -> dict[str, Any]:
    """The trend part of the HTML page: one chart per channel (inline SVG, every text escaped,
    nothing executable: ``markupsafe.Markup`` only for what ``analysis.charts`` drew), the q the
    flags were controlled at, the days covered, and the same numbers as table rows (the
    chart's accessible fallback)."""
    days = sorted({r["scheduled_for"] for r in report.trends})
    return {
        "charts": [
            (channel, markupsafe.Markup(svg))
            for channel, svg in trend_charts(report.trends, report.trend_fdr_q)
        ],
        "fdr_q": report.trend_fdr_q,
        "days": days,
        "rows": [
            {
                "channel": r["channel"],
                "brand": r["brand"],
                "day": r["scheduled_for"].isoformat(),
                "rate": _pct(r.get("mention_rate")),
                "interval": ""
                if r.get("mention_rate_lower") is None
                else f"{_pct(r['mention_rate_lower'])} – {_pct(r.get('mention_rate_upper'))}",
                "n": r.get("n"),
                "flagged_day_over_day": "flagged" if r.get("flagged_day_over_day") else "",
                "flagged_rolling_7d": "flagged" if r.get("flagged_rolling_7d") else "",
            }
            for r in report.trends
        ],
    }


def money_summary(conn: Conn, run: dict[str, Any]) -> dict[str, Any]:
    """The quote against the ledger and the reconciliation (R23, R24). Integer minor units."""
    ledger = fetch_all(conn, "ops.report_ledger", {"run_id": run["run_id"]})
    by_kind = {r["kind"]: int(r["amount_minor"]) for r in ledger}
    recon = fetch_all(conn, "ops.report_reconciliation", {"run_id": run["run_id"]})
    for r in recon:
        r["explained"] = is_explained(str(r["classification"]))
        # exact decimal minor units as text (a JSON number would turn it into a float)
        r["theirs_exact_minor"] = exact_minor_text(r.get("theirs_exact_minor", r["theirs_minor"]))
    # The same summary `billing reconcile`, the blocking check, the gauge and the alert agree with.
    summary = reconcile.stored_summary(conn, run["run_id"]) if recon else None
    currency = str(run["currency"]).strip()
    amounts = {
        "quoted_max": int(run["estimated_max_minor"]),
        "reserved": by_kind.get("reserve", 0),
        "charged": by_kind.get("charge", 0),
        "released": by_kind.get("release", 0),
        "refunded": by_kind.get("refund", 0),
    }
    return {
        "quote_note": QUOTE_NOTE,
        # for people: major units with the currency; the *_minor keys are for machines
        "display": {k: money_text(v, currency) for k, v in amounts.items()}
        | {
            # the money table's difference cells, in the words of the sentences below it (one
            # sign convention: who billed more; the JSON's *_minor stay theirs - ours)
            "unexplained": difference_text(
                summary.unexplained_difference_minor if summary else 0, currency
            ),
            "explained": explained_total_text(
                summary.explained_difference_minor if summary else 0,
                currency,
                summary.explained_difference_exact_minor if summary else None,
                summary.no_vendor_bill_ours_minor if summary else 0,
            ),
        },
        "reconciliation_words": reconciliation_text(
            summary.unexplained_difference_minor,
            summary.explained_difference_minor,
            summary.pending_ours_minor,
            currency,
            absolute_minor=summary.unexplained_absolute_minor,
            unexplained_lines=summary.unexplained_lines,
            no_vendor_bill_minor=summary.no_vendor_bill_ours_minor,
            explained_exact_minor=summary.explained_difference_exact_minor,
        )
        if summary
        else ["not reconciled yet"],
        "currency": run["currency"],
        "quoted_max_minor": int(run["estimated_max_minor"]),
        "reserved_minor": by_kind.get("reserve", 0),
        "charged_minor": by_kind.get("charge", 0),
        "released_minor": by_kind.get("release", 0),
        "refunded_minor": by_kind.get("refund", 0),
        "ledger": ledger,
        "reconciliation": recon,
        # the same lines as people read them, in the terminal and the HTML alike
        "reconciliation_display": reconciliation_rows(recon, currency),
        # theirs - ours; pending lines (statement not in yet) are in neither figure
        "reconciliation_unexplained_minor": summary.unexplained_difference_minor if summary else 0,
        "reconciliation_explained_minor": summary.explained_difference_minor if summary else 0,
        # the same with each vendor amount exact (decimal minor units as text; see words)
        "reconciliation_explained_exact_minor": exact_minor_text(
            summary.explained_difference_exact_minor if summary else 0
        ),
        "reconciliation_pending_ours_minor": summary.pending_ours_minor if summary else 0,
    }


def label_sizes(media: dict[str, Any]) -> None:
    """Say what each size of a stored screenshot is: ``size_bytes`` is the image; a WARC-stored
    one's storage key ends in ``#offset-length``, the record's length (the image gzip-compressed
    with its WARC headers), a different number that read as a contradiction beside it."""
    size = int(media.get("size_bytes") or 0)
    record = split_record_key(str(media.get("storage_key") or ""))
    media["warc_record"] = None
    media["size_note"] = f"image {size:,} bytes"
    if record is not None:
        key, offset, length = record
        media["warc_record"] = {"object_key": key, "offset": offset, "length_bytes": length}
        media["size_note"] += (
            f"; stored as WARC record {length:,} bytes (gzip-compressed, with its WARC headers) "
            f"at offset {offset:,} of {key}"
        )


def explain_thumbnail_size(thumb: dict[str, Any], shot: dict[str, Any] | None) -> None:
    """A thumbnail larger in bytes than its screenshot read as a contradiction: it happens when
    the screenshot is already thumbnail-sized (the simulator draws 320 x 240 flat-colour PNGs):
    the thumbnail is then the same pixels re-encoded as JPEG (every thumbnail is a JPEG, R21),
    which compresses flat drawings worse than PNG. Said where it happens."""
    if shot is None or int(thumb.get("size_bytes") or 0) < int(shot.get("size_bytes") or 0):
        return
    thumb["size_note"] += (
        f"; larger than its screenshot ({int(shot.get('size_bytes') or 0):,} bytes): the "
        "screenshot is already thumbnail-sized, so the thumbnail is the same pixels as a JPEG, "
        f"which compresses a flat drawing worse than the screenshot's {shot.get('mime_type')}"
    )


def download_command(media: dict[str, Any], tenant_id: str) -> str:
    """The exact command that downloads this stored item after authorisation: with its
    ``--kind`` (``evidence get`` defaults to the answer text, so without it the command printed
    beside a thumbnail fetched the answer, not the image)."""
    return (
        f"geo-pipeline evidence get {media['sample_id']} --tenant {tenant_id} "
        f"--kind {media['kind']}"
    )


def invalid_answers(samples: list[SampleReport]) -> dict[str, int]:
    """Answers judged not valid (R22), counted by reason: what no rate counts, and why."""
    out: dict[str, int] = {}
    for s in samples:
        if s.row.get("validity") == "invalid":
            reason = str(s.row.get("validity_reason") or "unspecified")
            out[reason] = out.get(reason, 0) + 1
    return dict(sorted(out.items()))


def channel_modes(samples: list[SampleReport]) -> dict[str, list[str]]:
    """The modes each channel's samples were asked in (its rates pool them), in first-seen
    order."""
    out: dict[str, list[str]] = {}
    for s in samples:
        modes = out.setdefault(str(s.row["channel"]), [])
        if str(s.row["mode"]) not in modes:
            modes.append(str(s.row["mode"]))
    return out


def channel_access(channels: list[str]) -> dict[str, str]:
    """How each channel was collected: its platform's ``access`` in the connector registry
    (api / scraped / browser, domain/words.ACCESS_WORDS), read from registered platforms whether
    offered or disabled (a report of a scraped run reads the same without the service's key)."""
    from geo_pipeline.connectors.registry import load_registry

    reg = load_registry()
    known = {**reg.disabled, **reg.entries}
    out = {}
    for ch in channels:
        entry = known.get(ch.split("__", 1)[0])
        out[ch] = entry.capabilities.access if entry else ACCESS_UNKNOWN
    return out


def channel_screenshots(channels: list[str]) -> dict[str, bool]:
    """Whether each channel's service ever gives a screenshot (its platform's ``screenshot`` in
    the connector registry; True for a platform the registry no longer lists: never guessed
    away)."""
    from geo_pipeline.connectors.registry import load_registry

    reg = load_registry()
    known = {**reg.disabled, **reg.entries}
    out = {}
    for ch in channels:
        entry = known.get(ch.split("__", 1)[0])
        out[ch] = bool(entry.capabilities.screenshot) if entry else True
    return out


def build_report(conn: Conn, run_id: str, link_for: LinkFor | None = None) -> RunReport:
    """Assemble the report of one run. Raises ``store.runs.RunNotFound`` for an unknown id."""
    run = runstore.get_run(conn, run_id)
    status = statusmod.run_status(conn, run_id).as_dict()
    channels = {
        ch: statusmod.partition_status(conn, run_id, ch).as_dict()
        for ch in statusmod.channels_of_run(conn, run_id)
    }
    # How each channel was collected: as frozen with the run (geo.run_platforms, issue 31), the
    # access the analytics views group by; the registry's word for a run made before 0054.
    frozen = run_platforms.channel_access(conn, run_id)
    fallback = channel_access([c for c in channels if frozen.get(c, {}).get("access") in
                               (None, ACCESS_UNKNOWN)])  # fmt: skip
    for ch, d in channels.items():
        got = frozen.get(ch, {}).get("access")
        d["access"] = got if got not in (None, ACCESS_UNKNOWN) else fallback[ch]
        d["label"] = channel_label(ch, str(d["access"]))  # what the key stands for, in words
        d["status_text"] = status_text(d)  # the channel's status with its reason
    shots = channel_screenshots(list(channels))
    params = {"run_id": run_id}
    cites: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for c in fetch_all(conn, "ops.report_citations", params):
        cites[c.pop("sample_id")].append(c)
    media: dict[tuple[str, str], dict[str, Any]] = {}
    for m in fetch_all(conn, "ops.report_media", params):
        m["link"] = link_for(m) if link_for else None
        label_sizes(m)
        m["download_command"] = download_command(m, str(run["tenant_id"]))
        media[(m["sample_id"], m["kind"])] = m
    for (sid, kind), m in media.items():
        if kind == "thumbnail":
            explain_thumbnail_size(m, media.get((sid, "screenshot")))
    rows = fetch_all(conn, "ops.report_samples", params)
    fill_displays(rows)  # derived displays rendered here; no raw text stays in a row (R19)
    said = {m["sample_id"]: m for m in fetch_all(conn, "ops.report_sample_mentions", params)}
    for r in rows:  # what each answer mentions: the facts the rates count, traced per answer
        m = said.get(r["sample_id"], {})
        r["brand_mentioned"] = m.get("brand_mentioned")
        r["competitors_mentioned"] = list(m.get("competitors_mentioned") or [])
    samples = [
        SampleReport(
            row=r,
            citations=cites.get(r["sample_id"], []),
            screenshot=media.get((r["sample_id"], "screenshot")),
            thumbnail=media.get((r["sample_id"], "thumbnail")),
            gives_screenshots=shots.get(str(r["channel"]), True),
        )
        for r in rows
    ]
    rates, source = mention_rates(conn, run_id)
    config = runstore.run_config(conn, run_id)
    # a brand with no domains configured has no citation rate (never "0 %": nothing to cite)
    with_domains = {b.name for b in (config.brand, *config.competitors) if b.domains}
    for r in rates:  # scraped and API rates are never pooled: each names its access
        r["access"] = channels.get(str(r["channel"]), {}).get("access", ACCESS_UNKNOWN)
        r["domains_configured"] = r["brand"] in with_domains
    trends, fdr_q = brand_trends(conn, run_id)
    # The status with its reason, and the invalid answers by reason: one text for every view.
    status["text"] = status_text(status, channels)
    invalid = invalid_answers(samples)
    # an invalid answer a person is still to confirm is counted once, as invalid, and said so
    in_review = sum(
        1
        for s in samples
        if s.row.get("validity") == "invalid" and s.row.get("analysis_state") == "review"
    )
    status["invalid_answers"] = invalid
    status["invalid_in_review"] = in_review
    status["invalid_text"] = invalid_answers_text(invalid, in_review)
    return RunReport(
        run=run,
        status=status,
        channels=channels,
        samples=samples,
        mention_rates=rates,
        mention_rates_source=source,
        money=money_summary(conn, run),
        generated_at=datetime.now(UTC),
        retention=fetch_all(conn, "ops.retention_of_run", params),
        trends=trends,
        trend_fdr_q=fdr_q,
        ui_api=ui_api.sections(conn, run_id),
        trend_note=trend_note(run, len({r["scheduled_for"] for r in trends})),
        channels_without_screenshots=sorted(c for c, ok in shots.items() if not ok),
    )
