"""The asset jobs the sensors launch (one collection run's partitions per Dagster run: a range
of its run|channel partitions, each materialised and checked on its own; issue 36) and the run
tags every job shares: the queue a run waits in, its run retries, its executor. The launchpad's
jobs are in defs/collection/jobs.py, the daily ones beside what they run (defs/collection/
resampling.py, defs/operations/retention.py).
"""

import dagster as dg

from geo_pipeline.defs import names

# dagster.yaml limits concurrent runs per value of this tag (QueuedRunCoordinator).
QUEUE_TAG = "geo/queue"
# Run retries (dagster.yaml run_retries): a failed run of an asset job is re-executed at most
# this many times by the daemon. The assets are idempotent, so a re-execution is safe; with
# retry_on_asset_or_op_failure off in dagster.yaml only runs that failed outside a step (launch,
# start timeout, a crashed run worker) are retried — steps have their own retry policy.
MAX_RETRIES_TAG = "dagster/max_retries"
RUN_RETRIES = 2
RETRIED = {MAX_RETRIES_TAG: str(RUN_RETRIES)}

# Every step of a run in the run's own process: a partition's few assets and checks are short
# database work, and a process per step (the multiprocess default) costs seconds of imports each
# (bench/dagster_launch.py).
ONE_PROCESS = dg.in_process_executor

sampling_plan_job = dg.define_asset_job(
    "sampling_plan_job",
    selection=dg.AssetSelection.assets(names.SAMPLING_PLAN),
    description="Check and dispatch the sampling plan of (run, channel) partitions (one run's).",
    tags={QUEUE_TAG: "plan", **RETRIED},
    executor_def=ONE_PROCESS,
)
partition_downstream_job = dg.define_asset_job(
    "partition_downstream_job",
    selection=dg.AssetSelection.assets(*names.PARTITION_DOWNSTREAM),
    description="Everything downstream of finished (run, channel) partitions, in one run.",
    tags={QUEUE_TAG: "downstream", **RETRIED},
    executor_def=ONE_PROCESS,
)
billing_job = dg.define_asset_job(
    "billing_job",
    selection=dg.AssetSelection.assets(*names.RUN_DOWNSTREAM),
    description="Reconcile the billing of one finished run.",
    tags={QUEUE_TAG: "billing", **RETRIED},
    executor_def=ONE_PROCESS,
)


# --------------------------------------------------------------------------- daily schedules
RESAMPLE_AT_ENV = "GEO_RESAMPLE_AT"
RESAMPLE_TZ_ENV = "GEO_RESAMPLE_TZ"
DEFAULT_TZ = "Asia/Shanghai"  # the zone of the daily schedules when GEO_RESAMPLE_TZ is unset


def cron_for(at: str, variable: str = RESAMPLE_AT_ENV) -> str:
    """``HH:MM`` (from ``variable``) -> a daily cron expression; a clear error for anything
    else."""
    try:
        hh, mm = (int(p) for p in at.split(":"))
    except ValueError:
        raise ValueError(f"{variable}={at!r}: expected HH:MM, e.g. 06:00") from None
    if not (0 <= hh < 24 and 0 <= mm < 60):
        raise ValueError(f"{variable}={at!r}: hour 0-23, minute 0-59")
    return f"{mm} {hh} * * *"
