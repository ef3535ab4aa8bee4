"""Settling a run (R23, R24): release the unused reservation once nothing more can cost money,
import the fee statements of the days the run's fees fall on through each platform's
connector, and reconcile our ledger against them. The billing_reconciliation asset, the CLI and
the demo all settle here, so they agree on what "settled" means.

Each step is idempotent (the release by its key, a statement by its content digest, the
reconciliation rewrites the run's lines in one transaction), so settling again later picks up
statements published since. The caller commits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from geo_pipeline.billing import ledger, reconcile
from geo_pipeline.domain.billing import ReconciliationSummary
from geo_pipeline.domain.catalogue import Registry, RegistryError
from geo_pipeline.domain.words import reconciliation_text
from geo_pipeline.store import status as statusmod
from geo_pipeline.store.db import Conn


@dataclass(frozen=True)
class Settlement:
    run_id: str
    summary: ReconciliationSummary
    # The release, when the run was closed (now or before); None when it was not tried or
    # refused -- ``close_refused`` says why (e.g. acceptance still unknown somewhere, R12).
    closed: ledger.CloseResult | None
    close_refused: str | None
    imported: tuple[reconcile.ImportResult, ...]
    # (platform, day) statements that could not be fetched: their lines stay pending.
    unavailable: tuple[str, ...]


def settle_run(
    conn: Conn, run_id: str, *, registry: Registry | None, close: bool = True
) -> Settlement:
    """Close (only when every sample is terminal), import statements (none when ``registry``
    is None), reconcile. A statement that cannot be fetched is reported, not raised."""
    closed = None
    close_refused = None
    if close and statusmod.run_status(conn, run_id).terminal:
        try:
            closed = ledger.close_run(conn, run_id)
        except ledger.BillingError as exc:
            close_refused = str(exc)
    imported: list[reconcile.ImportResult] = []
    unavailable: list[str] = []
    if registry is not None:
        import asyncio

        needed = reconcile.statement_days_needed(conn, run_id)
        imported, unavailable = asyncio.run(_import_statements(conn, registry, needed))
    summary = reconcile.reconcile_run(conn, run_id)
    return Settlement(run_id, summary, closed, close_refused, tuple(imported), tuple(unavailable))


async def _import_statements(
    conn: Conn, registry: Registry, needed: dict[str, list[str]]
) -> tuple[list[reconcile.ImportResult], list[str]]:
    # Here, not at the top: `runs show` reads run_money below and needs no HTTP client (every
    # connector, httpx) to start (issue 30).
    import httpx

    from geo_pipeline.connectors.base import ConnectorError
    from geo_pipeline.connectors.factory import ConnectorSet

    imported: list[reconcile.ImportResult] = []
    unavailable: list[str] = []
    async with ConnectorSet(registry) as connectors:
        for platform, days in sorted(needed.items()):
            for day in days:
                try:
                    result = await reconcile.afetch_and_import(conn, connectors[platform], day)
                except (ConnectorError, httpx.HTTPError, RegistryError) as exc:
                    unavailable.append(f"{platform} {day}: {type(exc).__name__}: {exc}"[:300])
                    continue
                imported.append(result)
    return imported, unavailable


def describe(s: Settlement) -> dict[str, Any]:
    """The settlement as plain values (for --json and the demo's summary)."""
    return {
        "run_id": s.run_id,
        "reconciliation": s.summary.as_dict(),
        "closed": None
        if s.closed is None
        else {"released_minor": s.closed.released.amount_minor, "closed_now": s.closed.closed_now},
        "close_refused": s.close_refused,
        "imports": [i.as_dict() for i in s.imported],
        "unavailable": list(s.unavailable),
    }


def run_money(conn: Conn, run_id: str) -> dict[str, Any]:
    """A run's money as `runs show` and the reports read it: the frozen estimate, the ledger by
    entry kind (integer minor units), whether it is closed (settled), and -- once reconciled --
    the difference split into unexplained and explained with its direction, in words."""
    led = ledger.run_ledger(conn, run_id)
    by_kind: dict[str, int] = {}
    for e in led["entries"]:
        by_kind[str(e["kind"])] = by_kind.get(str(e["kind"]), 0) + int(e["amount_minor"])
    currency = led["currency"]
    summary = reconcile.stored_summary(conn, run_id)
    return {
        "currency": currency,
        "estimated_max_minor": led["estimated_max_minor"],
        "reserved_minor": by_kind.get("reserve", 0),
        "charged_minor": by_kind.get("charge", 0),
        "released_minor": by_kind.get("release", 0),
        "refunded_minor": by_kind.get("refund", 0),
        "closed_at": led["closed_at"],
        "reconciled_lines": summary.lines,
        "unexplained_difference_minor": summary.unexplained_difference_minor,
        "explained_difference_minor": summary.explained_difference_minor,
        "reconciliation": reconciliation_text(
            summary.unexplained_difference_minor,
            summary.explained_difference_minor,
            summary.pending_ours_minor,
            currency,
            absolute_minor=summary.unexplained_absolute_minor,
            unexplained_lines=summary.unexplained_lines,
            no_vendor_bill_minor=summary.no_vendor_bill_ours_minor,
            explained_exact_minor=summary.explained_difference_exact_minor,
        )
        if summary.lines
        else ["not reconciled yet"],
    }
