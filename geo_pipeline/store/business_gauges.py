"""Gauges of R26 that no single worker sees: the evidence-missing rate and the reconciliation
difference are properties of the database, not of one process. ``refresh(conn)`` recomputes
them; a long-running process that exposes /metrics (the sweeper in production, the demo process
on a laptop) calls it on its own interval."""

from __future__ import annotations

from geo_pipeline.observability.metrics import EVIDENCE_MISSING_RATE, RECONCILIATION_DIFF
from geo_pipeline.store.db import Conn
from geo_pipeline.store.queries import Q


def refresh(conn: Conn, window_s: float = 3600.0) -> dict[str, object]:
    """Set the gauges from the database; returns the values (for logs and tests)."""
    with conn.cursor() as cur:
        cur.execute(Q("ops.evidence_missing_rate"), {"window_s": window_s})
        row = dict(cur.fetchone() or {})
        cur.execute(Q("ops.reconciliation_difference"))
        diffs = {str(r["currency"]).strip(): int(r["difference_minor"]) for r in cur.fetchall()}
    completed = int(row.get("completed") or 0)
    rate = (int(row.get("missing") or 0) / completed) if completed else 0.0
    EVIDENCE_MISSING_RATE.set(rate)
    for currency, diff in diffs.items():
        RECONCILIATION_DIFF.labels(currency).set(diff)
    return {"evidence_missing_rate": rate, "completed": completed, "reconciliation": diffs}
