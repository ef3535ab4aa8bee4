"""A tenant's own alerts (issue 37): one sensor that, every minute, finds each tenant's incidents
and sends each to that tenant's recipients (observability.tenant_routing), once per recipient.

Kinds: ``stuck_partition`` (a partition of the tenant's run past its publish deadline),
``mention_change`` (only changes analytics.brand_changes flags under its
Benjamini-Hochberg control, with both rates, their n and the day's question-clustered interval),
``resample_failed`` (a day whose re-sample made no run, with the reason) and ``reconciliation``
(a run whose charges and fee statements differ). Each message names the run to open
(`geo-pipeline runs show RUN`, the evidence through `runs export RUN`) or, for a failed
re-sample, the monitor and the Dagster run that tried.

Deliveries are recorded per (alert, recipient) in geo.alert_deliveries after the send worked:
a recipient whose delivery failed is tried again on the next tick, the others are not sent
twice. The operator's operations_alerts sensor (alerts.py) is unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import dagster as dg

from geo_pipeline.defs.operations.alerts import AlertThresholds, _num, _pct
from geo_pipeline.defs.resources import PostgresResource
from geo_pipeline.domain.billing import EXPLAINED
from geo_pipeline.observability.notify import Alert
from geo_pipeline.observability.tenant_routing import (
    Recipient,
    TenantAlert,
    notifier_for,
    route,
)
from geo_pipeline.settings import environment
from geo_pipeline.store.db import Conn
from geo_pipeline.store.queries import Q


def _rows(conn: Conn, name: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    with conn.cursor() as cur:
        cur.execute(Q(name), dict(params or {}))
        return [dict(r) for r in cur.fetchall()]


def run_link(run_id: str) -> dict[str, str]:
    return {
        "run": run_id,
        "open": f"geo-pipeline runs show {run_id}",
        "evidence": f"geo-pipeline runs export {run_id}",
    }


def tenant_incidents(conn: Conn, recent_days: int, stuck_grace_s: int = 900) -> list[TenantAlert]:
    """Every tenant's open incidents of the four kinds, each with its tenant and run."""
    out: list[TenantAlert] = []
    params = {"recent_days": recent_days}
    for r in _rows(conn, "tenant_alerts.stuck_partitions", {**params, "grace_s": stuck_grace_s}):
        key = f"stuck_partition:{r['run_id']}:{r['channel']}"
        summary = (
            f"partition {r['run_id']} / {r['channel']} is past its publish deadline, unpublished"
        )
        stuck: dict[str, Any] = {
            "deadline": r["publish_deadline_at"],
            "open samples": r["open_samples"],
            "samples": r["samples"],
            **run_link(r["run_id"]),
        }
        out.append(
            TenantAlert(
                Alert(key, "stuck_partition", summary, stuck),
                r["tenant_id"],
                r["monitor_id"],
                r["run_id"],
            )
        )
    for r in _rows(conn, "tenant_alerts.resample_failures", params):
        key = f"resample_failed:{r['monitor_id']}:{r['day']}"
        summary = (
            f"monitor {r['monitor_id']}: no run for {r['day']} ({r['reason_kind']}): "
            f"{str(r['reason']).splitlines()[0]}"
        )
        details: dict[str, Any] = {
            "monitor": r["monitor_id"],
            "day": str(r["day"]),
            "reason": r["reason"],
            "tries": r["tries"],
            "dagster run": r["dagster_run_id"] or "",
            "open": f"geo-pipeline monitors show {r['monitor_id']}",
        }
        out.append(
            TenantAlert(Alert(key, "resample_failed", summary, details), r["tenant_id"],
                        r["monitor_id"], None)
        )  # fmt: skip
    for r in _rows(conn, "tenant_alerts.mention_changes", params):
        key = (
            f"mention_change:{r['monitor_id']}:{r['channel']}:{r['brand']}:{r['scheduled_for']}"
            f":{r['comparison']}"
        )
        direction = "rose" if (r["rate_change"] or 0) > 0 else "fell"
        runs = list(r["run_ids"] or [])
        summary = (
            f"{r['brand']} on {r['channel']}: mention rate {direction} from "
            f"{_pct(r['prev_mention_rate'])} to {_pct(r['mention_rate'])} "
            f"({r['comparison'].replace('_', ' ')}; flagged at a false discovery rate of "
            f"{_pct(r['fdr_q'])})"
        )
        details = {
            "monitor": r["monitor_id"],
            "now": f"{r['scheduled_for']}: {r['mentions']}/{r['n']} = {_pct(r['mention_rate'])}",
            f"day's 95% interval (question-clustered, effective n {_num(r['n_effective'])})": (
                f"[{_pct(r['mention_rate_lower'])}, {_pct(r['mention_rate_upper'])}]"
            ),
            "before": f"{r['prev_mentions']}/{r['prev_n']} = {_pct(r['prev_mention_rate'])}",
            "test": f"p = {_num(r['p_value'], 4)}, Benjamini-Hochberg q = "
            f"{_num(r['q_value'], 4)} <= {r['fdr_q']} among {r['family_size']} tests",
        }
        if runs:
            details.update(run_link(runs[-1]))
        out.append(
            TenantAlert(Alert(key, "mention_change", summary, details), r["tenant_id"],
                        r["monitor_id"], runs[-1] if runs else None)
        )  # fmt: skip
    for r in _rows(
        conn, "tenant_alerts.reconciliation_differences", {**params, "explained": list(EXPLAINED)}
    ):
        key = f"reconciliation:{r['run_id']}:{r['currency']}"
        summary = (
            f"run {r['run_id']}: fee statements differ from our charges by "
            f"{r['difference_minor']} minor units {r['currency']}"
        )
        details = {
            "difference (theirs - ours, minor units)": r["difference_minor"],
            "lines": r["lines"],
            **run_link(r["run_id"]),
        }
        out.append(
            TenantAlert(Alert(key, "reconciliation", summary, details), r["tenant_id"],
                        r["monitor_id"], r["run_id"])
        )  # fmt: skip
    return out


def recipients(conn: Conn) -> list[Recipient]:
    return [
        Recipient(
            int(r["recipient_id"]),
            r["tenant_id"],
            r["monitor_id"],
            r["channel"],
            r["target"],
            tuple(r["kinds"]),
        )
        for r in _rows(conn, "tenant_alerts.recipients", {"tenant_id": None})
    ]


def deliver_tenant_alerts(
    conn: Conn, alerts: list[TenantAlert], env: Mapping[str, str], log: Any
) -> tuple[int, int]:
    """Send each alert to each of its recipients not yet sent to; (sent, failed)."""
    everyone = recipients(conn)
    done = {
        (r["alert_key"], int(r["recipient_id"]))
        for r in _rows(conn, "tenant_alerts.delivered", {"keys": [a.alert.key for a in alerts]})
    }
    sent = failed = 0
    for ta in alerts:
        for rcpt in route(ta, everyone):
            if (ta.alert.key, rcpt.recipient_id) in done:
                continue
            try:
                notifier_for(rcpt, env).send(ta.alert)
            except Exception as exc:  # RecipientUnavailable, HTTP, SMTP: retried next tick
                failed += 1
                log.warning(
                    "tenant %s alert %s to recipient %s not delivered, retrying next tick: %s: %s",
                    ta.tenant_id, ta.alert.key, rcpt.recipient_id, type(exc).__name__, exc,
                )  # fmt: skip
                continue
            with conn.transaction(), conn.cursor() as cur:
                cur.execute(
                    Q("tenant_alerts.record_delivery"),
                    {
                        "alert_key": ta.alert.key,
                        "recipient_id": rcpt.recipient_id,
                        "tenant_id": ta.tenant_id,
                        "kind": ta.alert.kind,
                        "run_id": ta.run_id,
                        "summary": ta.alert.summary[:2000],
                    },
                )
            sent += 1
    return sent, failed


@dg.sensor(
    name="tenant_alerts",
    minimum_interval_seconds=60,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Each tenant's own alerts — flagged mention-rate changes (Benjamini-Hochberg), "
    "failed re-samples with the reason, reconciliation differences, stuck partitions — to the "
    "webhook / e-mail recipients that tenant registered (`monitors recipients add`), never "
    "another tenant's; once per alert and recipient.",
)
def tenant_alerts(context: dg.SensorEvaluationContext, db: PostgresResource) -> dg.SkipReason:
    thresholds = AlertThresholds.from_env()
    with db.connect() as conn:
        alerts = tenant_incidents(conn, thresholds.recent_days, thresholds.stuck_grace_s)
        sent, failed = deliver_tenant_alerts(conn, alerts, environment(), context.log)
    return dg.SkipReason(f"{len(alerts)} tenant incidents; sent {sent}, failed {failed}")
