"""Each monitor on its own cadence (issue 37): cron + time zone per monitor.

``daily_resampling`` (resampling.py) keeps the monitors without a cadence of their own at the
deployment's GEO_RESAMPLE_AT. This schedule ticks every TICK_MINUTES and asks for the monitors
whose own cadence fired within the last CATCH_UP (a tick the daemon missed is made up on the
next); it requests the same ``resample_monitor_job`` with the same run key
``resample:<monitor>:<day>`` (the day of the fire time in the monitor's zone), so a repeated
request for one day is launched once, and that job is idempotent by (monitor, day) anyway.
Evaluating it only reads (a preview from the UI leaves nothing behind); a monitor whose stored
cadence no longer parses is left out with a log line, never a half request.
"""

from datetime import datetime, timedelta
from typing import Any, Literal

import dagster as dg
from pydantic import Field

from geo_pipeline.defs.collection.resampling import (
    monitor_run_id,
    resample_monitor_job,
    resample_run_key,
)
from geo_pipeline.defs.resources import ConnectorRegistryResource, PostgresResource
from geo_pipeline.domain.cadence import CadenceError, parse_cadence
from geo_pipeline.flows import monitors as flow
from geo_pipeline.settings import settings
from geo_pipeline.store.queries import Q

TICK_MINUTES = 15
CATCH_UP = timedelta(hours=1)


def due_monitors(
    rows: list[dict[str, Any]], tick: datetime, log: Any = None
) -> list[tuple[str, str]]:
    """(monitor_id, day) of each monitor whose cadence fired in (tick - CATCH_UP, tick]."""
    out = []
    for r in rows:
        try:
            cadence = parse_cadence(str(r["cron"]), str(r["timezone"]))
        except CadenceError as exc:
            if log is not None:
                log.warning("monitor %s left out: %s", r["monitor_id"], exc)
            continue
        fired = cadence.latest_fire(tick)
        if fired is not None and tick - fired < CATCH_UP:
            out.append((str(r["monitor_id"]), fired.date().isoformat()))
    return out


@dg.schedule(
    name="monitor_resampling",
    cron_schedule=f"*/{TICK_MINUTES} * * * *",
    execution_timezone="UTC",
    job=resample_monitor_job,
    default_status=dg.DefaultScheduleStatus.RUNNING,
    description="Monitors with a cadence of their own (monitors create/update --cron --timezone): "
    f"every {TICK_MINUTES} minutes, one resample_monitor_job run per monitor whose cadence fired "
    "within the last hour (run key resample:<monitor>:<day>). Evaluating it only reads.",
)
def monitor_resampling(
    context: dg.ScheduleEvaluationContext, db: PostgresResource
) -> list[dg.RunRequest] | dg.SkipReason:
    tick = context.scheduled_execution_time
    with db.connect() as conn, conn.cursor() as cur:
        cur.execute(Q("monitors.own_cadence"))
        rows = [dict(r) for r in cur.fetchall()]
    due = due_monitors(rows, tick, context.log)
    if not due:
        return dg.SkipReason(
            f"none of {len(rows)} monitors with their own cadence fired in the hour to {tick}"
        )
    return [
        dg.RunRequest(
            run_key=resample_run_key(m, datetime.fromisoformat(day).date()),
            job_name=resample_monitor_job.name,
            run_config={"ops": {"resample_monitor_op": {"config": {"monitor_id": m, "day": day}}}},
            tags={
                "geo/monitor_id": m,
                "geo/scheduled_for": day,
                "geo/run_id": monitor_run_id(m, datetime.fromisoformat(day).date()),
            },
        )
        for m, day in due
    ]


# ----------------------------------------------------------------------- the launchpad
class MonitorLifecycleConfig(dg.Config):
    """Pause, resume or retire a monitor, or change its cadence, from the launchpad (the same
    guarded changes as `geo-pipeline monitors pause|resume|retire|update`)."""

    monitor_id: str = Field(description="the monitor (geo-pipeline monitors list)")
    action: Literal["pause", "resume", "retire", "set_cadence", "default_cadence"] = Field(
        description="pause / resume / retire (final), or set_cadence (cron + timezone) / "
        "default_cadence (back to GEO_RESAMPLE_AT)"
    )
    reason: str = Field(default="", description="why: kept in the monitor's history")
    cron: str | None = Field(default=None, description="set_cadence: e.g. '0 7 * * 1-5'")
    timezone: str | None = Field(default=None, description="set_cadence: e.g. Europe/Berlin")


ACTION_EVENTS = {"pause": "paused", "resume": "resumed", "retire": "retired"}


@dg.op(
    description="Apply one lifecycle change to a monitor, recorded with who and why.",
    out=dg.Out(dg.Nothing),  # the revision is output metadata: nothing for the I/O manager
)
def monitor_lifecycle_op(
    context: dg.OpExecutionContext,
    config: MonitorLifecycleConfig,
    db: PostgresResource,
    registry: ConnectorRegistryResource,
) -> None:
    actor = f"dagster:{context.run_id}"
    with db.connect() as conn:
        try:
            if config.action in ACTION_EVENTS:
                change = flow.change_state(
                    conn, config.monitor_id, ACTION_EVENTS[config.action], actor, config.reason
                )
            else:
                if config.action == "set_cadence" and not config.cron:
                    raise flow.MonitorError("set_cadence needs cron (and optionally timezone)")
                change = flow.update_monitor(
                    conn,
                    config.monitor_id,
                    registry.load().capabilities(),
                    raw=None,
                    cron=config.cron,
                    timezone=config.timezone,
                    default_cadence=config.action == "default_cadence",
                    default_tz=settings().resample_tz or "Asia/Shanghai",
                    actor=actor,
                    reason=config.reason,
                )
        except (flow.MonitorError, CadenceError) as exc:
            raise dg.Failure(description=str(exc), allow_retries=False) from None
    context.add_output_metadata(
        {"monitor_id": change.monitor_id, "event": change.event, "revision": change.revision}
    )


@dg.job(
    description="Pause, resume or retire a monitor, or change its cadence (recorded in its "
    "history with the Dagster run as the actor). Same rules as `geo-pipeline monitors`.",
    executor_def=dg.in_process_executor,
    tags={"geo/kind": "monitor_lifecycle"},
)
def monitor_lifecycle_job() -> None:
    monitor_lifecycle_op()
