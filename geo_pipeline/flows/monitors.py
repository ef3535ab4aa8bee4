"""A monitor's lifecycle (issue 37): create, update, pause, resume, retire, each a guarded change
with an event in the same transaction, and the failed re-samples recorded with their reason.

A monitor saves the config the user wrote (re-validated against the registry on every re-sample,
so a registry change that breaks it is a failed re-sample with the reason, not a silent skip).
An update is a new revision used from the next run on; a run already created keeps its frozen
snapshot (R2), so each run's snapshot is the history of what it executed. Retired is final: the
id is never reused and its runs stay.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date
from typing import Any

from psycopg.types.json import Jsonb

from geo_pipeline.billing.errors import InsufficientFunds
from geo_pipeline.domain.cadence import CadenceError, parse_cadence
from geo_pipeline.domain.catalogue import PlatformDisabled, RegistryError
from geo_pipeline.domain.config_model import NormalisedConfig
from geo_pipeline.domain.config_problems import ConfigError
from geo_pipeline.domain.plan import QuoteError
from geo_pipeline.domain.platforms import Capabilities
from geo_pipeline.flows.create_run import quoted_plan
from geo_pipeline.store.db import Conn
from geo_pipeline.store.queries import Q


class MonitorError(ValueError):
    """A lifecycle change that is not allowed, with what to do instead."""


@dataclass(frozen=True)
class MonitorChange:
    monitor_id: str
    tenant_id: str
    event: str
    revision: int


def validated(
    conn: Conn, raw: Mapping[str, Any], caps: Mapping[str, Capabilities]
) -> NormalisedConfig:
    """The config checked as a run would be (every problem with its field path) and quoted at
    the prices in effect now, so a monitor that cannot be priced is refused at once."""
    return quoted_plan(conn, dict(raw), caps).config


def cadence_of(
    cron: str | None, timezone: str | None, default_tz: str
) -> tuple[str | None, str | None]:
    """(cron, timezone) to store: both NULL for the deployment's default cadence."""
    if cron is None:
        if timezone is not None:
            raise MonitorError("--timezone needs --cron (the default cadence has its own zone)")
        return None, None
    c = parse_cadence(cron, timezone or default_tz)
    return c.cron, c.timezone


def _event(
    conn: Conn,
    monitor: Mapping[str, Any],
    event: str,
    revision: int,
    actor: str,
    reason: str,
    config: Mapping[str, Any] | None = None,
) -> MonitorChange:
    with conn.cursor() as cur:
        cur.execute(
            Q("monitors.insert_event"),
            {
                "monitor_id": monitor["monitor_id"],
                "tenant_id": monitor["tenant_id"],
                "event": event,
                "revision": revision,
                "config": Jsonb(dict(config)) if config is not None else None,
                "cron": monitor.get("cron"),
                "timezone": monitor.get("timezone"),
                "actor": actor,
                "reason": reason,
            },
        )
    return MonitorChange(str(monitor["monitor_id"]), str(monitor["tenant_id"]), event, revision)


def get_monitor(conn: Conn, monitor_id: str) -> dict[str, Any]:
    with conn.cursor() as cur:
        cur.execute(Q("monitors.get_monitor"), {"monitor_id": monitor_id})
        row = cur.fetchone()
    if row is None:
        raise MonitorError(f"no monitor {monitor_id!r} (see `geo-pipeline monitors list`)")
    return dict(row)


def create_monitor(
    conn: Conn,
    raw: Mapping[str, Any],
    caps: Mapping[str, Capabilities],
    *,
    cron: str | None,
    timezone: str | None,
    default_tz: str,
    actor: str,
    reason: str = "",
) -> MonitorChange:
    """A new monitor from a collection config naming it (``monitor:``); its first run is made by
    the schedule on its cadence. An existing id (also a retired one) is refused."""
    plan = quoted_plan(conn, dict(raw), caps)
    config = plan.config
    if config.monitor is None:
        raise MonitorError(
            "the config names no monitor: add `monitor: <id>` (1-48 of A-Z a-z 0-9 _ -)"
        )
    cron, timezone = cadence_of(cron, timezone, default_tz)
    row = {
        "monitor_id": config.monitor,
        "tenant_id": config.tenant,
        "cron": cron,
        "timezone": timezone,
    }
    with conn.transaction(), conn.cursor() as cur:
        # The tenant row as a run's creation writes it (runs.upsert_tenant): a monitor may come
        # before the tenant's first run.
        cur.execute(
            Q("runs.upsert_tenant"), {"tenant_id": config.tenant, "currency": plan.quote.currency}
        )
        cur.execute(Q("monitors.insert_monitor"), {**row, "config": Jsonb(dict(raw))})
        if cur.fetchone() is None:
            existing = get_monitor(conn, config.monitor)
            raise MonitorError(
                f"monitor {config.monitor!r} already exists ({existing['status']}, tenant "
                f"{existing['tenant_id']}): change it with `monitors update`"
                + ("; a retired id is never reused" if existing["status"] == "retired" else "")
            )
        return _event(conn, row, "created", 1, actor, reason, raw)


def update_monitor(
    conn: Conn,
    monitor_id: str,
    caps: Mapping[str, Capabilities],
    *,
    raw: Mapping[str, Any] | None,
    cron: str | None,
    timezone: str | None,
    default_cadence: bool,
    default_tz: str,
    actor: str,
    reason: str = "",
) -> MonitorChange:
    """A new revision: a new config and/or cadence, used from the next run on (R2)."""
    current = get_monitor(conn, monitor_id)
    if current["status"] == "retired":
        raise MonitorError(f"monitor {monitor_id!r} is retired; create a new monitor instead")
    new_raw = dict(raw) if raw is not None else dict(current["config"])
    if raw is not None:
        config = validated(conn, new_raw, caps)
        if config.monitor not in (None, monitor_id):
            raise MonitorError(
                f"monitor: {config.monitor!r} in the config is not {monitor_id!r}; a monitor "
                "keeps its id (create a new one for another id)"
            )
        if config.tenant != current["tenant_id"]:
            raise MonitorError(
                f"tenant: {config.tenant!r} in the config is not the monitor's tenant "
                f"{current['tenant_id']!r}; a monitor never moves to another tenant"
            )
        new_raw["monitor"] = monitor_id
    if default_cadence:
        new_cron, new_tz = None, None
    elif cron is None and timezone is None:
        new_cron, new_tz = current["cron"], current["timezone"]
    else:
        new_cron, new_tz = cadence_of(
            cron or current["cron"], timezone or current["timezone"], default_tz
        )
    with conn.transaction(), conn.cursor() as cur:
        cur.execute(
            Q("monitors.update_config"),
            {
                "monitor_id": monitor_id,
                "config": Jsonb(new_raw),
                "cron": new_cron,
                "timezone": new_tz,
            },
        )
        row = cur.fetchone()
        if row is None:
            raise MonitorError(f"monitor {monitor_id!r} was retired meanwhile; nothing changed")
        revision = int(row["revision"])
        return _event(
            conn,
            {**current, "cron": new_cron, "timezone": new_tz},
            "updated",
            revision,
            actor,
            reason,
            new_raw,
        )


# event -> (query, the states it may leave, what the refusal says)
TRANSITIONS = {
    "paused": ("monitors.pause", ("active",), "only an active monitor can be paused"),
    "resumed": ("monitors.resume", ("paused",), "only a paused monitor can be resumed"),
    "retired": ("monitors.retire", ("active", "paused"), "it is already retired"),
}


def change_state(
    conn: Conn, monitor_id: str, event: str, actor: str, reason: str = ""
) -> MonitorChange:
    """Pause, resume or retire: a guarded UPDATE (the allowed-from states are its WHERE) and its
    event, in one transaction; a refused change writes nothing and says why."""
    query, _allowed, refusal = TRANSITIONS[event]
    current = get_monitor(conn, monitor_id)
    with conn.transaction(), conn.cursor() as cur:
        cur.execute(Q(query), {"monitor_id": monitor_id})
        row = cur.fetchone()
        if row is None:
            raise MonitorError(f"monitor {monitor_id!r} is {current['status']}: {refusal}")
        return _event(conn, current, event, int(row["revision"]), actor, reason)


# ----------------------------------------------------------------------- failed re-samples
REASON_KINDS = ("insufficient_balance", "invalid_config", "disabled_engine", "quote", "conflict")


def reason_kind(exc: BaseException) -> str:
    """What kind of reason stopped a re-sample: what the person must fix."""
    if isinstance(exc, InsufficientFunds):
        return "insufficient_balance"
    if isinstance(exc, PlatformDisabled):
        return "disabled_engine"
    if isinstance(exc, ConfigError):
        # A platform the registry no longer offers (its key variable unset) reads as disabled.
        if any("disabled" in str(p) for p in exc.problems):
            return "disabled_engine"
        return "invalid_config"
    if isinstance(exc, RegistryError | CadenceError):
        return "invalid_config"
    if isinstance(exc, QuoteError):
        return "quote"
    return "conflict"


def record_resample_failure(
    conn: Conn, monitor_id: str, day: date, exc: BaseException, dagster_run_id: str | None
) -> str:
    """Record why the day's re-sample of a monitor made no run (its own transaction, after the
    failed one was rolled back); returns the reason kind. Read by `monitors show` and the
    tenant's resample_failed alert."""
    kind = reason_kind(exc)
    with conn.transaction(), conn.cursor() as cur:
        cur.execute(Q("monitors.get_monitor"), {"monitor_id": monitor_id})
        monitor = cur.fetchone()
        if monitor is None:
            return kind
        cur.execute(
            Q("monitors.record_failure"),
            {
                "monitor_id": monitor_id,
                "tenant_id": monitor["tenant_id"],
                "day": day,
                "reason_kind": kind,
                "reason": str(exc)[:2000],
                "dagster_run_id": dagster_run_id,
            },
        )
    return kind
