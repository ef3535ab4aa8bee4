"""Gauges of R26 that no single worker sees: the evidence-missing rate, the reconciliation
difference and the sample backlog are properties of the database, not of one process.
``refresh(conn)`` and ``refresh_backlog(conn)`` recompute them; a long-running process that
exposes /metrics (the sweeper in production, the demo process on a laptop) calls them on its
own interval."""

from __future__ import annotations

from collections.abc import Iterable

from geo_pipeline.domain.billing import EXPLAINED
from geo_pipeline.observability.metrics import (
    BACKLOG,
    EVIDENCE_MISSING_RATE,
    OLDEST_QUEUED_AGE,
    RECONCILIATION_DIFF,
)
from geo_pipeline.store.db import Conn
from geo_pipeline.store.queries import Q


def refresh(conn: Conn, window_s: float = 3600.0) -> dict[str, object]:
    """Set the gauges from the database; returns the values (for logs and tests)."""
    with conn.cursor() as cur:
        cur.execute(Q("ops.evidence_missing_rate"), {"window_s": window_s})
        row = dict(cur.fetchone() or {})
        cur.execute(Q("ops.reconciliation_difference"), {"explained": list(EXPLAINED)})
        diffs = {str(r["currency"]).strip(): int(r["difference_minor"]) for r in cur.fetchall()}
    completed = int(row.get("completed") or 0)
    rate = (int(row.get("missing") or 0) / completed) if completed else 0.0
    EVIDENCE_MISSING_RATE.set(rate)
    for currency, diff in diffs.items():
        RECONCILIATION_DIFF.labels(currency).set(diff)
    return {"evidence_missing_rate": rate, "completed": completed, "reconciliation": diffs}


BACKLOG_STATES = ("queued", "running", "uncertain", "dead_letter")


def refresh_backlog(conn: Conn, platforms: Iterable[str] = ()) -> dict[str, dict[str, float]]:
    """Set the backlog gauges per platform and state. Every platform in ``platforms`` (the
    registry's) is reported, 0 when idle, so a scaler sees zero rather than a missing series."""
    out: dict[str, dict[str, float]] = {
        p: {**dict.fromkeys(BACKLOG_STATES, 0.0), "oldest_queued_s": 0.0} for p in platforms
    }
    with conn.cursor() as cur:
        cur.execute(Q("ops.backlog_by_platform"))
        rows = [dict(r) for r in cur.fetchall()]
        cur.execute(Q("ops.open_dead_letters_by_platform"))
        dead = {str(r["platform"]): int(r["n"]) for r in cur.fetchall()}
    for r in rows:
        p = out.setdefault(
            str(r["platform"]), {**dict.fromkeys(BACKLOG_STATES, 0.0), "oldest_queued_s": 0.0}
        )
        for state in ("queued", "running", "uncertain"):
            p[state] = float(r[state])
        p["oldest_queued_s"] = max(0.0, float(r["oldest_queued_s"]))
    for platform, n in dead.items():
        if platform:
            out.setdefault(
                platform, {**dict.fromkeys(BACKLOG_STATES, 0.0), "oldest_queued_s": 0.0}
            )["dead_letter"] = float(n)
    for platform, values in out.items():
        for state in BACKLOG_STATES:
            BACKLOG.labels(platform, state).set(values[state])
        OLDEST_QUEUED_AGE.labels(platform).set(values["oldest_queued_s"])
    return out
