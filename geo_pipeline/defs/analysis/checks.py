"""The checks of brand_analysis and brand_visibility (R6, R7), as functions of (connection,
partition); a failing check lists examples (at most ``EXAMPLES``)."""

from __future__ import annotations

from typing import Any

import dagster as dg

from geo_pipeline.defs import names
from geo_pipeline.defs.factory import EXAMPLES, check_result, query_rows
from geo_pipeline.store.db import Conn


def valid_answers_analysed(conn: Conn, run_id: str, channel: str) -> dg.AssetCheckResult:
    """R6: after analysis, every valid answer has an analysis result for its latest revision."""
    rows = query_rows(conn, "valid_not_analysed", run_id=run_id, channel=channel)
    return check_result(
        names.CHECK_VALID_ANSWERS_ANALYSED,
        names.BRAND_ANALYSIS,
        not rows,
        not_analysed=len(rows),
        examples=[r["sample_id"] for r in rows[:EXAMPLES]],
    )


def pending_not_reported_as_not_mentioned(
    conn: Conn, run_id: str, channel: str
) -> dg.AssetCheckResult:
    """R6: an analysis that is pending, in review or failed is never reported "not mentioned"."""
    rows = query_rows(conn, "pending_reported_not_mentioned", run_id=run_id, channel=channel)
    return check_result(
        names.CHECK_NO_PENDING_AS_NOT_MENTIONED,
        names.BRAND_ANALYSIS,
        not rows,
        offending=len(rows),
        examples=[
            f"{r['sample_id']} ({r['analysis_state']}, {r['mention_status']})"
            for r in rows[:EXAMPLES]
        ],
    )


def visibility_matches(
    conn: Conn, run_id: str, channel: str, table: list[dict[str, Any]]
) -> dg.AssetCheckResult:
    """R7: the analyst table says what the sample-level facts say — one row per tracked brand,
    every planned sample counted, the rate denominator only answers whose analysis is known."""
    expected = {
        r["brand"]: r
        for r in query_rows(conn, "channel_visibility_expected", run_id=run_id, channel=channel)
    }
    got = {r["brand"]: r for r in table}
    problems = [f"{b}: no row" for b in sorted(set(expected) - set(got))]
    problems += [f"{b}: not a tracked brand" for b in sorted(set(got) - set(expected))]
    for brand in sorted(set(expected) & set(got)):
        for col in ("samples", "n", "mentions"):
            if int(got[brand][col]) != int(expected[brand][col]):
                problems.append(
                    f"{brand}: {col} {got[brand][col]} != {expected[brand][col]} from the facts"
                )
    return check_result(
        names.CHECK_VISIBILITY_MATCHES,
        names.BRAND_VISIBILITY,
        not problems,
        brands=len(expected),
        problems=problems[:EXAMPLES],
    )
