"""Persisting a plan: config snapshot, quote snapshot, run, batches and samples, in one
transaction (R2, R3, R5, R23). Re-planning the same config for the same run id is a no-op; the
same run id with a different config is refused.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

from psycopg.types.json import Jsonb

from geo_pipeline.billing import ledger
from geo_pipeline.domain.config import ConfigError, NormalisedConfig, Problem
from geo_pipeline.domain.plan import Batch, PlannedSample, Quote, assign_batches, expand, quote
from geo_pipeline.domain.platforms import Capabilities
from geo_pipeline.store.db import Conn
from geo_pipeline.store.queries import Q


class RunConflict(ValueError):
    """The run id exists with a different config snapshot."""


class RunNotFound(LookupError):
    pass


@dataclass(frozen=True)
class Plan:
    run_id: str
    config: NormalisedConfig
    quote: Quote
    samples: list[PlannedSample]
    batches: list[Batch]

    def summary(self) -> dict[str, Any]:
        per_channel: dict[str, int] = {}
        for s in self.samples:
            per_channel[s.channel] = per_channel.get(s.channel, 0) + 1
        c = self.config
        return {
            "run_id": self.run_id,
            "tenant": c.tenant,
            "snapshot_id": c.snapshot_id,
            "questions": len(c.questions),
            "targets": len(c.targets),
            "repeats": c.repeats,
            "samples": len(self.samples),
            "formula": f"{len(c.questions)} x {len(c.targets)} x {c.repeats} = {len(self.samples)}",
            "channels": per_channel,
            "batches": [
                {"batch_no": b.batch_no, "size": b.size, "platform_counts": b.platform_counts}
                for b in self.batches
            ],
            "submit_cap": c.submit_cap,
            "duplicates_removed": [str(p) for p in c.duplicates],
            "quote": self.quote.as_dict(),
        }


def new_run_id(today: date | None = None) -> str:
    day = (today or datetime.now(UTC).date()).strftime("%Y%m%d")
    return f"r{day}-{secrets.token_hex(4)}"


# A run id is also a Dagster dynamic partition key: no '|', ',', '[' or ']' (DESIGN.md section 5);
# the same rule is the CHECK on geo.runs.run_id.
RUN_ID_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def plan_for(config: NormalisedConfig, caps: Mapping[str, Capabilities], run_id: str) -> Plan:
    """Quote a validated config with its platforms' prices (R4) and expand it (R3)."""
    return build_plan(config, quote(config, {p: c.prices for p, c in caps.items()}), run_id)


def build_plan(config: NormalisedConfig, quote: Quote, run_id: str) -> Plan:
    if not RUN_ID_RE.match(run_id):
        raise ConfigError(
            [
                Problem(
                    "run_id", f"{run_id!r} is not a run id: use 1-64 of A-Z, a-z, 0-9, '_' or '-'"
                )
            ]
        )
    samples, batches = assign_batches(
        expand(config, run_id), config.submit_cap, config.platform_caps
    )
    return Plan(run_id, config, quote, samples, batches)


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
    """Persist the plan in one transaction. Returns (run_id, created_now).

    ``monitor_config``: the raw, editable config to save as the monitor's config (when the run
    belongs to a monitor); the run itself executes the frozen snapshot only (R2).
    ``confirm``: reserve the quote's estimated_max now (billing refuses when the balance is
    short, and then nothing at all is written). Work is dispatched only for a confirmed run."""
    c = plan.config
    monitor_id = monitor_id if monitor_id is not None else c.monitor
    with conn.transaction(), conn.cursor() as cur:
        cur.execute(Q("runs.lock_run"), {"run_id": plan.run_id})
        cur.execute(Q("runs.get_run"), {"run_id": plan.run_id})
        existing = cur.fetchone()
        if existing is not None:
            row = dict(existing) if isinstance(existing, Mapping) else None
            if row is None or row["snapshot_id"] != c.snapshot_id:
                raise RunConflict(
                    f"run {plan.run_id} already exists with another config snapshot; "
                    "a changed config needs a new run id"
                )
            return plan.run_id, False
        cur.execute(
            Q("runs.upsert_tenant"), {"tenant_id": c.tenant, "currency": plan.quote.currency}
        )
        if monitor_id is not None:
            cur.execute(
                Q("runs.upsert_monitor"),
                {
                    "monitor_id": monitor_id,
                    "tenant_id": c.tenant,
                    "config": Jsonb(dict(monitor_config) if monitor_config else c.canonical()),
                },
            )
            if cur.fetchone() is None:
                raise RunConflict(f"monitor {monitor_id!r} belongs to another tenant")
        cur.execute(
            Q("runs.insert_snapshot"),
            {"snapshot_id": c.snapshot_id, "tenant_id": c.tenant, "config": Jsonb(c.canonical())},
        )
        cur.execute(
            Q("runs.insert_question_revisions"),
            {
                "revisions": [q.revision for q in c.questions],
                "texts": [q.text for q in c.questions],
            },
        )
        q = plan.quote
        cur.execute(
            Q("runs.insert_quote"),
            {
                "quote_id": q.quote_id,
                "tenant_id": c.tenant,
                "currency": q.currency,
                "estimated_max_minor": q.estimated_max.amount_minor,
                "price_versions": Jsonb(q.price_versions),
            },
        )
        if cur.fetchone() is not None:
            cur.executemany(
                Q("runs.insert_quote_line"),
                [
                    {
                        "quote_id": q.quote_id,
                        "line_no": i,
                        **line.__dict__,
                        "amount_minor": line.amount_minor,
                    }
                    for i, line in enumerate(q.lines)
                ],
            )
        cur.execute(
            Q("runs.insert_run"),
            {
                "run_id": plan.run_id,
                "tenant_id": c.tenant,
                "monitor_id": monitor_id,
                "snapshot_id": c.snapshot_id,
                "quote_id": q.quote_id,
                "scheduled_for": scheduled_for,
                "priority": c.priority,
                "sample_count": len(plan.samples),
            },
        )
        cur.executemany(
            Q("runs.insert_batch"),
            [
                {
                    "run_id": plan.run_id,
                    "batch_no": b.batch_no,
                    "size": b.size,
                    "platform_counts": Jsonb(b.platform_counts),
                }
                for b in plan.batches
            ],
        )
        # COPY: a 100k-sample run is one round trip of rows, not 100k statements.
        with cur.copy(Q("runs.copy_samples")) as copy:  # type: ignore[arg-type]
            for s in plan.samples:
                copy.write_row(
                    (
                        s.sample_id,
                        s.run_id,
                        c.tenant,
                        s.batch_no,
                        s.question_revision,
                        s.question_index,
                        s.platform,
                        s.device,
                        s.region,
                        s.mode,
                        s.repeat_index,
                        s.screenshot_policy,
                        c.priority,
                    )
                )
        # Estimate (and, when confirmed, reservation) in the same transaction (R23).
        ledger.record_run_created(conn, plan, confirm)
        if dispatch and confirm:
            cur.execute(Q("runs.dispatch_new_run"), {"run_id": plan.run_id})
    return plan.run_id, True


def dispatch(conn: Conn, run_id: str, channel: str | None = None) -> int:
    """Queue collect hints for never-dispatched samples of a run (or one channel), one per
    (batch, channel); returns how many samples the new hints cover. Idempotent."""
    with conn.transaction(), conn.cursor() as cur:
        params = {"run_id": run_id, "channel": channel}
        cur.execute(Q("runs.mark_dispatched"), params)  # workers may claim it from now on
        cur.execute(Q("runs.dispatch_collect"), params)
        row = cur.fetchone()
    if row is None:
        return 0
    return int(row["n"] if isinstance(row, dict) else row[0])


def get_run(conn: Conn, run_id: str) -> dict[str, Any]:
    with conn.cursor() as cur:
        cur.execute(Q("runs.get_run"), {"run_id": run_id})
        row = cur.fetchone()
    if row is None:
        raise RunNotFound(f"no run with id {run_id!r}")
    return dict(row)


def run_config(conn: Conn, run_id: str) -> NormalisedConfig:
    """The frozen config snapshot the run executes (R2)."""
    run = get_run(conn, run_id)
    with conn.cursor() as cur:
        cur.execute(Q("runs.get_snapshot"), {"snapshot_id": run["snapshot_id"]})
        row = cur.fetchone()
    assert row is not None
    return NormalisedConfig.from_canonical(dict(row)["config"])


def list_runs(conn: Conn, tenant_id: str | None = None, limit: int = 50) -> list[dict[str, Any]]:
    with conn.cursor() as cur:
        cur.execute(Q("runs.list_runs"), {"tenant_id": tenant_id, "limit": limit})
        return [dict(r) for r in cur.fetchall()]


def quote_lines(conn: Conn, quote_id: str) -> list[dict[str, Any]]:
    with conn.cursor() as cur:
        cur.execute(Q("runs.quote_lines"), {"quote_id": quote_id})
        return [dict(r) for r in cur.fetchall()]


def batches(conn: Conn, run_id: str) -> list[dict[str, Any]]:
    with conn.cursor() as cur:
        cur.execute(Q("runs.batches"), {"run_id": run_id})
        return [dict(r) for r in cur.fetchall()]
