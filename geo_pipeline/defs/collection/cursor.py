"""The completion sensor's cursor: times as people read them (ISO 8601 in UTC), read back from
that or from the unix seconds older cursors hold (issue 36: human-readable cursors)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any


def cursor_time(ts: float) -> str:
    """A cursor's time as people read it: ISO 8601 in UTC, to the microsecond (lossless)."""
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="microseconds")


def cursor_ts(value: Any) -> float | None:
    """A cursor time back to unix seconds: ISO 8601, or the unix seconds older cursors hold."""
    if value is None:
        return None
    if isinstance(value, int | float):
        return float(value)
    return datetime.fromisoformat(str(value)).timestamp()


def _load_cursor(raw: str | None) -> dict[str, Any]:
    fresh: dict[str, Any] = {"id": None, "swept": 0.0, "deadlines": None}
    if not raw:
        return fresh
    try:
        data = json.loads(raw)
        return {
            "id": data.get("id"),
            "swept": cursor_ts(data.get("swept")) or 0.0,
            "deadlines": cursor_ts(data.get("deadlines")),
        }
    except ValueError:
        return fresh
