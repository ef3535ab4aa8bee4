"""Service callbacks as the worker reads them (issue 31; migration 0037)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from geo_pipeline.store.queries import Q

if TYPE_CHECKING:
    from geo_pipeline.store.db import Conn


def task_for_key(conn: Conn, platform: str, idempotency_key: str) -> str | None:
    """The upstream task id a callback named for ``idempotency_key``; None when none came."""
    with conn.cursor() as cur:
        cur.execute(
            Q("webhooks.task_for_key"),
            {"platform": platform, "idempotency_key": idempotency_key},
        )
        row = cur.fetchone()
    return None if row is None else str(row["upstream_id"])
