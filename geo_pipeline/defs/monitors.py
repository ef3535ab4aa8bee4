"""Each monitor on its own cadence (issue 37): cron + time zone per monitor.

``daily_resampling`` (schedules.py) keeps the monitors without a cadence of their own at the
deployment's GEO_RESAMPLE_AT. This schedule ticks every TICK_MINUTES and asks for the monitors
whose own cadence fired within the last CATCH_UP (a tick the daemon missed is made up on the
next); it requests the same ``resample_monitor_job`` with the same run key
``resample:<monitor>:<day>`` (the day of the fire time in the monitor's zone), so a repeated
request for one day is launched once, and that job is idempotent by (monitor, day) anyway.
Evaluating it only reads (a preview from the UI leaves nothing behind); a monitor whose stored
cadence no longer parses is left out with a log line, never a half request.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import dagster as dg

from geo_pipeline.defs.resources import PostgresResource
from geo_pipeline.defs.schedules import monitor_run_id, resample_monitor_job, resample_run_key
from geo_pipeline.domain.cadence import CadenceError, parse_cadence
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
