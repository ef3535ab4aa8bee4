"""A monitor's cadence (cron + zone): which fire time is the latest at a tick, and what is refused."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from geo_pipeline.defs.collection.monitors import CATCH_UP, due_monitors
from geo_pipeline.domain.cadence import CadenceError, parse_cadence

BERLIN = ZoneInfo("Europe/Berlin")


def test_weekday_cadence_in_its_own_zone() -> None:
    c = parse_cadence("0 7 * * 1-5", "Europe/Berlin")
    # Saturday 2026-12-05 10:00 Berlin: the latest fire is Friday 07:00 Berlin.
    sat = datetime(2026, 12, 5, 10, 0, tzinfo=BERLIN)
    assert c.latest_fire(sat) == datetime(2026, 12, 4, 7, 0, tzinfo=BERLIN)
    assert c.next_fire(sat) == datetime(2026, 12, 7, 7, 0, tzinfo=BERLIN)
    # Exactly at the fire time counts as fired.
    mon = datetime(2026, 12, 7, 6, 0, tzinfo=UTC)  # 07:00 Berlin (CET = UTC+1)
    assert c.latest_fire(mon) == mon


def test_day_of_month_or_day_of_week_as_cron_does() -> None:
    c = parse_cadence("30 6 1 * sun", "UTC")
    assert c.fires_on(datetime(2026, 12, 1).date())  # the 1st (a Tuesday)
    assert c.fires_on(datetime(2026, 12, 6).date())  # a Sunday
    assert not c.fires_on(datetime(2026, 12, 2).date())
    monthly = parse_cadence("0 8 1,15 */2 *", "UTC")
    assert monthly.months == frozenset({1, 3, 5, 7, 9, 11})
    assert monthly.days == frozenset({1, 15})


@pytest.mark.parametrize(
    ("cron", "tz", "words"),
    [
        ("*/5 * * * *", "UTC", "at most once a day"),
        ("0 6,18 * * *", "UTC", "at most once a day"),
        ("0 6 * *", "UTC", "5 fields"),
        ("0 6 32 * *", "UTC", "outside 1-31"),
        ("0 6 * * mon-xyz", "UTC", "not a number"),
        ("0 6 31 2 *", "UTC", "never fires"),
        ("0 6 * * *", "Mars/Olympus", "IANA time zone"),
        ("0 6 5-1 * *", "UTC", "backwards"),
    ],
)
def test_a_cadence_that_cannot_work_is_refused_with_the_field(
    cron: str, tz: str, words: str
) -> None:
    with pytest.raises(CadenceError, match=words):
        parse_cadence(cron, tz)


def test_due_monitors_within_the_catch_up_window_only() -> None:
    rows = [
        {"monitor_id": "berlin-7", "cron": "0 7 * * *", "timezone": "Europe/Berlin"},
        {"monitor_id": "shanghai-9", "cron": "0 9 * * *", "timezone": "Asia/Shanghai"},
        {"monitor_id": "stored-bad", "cron": "*/5 * * * *", "timezone": "UTC"},
    ]
    # 06:15 UTC = 07:15 Berlin (fired 15 min ago) = 14:15 Shanghai (fired 5 h ago).
    tick = datetime(2026, 12, 7, 6, 15, tzinfo=UTC)
    assert due_monitors(rows, tick) == [("berlin-7", "2026-12-07")]
    assert due_monitors(rows, tick + CATCH_UP) == []
    # 01:00 UTC = 09:00 Shanghai: the day is Shanghai's day.
    assert due_monitors(rows, datetime(2026, 12, 7, 1, 0, tzinfo=UTC)) == [
        ("shanghai-9", "2026-12-07")
    ]
    # 23:10 UTC on the 6th is 07:10 on the 7th in Shanghai: the run stands for the 7th.
    early = [{"monitor_id": "shanghai-7", "cron": "0 7 * * *", "timezone": "Asia/Shanghai"}]
    late = datetime(2026, 12, 6, 23, 0, tzinfo=UTC) + timedelta(minutes=10)
    assert due_monitors(early, late) == [("shanghai-7", "2026-12-07")]
