"""Daily re-sampling of every active monitor (R5: a next-day re-sample is a new run id).

Time and time zone come from GEO_RESAMPLE_AT (``HH:MM``, default 06:00) and GEO_RESAMPLE_TZ
(default Asia/Shanghai). Schedules cannot return dynamic partition requests (docs/design.md section
5), so a tick creates each monitor's run for the day, adds the partitions itself, then returns
one ``sampling_plan`` request per partition with a run key.
"""

from collections.abc import Mapping
from datetime import date
from typing import Any
from zoneinfo import ZoneInfo

import dagster as dg

from geo_pipeline.billing import prices
from geo_pipeline.billing.ledger import InsufficientFunds
from geo_pipeline.defs import names
from geo_pipeline.defs.jobs import sampling_plan_job
from geo_pipeline.defs.partitions import known_channels, partition_key
from geo_pipeline.defs.resources import ConnectorRegistryResource, PostgresResource
from geo_pipeline.domain.config import ConfigError, NormalisedConfig, normalise_and_validate
from geo_pipeline.domain.plan import QuoteError, plan_for
from geo_pipeline.flows.create_run import create_run
from geo_pipeline.settings import settings
from geo_pipeline.store import runs as runstore
from geo_pipeline.store.db import Conn
from geo_pipeline.store.queries import Q

RESAMPLE_AT_ENV = "GEO_RESAMPLE_AT"
RESAMPLE_TZ_ENV = "GEO_RESAMPLE_TZ"
DEFAULT_TZ = "Asia/Shanghai"


def cron_for(at: str) -> str:
    """``HH:MM`` -> a daily cron expression; a clear error for anything else."""
    try:
        hh, mm = (int(p) for p in at.split(":"))
    except ValueError:
        raise ValueError(f"{RESAMPLE_AT_ENV}={at!r}: expected HH:MM, e.g. 06:00") from None
    if not (0 <= hh < 24 and 0 <= mm < 60):
        raise ValueError(f"{RESAMPLE_AT_ENV}={at!r}: hour 0-23, minute 0-59")
    return f"{mm} {hh} * * *"


def monitor_run_id(monitor_id: str, day: date) -> str:
    """One run id per monitor per day (<= 48 + 9 characters, a valid partition key)."""
    return f"{monitor_id}-{day:%Y%m%d}"


def monitor_config(
    saved: Mapping[str, Any], registry: ConnectorRegistryResource
) -> tuple[NormalisedConfig, Mapping[str, Any]]:
    """A monitor's saved config is what the user filled in (launchpad), or a canonical snapshot
    (saved by the CLI); both become the normalised config to freeze for today's run."""
    if (
        "targets" in saved
        and "questions" in saved
        and all(isinstance(q, dict) for q in saved["questions"])
    ):
        return NormalisedConfig.from_canonical(saved), saved
    return normalise_and_validate(saved, registry.load().capabilities()), saved


def ensure_monitor_run(
    conn: Conn, monitor: Mapping[str, Any], day: date, registry: ConnectorRegistryResource
) -> tuple[str, list[str]]:
    """Today's run of a monitor: found by (monitor_id, scheduled_for), else created from the
    monitor's current config (frozen into a new snapshot, R2). Returns (run_id, channels)."""
    with conn.cursor() as cur:
        cur.execute(
            Q("dagster.monitor_run_for_day"), {"monitor_id": monitor["monitor_id"], "day": day}
        )
        row = cur.fetchone()
    if row is not None:
        run_id = str(row["run_id"])
        return run_id, runstore.run_config(conn, run_id).channels
    config, saved = monitor_config(monitor["config"], registry)
    # Quoted at the price versions in effect now; the quote snapshot freezes them (R23).
    caps = prices.effective_capabilities(conn, registry.load().capabilities())
    plan = plan_for(config, caps, monitor_run_id(monitor["monitor_id"], day))
    run_id, _ = create_run(
        conn,
        plan,
        monitor_id=monitor["monitor_id"],
        scheduled_for=day,
        confirm=True,
        dispatch=False,
        monitor_config=saved,
    )
    return run_id, config.channels


def resample_requests(
    context: dg.ScheduleEvaluationContext,
    db: PostgresResource,
    registry: ConnectorRegistryResource,
    tz: str,
) -> list[dg.RunRequest] | dg.SkipReason:
    scheduled = context.scheduled_execution_time
    day = scheduled.astimezone(ZoneInfo(tz)).date()
    created: dict[str, list[str]] = {}
    problems: list[str] = []
    with db.connect() as conn:
        with conn.cursor() as cur:
            cur.execute(Q("dagster.active_monitors"))
            monitors = [dict(r) for r in cur.fetchall()]
        for m in monitors:
            try:
                run_id, channels = ensure_monitor_run(conn, m, day, registry)
            except (ConfigError, QuoteError, InsufficientFunds, runstore.RunConflict) as exc:
                # One broken monitor never stops the others; the log says what to fix.
                conn.rollback()
                problems.append(f"monitor {m['monitor_id']}: {exc}")
                continue
            created[run_id] = channels
    for p in problems:
        context.log.warning("daily re-sample skipped %s", p)
    if not created:
        return dg.SkipReason(f"no active monitor could be re-sampled for {day}: {problems}")
    context.instance.add_dynamic_partitions(names.RUNS_PARTITIONS, sorted(created))
    known = known_channels()
    return [
        dg.RunRequest(
            run_key=names.plan_run_key(run_id, ch),
            partition_key=partition_key(run_id, ch),
            tags={"geo/run_id": run_id, "geo/channel": ch, "geo/scheduled_for": str(day)},
        )
        for run_id, chs in sorted(created.items())
        for ch in chs
        if ch in known
    ]


def build_daily_resampling(at: str | None = None, tz: str | None = None) -> dg.ScheduleDefinition:
    at = at or settings().resample_at
    tz = tz or settings().resample_tz or DEFAULT_TZ
    ZoneInfo(tz)  # an unknown zone fails at load time, not at the first tick

    @dg.schedule(
        name="daily_resampling",
        cron_schedule=cron_for(at),
        execution_timezone=tz,
        job=sampling_plan_job,
        default_status=dg.DefaultScheduleStatus.RUNNING,
        description=f"Every day at {at} ({tz}): a new run per active monitor, its partitions "
        "added and its sampling_plan requested.",
    )
    def daily_resampling(
        context: dg.ScheduleEvaluationContext,
        db: PostgresResource,
        registry: ConnectorRegistryResource,
    ) -> Any:
        return resample_requests(context, db, registry, tz)

    return daily_resampling


daily_resampling = build_daily_resampling()
