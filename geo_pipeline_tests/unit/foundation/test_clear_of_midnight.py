"""The tests' guard against crossing midnight (geo_pipeline_tests/clock.py): a test that names
today and lets the code find its own today waits out a midnight nearer than its span, in the
time zone whose day it names (UTC for statements, Asia/Shanghai for resample days)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from geo_pipeline_tests.clock import SHANGHAI, clear_of_midnight, seconds_to_midnight


def _slept(at: datetime, tz: object, margin_s: float = 120.0) -> list[float]:
    slept: list[float] = []
    clear_of_midnight(tz, margin_s, now=lambda: at, sleep=slept.append)  # type: ignore[arg-type]
    return slept


def test_a_minute_before_midnight_utc_waits_until_after_it() -> None:
    assert _slept(datetime(2026, 12, 6, 23, 59, 0, tzinfo=UTC), UTC) == [pytest.approx(61.0)]


def test_far_from_midnight_nothing_waits() -> None:
    assert _slept(datetime(2026, 12, 6, 12, 0, 0, tzinfo=UTC), UTC) == []
    assert _slept(datetime(2026, 12, 6, 23, 57, 59, tzinfo=UTC), UTC) == []


def test_shanghai_midnight_is_16_00_utc() -> None:
    # 15:59:30 UTC is 23:59:30 in Shanghai: a resample day there is about to change.
    at = datetime(2026, 12, 6, 15, 59, 30, tzinfo=UTC)
    assert seconds_to_midnight(SHANGHAI, at) == pytest.approx(30.0)
    assert _slept(at, SHANGHAI) == [pytest.approx(31.0)]
    assert _slept(at, UTC) == []
