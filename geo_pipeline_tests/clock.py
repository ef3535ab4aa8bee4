"""Tests that name "today" and then let the code under test (the simulator's statements, the
ledger, a resample job that refuses a past day) find its own today: both must be the same day.

A test that crosses midnight between the two fails on a correct system (CI runs round the clock:
a quiet-hours test already failed when a run crossed midnight UTC). ``clear_of_midnight``
called at the start of such a test waits out a midnight that is nearer than the test's span,
so the whole test runs inside one day. It sleeps only in the last ``margin_s`` of a day.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo

SHANGHAI = ZoneInfo("Asia/Shanghai")

# Well over what one of these tests was measured to take beside other work (tens of seconds),
# and under pytest's 300 s hang guard together with the test itself.
MARGIN_S = 120.0


def seconds_to_midnight(tz: tzinfo, now: datetime | None = None) -> float:
    """Seconds from ``now`` to the next midnight in ``tz``."""
    now = (now or datetime.now(UTC)).astimezone(tz)
    midnight = datetime.combine(now.date() + timedelta(days=1), datetime.min.time(), tz)
    return (midnight - now).total_seconds()


def clear_of_midnight(
    tz: tzinfo = UTC,
    margin_s: float = MARGIN_S,
    *,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
    sleep: Callable[[float], None] = time.sleep,
) -> float:
    """When midnight in ``tz`` is less than ``margin_s`` away, sleep until just after it.
    Returns the seconds slept (0.0 almost always)."""
    left = seconds_to_midnight(tz, now())
    if left >= margin_s:
        return 0.0
    sleep(left + 1.0)
    return left + 1.0
