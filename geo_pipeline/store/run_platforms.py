"""How each platform of a run was collected, frozen with the run (issue 31, migration 0054):
its ``access`` (api / scraped / browser) and the ``engine`` it asks, from the connector
registry when the run is created. The analytics views that keep scraped and API answers apart
(fan-out, citation gap, UI-vs-API agreement) and the reports' access column read these rows,
so a later registry edit never relabels an old run."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from psycopg.types.json import Jsonb

from geo_pipeline.store.db import Conn
from geo_pipeline.store.queries import Q, fetch_all


def platform_rows(platforms: Iterable[str]) -> list[dict[str, str]]:
    """Access and engine of each platform the registry knows (offered or disabled for want of
    its key); a platform it does not know is left out (the views say 'unknown')."""
    from geo_pipeline.connectors.registry import load_registry

    reg = load_registry()
    known = {**reg.disabled, **reg.entries}
    rows = []
    for p in sorted(set(platforms)):
        entry = known.get(p)
        if entry is not None:
            caps = entry.capabilities
            rows.append({"platform": p, "access": caps.access, "engine": caps.engine_name})
    return rows


def freeze(conn: Conn, run_id: str, tenant_id: str, platforms: Iterable[str]) -> None:
    """Record the run's platforms' access and engine (first record wins)."""
    rows = platform_rows(platforms)
    if rows:
        conn.execute(
            Q("ui_api.freeze_run_platforms"),
            {"run_id": run_id, "tenant_id": tenant_id, "rows": Jsonb(rows)},
        )


def freeze_missing(conn: Conn, run_id: str) -> None:
    """For a run created before migration 0054: freeze its platforms now, from the registry."""
    missing = fetch_all(conn, "ui_api.unfrozen_platforms", {"run_id": run_id})
    if missing:
        freeze(conn, run_id, str(missing[0]["tenant_id"]), [r["platform"] for r in missing])


def channel_access(conn: Conn, run_id: str) -> dict[str, dict[str, Any]]:
    """channel -> {access, engine} as frozen for the run."""
    return {
        str(r["channel"]): {"access": r["access"], "engine": r["engine"]}
        for r in fetch_all(conn, "ui_api.channel_access", {"run_id": run_id})
    }
