"""Runs that fail are asked again, boundedly. On a loaded machine the code server can take longer
than its timeout to answer: the daemon's launch of a ``partition_downstream_job`` run then fails
before any step (``DagsterUserCodeUnreachableError``). A run key is launched once, so the
completion sensor's PostgreSQL sweep asks again for a finished partition whose last run failed,
under a fresh key (``<key>:attempt:<n>``), at most ``MAX_REQUEST_ATTEMPTS`` times; billing
likewise. A partition whose run succeeded or is still in flight, or whose failed run Dagster's
own run retries are about to re-execute, is not asked again.

The daemon is played by ``Daemon`` below (what ``dagster/_daemon/sensor.py`` and the queued run
coordinator do with a tick's requests); the sensor is evaluated with ``build_sensor_context``
over real Redis and PostgreSQL, as in test_sensors.py."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import dagster as dg
import psycopg
import pytest
import redis as redis_lib

from geo_pipeline.definitions import ASSETS
from geo_pipeline.defs import names
from geo_pipeline.defs.collection.assets import collection_results
from geo_pipeline.defs.collection.cursor import cursor_time, cursor_ts
from geo_pipeline.defs.collection.run_keys import MAX_REQUEST_ATTEMPTS, attempt_run_key
from geo_pipeline.defs.collection.sensors import completion_sensor, sampling_plan_sensor
from geo_pipeline.defs.jobs import billing_job, partition_downstream_job, sampling_plan_job
from geo_pipeline.defs.partitions import partition_key
from geo_pipeline.defs.resources import PostgresResource
from geo_pipeline.store.db import Conn
from geo_pipeline_tests.dagster.conftest import create_run, finish

WEB, APP = "deepseek__web", "qwen__app"
RUN_KEY_TAG = "dagster/run_key"
SENSOR_TAG = "dagster/sensor_name"
UNREACHABLE = (
    "dagster._core.errors.DagsterUserCodeUnreachableError: Could not reach user code server. "
    "gRPC Error code: DEADLINE_EXCEEDED (the code server took longer than 60 s to answer)"
)


class Daemon:
    """What the Dagster daemon does with a sensor tick's run requests: a run key it launched
    before is skipped; a new key becomes a run tagged with the key and the sensor, and is
    launched. A launch for which ``unreachable(request)`` is true fails before any step, as the
    queued run coordinator reports it when the code server does not answer: the run is created,
    an engine event says why, and the run is marked failed — no step event, no materialisation."""

    def __init__(
        self,
        defs: dg.Definitions,
        instance: dg.DagsterInstance,
        unreachable: Callable[[dg.RunRequest], bool] = lambda _req: False,
    ) -> None:
        self.defs, self.instance, self.unreachable = defs, instance, unreachable
        self.launched: list[str] = []

    def launch(self, result: dg.SensorResult) -> list[str]:
        """The run keys launched from this tick (skipped keys are not)."""
        out = []
        for req in result.run_requests or []:
            assert req.run_key and req.job_name
            if self.instance.get_runs(dg.RunsFilter(tags={RUN_KEY_TAG: req.run_key})):
                continue  # the daemon launches a run key once
            job = self.defs.resolve_job_def(req.job_name)
            tags = {**req.tags, RUN_KEY_TAG: req.run_key, SENSOR_TAG: "completion_sensor"}
            if self.unreachable(req):
                run = self.instance.create_run_for_job(
                    job_def=job,
                    tags={**job.tags, **tags, **partition_tags(req)},
                    status=dg.DagsterRunStatus.NOT_STARTED,
                )
                self.instance.report_engine_event(
                    f"Caught an unrecoverable error while dequeuing the run: {UNREACHABLE}", run
                )
                self.instance.report_run_failed(run)
            else:
                job.execute_in_process(
                    partition_key=req.partition_key,
                    instance=self.instance,
                    tags=tags,
                    raise_on_error=False,
                )
            out.append(req.run_key)
        self.launched += out
        return out


def partition_tags(req: dg.RunRequest) -> dict[str, str]:
    """The tags naming what a request's run covers: its partition, or its partition range."""
    if req.partition_key is not None:
        return {"dagster/partition": req.partition_key}
    return {k: v for k, v in req.tags.items() if k.startswith("dagster/asset_partition_range")}


def first_launch_of_each_fails(instance: dg.DagsterInstance) -> Callable[[dg.RunRequest], bool]:
    """The first run of each (job, partition or range) fails to launch; later ones reach the
    code server."""

    def unreachable(req: dg.RunRequest) -> bool:
        return not instance.get_runs(dg.RunsFilter(job_name=req.job_name, tags=partition_tags(req)))

    return unreachable


def tick(
    instance: dg.DagsterInstance,
    resources: dict[str, Any],
    defs: dg.Definitions,
    cursor: str | None,
) -> dg.SensorResult:
    with dg.build_sensor_context(
        instance=instance, cursor=cursor, resources=resources, definitions=defs
    ) as ctx:
        result = completion_sensor(ctx)
    assert isinstance(result, dg.SensorResult)
    return result


def sweep_due(cursor: str | None) -> str:
    """The same cursor, as the next tick after ``sweep_interval_seconds`` (300) sees it."""
    data = json.loads(cursor or "{}")
    data["swept"] = cursor_time((cursor_ts(data.get("swept")) or 0.0) - 301)
    return json.dumps(data, sort_keys=True)


def requested(result: dg.SensorResult) -> list[str]:
    return sorted(r.run_key for r in result.run_requests or [] if r.run_key)


def definitions(resources: dict[str, Any]) -> dg.Definitions:
    return dg.Definitions(
        assets=ASSETS,
        jobs=[partition_downstream_job, billing_job],
        sensors=[completion_sensor],
        resources=resources,
    )


def stream(resources: dict[str, Any]) -> str:
    return resources["redis"].completions_stream


def downstream_key(run_id: str, channel: str, attempt: int = 1) -> str:
    return attempt_run_key(names.downstream_run_key(run_id, channel), attempt)


def both_key(run_id: str, attempt: int = 1) -> str:
    """The key of the one downstream run of both partitions (their range)."""
    both = names.downstream_range_key(run_id, [(WEB, None, None), (APP, None, None)])
    return attempt_run_key(both, attempt)


def billing_key(run_id: str, attempt: int = 1) -> str:
    return attempt_run_key(names.billing_run_key(run_id), attempt)


def materialised(instance: dg.DagsterInstance, asset: dg.AssetKey) -> set[str]:
    return set(instance.get_materialized_partitions(asset))


def test_downstream_runs_that_failed_to_launch_are_requested_again_until_all_materialise(
    conn: Any,
    dg_instance: dg.DagsterInstance,
    resources: dict[str, Any],
    redis_client: redis_lib.Redis,
) -> None:
    defs = definitions(resources)
    run_id = create_run(conn, dg_instance)
    # The first tick's launches fail (the code server does not answer); later ones reach it.
    first_tick = {both_key(run_id), billing_key(run_id)}
    daemon = Daemon(defs, dg_instance, lambda req: req.run_key in first_tick)
    first = tick(dg_instance, resources, defs, None)
    finish(conn, run_id, WEB, client=redis_client, stream=stream(resources))
    finish(conn, run_id, APP, client=redis_client, stream=stream(resources), fail=1)

    # Every partition is finished; the two runs (downstream of both partitions, billing) are
    # requested and every launch fails.
    second = tick(dg_instance, resources, defs, first.cursor)
    assert sorted(daemon.launch(second)) == sorted([both_key(run_id), billing_key(run_id)])
    failed = dg_instance.get_runs(dg.RunsFilter(statuses=[dg.DagsterRunStatus.FAILURE]))
    assert len(failed) == 2
    assert not materialised(dg_instance, names.COLLECTION_RESULTS)

    # Nothing new in the stream and the sweep not due: nothing asked yet.
    third = tick(dg_instance, resources, defs, second.cursor)
    assert daemon.launch(third) == []

    # The sweep: PostgreSQL says every partition is finished, Dagster that brand_visibility is
    # missing and the last run failed: each partition is asked again, alone (one partition's
    # failure must not hold back the others), billing under a fresh key.
    fourth = tick(dg_instance, resources, defs, sweep_due(third.cursor))
    assert sorted(daemon.launch(fourth)) == sorted(
        [downstream_key(run_id, WEB), downstream_key(run_id, APP), billing_key(run_id, 2)]
    )
    partitions = {str(partition_key(run_id, ch)) for ch in (WEB, APP)}
    for asset in names.PARTITION_DOWNSTREAM:
        assert materialised(dg_instance, asset) == partitions, asset
    assert materialised(dg_instance, names.BILLING_RECONCILIATION) == {run_id}

    # Billing after: its materialisation follows every partition's collection results.
    def last_materialisation(asset: dg.AssetKey, partition: str) -> int:
        records = dg_instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=asset, asset_partitions=[partition]), limit=1
        ).records
        return records[0].storage_id

    billed = last_materialisation(names.BILLING_RECONCILIATION, run_id)
    for p in partitions:
        assert last_materialisation(names.COLLECTION_RESULTS, p) < billed

    # Idempotent: later sweeps and a redelivered completion ask for nothing new.
    redis_client.xadd(stream(resources), {"run_id": run_id, "channel": WEB})
    fifth = tick(dg_instance, resources, defs, sweep_due(fourth.cursor))
    assert daemon.launch(fifth) == []
    assert set(requested(fifth)) <= set(daemon.launched)
    sixth = tick(dg_instance, resources, defs, sweep_due(fifth.cursor))
    assert daemon.launch(sixth) == []


def test_only_the_partition_whose_run_failed_is_asked_again(
    conn: Any,
    dg_instance: dg.DagsterInstance,
    resources: dict[str, Any],
    redis_client: redis_lib.Redis,
) -> None:
    defs = definitions(resources)
    run_id = create_run(conn, dg_instance)
    web = str(partition_key(run_id, WEB))
    # WEB's run fails to launch; APP's and billing's launch fine. (They finish a tick apart:
    # partitions publishable in the same tick share one run.)
    daemon = Daemon(defs, dg_instance, lambda req: req.partition_key == web)
    first = tick(dg_instance, resources, defs, None)
    finish(conn, run_id, WEB, client=redis_client, stream=stream(resources))
    web_tick = tick(dg_instance, resources, defs, first.cursor)
    assert daemon.launch(web_tick) == [downstream_key(run_id, WEB)]
    finish(conn, run_id, APP, client=redis_client, stream=stream(resources))
    second = tick(dg_instance, resources, defs, web_tick.cursor)
    daemon.launch(second)
    assert materialised(dg_instance, names.BRAND_VISIBILITY) == {str(partition_key(run_id, APP))}

    # WEB's second attempt is launched and still running at the next sweep: not asked again.
    swept = tick(dg_instance, resources, defs, sweep_due(second.cursor))
    assert downstream_key(run_id, WEB, 2) in requested(swept)
    assert set(requested(swept)) - set(daemon.launched) == {downstream_key(run_id, WEB, 2)}
    job = defs.resolve_job_def(partition_downstream_job.name)
    dg_instance.create_run_for_job(
        job_def=job,
        tags={**job.tags, RUN_KEY_TAG: downstream_key(run_id, WEB, 2), "dagster/partition": web},
        status=dg.DagsterRunStatus.STARTED,
    )
    again = tick(dg_instance, resources, defs, sweep_due(swept.cursor))
    # The one in flight is requested under its own key (the daemon skips it); nothing else new.
    assert set(requested(again)) - set(daemon.launched) == {downstream_key(run_id, WEB, 2)}
    assert daemon.launch(again) == []
    assert not dg_instance.get_runs(
        dg.RunsFilter(tags={RUN_KEY_TAG: downstream_key(run_id, WEB, 3)})
    )


def test_a_failed_run_dagster_will_retry_is_left_to_run_retries(
    conn: Any,
    resources: dict[str, Any],
    redis_client: redis_lib.Redis,
) -> None:
    # The instance retries failed runs (dagster.yaml run_retries): a failed run is tagged
    # dagster/will_retry=true, and the sweep leaves it to the retry daemon, which re-executes
    # it under the same run key. When the retry daemon itself cannot reach the code server it
    # gives up (will_retry=false): then the sweep asks again.
    with dg.instance_for_test(
        overrides={"run_retries": {"enabled": True, "max_retries": 2}}
    ) as inst:
        defs = definitions(resources)
        daemon = Daemon(defs, inst, lambda req: req.job_name == partition_downstream_job.name)
        run_id = create_run(conn, inst)
        first = tick(inst, resources, defs, None)
        finish(conn, run_id, WEB, client=redis_client, stream=stream(resources))
        second = tick(inst, resources, defs, first.cursor)
        assert daemon.launch(second) == [downstream_key(run_id, WEB)]
        [failed] = inst.get_runs(dg.RunsFilter(statuses=[dg.DagsterRunStatus.FAILURE]))
        assert failed.tags.get("dagster/will_retry") == "true"

        pending = tick(inst, resources, defs, sweep_due(second.cursor))
        assert requested(pending) == [downstream_key(run_id, WEB)]  # launched: skipped
        assert daemon.launch(pending) == []

        inst.add_run_tags(failed.run_id, {"dagster/will_retry": "false"})  # "Failed to retry run"
        retried = tick(inst, resources, defs, sweep_due(pending.cursor))
        assert requested(retried) == [downstream_key(run_id, WEB, 2)]


def test_attempts_are_bounded(
    conn: Any,
    dg_instance: dg.DagsterInstance,
    resources: dict[str, Any],
    redis_client: redis_lib.Redis,
) -> None:
    defs = definitions(resources)
    daemon = Daemon(defs, dg_instance, lambda _req: True)  # the code server never answers
    run_id = create_run(conn, dg_instance)
    cursor = tick(dg_instance, resources, defs, None).cursor
    finish(conn, run_id, WEB, client=redis_client, stream=stream(resources))
    finish(conn, run_id, APP, client=redis_client, stream=stream(resources))
    for _ in range(MAX_REQUEST_ATTEMPTS + 2):
        result = tick(dg_instance, resources, defs, sweep_due(cursor))
        daemon.launch(result)
        cursor = result.cursor
    # One run of both partitions, then each alone (bounded), billing bounded.
    expected = [both_key(run_id)] + [
        key
        for n in range(1, MAX_REQUEST_ATTEMPTS + 1)
        for key in (
            downstream_key(run_id, WEB, n),
            downstream_key(run_id, APP, n),
            billing_key(run_id, n),
        )
    ]
    assert sorted(daemon.launched) == sorted(expected)
    assert not tick(dg_instance, resources, defs, sweep_due(cursor)).run_requests


def test_a_sampling_plan_run_that_failed_to_launch_is_requested_again(
    conn: Any, dg_instance: dg.DagsterInstance, resources: dict[str, Any]
) -> None:
    defs = dg.Definitions(
        assets=ASSETS, jobs=[sampling_plan_job], sensors=[sampling_plan_sensor], resources=resources
    )
    daemon = Daemon(defs, dg_instance, first_launch_of_each_fails(dg_instance))
    run_id = create_run(conn, dg_instance)

    def plan_tick(cursor: str | None) -> dg.SensorResult:
        with dg.build_sensor_context(
            instance=dg_instance, cursor=cursor, resources=resources, definitions=defs
        ) as ctx:
            result = sampling_plan_sensor(ctx)
        assert isinstance(result, dg.SensorResult)
        return result

    first = plan_tick(None)
    plans = [names.plan_run_key(run_id, WEB, APP)]  # one run, both partitions
    assert sorted(daemon.launch(first)) == sorted(plans)  # fails to launch
    second = plan_tick(first.cursor)
    assert sorted(daemon.launch(second)) == sorted(attempt_run_key(k, 2) for k in plans)
    assert materialised(dg_instance, names.SAMPLING_PLAN) == {
        str(partition_key(run_id, ch)) for ch in (WEB, APP)
    }
    assert not plan_tick(second.cursor).run_requests  # dispatched: nothing asked again


# --------------------------------------------------------------------------- op retries
_REFUSED: set[str] = set()


class RefusesFirstConnection(PostgresResource):
    """PostgreSQL that refuses the first connection of a test (a restart, a full pool)."""

    @contextmanager
    def connect(self) -> Iterator[Conn]:
        if self.url not in _REFUSED:
            _REFUSED.add(self.url)
            raise psycopg.OperationalError("connection refused (the server is restarting)")
        with super().connect() as conn:
            yield conn


@pytest.fixture
def refusing_db(db_url: str) -> Iterator[PostgresResource]:
    _REFUSED.discard(db_url)
    yield RefusesFirstConnection(url=db_url)
    _REFUSED.discard(db_url)


def test_an_asset_retries_a_refused_database_connection_and_not_a_business_failure(
    conn: Any,
    dg_instance: dg.DagsterInstance,
    resources: dict[str, Any],
    refusing_db: PostgresResource,
) -> None:
    run_id = create_run(conn, dg_instance)
    finish(conn, run_id, WEB)
    key = partition_key(run_id, WEB)
    ok = dg.materialize(
        [collection_results],
        partition_key=key,
        instance=dg_instance,
        resources={**resources, "db": refusing_db},
        raise_on_error=False,
    )
    assert ok.success
    assert [e.event_type_value for e in ok.all_events if e.is_step_up_for_retry] == [
        "STEP_UP_FOR_RETRY"
    ]
    # A partition still collecting fails at once: retrying cannot finish its samples.
    finish(conn, run_id, APP, only=1)
    refused = dg.materialize(
        [collection_results],
        partition_key=partition_key(run_id, APP),
        instance=dg_instance,
        resources=resources,
        raise_on_error=False,
    )
    assert not refused.success
    assert not [e for e in refused.all_events if e.is_step_up_for_retry]
