"""Run keys of the sensors' requests: fresh keys for a request whose run failed, and which
partitions a run already covers (a run may cover a range of one collection run's partitions,
issue 36: its key names each partition's share, ``<prefix>:<run id>:<part>+<part>...``).

A run key is launched once by the daemon, so a request whose run failed (to launch, on a loaded
machine whose code server did not answer, or later) is asked again under a fresh key
``<key>:attempt:<n>``, at most ``MAX_REQUEST_ATTEMPTS`` times (``fresh_run_keys``).
"""

import re
from collections.abc import Iterable, Sequence

import dagster as dg

from geo_pipeline.defs import names
from geo_pipeline.defs.partitions import RANGE_END_TAG, RANGE_START_TAG, parse_partition_key

# Dagster's system tags: the key the daemon launched a run under (copied to its run retries),
# and whether the run-retry daemon will re-execute a failed run (dagster.yaml run_retries).
RUN_KEY_TAG = "dagster/run_key"
WILL_RETRY_TAG = "dagster/will_retry"
# Fresh requests per publication key (each run also has its dagster/max_retries run retries):
# a failure that persists (a blocking check, a run that cannot start) costs at most this many
# runs, and the failed runs are the alert.
MAX_REQUEST_ATTEMPTS = 3


# --------------------------------------------------------------------------- fresh attempts
def attempt_run_key(key: str, attempt: int) -> str:
    """The run key of a request's ``attempt``-th run: the plain key first, then ``:attempt:n``."""
    return key if attempt <= 1 else f"{key}:attempt:{attempt}"


def fresh_run_keys(
    instance: dg.DagsterInstance,
    keys: Iterable[str],
    max_attempts: int = MAX_REQUEST_ATTEMPTS,
    latest_runs: dict[str, dg.DagsterRun] | None = None,
) -> dict[str, str | None]:
    """For each request key, the key to request now (None: attempts exhausted).

    The daemon skips a key it has launched, so: no run yet, or the last attempt's latest run
    in flight, succeeded, cancelled (an operator's decision) or about to be re-executed by
    Dagster's run retries -> that attempt's key again (a no-op for the daemon); the last
    attempt's latest run failed and will not be retried -> the next attempt's key, fresh. One
    query to the instance for every key of the tick. ``latest_runs``, when given, receives each
    key's latest run (what a skipped tick names)."""
    keys = sorted(set(keys))
    family = {attempt_run_key(k, n): (k, n) for k in keys for n in range(1, max_attempts + 1)}
    if not family:
        return {}
    latest: dict[str, tuple[tuple[int, int], dg.DagsterRun]] = {}
    for rec in instance.get_run_records(dg.RunsFilter(tags={RUN_KEY_TAG: sorted(family)})):
        key, n = family[rec.dagster_run.tags[RUN_KEY_TAG]]
        order = (n, rec.storage_id)  # a run retry carries its parent's key: the newest counts
        if key not in latest or order > latest[key][0]:
            latest[key] = (order, rec.dagster_run)
    if latest_runs is not None:
        latest_runs.update({key: run for key, (_, run) in latest.items()})
    out: dict[str, str | None] = {}
    for key in keys:
        if key not in latest:
            out[key] = key
            continue
        (attempt, _), run = latest[key]
        failed = (
            run.status == dg.DagsterRunStatus.FAILURE and run.tags.get(WILL_RETRY_TAG) != "true"
        )
        if not failed:
            out[key] = attempt_run_key(key, attempt)
        elif attempt < max_attempts:
            out[key] = attempt_run_key(key, attempt + 1)
        else:
            out[key] = None
    return out


# --------------------------------------------------------------------------- ranged runs
ATTEMPT_SUFFIX = re.compile(r":attempt:\d+$")
RUN_ID_TAG = "geo/run_id"
PARTITION_TAG = "dagster/partition"


def latest_covering(
    instance: dg.DagsterInstance, job_name: str, prefix: str, run_ids: Iterable[str]
) -> dict[tuple[str, str], dg.DagsterRun]:
    """For each (collection run, part) the latest Dagster run of ``job_name`` whose run key
    ``<prefix>:<run id>:<part>+<part>...[:attempt:n]`` names it (a part: one partition's share
    of the key, ``names.downstream_part``); one query for all the runs."""
    ids = sorted(set(run_ids))
    if not ids:
        return {}
    latest: dict[tuple[str, str], tuple[int, dg.DagsterRun]] = {}
    for rec in instance.get_run_records(dg.RunsFilter(job_name=job_name, tags={RUN_ID_TAG: ids})):
        run = rec.dagster_run
        rid, key = run.tags.get(RUN_ID_TAG, ""), run.tags.get(RUN_KEY_TAG, "")
        head = f"{prefix}:{rid}:"
        if not rid or not key.startswith(head):
            continue
        for part in ATTEMPT_SUFFIX.sub("", key[len(head) :]).split(names.CHANNEL_JOIN):
            if (rid, part) not in latest or rec.storage_id > latest[(rid, part)][0]:
                latest[(rid, part)] = (rec.storage_id, run)
    return {k: run for k, (_, run) in latest.items()}


def failed_for_good(run: dg.DagsterRun) -> bool:
    """Failed, and Dagster's run retries will not re-execute it."""
    return run.status == dg.DagsterRunStatus.FAILURE and run.tags.get(WILL_RETRY_TAG) != "true"


def again(run: dg.DagsterRun) -> dg.RunRequest:
    """The request a run was launched for, again (the daemon skips a run key it launched)."""
    tags = {k: v for k, v in run.tags.items() if k.startswith("geo/")}
    ranged = {k: v for k, v in run.tags.items() if k in (RANGE_START_TAG, RANGE_END_TAG)}
    return dg.RunRequest(
        run_key=run.tags[RUN_KEY_TAG],
        job_name=run.job_name,
        partition_key=run.tags.get(PARTITION_TAG),
        tags={**tags, **ranged},
    )


def plan_span_key(span: Sequence[str]) -> str:
    """The run key of the sampling plans of adjacent partitions of one run (``adjacent_ranges``)."""
    pairs = [parse_partition_key(k) for k in span]
    return names.plan_run_key(pairs[0][0], *(ch for _, ch in pairs))
