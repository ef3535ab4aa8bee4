"""A monitor's cadence: a five-field cron expression in a time zone (issue 37).

A monitor has one run per day (R5: the run id is ``<monitor>-<YYYYMMDD>``), so a cadence fires at
most once a day: minute and hour are single numbers; day of month, month and day of week take
the usual ``*``, lists, ranges and steps (``0 6 * * 1-5`` = weekdays at 06:00, ``30 7 1 * *`` =
the first of each month). As in cron, when both day of month and day of week are restricted a day
matches either. Pure: the schedule asks "which fire time is the latest at or before this tick".
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

DOW_NAMES = {"sun": 0, "mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6}
MONTH_NAMES = {
    m: i + 1
    for i, m in enumerate(
        ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
    )
}
# How far back the latest fire time is looked for: a yearly cadence ("0 6 29 2 *" aside).
LOOKBACK_DAYS = 400


class CadenceError(ValueError):
    """A cadence that cannot be used, with the field and what is allowed."""


def _values(
    field: str, name: str, lo: int, hi: int, names: dict[str, int] | None = None
) -> frozenset[int]:
    out: set[int] = set()
    for part in field.split(","):
        base, _, step_text = part.partition("/")
        try:
            step = int(step_text) if step_text else 1
        except ValueError:
            raise CadenceError(
                f"cron {name} {field!r}: step {step_text!r} is not a number"
            ) from None
        if step < 1:
            raise CadenceError(f"cron {name} {field!r}: step must be >= 1")

        def num(text: str) -> int:
            key = text.strip().lower()
            if names and key in names:
                return names[key]
            try:
                v = int(key)
            except ValueError:
                raise CadenceError(
                    f"cron {name} {field!r}: {text!r} is not a number from {lo} to {hi}"
                ) from None
            if name == "day of week" and v == 7:
                v = 0  # cron allows 7 for Sunday
            if not lo <= v <= hi:
                raise CadenceError(f"cron {name} {field!r}: {v} is outside {lo}-{hi}")
            return v

        if base == "*":
            start, end = lo, hi
        elif "-" in base:
            a, b = base.split("-", 1)
            start, end = num(a), num(b)
            if end < start:
                raise CadenceError(f"cron {name} {field!r}: range {base!r} runs backwards")
        else:
            start = num(base)
            end = hi if step_text else start
        out.update(range(start, end + 1, step))
    return frozenset(out)


@dataclass(frozen=True)
class Cadence:
    cron: str
    timezone: str
    minute: int
    hour: int
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday, as in cron
    days_restricted: bool
    weekdays_restricted: bool

    def fires_on(self, day: date) -> bool:
        if day.month not in self.months:
            return False
        dom = day.day in self.days
        dow = (day.isoweekday() % 7) in self.weekdays
        if self.days_restricted and self.weekdays_restricted:
            return dom or dow
        return dom and dow

    def _at(self, day: date) -> datetime:
        # A wall time skipped by a DST change fires at the same UTC offset as before it (zoneinfo
        # folds it forward); a repeated one fires once, at its first occurrence (fold=0).
        return datetime.combine(day, time(self.hour, self.minute), ZoneInfo(self.timezone))

    def latest_fire(self, at: datetime) -> datetime | None:
        """The latest fire time at or before ``at`` (aware), or None within LOOKBACK_DAYS."""
        local = at.astimezone(ZoneInfo(self.timezone))
        for back in range(LOOKBACK_DAYS + 1):
            day = local.date() - timedelta(days=back)
            if self.fires_on(day) and self._at(day) <= at:
                return self._at(day)
        return None

    def next_fire(self, after: datetime) -> datetime | None:
        """The first fire time strictly after ``after`` (aware), or None within LOOKBACK_DAYS."""
        local = after.astimezone(ZoneInfo(self.timezone))
        for ahead in range(LOOKBACK_DAYS + 1):
            day = local.date() + timedelta(days=ahead)
            if self.fires_on(day) and self._at(day) > after:
                return self._at(day)
        return None


def parse_cadence(cron: str, timezone: str) -> Cadence:
    """A cadence, checked: five fields, a fixed minute and hour (one run a day), a known zone."""
    try:
        ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        raise CadenceError(
            f"timezone {timezone!r} is not an IANA time zone (e.g. Asia/Shanghai, UTC)"
        ) from None
    fields = cron.split()
    if len(fields) != 5:
        raise CadenceError(
            f"cron {cron!r}: expected 5 fields (minute hour day-of-month month day-of-week), "
            f"got {len(fields)}"
        )
    minute_f, hour_f, dom_f, month_f, dow_f = fields
    fixed = []
    for text, name, hi in ((minute_f, "minute", 59), (hour_f, "hour", 23)):
        if not text.isdigit() or not 0 <= int(text) <= hi:
            raise CadenceError(
                f"cron {name} {text!r}: a monitor runs at most once a day, so its {name} is one "
                f"number from 0 to {hi}"
            )
        fixed.append(int(text))
    cadence = Cadence(
        cron=" ".join(fields),
        timezone=timezone,
        minute=fixed[0],
        hour=fixed[1],
        days=_values(dom_f, "day of month", 1, 31),
        months=_values(month_f, "month", 1, 12, MONTH_NAMES),
        weekdays=_values(dow_f, "day of week", 0, 7, DOW_NAMES),
        days_restricted=dom_f != "*",
        weekdays_restricted=dow_f != "*",
    )
    if cadence.next_fire(datetime(2000, 1, 1, tzinfo=ZoneInfo("UTC"))) is None:
        raise CadenceError(f"cron {cron!r}: never fires (no such day)")
    return cadence
