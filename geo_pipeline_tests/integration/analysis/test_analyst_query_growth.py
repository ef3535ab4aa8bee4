"""An analyst's window of days costs the days asked for, not the monitor's whole history
(issue 39): the share of voice over the last 30 days reads the same buffers over 60 days of
history as over 600 (PostgreSQL's own count, under EXPLAIN (ANALYZE, BUFFERS); no clock), and so do the day's
flagged changes and the report's 30-day trend (stored per monitor x channel x brand x day by the
refresh, sql/migrations/0049_brand_rollup.sql)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from geo_pipeline_tests.scale_data import ANALYST_QUERIES, analyst_history

SHARE_OF_VOICE_30_DAYS = """
    SELECT scheduled_for, channel, brand, n, share_of_answers_mentioning_any_brand,
           share_of_all_tracked_mentions
      FROM analytics.share_of_voice
     WHERE monitor_id = %(monitor)s
       AND scheduled_for BETWEEN %(day)s::date - 29 AND %(day)s::date
     ORDER BY channel, brand, scheduled_for"""


def _buffers(db: Any, days: int) -> tuple[int, int]:
    """(buffers, rows) of the query over the last 30 days of a history of ``days`` days."""
    history = analyst_history(
        db, days * 20, monitor=f"m-{days}", questions=2, channels=2, repeats=5, brands=3
    )
    assert history.days == days
    day = history.first_day + timedelta(days=days - 1)
    row = db.execute(
        "EXPLAIN (ANALYZE, BUFFERS, TIMING OFF, FORMAT JSON) " + SHARE_OF_VOICE_30_DAYS,
        {"monitor": history.monitor, "day": day},
    ).fetchone()
    db.rollback()
    plan = next(iter(row.values()))[0]["Plan"]
    return plan["Shared Hit Blocks"] + plan["Shared Read Blocks"], plan["Actual Rows"]


def test_share_of_voice_of_30_days_does_not_read_the_whole_history(db: Any) -> None:
    short_buffers, short_rows = _buffers(db, 60)
    long_buffers, long_rows = _buffers(db, 600)
    assert short_rows == long_rows == 30 * 2 * 3  # 30 days x 2 channels x 3 brands
    # 10x the history (and a second monitor's beside it): at most an index level more.
    assert long_buffers <= 2 * short_buffers, (short_buffers, long_buffers)


def _explain(db: Any, query: str, history: Any) -> tuple[int, int]:
    """(shared buffers, rows) of ``query`` asked for the history's last day."""
    day = history.first_day + timedelta(days=history.days - 1)
    row = db.execute(
        "EXPLAIN (ANALYZE, BUFFERS, TIMING OFF, FORMAT JSON) " + query,
        {"tenant": history.tenant, "monitor": history.monitor, "day": day},
    ).fetchone()
    db.rollback()
    plan = next(iter(row.values()))[0]["Plan"]
    return plan["Shared Hit Blocks"] + plan["Shared Read Blocks"], plan["Actual Rows"]


@pytest.mark.parametrize(
    "query", ["changes flagged on the day", "trends (report, 30 days)", "mention rate, 30 days"]
)
def test_changes_and_trends_cost_the_days_asked_not_the_history(db: Any, query: str) -> None:
    """The day's flagged changes, the report's 30-day trend and the 30-day mention rate (index
    of 0052): 10x the history (60 -> 600 days of daily runs, 2 channels x 3 brands x 2
    questions) may cost at most 2x the
    buffers (an index level); the views that recomputed every day of the history cost ~10x."""
    work = {}
    for days in (60, 600):
        history = analyst_history(
            db, days * 20, monitor=f"m-{days}", questions=2, channels=2, repeats=5, brands=3
        )
        assert history.days == days
        work[days] = _explain(db, ANALYST_QUERIES[query], history)
    print(query, work)
    (short_buffers, short_rows), (long_buffers, long_rows) = work[60], work[600]
    assert short_rows == long_rows > 0, work
    assert long_buffers <= 2 * short_buffers, work
