"""``json.dumps(..., default=json_default)`` for what this project prints and exports: dates and
times as ISO 8601, decimals as strings (never floats), sets and tuples as lists, and objects
with ``as_dict()`` (statuses, reports) as their dict."""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal
from typing import Any


def json_default(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    if hasattr(value, "as_dict"):
        return value.as_dict()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")
