"""Alerts people act on: one Dagster sensor that, every minute, looks for the incidents an on-call
engineer must hear about and tells them once, then once more when it clears.

Incidents (docs/operations.md has a runbook section per kind):
- ``blocking_check``: the latest evaluation of a blocking asset check failed for a partition;
- ``stuck_partition``: a (run, channel) past its publish deadline plus a grace, unpublished;
- ``dead_letters`` / ``uncertain``: more than a threshold of open dead letters / uncertain samples;
- ``reconciliation``: a run whose charges and fee statements disagree;
- ``account_suspended`` / ``account_needs_login`` / ``page_changed``: the browser lane's
  accounts and pages that wait for a person (issue #32);
- ``mention_change``: a brand mention-rate change ``analytics.brand_changes`` flags (question-
  clustered test, Benjamini-Hochberg across the day's brand x channel family; day over day or
  rolling 7 days); the message carries both rates, their n, the q and the day's question-
  clustered interval with its effective n (``analytics.brand_trends``).

The open incidents live in the sensor's cursor, keyed by a stable identity: a condition that
holds on every tick is one alert, not one per minute; when it no longer holds the sensor sends a
resolve message and forgets it. A delivery that fails leaves the incident unreported, so the
next tick tries again. Thresholds: GEO_ALERT_DEAD_LETTERS (10), GEO_ALERT_UNCERTAIN (50),
GEO_ALERT_STUCK_GRACE_S (900), GEO_ALERT_RECENT_DAYS (7). Delivery:
geo_pipeline.observability.notify.
"""

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import dagster as dg

from geo_pipeline.defs.resources import PostgresResource
from geo_pipeline.domain.billing import EXPLAINED
from geo_pipeline.observability.notify import Alert, Notifier, deliver, notifiers_from_env
from geo_pipeline.settings import Settings, settings
from geo_pipeline.store.db import Conn
from geo_pipeline.store.queries import Q


@dataclass(frozen=True)
class AlertThresholds:
    dead_letters: int = 10
    uncertain: int = 50
    stuck_grace_s: int = 900
    recent_days: int = 7

    @classmethod
    def from_env(cls, env: Settings | None = None) -> "AlertThresholds":
        """The thresholds the settings hold (GEO_ALERT_*; default ``settings()``)."""
        env = settings() if env is None else env
        return cls(
            dead_letters=env.alert_dead_letters,
            uncertain=env.alert_uncertain,
            stuck_grace_s=env.alert_stuck_grace_s,
            recent_days=env.alert_recent_days,
        )


def _rows(conn: Conn, name: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    with conn.cursor() as cur:
        cur.execute(Q(name), dict(params or {}))
        return [dict(r) for r in cur.fetchall()]


def _pct(v: Any) -> str:
    return "n/a" if v is None else f"{float(v):.1%}"


def _num(v: Any, digits: int = 1) -> str:
    return "n/a" if v is None else f"{float(v):.{digits}f}"


def database_incidents(conn: Conn, t: AlertThresholds) -> dict[str, Alert]:
    """The incidents PostgreSQL shows right now."""
    out: dict[str, Alert] = {}
    for r in _rows(
        conn, "alerts.stuck_partitions", {"grace_s": t.stuck_grace_s, "recent_days": t.recent_days}
    ):
        key = f"stuck_partition:{r['run_id']}:{r['channel']}"
        out[key] = Alert(
            key,
            "stuck_partition",
            f"partition {r['run_id']} / {r['channel']} is past its publish deadline, unpublished",
            {
                "deadline": r["publish_deadline_at"],
                "open samples": r["open_samples"],
                "samples": r["samples"],
            },
        )
    counts = _rows(conn, "alerts.open_counts")[0]
    if int(counts["dead_letters"]) > t.dead_letters:
        out["dead_letters"] = Alert(
            "dead_letters",
            "dead_letters",
            f"{counts['dead_letters']} open dead letters (threshold {t.dead_letters})",
            {"open dead letters": counts["dead_letters"]},
        )
    if int(counts["uncertain"]) > t.uncertain:
        out["uncertain"] = Alert(
            "uncertain",
            "uncertain",
            f"{counts['uncertain']} samples with unknown upstream acceptance "
            f"(threshold {t.uncertain})",
            {"uncertain samples": counts["uncertain"]},
        )
    for r in _rows(conn, "alerts.reconciliation_differences", {"explained": list(EXPLAINED)}):
        key = f"reconciliation:{r['run_id']}:{r['currency']}"
        out[key] = Alert(
            key,
            "reconciliation",
            f"run {r['run_id']}: fee statements differ from our charges by "
            f"{r['absolute_minor']} minor units {r['currency']} on {r['lines']} unexplained "
            f"line(s) (sum of |theirs - ours|; theirs - ours {r['difference_minor']})",
            {
                "difference (theirs - ours, minor units)": r["difference_minor"],
                "unexplained |theirs - ours| (minor units)": r["absolute_minor"],
                "lines": r["lines"],
            },
        )
    for r in _rows(conn, "alerts.flagged_mention_changes", {"recent_days": t.recent_days}):
        key = (
            f"mention_change:{r['monitor_id']}:{r['channel']}:{r['brand']}:{r['scheduled_for']}"
            + ("" if r["comparison"] == "day_over_day" else f":{r['comparison']}")
        )
        direction = "rose" if (r["rate_change"] or 0) > 0 else "fell"
        if r["comparison"] == "day_over_day":
            before = f"{r['prev_from']}"
            what = "day over day"
        else:
            before = f"{r['prev_from']}..{r['prev_to']}"
            what = "last 7 days against the 7 before"
        out[key] = Alert(
            key,
            "mention_change",
            f"{r['brand']} on {r['channel']}: mention rate {direction} from "
            f"{_pct(r['prev_mention_rate'])} to {_pct(r['mention_rate'])} ({what}; flagged at "
            f"a false discovery rate of {_pct(r['fdr_q'])})",
            {
                "monitor": r["monitor_id"],
                "now": f"{r['scheduled_for']}: {r['mentions']}/{r['n']} = "
                f"{_pct(r['mention_rate'])}",
                "day's 95% interval (question-clustered, effective n "
                f"{_num(r['n_effective'])})": f"[{_pct(r['mention_rate_lower'])}, "
                f"{_pct(r['mention_rate_upper'])}]",
                "before": f"{before}: {r['prev_mentions']}/{r['prev_n']} = "
                f"{_pct(r['prev_mention_rate'])}",
                "test": f"question-clustered change over {r['questions']} questions, "
                f"p = {_num(r['p_value'], 4)}, Benjamini-Hochberg q = {_num(r['q_value'], 4)} "
                f"<= {r['fdr_q']} among {r['family_size']} brand x channel tests of the day",
                "runs": ", ".join(r["run_ids"] or []),
            },
        )
    out.update(account_incidents(conn))
    out.update(page_incidents(conn))
    return out


def account_incidents(conn: Conn) -> dict[str, Alert]:
    """Browser-lane accounts that wait for a person (issue #32): suspended by a captcha or risk
    page (no retry storm: nothing uses it until it is resumed), or logged out (its samples
    wait). A worker sees these first; the alert is what reaches an operator."""
    out: dict[str, Alert] = {}
    for r in _rows(conn, "alerts.accounts_needing_a_person"):
        platform, account = r["platform"], r["account_id"]
        suspended = r["state"] == "suspended"
        out[f"account:{platform}:{account}"] = Alert(
            f"account:{platform}:{account}",
            "account_suspended" if suspended else "account_needs_login",
            f"{platform} account {account} "
            + ("is suspended" if suspended else "needs a login")
            + ": it sends nothing until a person acts",
            {
                "reason": r["state_reason"] or r["state"],
                "since": r["state_changed_at"],
                "do": (
                    "solve the page in a real browser with this account, then "
                    f"`geo-pipeline accounts resume {platform} {account}`"
                    if suspended
                    else f"`geo-pipeline accounts login {platform} {account} --storage-state "
                    "FILE` (a fresh export of a person's login)"
                ),
            },
        )
    return out


def page_incidents(conn: Conn) -> dict[str, Alert]:
    """Browser-lane platforms whose page layout changed (issue #32): the app's page no longer
    has the controls the platform module's selectors name, so nothing can be asked there until
    the selectors are updated. One incident per platform, cleared by the next successful send."""
    out: dict[str, Alert] = {}
    for r in _rows(conn, "alerts.pages_changed"):
        platform = r["platform"]
        out[f"page_changed:{platform}"] = Alert(
            f"page_changed:{platform}",
            "page_changed",
            f"{platform}: the page layout changed; nothing is sent there (its samples wait "
            "once, then fail with unavailable:layout_changed:waits_spent)",
            {
                "seen by": ", ".join(r["accounts"] or []),
                "since": r["since"],
                "missing": r["detail"],
                "do": "update the platform's selectors (geo_pipeline/connectors/browser/"
                "<app>.py), then re-run the failed samples; see docs/browser-lane.md",
            },
        )
    return out


def _failed_partitions(
    instance: dg.DagsterInstance, check: dg.AssetCheckKey, spec: dg.AssetCheckSpec, history: int
) -> list[tuple[str | None, str]]:
    """(partition, Dagster run id) of each partition whose latest evaluation of ``check`` failed.

    A partitioned check (defs/factory.py: check_spec) is read from the status the UI shows per
    partition (Dagster's asset check state), so a partition that failed stays an incident
    however many other partitions pass after it. An unpartitioned check is read from its recent
    history."""
    from dagster._core.definitions.partitions.subset import PartitionsSubset
    from dagster._core.event_api import PartitionKeyFilter
    from dagster._core.storage.asset_check_execution_record import (
        AssetCheckExecutionRecordStatus,
        AssetCheckExecutionResolvedStatus,
    )

    storage = instance.event_log_storage
    if spec.partitions_def is not None:
        with dg.partition_loading_context(dynamic_partitions_store=instance):
            state = storage.get_asset_check_state([(check, spec.partitions_def)])[check]
            failed = state.subsets.get(AssetCheckExecutionResolvedStatus.FAILED)
            subset = failed.subset_value if failed is not None else None
            keys = (
                sorted(subset.get_partition_keys()) if isinstance(subset, PartitionsSubset) else []
            )
        out: list[tuple[str | None, str]] = []
        for key in keys:
            latest = storage.get_latest_asset_check_execution_by_key(
                [check], partition_filter=PartitionKeyFilter(key=key)
            ).get(check)
            out.append((key, latest.run_id if latest else ""))
        return out
    seen: set[str | None] = set()
    out = []
    for rec in storage.get_asset_check_execution_history(check, history):
        if rec.partition in seen or rec.status == AssetCheckExecutionRecordStatus.PLANNED:
            continue
        seen.add(rec.partition)
        if rec.status == AssetCheckExecutionRecordStatus.FAILED:
            out.append((rec.partition, rec.run_id))
    return out


def blocking_check_incidents(
    instance: dg.DagsterInstance, repository: dg.RepositoryDefinition, history: int = 200
) -> dict[str, Alert]:
    """Blocking checks whose latest evaluation, per partition, failed."""
    graph = repository.asset_graph
    out: dict[str, Alert] = {}
    for check in sorted(graph.asset_check_keys, key=lambda k: k.to_user_string()):
        spec = graph.get_check_spec(check)
        if not spec.blocking:
            continue
        for partition, run_id in _failed_partitions(instance, check, spec, history):
            where = partition or "(unpartitioned)"
            key = f"blocking_check:{check.to_user_string()}:{where}"
            out[key] = Alert(
                key,
                "blocking_check",
                f"blocking check {check.name} failed on {check.asset_key.to_user_string()} "
                f"{where}: its downstream assets were not materialised",
                {
                    "asset": check.asset_key.to_user_string(),
                    "check": check.name,
                    "partition": where,
                    "dagster run": run_id,
                },
            )
    return out


def reconcile(
    open_incidents: Mapping[str, Mapping[str, str]], current: Mapping[str, Alert]
) -> tuple[list[Alert], list[Alert]]:
    """(new incidents to announce, cleared incidents to resolve): pure, for the cursor."""
    new = [a for k, a in sorted(current.items()) if k not in open_incidents]
    cleared = [
        Alert(k, v["kind"], v["summary"], {"status": "cleared"}, resolved=True)
        for k, v in sorted(open_incidents.items())
        if k not in current
    ]
    return new, cleared


def run_alerts(
    cursor: str | None,
    current: Mapping[str, Alert],
    notifiers: list[Notifier],
    log: Any,
) -> tuple[str, list[Alert]]:
    """Announce new incidents and resolve cleared ones; returns the new cursor and what was sent.
    An alert whose delivery failed everywhere stays as it was, to be retried next tick."""
    open_incidents: dict[str, dict[str, str]] = json.loads(cursor) if cursor else {}
    new, cleared = reconcile(open_incidents, current)
    sent: list[Alert] = []
    for alert in [*new, *cleared]:
        failures = deliver(notifiers, alert)
        if notifiers and len(failures) == len(notifiers):
            log.warning("alert %s not delivered, retrying next tick: %s", alert.key, failures)
            continue
        for f in failures:
            log.warning("alert %s: %s", alert.key, f)
        (log.info if alert.resolved else log.warning)("%s", alert.text())
        sent.append(alert)
        if alert.resolved:
            open_incidents.pop(alert.key, None)
        else:
            open_incidents[alert.key] = {"kind": alert.kind, "summary": alert.summary}
    return json.dumps(open_incidents, sort_keys=True), sent


@dg.sensor(
    name="operations_alerts",
    minimum_interval_seconds=60,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Failed blocking checks, stuck partitions, dead letters and uncertain samples "
    "above threshold, reconciliation differences, mention-rate changes flagged after "
    "false-discovery-rate control: one alert per incident to the webhook / e-mail of the "
    "environment, and a resolve message.",
)
def operations_alerts(context: dg.SensorEvaluationContext, db: PostgresResource) -> dg.SkipReason:
    thresholds = AlertThresholds.from_env()
    with db.connect() as conn:
        current = database_incidents(conn, thresholds)
    if context.repository_def is not None:
        current.update(blocking_check_incidents(context.instance, context.repository_def))
    cursor, sent = run_alerts(context.cursor, current, notifiers_from_env(), context.log)
    context.update_cursor(cursor)
    return dg.SkipReason(
        f"{len(current)} open incidents; sent {len(sent)} "
        f"({sum(a.resolved for a in sent)} resolved)"
    )
