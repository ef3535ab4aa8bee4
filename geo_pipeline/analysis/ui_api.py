"""Scraped vs API apart (issue 31): the fan-out, the citation gap and UI-vs-API agreement of a
run, read from the analytics views of migration 0054 (``analytics.fan_out``,
``fan_out_channels``, ``citation_gap``, ``ui_api_agreement``; docs/analysts.md, "Scraped vs
API"). Every report, export and the Dagster metadata show these rows as they are: nothing here
computes a rate or an interval."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from geo_pipeline.analysis.trends import relation_exists
from geo_pipeline.store.db import Conn
from geo_pipeline.store.queries import fetch_all

# Section name -> the named query that reads its view (sql/queries/ui_api.sql).
SECTIONS = {
    "fan_out_channels": "ui_api.fan_out_channels",
    "fan_out": "ui_api.fan_out",
    "citation_gap": "ui_api.citation_gap",
    "ui_api_agreement": "ui_api.agreement",
}
VIEW = "analytics.ui_api_agreement"


def _plain(row: dict[str, Any]) -> dict[str, Any]:
    return {k: float(v) if isinstance(v, Decimal) else v for k, v in row.items()}


def sections(
    conn: Conn, run_id: str, channel: str | None = None
) -> dict[str, list[dict[str, Any]]]:
    """The four sections of a run (one channel's rows with ``channel``); empty lists on a
    database older than migration 0054."""
    if not relation_exists(conn, VIEW):
        return {name: [] for name in SECTIONS}
    params = {"run_id": run_id, "channel": channel}
    return {
        name: [_plain(r) for r in fetch_all(conn, query, params)]
        for name, query in SECTIONS.items()
    }


def pct(value: Any) -> str:
    """A share as a whole percentage ('' when there is none)."""
    return "" if value is None else f"{float(value) * 100:.0f} %"


def share_text(rate: Any, lower: Any, upper: Any, n: Any) -> str:
    """A share with its 95 % interval and n, as every output writes it: "75 % (40–93 %, n = 8)"."""
    size = f"n = {int(n or 0)}"
    if rate is None:
        return f"n/a ({size})"
    if lower is None or upper is None:
        return f"{float(rate) * 100:.0f} % ({size})"
    return (
        f"{float(rate) * 100:.0f} % ({float(lower) * 100:.0f}–{float(upper) * 100:.0f} %, {size})"
    )


def rate_of(x: Any, n: Any) -> str:
    """x of n as "3/4 (75 %)", or "n/a (n = 0)"."""
    if not n:
        return "n/a (n = 0)"
    return f"{int(x)}/{int(n)} ({float(x) / float(n) * 100:.0f} %)"


def display_rows(data: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, str]]]:
    """The four sections as people read them: the same words in the terminal, the HTML page
    and the Dagster metadata (machine formats keep the rows' own columns)."""
    return {
        "fan_out_channels": [
            {
                "channel": r["channel"],
                "access": r["access"],
                "questions": str(r["questions"]),
                "searched": share_text(
                    r["share_searched"],
                    r["share_searched_lower"],
                    r["share_searched_upper"],
                    r["answers"],
                ),
                "interval": str(r["share_searched_interval"]),
                "queries": str(r["queries"]),
                "distinct queries": str(r["distinct_queries"]),
                "queries per answer": f"{float(r['queries_per_answer']):.2f}",
                "target brand mentioned when searched": rate_of(
                    r["mentions_searched"], r["answers_searched"]
                ),
                "target brand mentioned when not searched": rate_of(
                    r["mentions_not_searched"], r["answers_not_searched"]
                ),
            }
            for r in data["fan_out_channels"]
        ],
        "fan_out": [
            {
                "channel": r["channel"],
                "access": r["access"],
                "question": f"Q{int(r['question_index']) + 1}",
                "answers": str(r["answers"]),
                "searched": str(r["answers_searched"]),
                "queries": str(r["queries"]),
                "distinct queries": str(r["distinct_queries"]),
            }
            for r in data["fan_out"]
        ],
        "citation_gap": [
            {
                "channel": r["channel"],
                "access": r["access"],
                "domain": str(r["domain"]),
                "cited with a competitor": rate_of(r["cited_with_competitor"], r["n"]),
                "questions": str(r["questions"]),
                "competitors": ", ".join(r.get("competitors") or []),
            }
            for r in data["citation_gap"]
        ],
        "ui_api_agreement": [
            {
                "engine": r["engine"],
                "UI channel": f"{r['ui_channel']} ({r['ui_access']})",
                "API channel": r["api_channel"],
                "questions": str(r["questions"]),
                "agree on mentioned": share_text(
                    r["agreement"], r["agreement_lower"], r["agreement_upper"], r["pairs"]
                ),
                "interval": str(r["agreement_interval"]),
                "agree on rank (pairs both mentioning it)": share_text(
                    r["rank_agreement"],
                    r["rank_agreement_lower"],
                    r["rank_agreement_upper"],
                    r["rank_pairs"],
                ),
                "rank interval": str(r["rank_agreement_interval"] or "-"),
            }
            for r in data["ui_api_agreement"]
        ],
    }


# What each section is, said once for every output (docs/analysts.md has the SQL).
def section_heading(accesses: list[str | None]) -> str:
    """The page's heading over these sections: "Scraped vs API" only where the run has a
    scraped channel to set beside its API ones (issue #34: an API-only run read it)."""
    if "scraped" in accesses:
        return "Scraped vs API"
    return "Search fan-out and citation gap"


SECTION_TITLES = {
    "fan_out_channels": "Fan-out per channel",
    "fan_out": "Fan-out per question",
    "citation_gap": "Citation gap",
    "ui_api_agreement": "UI-vs-API agreement",
}
SECTION_NOTES = {
    "fan_out_channels": (
        "searched: share of the channel's n answers that ran a web search, with its 95 % "
        "interval (question-clustered where several questions are pooled, Wilson from one "
        "question: each row names its method); queries: the search queries the engine reported "
        "(distinct after trimming and case folding, per question); an API that hides its "
        "queries shows searched answers with 0 queries; target brand mentioned when searched / "
        "not searched: the monitored brand's mentions among the answers that did / did not "
        "search"
    ),
    "fan_out": "answers (n), answers that searched, queries, distinct queries",
    "citation_gap": (
        "domains the channel cites in answers naming a competitor and never in an answer "
        "naming the brand; x/n = answers citing it with a competitor named / the channel's n"
    ),
    "ui_api_agreement": (
        "the same engine asked through the consumer product (scraped or browser) and its API "
        "in this run: of every pair of answers to one question (one each way), the share "
        "agreeing on whether the brand is mentioned, and, where both mention it, on its rank; "
        "n = pairs for mentioned; for rank, n = only the pairs where both answers mention the "
        "brand; 95 % interval clustered by question"
    ),
}
