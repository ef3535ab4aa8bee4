"""The bench's set-based analyst history (geo_pipeline_tests/scale_data.bulk_analyst_history,
used by bench/scale.py up to 10M samples) stores the same trends and changes the refresh's own
functions write: its rows for the days after the first BASE + PERIOD are copies shifted by whole
periods, and here every row equals a full analytics.rebuild_brand_rollup of the same history
(three periods past the computed head, so shifted copies of every template day are compared).
New coverage (issue 39)."""

from __future__ import annotations

from typing import Any

from geo_pipeline_tests.scale_data import BASE, PERIOD, bulk_analyst_history, rollup_difference


def test_bulk_rollup_equals_the_refresh(db: Any) -> None:
    days = BASE + 4 * PERIOD + 5
    history = bulk_analyst_history(
        db, days * 20, monitor="m-bulk", questions=2, channels=2, repeats=5, brands=3
    )
    assert history.days == days
    diff = rollup_difference(db, history.monitor)
    # 2 channels x 3 brands a day: trends every day, changes (day over day, rolling) after day 0
    assert diff["brand_day_trends_rows"] == days * 6, diff
    assert diff["brand_day_changes_rows"] >= (days - 1) * 6, diff
    assert diff["brand_day_changes"] == 0 and diff["brand_day_trends"] == 0, diff
