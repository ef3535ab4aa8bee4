"""A monitor's trend as the run report and the Dagster metadata read it: every brand's mention
rate per channel and day of the run's monitor (``analytics.brand_trends``), with the changes
``analytics.brand_changes`` flagged after false-discovery-rate control. One implementation for
both shells: the report (geo_pipeline.ops.report) and the ``brand_visibility`` asset
(geo_pipeline.defs.analysis.assets), which draw it with
:func:`geo_pipeline.analysis.charts.trend_charts`.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from geo_pipeline.store.db import Conn
from geo_pipeline.store.queries import fetch_all

# The monitor's rates per channel x brand x day with the changes flagged after FDR control.
TREND_VIEW = "analytics.brand_trends"
# How far back the trend of a monitor's run looks, in days up to the run's own day.
TREND_DAYS = 30


def relation_exists(conn: Conn, name: str) -> bool:
    """Whether an optional relation (an analyst table or view that may land later) exists."""
    rows = fetch_all(conn, "ops.relation_exists", {"name": name})
    return bool(rows and rows[0]["present"])


def brand_trends(conn: Conn, run_id: str) -> tuple[list[dict[str, Any]], float | None]:
    """The mention rate of every brand per channel and day of the run's monitor, over the
    ``TREND_DAYS`` days up to the run's day, with the question-clustered 95 % interval and
    whether a change was flagged that day (day over day, rolling 7 days), and the FDR q of those
    flags. Empty (and None) for a run outside a monitor, or before the views exist."""
    if not relation_exists(conn, TREND_VIEW):
        return [], None
    rows = fetch_all(conn, "ops.report_brand_trends", {"run_id": run_id, "days": TREND_DAYS})
    for r in rows:
        for key, value in r.items():
            if isinstance(value, Decimal):
                r[key] = float(value)
    fdr_q = next((float(r["fdr_q"]) for r in rows if r.get("fdr_q") is not None), None)
    return [{k: v for k, v in r.items() if k != "fdr_q"} for r in rows], fdr_q
