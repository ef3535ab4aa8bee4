"""Refreshing the materialised analyst tables of the ``analytics`` schema.

Per run, in one transaction: delete the run's rows and insert them again (a partition write that
can be repeated, STYLE.md point 7), so readers see either the old or the new numbers, never a
mix. The live views (sample_facts, sample_brand_facts) need no refresh; brand_changes and
brand_trends read rows stored per monitor x channel x brand x day, which the same transaction
rewrites for the days the run's day can change (``analysis.refresh_brand_rollup``; issue 39:
the views used to recompute the monitor's whole history on every query). Rates pooled over
questions get their question-clustered intervals and effective n (``honest.*``,
sql/migrations/0021_honest_numbers.sql) in the same transaction, from the per-question rows just
inserted.
"""

from __future__ import annotations

from geo_pipeline.store.db import Conn
from geo_pipeline.store.queries import Q

# The run's rows of each analyst table, deleted before the insert rewrites them (query names in
# full, so a test can see every named query is used).
DELETES = (
    "analysis.refresh_delete_brand_metrics",
    "analysis.refresh_delete_channel_brand_metrics",
    "analysis.refresh_delete_share_of_voice",
    "analysis.refresh_delete_source_domains",
)
# Updates that add the question-clustered columns to the rows the insert just wrote.
CLUSTERED = ("honest.refresh_channel", "honest.refresh_share_of_voice")
# Then the stored trends and changes of the monitor's days the run's day changes (they read
# brand_metrics and channel_brand_metrics as just written).
ROLLUP = "analysis.refresh_brand_rollup"


def refresh_analytics(conn: Conn, run_id: str | None = None) -> dict[str, int]:
    """Recompute the analyst tables of one run (or of every run); returns rows per table."""
    params = {"run_id": run_id}
    if run_id is not None:
        # A run created before migration 0054 gets its platforms' access frozen now, so the
        # views that keep scraped and API answers apart can read it (issue 31).
        from geo_pipeline.store import run_platforms

        with conn.transaction():
            run_platforms.freeze_missing(conn, run_id)
    with conn.transaction(), conn.cursor() as cur:
        cur.execute(Q("analysis.tune"))
        for query in DELETES:
            cur.execute(Q(query), params)
        # Every table in one statement: the run's per-sample status is computed once.
        cur.execute(Q("analysis.refresh_insert_tables"), params)
        row = cur.fetchone()
        assert row is not None
        counts = {k: int(v) for k, v in row.items()}
        for query in CLUSTERED:
            cur.execute(Q(query), params)
        cur.execute(Q(ROLLUP), params)
        row = cur.fetchone()
        assert row is not None
        counts["brand_rollup"] = int(row["rows"])
    return counts
