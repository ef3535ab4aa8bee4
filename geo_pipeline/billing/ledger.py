"""The append-only ledger (R23, R24). PLACEHOLDER BODIES: the billing issue (#7) implements them.

Interface used by the rest of the system (keep these signatures):

- ``record_run_created(conn, plan, confirm)``: called by ``store.runs.create_run`` inside its
  transaction. Posts the estimate; with ``confirm`` reserves ``estimated_max`` (raising
  ``InsufficientFunds`` so the whole run creation rolls back) and sets ``runs.confirmed_at``.
- ``post_charge(conn, charge)``: called by the worker inside the fenced completion transaction;
  idempotent on ``charge:<sample_id>:<attempt_no>``; returns the entry id or None when the
  platform's rule says the attempt is free or the charge already exists.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from geo_pipeline.store.db import Conn
    from geo_pipeline.store.runs import Plan


class InsufficientFunds(ValueError):
    """The tenant's available balance does not cover the reservation."""


@dataclass(frozen=True)
class ChargeRequest:
    tenant_id: str
    run_id: str
    sample_id: str
    attempt_no: int
    upstream_id: str
    platform: str
    mode: str
    upstream_outcome: str  # 'completed' or 'failed' (the upstream task's own outcome)
    deep_thinking_used: bool = False
    web_search_used: bool = False
    screenshot_used: bool = False


def record_run_created(conn: Conn, plan: Plan, confirm: bool) -> None:
    if confirm:
        conn.execute("UPDATE geo.runs SET confirmed_at = now() WHERE run_id = %s", (plan.run_id,))


def post_charge(conn: Conn, charge: ChargeRequest) -> int | None:
    del conn, charge
    return None
