"""Quiet hours of the browser lane (issue #32): no account sends inside the window (a person
sleeps; accounts that ask at 3 a.m. look automated). The sample waits (``unavailable``,
cause ``quiet_hours``) until the window ends; nothing is launched, leased or sent."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from geo_pipeline.connectors.base import SubmitRequest
from geo_pipeline.connectors.browser.accounts import QuietHours
from geo_pipeline.connectors.browser.connector import BrowserConnector
from geo_pipeline.connectors.browser.spec import InQuietHours
from geo_pipeline.connectors.registry import load_registry


def at(hh: int, mm: int = 0) -> datetime:
    return datetime(2026, 12, 6, hh, mm, tzinfo=UTC)


def test_a_window_over_midnight_in_its_own_time_zone() -> None:
    q = QuietHours.parse("23:30-07:00", "Asia/Shanghai")  # UTC+8
    assert q is not None
    # 15:30 UTC = 23:30 Shanghai: the window opens; it ends at 07:00 Shanghai = 23:00 UTC.
    assert q.wait_s(at(15, 29)) == 0.0
    assert q.wait_s(at(15, 30)) == 7.5 * 3600
    assert q.wait_s(at(22, 0)) == 3600.0
    assert q.wait_s(at(23, 0)) == 0.0
    same_day = QuietHours.parse("01:00-05:00", "UTC")
    assert same_day is not None and same_day.wait_s(at(4, 30)) == 1800.0
    assert same_day.wait_s(at(5, 0)) == 0.0 and same_day.wait_s(at(0, 59)) == 0.0
    assert QuietHours.parse(None, "UTC") is None and QuietHours.parse("", "UTC") is None


@pytest.mark.parametrize(
    ("text", "tz", "message"),
    [
        ("23-07", "UTC", "'23-07': HH:MM-HH:MM"),
        ("25:00-07:00", "UTC", "'25:00-07:00': HH:MM-HH:MM"),
        ("07:00-07:00", "UTC", "an empty window"),
        ("23:00-07:00", "Mars/Olympus", "time zone 'Mars/Olympus'"),
    ],
)
def test_bad_quiet_hours_say_what_is_allowed(text: str, tz: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        QuietHours.parse(text, tz, where="platforms.doubao_web.options.quiet_hours")


def test_inside_the_window_nothing_is_leased_or_launched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GEO_BROWSER_PROFILES", str(tmp_path))
    # A window around the present (an hour before to two after, over midnight when it falls
    # so): "00:00-23:59" failed in the minute 23:59-00:00 (a CI run crossed it).
    now = datetime.now(UTC)
    window = f"{now - timedelta(hours=1):%H:%M}-{now + timedelta(hours=2):%H:%M}"
    monkeypatch.setenv("GEO_BROWSER_QUIET_HOURS", window)
    monkeypatch.setenv("GEO_BROWSER_QUIET_TZ", "UTC")
    entry = load_registry().entry("doubao_web")
    entry = dataclasses.replace(entry, options={**entry.options, "accounts": ["a1"]})
    conn = BrowserConnector(entry)
    req = SubmitRequest("s1", 1, "acme", "问题", "doubao_web", "desktop", "cn", "standard", True)
    with pytest.raises(InQuietHours) as caught:
        asyncio.run(conn.submit(req))
    exc = caught.value
    assert exc.error_class == "unavailable" and exc.cause == "quiet_hours"
    assert exc.retry_after_s is not None and 0 < exc.retry_after_s <= 24 * 3600
    assert conn._pw is None  # no browser was started
    # A registry option overrides the deployment's setting (per platform).
    entry2 = dataclasses.replace(entry, options={**entry.options, "quiet_hours": "bad"})
    with pytest.raises(ValueError, match=r"platforms\.doubao_web\.options\.quiet_hours"):
        BrowserConnector(entry2)
