"""The collection sensors: the sampling_plan sensor and the completion sensor.

The completion stream tells the completion sensor *where to look*; PostgreSQL decides *what is
finished* (principle 1). A trimmed or lost stream therefore delays a request, never
loses it: the sensor also sweeps the unfinished partitions of recent runs from PostgreSQL.

Cursor of the completion sensor (JSON): ``{"id": <last stream id read>, "swept": <time of the
last PostgreSQL sweep>, "deadlines": <database time up to which passed publish deadlines were
looked for>}``, times in ISO 8601 UTC (a cursor holding unix seconds, as before, is read too). A
tick reads at most ``max_entries_per_tick`` entries with bounded ``XRANGE ... COUNT`` pages and
never blocks (a tick has 60 s).

Run keys, fresh attempts and the runs covering a partition: defs/collection/run_keys.py.
"""

import json
import time
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime

import dagster as dg
import redis as redis_lib

from geo_pipeline.defs import names
from geo_pipeline.defs.collection.cursor import _load_cursor, cursor_time
from geo_pipeline.defs.collection.run_keys import (
    MAX_REQUEST_ATTEMPTS,
    RUN_KEY_TAG,
    again,
    failed_for_good,
    fresh_run_keys,
    latest_covering,
    plan_span_key,
)
from geo_pipeline.defs.collection.stream import Pair, StreamRead, read_completions
from geo_pipeline.defs.factory import query_rows
from geo_pipeline.defs.jobs import billing_job, partition_downstream_job, sampling_plan_job
from geo_pipeline.defs.partitions import (
    add_requests,
    adjacent_ranges,
    existing_partitions,
    newest_order,
    parse_partition_key,
    partition_key,
    range_request,
    run_partition_keys,
)
from geo_pipeline.defs.resources import PipelineSettingsResource, PostgresResource, RedisResource
from geo_pipeline.domain.states import Publication
from geo_pipeline.store import status as statusmod
from geo_pipeline.store.db import Conn

# Both sensors tick as often as the daemon looks (its sensor loop runs every 5 s): a launch waits
# on each of them once (sampling plan, then publication), and a tick is a few small queries
# (the completion sensor's PostgreSQL sweep keeps its own 300 s interval). At 15 s and 30 s the
# two waits were up to 45 s of an 8-sample run's click-to-published (issue 36).
SENSOR_INTERVAL_S = 5


# --------------------------------------------------------------------------- PostgreSQL side
def _key(pair: Pair) -> str | None:
    """The partition key of a (run, channel) pair; None for a pair that cannot be one (a stream
    entry naming a run id with ``|``): no such partition exists, nothing is requested."""
    try:
        return partition_key(*pair)
    except ValueError:
        return None


def run_channels(conn: Conn, run_ids: Iterable[str]) -> dict[str, list[str]]:
    """The channels of the given runs (from their frozen snapshots); unknown ids are left out."""
    ids = sorted(set(run_ids))
    if not ids:
        return {}
    return {r["run_id"]: list(r["channels"]) for r in query_rows(conn, "run_channels", run_ids=ids)}


def recent_unfinished(
    conn: Conn, days: int, done_partitions: set[str], billed_runs: set[str]
) -> tuple[set[Pair], set[str]]:
    """Partitions of recent runs whose downstream assets are not yet materialised, and recent
    runs whose billing is not."""
    pairs: set[Pair] = set()
    runs: set[str] = set()
    for r in query_rows(conn, "recent_runs", days=days, live_only=False):
        if r["run_id"] not in billed_runs:
            runs.add(r["run_id"])
        for ch in r["channels"]:
            if _key((r["run_id"], ch)) not in done_partitions:
                pairs.add((r["run_id"], ch))
    return pairs, runs


def recent_runs_among(conn: Conn, run_ids: set[str], days: int, now_ts: float) -> set[str]:
    """Of the given ids, the runs PostgreSQL has that were created within the last ``days``."""
    if not run_ids:
        return set()
    horizon = now_ts - days * 86400
    return {
        r["run_id"]
        for r in query_rows(conn, "runs_created", run_ids=sorted(run_ids))
        if r["created_at"].timestamp() >= horizon
    }


def publishable_runs(conn: Conn, run_ids: Iterable[str]) -> dict[str, Publication]:
    """Runs whose every partition is publishable (complete, or past the run's deadline), with
    their run-level counts (decided by the aggregation service)."""
    ids = sorted(set(run_ids))
    if not ids:
        return {}
    channels = {r["run_id"]: r["channels"] for r in query_rows(conn, "run_channels", run_ids=ids)}
    return {
        rid: pub
        for rid, pub in statusmod.run_publications(conn, channels).items()
        if pub.publishable
    }


def completion_requests(
    conn: Conn,
    candidates: set[Pair],
    existing_runs: set[str],
    existing_pairs: set[str],
    instance: dg.DagsterInstance,
    billing_candidates: frozenset[str] | set[str] = frozenset(),
    order: Sequence[str] | None = None,
) -> tuple[list[dg.RunRequest], list[Pair], list[str]]:
    """One downstream run per run with publishable partitions, covering all of them (their
    downstream assets together; a range of the partitions adjacent in ``order``, the instance's
    run|channel keys, normally all of the run's publishable ones: issue 36), and one billing
    run per publishable run (among the candidates' runs and ``billing_candidates``), each with
    a run key so the daemon never launches it twice. A partition is publishable when every sample is
    terminal, or past its run's publish deadline; the key then carries the terminal count, so
    each real change (a late completion) is requested once and an unchanged partition never
    again — unless its run failed: then it is asked again under a fresh key, boundedly
    (``fresh_run_keys``). Returns the requests, the publishable partitions and the keys whose
    attempts are exhausted. Only partitions that exist are requested: ``existing_pairs`` holds
    their run|channel keys, ``existing_runs`` the run keys billing is partitioned by."""
    candidates = {p for p in candidates if _key(p) in existing_pairs}
    states = statusmod.publication_states(conn, candidates)
    publishable = sorted(p for p, pub in states.items() if pub.publishable)
    if order is None:
        order = newest_order(
            instance, names.RUN_CHANNEL_PARTITIONS, (k for k in map(_key, publishable) if k)
        )

    def part(pair: Pair) -> str:
        return names.downstream_part(pair[1], states[pair].terminal, states[pair].samples)

    # A partition whose publication state a run already covers (in flight, done, or about to
    # be retried; under its own key or in a range) is asked again under that run's key, which
    # the daemon skips: a regrouping (a redelivered completion touching one channel of a run
    # published as a range) never re-runs it under a new key.
    covering = latest_covering(
        instance, partition_downstream_job.name, "downstream", {rid for rid, _ in publishable}
    )
    covered = {
        p: run
        for p in publishable
        if (run := covering.get((p[0], part(p)))) is not None and not failed_for_good(run)
    }
    requests = list({run.run_id: again(run) for run in covered.values()}.values())
    # (publication key, partitions, job, tags) of each request, before its attempt is known.
    planned: list[tuple[str, list[str], str, dict[str, str]]] = []
    todo = [p for p in publishable if p not in covered]
    # A partition whose run failed is asked again ALONE: in a range, one partition's failed
    # blocking check (or refusal) stops the downstream steps of every partition of the range,
    # so the others would never publish; alone each fails or publishes on its own, as before.
    alone = {p for p in todo if (p[0], part(p)) in covering}
    for rid in sorted({rid for rid, _ in todo}):
        wanted = [partition_key(r, ch) for r, ch in todo if r == rid and (r, ch) not in alone]
        spans = adjacent_ranges(wanted, order)
        spans += [[partition_key(r, ch)] for r, ch in sorted(alone) if r == rid]
        for span in spans:
            channels = [parse_partition_key(k)[1] for k in span]
            parts: list[tuple[str, int | None, int | None]] = [
                (ch, states[(rid, ch)].terminal, states[(rid, ch)].samples) for ch in channels
            ]
            tags = {"geo/run_id": rid, **({"geo/channel": channels[0]} if len(span) == 1 else {})}
            planned.append(
                (
                    names.downstream_range_key(rid, parts),
                    span,
                    partition_downstream_job.name,
                    tags,
                )
            )
    billable = {rid for rid, _ in publishable} | (set(billing_candidates) & existing_runs)
    for rid, pub in sorted(publishable_runs(conn, billable).items()):
        planned.append(
            (
                names.billing_run_key(rid, terminal=pub.terminal, samples=pub.samples),
                [rid],
                billing_job.name,
                {"geo/run_id": rid},
            )
        )
    keys = fresh_run_keys(instance, [p[0] for p in planned])
    requests += [
        range_request(span, run_key=run_key, job_name=job, tags=tags)
        for key, span, job, tags in planned
        if (run_key := keys[key]) is not None
    ]
    exhausted = sorted(p[0] for p in planned if keys[p[0]] is None)
    return requests, publishable, exhausted


def evaluate_completions(
    context: dg.SensorEvaluationContext,
    db: PostgresResource,
    redis: RedisResource,
    settings: PipelineSettingsResource,
    now: float | None = None,
) -> dg.SensorResult:
    now = time.time() if now is None else now
    cursor = _load_cursor(context.cursor)
    client = redis.client()
    try:
        read = read_completions(
            client,
            redis.completions_stream,
            cursor["id"],
            settings.stream_page,
            settings.max_entries_per_tick,
        )
    except redis_lib.RedisError as exc:
        # Redis down: PostgreSQL still knows everything; sweep and keep the cursor.
        read = StreamRead(last_id=cursor["id"], gap=f"redis unavailable: {exc}")
    finally:
        client.close()
    sweep_due = now - cursor["swept"] >= settings.sweep_interval_seconds
    # The first tick sweeps too (swept = 0 in a fresh cursor).
    sweep = read.gap is not None or sweep_due
    candidates = set(read.pairs)
    with db.connect() as conn:
        # Deadlines that passed since the last tick: no completion event comes for a partition
        # whose last samples are stuck, so PostgreSQL is asked every tick (one small query).
        since = cursor["deadlines"]
        crossed, checked_at = statusmod.deadline_crossed(
            conn,
            datetime.fromtimestamp(since, UTC) if since is not None else None,
            settings.recent_run_days,
        )
        candidates |= crossed
        unbilled: set[str] = set()
        if sweep:
            # Not yet materialised, whether never requested or its run failed (to launch, or
            # later): completion_requests asks again under a fresh key, boundedly.
            unfinished, unbilled = recent_unfinished(
                conn,
                settings.recent_run_days,
                context.instance.get_materialized_partitions(names.BRAND_VISIBILITY),
                context.instance.get_materialized_partitions(names.BILLING_RECONCILIATION),
            )
            candidates |= unfinished
            # Published with exclusions and changed since: late completions whose stream
            # entries were lost are still re-published.
            candidates |= statusmod.republish_due(conn, settings.recent_run_days)
        # Which of the tick's keys exist: asked for those keys only, not every partition.
        existing_runs, existing_pairs = existing_partitions(
            context.instance, {rid for rid, _ in candidates} | unbilled, map(_key, candidates)
        )
        # Runs created by the CLI have no partitions yet (and a run registered before the
        # upgrade to run|channel partitions has only its run key): adopt the recent ones
        # PostgreSQL knows, with every channel of the run (ids it does not know are ignored;
        # old runs stay with the retention sensor).
        unregistered = {
            rid
            for rid, ch in candidates
            if rid not in existing_runs or _key((rid, ch)) not in existing_pairs
        } | (unbilled - existing_runs)
        adopted = run_channels(
            conn, recent_runs_among(conn, unregistered, settings.recent_run_days, now)
        )
        adopted_runs, adopted_pairs = run_partition_keys(adopted)
        # An adopted run's other channels may exist already (added before a crash).
        existing_pairs |= existing_partitions(context.instance, (), adopted_pairs)[1]
        requests, finished, exhausted = completion_requests(
            conn,
            candidates,
            existing_runs | set(adopted_runs),
            existing_pairs | set(adopted_pairs),
            context.instance,
            unbilled,
        )
    new_cursor = json.dumps(
        {
            "id": read.last_id,
            "swept": cursor_time(now if sweep else cursor["swept"]),
            "deadlines": cursor_time(checked_at.timestamp()),
        },
        sort_keys=True,
    )
    context.log.info(
        "read %d completion entries (%d partitions touched), swept=%s%s, %d deadlines passed; "
        "%d publishable partitions",
        read.entries,
        len(read.pairs),
        sweep,
        f" ({read.gap})" if read.gap else "",
        len(crossed),
        len(finished),
    )
    if exhausted:
        context.log.warning(
            "not requested again after %d failed runs each (see their failures): %s",
            MAX_REQUEST_ATTEMPTS,
            ", ".join(exhausted),
        )
    # Applied by the daemon before the run requests (a sensor never writes to the instance).
    adds = add_requests(adopted, existing_runs, existing_pairs)
    if not requests:
        return dg.SensorResult(
            skip_reason=f"{read.entries} entries read ({len(read.pairs)} partitions touched), "
            f"{'swept PostgreSQL' if sweep else 'no sweep due'}"
            f"{f' ({read.gap})' if read.gap else ''}, {len(crossed)} deadlines passed: no "
            "partition publishable (every sample terminal, or past its run's deadline)"
            + (f"; {len(exhausted)} not requested again after failed runs" if exhausted else ""),
            cursor=new_cursor,
            dynamic_partitions_requests=adds,
        )
    return dg.SensorResult(
        run_requests=requests, cursor=new_cursor, dynamic_partitions_requests=adds
    )


@dg.sensor(
    name="completion_sensor",
    jobs=[partition_downstream_job, billing_job],
    minimum_interval_seconds=SENSOR_INTERVAL_S,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Reads <ns>:completions and passed publish deadlines; requests the downstream "
    "assets of every partition PostgreSQL says is publishable (finished, or past its run's "
    "deadline; again after a late completion), and billing of every publishable run.",
)
def completion_sensor(
    context: dg.SensorEvaluationContext,
    db: PostgresResource,
    redis: RedisResource,
    settings: PipelineSettingsResource,
) -> dg.SensorResult:
    return evaluate_completions(context, db, redis, settings)


# --------------------------------------------------------------------------- sampling plans
@dg.sensor(
    name="sampling_plan_sensor",
    jobs=[sampling_plan_job],
    minimum_interval_seconds=SENSOR_INTERVAL_S,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Requests sampling_plan for every never-dispatched partition of a recent run "
    "(created by the launchpad job, the daily re-sample job or the CLI), adding the run's "
    "partitions when they are missing.",
)
def sampling_plan_sensor(
    context: dg.SensorEvaluationContext, db: PostgresResource, settings: PipelineSettingsResource
) -> dg.SensorResult:
    # Cursor: the partitions already seen dispatched, so a tick asks PostgreSQL only about the
    # others (a dispatched partition stays dispatched); pruned to the recent window.
    seen: set[str] = set(json.loads(context.cursor)["dispatched"]) if context.cursor else set()
    planned = context.instance.get_materialized_partitions(names.SAMPLING_PLAN)
    with db.connect() as conn:
        recent = query_rows(conn, "recent_runs", days=settings.recent_run_days, live_only=True)
        pairs = sorted(
            (r["run_id"], ch)
            for r in recent
            for ch in r["channels"]
            if (key := _key((r["run_id"], ch))) is not None
            and key not in planned
            and key not in seen
        )
        undispatched = {
            (r["run_id"], r["channel"])
            for r in query_rows(
                conn,
                "undispatched_pairs",
                run_ids=[p[0] for p in pairs],
                channels=[p[1] for p in pairs],
            )
        }
    recent_ids = {r["run_id"] for r in recent}
    seen = {k for k in seen if k.split("|", 1)[0] in recent_ids}
    seen |= {partition_key(rid, ch) for rid, ch in pairs if (rid, ch) not in undispatched}
    cursor = json.dumps({"dispatched": sorted(seen)})
    if not undispatched:
        partitions = sum(len(r["channels"]) for r in recent)
        return dg.SensorResult(
            skip_reason=f"nothing to dispatch: {_count(partitions, 'partition')} of "
            f"{_count(len(recent), 'recent run')} (created in the last {settings.recent_run_days} "
            f"days, not cancelled) are planned or dispatched",
            cursor=cursor,
        )
    # A run created outside Dagster (CLI) has no partitions yet: add them with the requests,
    # every channel of the run (the daemon applies them before launching the requests).
    channels_of = {r["run_id"]: list(r["channels"]) for r in recent}
    scheduled = {
        r["run_id"]: {
            "geo/scheduled_for": str(r["scheduled_for"]),
            "geo/monitor_id": str(r["monitor_id"]),
        }
        for r in recent
        if r.get("scheduled_for") is not None
    }
    order = context.instance.get_dynamic_partitions(names.RUN_CHANNEL_PARTITIONS)
    adds = add_requests(
        {rid: channels_of[rid] for rid, _ in undispatched},
        context.instance.get_dynamic_partitions(names.RUNS_PARTITIONS),
        order,
    )
    # One run per collection run for its undispatched partitions (a range); partitions this tick
    # adds (a CLI-created run) have no place in the order yet: asked next tick, as a range too.
    existing = set(order)
    spans = [
        span
        for rid in sorted({rid for rid, _ in undispatched})
        for span in adjacent_ranges(
            [partition_key(r, ch) for r, ch in undispatched if r == rid], order
        )
        if span[0] in existing
    ]
    added_now = sorted({rid for rid, ch in undispatched if partition_key(rid, ch) not in existing})
    # Still undispatched after its run failed (to launch, or a failed plan check): asked again
    # under a fresh key, boundedly, as the completion sensor does. A key whose run the daemon
    # already launched is not asked again (the daemon would skip it without a word): the tick
    # names the partition and the run it waits on instead.
    latest: dict[str, dg.DagsterRun] = {}
    bases = [plan_span_key(span) for span in spans]
    keys = fresh_run_keys(context.instance, bases, latest_runs=latest)
    requests: list[dg.RunRequest] = []
    waiting: list[str] = []
    exhausted: list[str] = []
    for span, base in zip(spans, bases, strict=True):
        run_key, run = keys[base], latest.get(base)
        rid = parse_partition_key(span[0])[0]
        channels = [parse_partition_key(k)[1] for k in span]
        if run_key is None:
            exhausted += span
        elif run is not None and run.tags.get(RUN_KEY_TAG) == run_key:
            waiting += [f"{k} ({run.status.value}, run {run.run_id[:8]})" for k in span]
        else:
            one = {"geo/channel": channels[0]} if len(span) == 1 else {}
            requests.append(
                range_request(
                    span,
                    run_key=run_key,
                    job_name=sampling_plan_job.name,
                    tags={"geo/run_id": rid, **one, **scheduled.get(rid, {})},
                )
            )
    why = []
    if added_now:
        why.append(
            f"{_count(len(added_now), 'run')} whose partitions this tick adds, requested on the "
            f"next tick: {', '.join(added_now[:10])}"
        )
    if waiting:
        why.append(
            f"{_count(len(waiting), 'partition')} wait on runs already launched: "
            + ", ".join(waiting[:10])
            + (", ..." if len(waiting) > 10 else "")
        )
    if exhausted:
        why.append(
            f"{_count(len(exhausted), 'partition')} not requested again after "
            f"{MAX_REQUEST_ATTEMPTS} failed runs each (see their failures): "
            + ", ".join(exhausted[:10])
        )
    if why:
        context.log.info("sampling plans not requested: %s", "; ".join(why))
    if not requests:
        return dg.SensorResult(
            skip_reason="; ".join(why), dynamic_partitions_requests=adds, cursor=cursor
        )
    return dg.SensorResult(run_requests=requests, dynamic_partitions_requests=adds, cursor=cursor)


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"
