"""The sweeper (R9, R11, R12): re-derives due and orphaned work from PostgreSQL, because Redis
may lose or trim entries. Each pass hands expired leases back to the queue, ends the
unsubmitted samples of cancelled runs (CANCELLED, so the run can close and release its
reservation), and queues hints for due work that has none (including uncertain samples due for
a lookup), so a lost message delays a sample by at most lease + sweep interval, never loses it.

Each pass also bounds Redis (streams.trim): the consumer-group streams are trimmed to what their
groups still need, the completion and dead-letter streams to a time window, so a managed Redis
holds the work in flight, not the history. And every ``gauge_every_s`` it refreshes the
database-wide gauges (backlog per platform and state, oldest queued age, evidence-missing rate,
reconciliation difference): the sweeper is the one production process that always runs.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from geo_pipeline.observability.logs import event
from geo_pipeline.observability.metrics import PENDING_ENTRIES, STREAM_LENGTH, UNCERTAIN
from geo_pipeline.store import business_gauges
from geo_pipeline.store import execution as ex
from geo_pipeline.store.db import Conn
from geo_pipeline.streams.keys import GROUP
from geo_pipeline.streams.trim import trim_streams

log = logging.getLogger("geo_pipeline.sweeper")


@dataclass(frozen=True)
class SweepSettings:
    interval_s: float = 5.0
    grace_s: float = 2.0  # a due sample gets this long to be claimed before a new hint
    hint_ttl_s: float = 30.0  # a hint younger than this counts as live
    screenshot_ttl_s: float = 300.0  # a pending screenshot's hint is renewed after this
    limit: int = 5000
    trim: bool = True  # trim the streams each pass (never an unacknowledged entry)
    windowed_keep_s: float = 86400.0  # completion / dead-letter streams keep this long
    gauge_every_s: float = 15.0  # database-wide gauges: a few aggregate reads, not every pass


def sweep_once(
    conn: Conn,
    *,
    actor: str,
    settings: SweepSettings,
    lookup_platforms: Sequence[str],
) -> dict[str, int]:
    expired = ex.sweep_expired(conn, actor=actor, limit=settings.limit)
    cancelled = ex.sweep_cancelled(conn, actor=actor, limit=settings.limit)
    hinted = ex.sweep_unhinted(
        conn,
        grace_s=settings.grace_s,
        hint_ttl_s=settings.hint_ttl_s,
        lookup_platforms=lookup_platforms,
        limit=settings.limit,
    )
    shots = ex.sweep_screenshots(conn, ttl_s=settings.screenshot_ttl_s, limit=settings.limit)
    uncertain = ex.uncertain_count(conn)
    UNCERTAIN.set(uncertain)
    return {
        "expired": len(expired),
        "cancelled": len(cancelled),
        "hinted": sum(hinted) + len(shots),  # samples covered by the new hints
        "collect_hints": len(hinted),  # outbox rows: one per (run, channel, batch)
        "screenshots": len(shots),
        "uncertain": uncertain,
    }


def stream_gauges(redis: Any, keys: Sequence[str]) -> None:
    """Queue length and pending entries per stream (D11), for scaling on lag (D1)."""
    for key in keys:
        try:
            STREAM_LENGTH.labels(key).set(redis.xlen(key))
            info = redis.xpending(key, GROUP)
            PENDING_ENTRIES.labels(key).set(int(info.get("pending", 0)) if info else 0)
        except Exception:  # a missing stream or group simply has nothing to report
            continue


def trim_pass(
    redis: Any, stream_keys: Sequence[str], windowed_keys: Sequence[str], keep_s: float
) -> int:
    """Trim every stream once; returns the entries removed."""
    results = trim_streams(redis, stream_keys, [(k, keep_s) for k in windowed_keys])
    removed = sum(r.removed for r in results)
    if removed:
        event(log, "sweeper.trimmed", removed=removed, streams=len(results))
    return removed


def _redis_reachable(redis: Any) -> tuple[bool, str]:
    try:
        redis.ping()
    except Exception as exc:  # any client or socket error means the same here
        return False, f"{type(exc).__name__}: {exc}"[:200]
    return True, ""


def run_sweeper(
    conn: Conn,
    *,
    actor: str,
    settings: SweepSettings,
    lookup_platforms: Sequence[str],
    stop: threading.Event,
    redis: Any = None,
    stream_keys: Sequence[str] = (),
    windowed_keys: Sequence[str] = (),
    platforms: Sequence[str] = (),
) -> dict[str, int]:
    totals = {
        "expired": 0,
        "cancelled": 0,
        "hinted": 0,
        "passes": 0,
        "trimmed": 0,
        "redis_unreachable_passes": 0,
    }
    gauges_due = 0.0
    redis_down_since: float | None = None
    event(log, "sweeper.started", actor=actor)
    while not stop.is_set():
        if redis is not None:
            # PostgreSQL is the truth, so the sweep goes on without Redis; but the hints it
            # queues wait in the outbox and the streams are neither trimmed nor measured: say
            # so once, and again when Redis is back (trim_pass and stream_gauges stay quiet).
            reachable, why = _redis_reachable(redis)
            if not reachable:
                totals["redis_unreachable_passes"] += 1
                if redis_down_since is None:
                    redis_down_since = time.monotonic()
                    log.warning(
                        "sweeper: Redis unreachable (%s); sweeping PostgreSQL goes on, stream "
                        "trimming and stream gauges are paused until it answers",
                        why,
                    )
            elif redis_down_since is not None:
                event(log, "sweeper.redis_back", down_s=round(time.monotonic() - redis_down_since))
                redis_down_since = None
        try:
            got = sweep_once(
                conn, actor=actor, settings=settings, lookup_platforms=lookup_platforms
            )
            totals["expired"] += got["expired"]
            totals["cancelled"] += got["cancelled"]
            totals["hinted"] += got["hinted"]
            totals["passes"] += 1
            if got["expired"] or got["cancelled"] or got["hinted"]:
                event(log, "sweeper.pass", **got)
            else:  # an idle pass too, at debug: its time shows the sweep cadence (bench/chaos.py)
                log.debug("sweeper.pass", extra=got)
            if redis is not None and redis_down_since is None:
                if settings.trim:
                    totals["trimmed"] += trim_pass(
                        redis, stream_keys, windowed_keys, settings.windowed_keep_s
                    )
                stream_gauges(redis, stream_keys)
            if time.monotonic() >= gauges_due:
                business_gauges.refresh_backlog(conn, platforms)
                business_gauges.refresh(conn)
                gauges_due = time.monotonic() + settings.gauge_every_s
        except Exception as exc:
            log.warning("sweep failed: %s", exc)
            conn.rollback()
        stop.wait(settings.interval_s)
    event(log, "sweeper.stopped", **totals)
    return totals
