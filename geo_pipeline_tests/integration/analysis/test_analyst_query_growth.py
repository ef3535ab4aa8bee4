"""An analyst's window of days costs the days asked for, not the monitor's whole history
(issue 39): the share of voice over the last 30 days reads the same buffers over 60 days of
history as over 600 (PostgreSQL's own count, under EXPLAIN (ANALYZE, BUFFERS); no clock)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from geo_pipeline_tests.scale_data import analyst_history

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
