"""Daily re-sampling of every active monitor (R5: a next-day re-sample is a new run id).

Time and time zone come from GEO_RESAMPLE_AT (``HH:MM``, default 06:00) and GEO_RESAMPLE_TZ
(default Asia/Shanghai). Evaluating the schedule has no side effect (a test evaluation from the
UI, for any date, leaves nothing behind): it reads the active monitors and returns one
``resample_monitor_job`` request per monitor, run key ``resample:<monitor>:<day>``. That job
creates the day's run (snapshot, quote, reservation), idempotently by (monitor, day), and adds
its partitions; the ``sampling_plan_sensor`` then requests the run's ``sampling_plan``
partitions as for a launchpad run. A broken monitor fails its own run, with the reason.
"""

from collections.abc import Mapping
from datetime import date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import dagster as dg
from pydantic import Field

from geo_pipeline.billing.ledger import InsufficientFunds
from geo_pipeline.defs.jobs import DEFAULT_TZ, QUEUE_TAG, RETRIED, cron_for
from geo_pipeline.defs.partitions import register_run_partitions
from geo_pipeline.defs.resources import ConnectorRegistryResource, PostgresResource
from geo_pipeline.domain.catalogue import RegistryError
from geo_pipeline.domain.config import normalise_and_validate
from geo_pipeline.domain.config_model import NormalisedConfig
from geo_pipeline.domain.config_problems import ConfigError
from geo_pipeline.domain.plan import QuoteError
from geo_pipeline.flows.create_run import create_run, quoted_plan_for
from geo_pipeline.flows.monitors import record_resample_failure
from geo_pipeline.settings import settings
from geo_pipeline.store import runs as runstore
from geo_pipeline.store.db import Conn
from geo_pipeline.store.queries import Q


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
    # The one quote path: the price versions in effect now, frozen by the snapshot (R23).
    plan = quoted_plan_for(
        conn, config, registry.load().capabilities(), monitor_run_id(monitor["monitor_id"], day)
    )
    run_id, _ = create_run(
        conn,
        plan,
        monitor_id=monitor["monitor_id"],
        scheduled_for=day,
        confirm=True,
        dispatch=False,
        monitor_config=saved,
        # What was read stays as it is: an update committed meanwhile is the next run's.
        keep_monitor_config=True,
    )
    return run_id, config.channels


def resample_run_key(monitor_id: str, day: date) -> str:
    """The schedule's run key for one monitor's day: the daemon launches it once."""
    return f"resample:{monitor_id}:{day.isoformat()}"


def resample_zone() -> str:
    return settings().resample_tz or DEFAULT_TZ


# How far back a day may be re-sampled without saying so: yesterday stays on time (a daemon that
# caught up late, a tick near midnight), older days are a backfill.
ON_TIME_DAYS = 1


def resample_day(day: str, backfill: bool, tz: str, today: date | None = None) -> date:
    """The day of a re-sample run, checked: an ISO date, not in the future beyond tomorrow, and
    more than ON_TIME_DAYS before today (in the schedule's zone) only as a deliberate backfill —
    a past day's run would be quoted at today's prices and dispatched today."""
    try:
        wanted = date.fromisoformat(day)
    except ValueError:
        raise dg.Failure(
            description=f"day={day!r}: expected a date as YYYY-MM-DD, e.g. 2026-11-30",
            allow_retries=False,
        ) from None
    today = today or datetime.now(ZoneInfo(tz)).date()
    if wanted > today + timedelta(days=1):
        raise dg.Failure(
            description=f"day={wanted}: in the future (today is {today} in {tz}); a re-sample "
            "runs on its day",
            allow_retries=False,
        )
    if wanted < today - timedelta(days=ON_TIME_DAYS) and not backfill:
        raise dg.Failure(
            description=f"day={wanted}: more than {ON_TIME_DAYS} day before today ({today} in "
            f"{tz}); set backfill: true to re-sample a past day on purpose",
            allow_retries=False,
        )
    return wanted


class ResampleMonitorConfig(dg.Config):
    """One monitor's re-sample for one day (what the daily_resampling schedule requests)."""

    monitor_id: str = Field(description="the monitor to re-sample (geo.monitors)")
    day: str = Field(description="the day the run stands for, YYYY-MM-DD (its scheduled_for)")
    backfill: bool = Field(
        default=False,
        description=f"allow a day more than {ON_TIME_DAYS} day before today (a deliberate "
        "backfill)",
    )


@dg.op(
    description="Create (or find) a monitor's run for the day and add its partitions.",
    out=dg.Out(dg.Nothing),  # the run id is output metadata: nothing for the I/O manager
)
def resample_monitor_op(
    context: dg.OpExecutionContext,
    config: ResampleMonitorConfig,
    db: PostgresResource,
    registry: ConnectorRegistryResource,
) -> None:
    day = resample_day(config.day, config.backfill, resample_zone())
    with db.connect() as conn:
        with conn.cursor() as cur:
            cur.execute(Q("dagster.active_monitors"))
            monitor = next(
                (dict(r) for r in cur.fetchall() if r["monitor_id"] == config.monitor_id), None
            )
        if monitor is None:
            raise dg.Failure(
                description=f"monitor {config.monitor_id!r} is not active (paused or unknown); "
                "nothing to re-sample",
                allow_retries=False,
            )
        try:
            run_id, channels = ensure_monitor_run(conn, monitor, day, registry)
        except (
            ConfigError,
            QuoteError,
            InsufficientFunds,
            runstore.RunConflict,
            RegistryError,
        ) as exc:
            # This monitor's run fails with what to fix; the other monitors have their own runs.
            conn.rollback()
            # Recorded with its reason (monitors show, the tenant's resample_failed alert).
            record_resample_failure(conn, config.monitor_id, day, exc, context.run_id)
            raise dg.Failure(
                description=f"monitor {config.monitor_id} on {day}: {exc}",
                metadata={"problems": [str(p) for p in getattr(exc, "problems", [])]},
                allow_retries=False,
            ) from None
    # After the commit: a partition never names a run PostgreSQL does not have.
    register_run_partitions(context.instance, run_id, channels)
    context.add_output_metadata(
        {"run_id": run_id, "monitor_id": config.monitor_id, "day": str(day), "channels": channels}
    )
    context.log.info(
        "run %s for monitor %s on %s; the sampling_plan sensor requests its partitions",
        run_id,
        config.monitor_id,
        day,
    )


@dg.job(
    description="Re-sample one monitor for one day: create (or find) its run — snapshot, quote, "
    "reservation — and add its partitions; the sampling_plan_sensor then requests them. "
    "Idempotent by (monitor, day). Requested by the daily_resampling schedule.",
    executor_def=dg.in_process_executor,
    tags={"geo/kind": "resample", QUEUE_TAG: "resample", **RETRIED},
)
def resample_monitor_job() -> None:
    resample_monitor_op()


def resample_requests(
    context: dg.ScheduleEvaluationContext, db: PostgresResource, tz: str
) -> list[dg.RunRequest] | dg.SkipReason:
    """One request per active monitor; reads only (an evaluation previewed from the UI must
    leave nothing behind: the runs are created by the requested jobs)."""
    day = context.scheduled_execution_time.astimezone(ZoneInfo(tz)).date()
    with db.connect() as conn:
        with conn.cursor() as cur:
            # Monitors with a cadence of their own: monitors.py's monitor_resampling.
            cur.execute(Q("monitors.default_cadence"))
            monitors = [str(r["monitor_id"]) for r in cur.fetchall()]
    if not monitors:
        return dg.SkipReason(f"no active monitor to re-sample for {day}")
    return [
        dg.RunRequest(
            run_key=resample_run_key(m, day),
            job_name=resample_monitor_job.name,
            run_config={
                "ops": {"resample_monitor_op": {"config": {"monitor_id": m, "day": str(day)}}}
            },
            tags={
                "geo/monitor_id": m,
                "geo/scheduled_for": str(day),
                "geo/run_id": monitor_run_id(m, day),
            },
        )
        for m in monitors
    ]


def build_daily_resampling(at: str | None = None, tz: str | None = None) -> dg.ScheduleDefinition:
    at = at or settings().resample_at
    tz = tz or settings().resample_tz or DEFAULT_TZ
    ZoneInfo(tz)  # an unknown zone fails at load time, not at the first tick

    @dg.schedule(
        name="daily_resampling",
        cron_schedule=cron_for(at),
        execution_timezone=tz,
        job=resample_monitor_job,
        default_status=dg.DefaultScheduleStatus.RUNNING,
        description=f"Every day at {at} ({tz}): one resample_monitor_job run per active "
        "monitor (run key resample:<monitor>:<day>). Evaluating it only reads the monitors.",
    )
    def daily_resampling(context: dg.ScheduleEvaluationContext, db: PostgresResource) -> Any:
        return resample_requests(context, db, tz)

    return daily_resampling


daily_resampling = build_daily_resampling()
