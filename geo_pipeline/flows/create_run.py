"""Creating a run: validate the config (R1, R16), quote (R4) and expand (R3) it, then persist
snapshot, quote, run, batches, samples, the ledger's estimate and -- when confirmed -- the
reservation and the first dispatch, in ONE transaction (R2, R23): a short balance writes
nothing at all. The CLI, the launchpad job and the daily schedule all create runs here.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from datetime import UTC, date, datetime
from typing import Any

from geo_pipeline.billing import ledger
from geo_pipeline.domain.config import normalise_and_validate
from geo_pipeline.domain.plan import Plan, plan_for
from geo_pipeline.domain.platforms import Capabilities
from geo_pipeline.store import runs
from geo_pipeline.store.db import Conn


def new_run_id(today: date | None = None) -> str:
    day = (today or datetime.now(UTC).date()).strftime("%Y%m%d")
    return f"r{day}-{secrets.token_hex(4)}"


def plan_run(raw: Any, caps: Mapping[str, Capabilities], run_id: str | None = None) -> Plan:
    """Validate, quote and expand a collection config (a mapping or the launchpad's model) for
    ``run_id`` (default: a new one); raises ConfigError with every problem, or QuoteError."""
    config = normalise_and_validate(raw, caps)
    return plan_for(config, caps, run_id or new_run_id())


def create_run(
    conn: Conn,
    plan: Plan,
    *,
    monitor_id: str | None = None,
    scheduled_for: date | None = None,
    confirm: bool = True,
    dispatch: bool = True,
    monitor_config: Mapping[str, Any] | None = None,
) -> tuple[str, bool]:
    """Persist the plan in one transaction. Returns (run_id, created_now); re-creating the same
    run with the same config is a no-op, with another config a ``runs.RunConflict``.

    ``monitor_id``: default the config's monitor. ``monitor_config``: the raw, editable config
    saved as the monitor's (the run itself executes the frozen snapshot only, R2).
    ``confirm``: reserve the quote's estimated_max now (``ledger.InsufficientFunds`` when the
    balance is short, and then nothing is written). Work is dispatched only for a confirmed
    run."""
    with conn.transaction():
        created = runs.insert_run(
            conn,
            plan,
            monitor_id=monitor_id if monitor_id is not None else plan.config.monitor,
            scheduled_for=scheduled_for,
            monitor_config=monitor_config,
        )
        if not created:
            return plan.run_id, False
        ledger.record_run_created(conn, plan, confirm)
        if dispatch and confirm:
            runs.dispatch_new_run(conn, plan.run_id)
    return plan.run_id, True
