"""Sensors evaluated with build_sensor_context over a real Redis stream and real PostgreSQL:
one request per finished partition, run keys that never repeat, catch-up after the stream was
trimmed or lost, sampling-plan requests for new runs, and partition retention."""

from __future__ import annotations

import json
from typing import Any

import dagster as dg
import redis as redis_lib

from geo_pipeline.defs import names
from geo_pipeline.defs.collection.sensors import completion_sensor, sampling_plan_sensor
from geo_pipeline.defs.collection.stream import read_completions
from geo_pipeline.defs.operations.partition_retention import partition_retention_sensor
from geo_pipeline.defs.partitions import partition_key
from geo_pipeline_tests.dagster.conftest import create_run, finish

WEB, APP = "deepseek__web", "qwen__app"


def tick(
    sensor: Any, instance: dg.DagsterInstance, resources: dict[str, Any], cursor: str | None
) -> dg.SensorResult:
    # A context manager, as the daemon uses it: the evidence resource nests an S3Resource.
    with dg.build_sensor_context(instance=instance, cursor=cursor, resources=resources) as ctx:
        result = sensor(ctx)
    assert isinstance(result, dg.SensorResult)
    return result


def keys(result: dg.SensorResult) -> list[str]:
    return sorted(r.run_key for r in result.run_requests or [] if r.run_key)


def added(result: dg.SensorResult) -> dict[str, list[str]]:
    """{partitions name: keys} the result asks the daemon to add (a sensor never adds itself)."""
    out: dict[str, list[str]] = {}
    for req in result.dynamic_partitions_requests or []:
        assert isinstance(req, dg.AddDynamicPartitionsRequest)
        out[req.partitions_def_name] = list(req.partition_keys)
    return out


def covered(req: dg.RunRequest) -> list[str]:
    """The partition keys a request's run covers: its partition, or its range's ends (the
    ranges here are two adjacent keys)."""
    if req.partition_key is not None:
        return [req.partition_key]
    span = req.partition_key_range
    assert span is not None, req
    return [span.start, span.end]


def stream(resources: dict[str, Any]) -> str:
    return resources["redis"].completions_stream


def test_completion_sensor_requests_each_finished_partition_once(
    conn: Any,
    dg_instance: dg.DagsterInstance,
    resources: dict[str, Any],
    redis_client: redis_lib.Redis,
) -> None:
    run_id = create_run(conn, dg_instance)
    # First tick: nothing in the stream, nothing finished (and the first sweep is done).
    first = tick(completion_sensor, dg_instance, resources, None)
    assert not first.run_requests
    # Half of WEB finishes: touched, not finished.
    finish(conn, run_id, WEB, client=redis_client, stream=stream(resources), only=2)
    second = tick(completion_sensor, dg_instance, resources, first.cursor)
    assert not second.run_requests
    # WEB finishes: exactly one downstream run for that partition, keyed.
    finish(conn, run_id, WEB, client=redis_client, stream=stream(resources), fail=1)
    third = tick(completion_sensor, dg_instance, resources, second.cursor)
    assert keys(third) == [names.downstream_run_key(run_id, WEB)]
    [req] = third.run_requests or []
    assert req.partition_key == partition_key(run_id, WEB)
    assert req.job_name == "partition_downstream_job"
    # Nothing new in the stream: nothing requested again.
    fourth = tick(completion_sensor, dg_instance, resources, third.cursor)
    assert not fourth.run_requests
    assert json.loads(fourth.cursor or "{}")["id"] == json.loads(third.cursor or "{}")["id"]
    # APP finishes: its partition, and now the whole run is finished -> billing too.
    finish(conn, run_id, APP, client=redis_client, stream=stream(resources))
    fifth = tick(completion_sensor, dg_instance, resources, fourth.cursor)
    assert keys(fifth) == sorted(
        [names.downstream_run_key(run_id, APP), names.billing_run_key(run_id)]
    )
    billing = next(r for r in fifth.run_requests or [] if r.job_name == "billing_job")
    assert billing.partition_key == run_id


def test_duplicate_completion_messages_request_the_same_run_key(
    conn: Any,
    dg_instance: dg.DagsterInstance,
    resources: dict[str, Any],
    redis_client: redis_lib.Redis,
) -> None:
    run_id = create_run(conn, dg_instance)
    first = tick(completion_sensor, dg_instance, resources, None)
    finish(conn, run_id, WEB, client=redis_client, stream=stream(resources))
    second = tick(completion_sensor, dg_instance, resources, first.cursor)
    # A redelivered completion (at-least-once) touches the partition again: same run key, so
    # the daemon launches nothing twice.
    redis_client.xadd(
        stream(resources),
        {
            "event_id": "dup",
            "sample_id": "s",
            "run_id": run_id,
            "channel": WEB,
            "collection_state": "completed",
        },
    )
    third = tick(completion_sensor, dg_instance, resources, second.cursor)
    assert keys(second) == keys(third) == [names.downstream_run_key(run_id, WEB)]


def test_trimmed_stream_is_caught_up_from_postgresql(
    conn: Any,
    dg_instance: dg.DagsterInstance,
    resources: dict[str, Any],
    redis_client: redis_lib.Redis,
) -> None:
    run_id = create_run(conn, dg_instance)
    redis_client.xadd(stream(resources), {"run_id": "other", "channel": WEB})
    first = tick(completion_sensor, dg_instance, resources, None)
    cursor = json.loads(first.cursor or "{}")
    assert cursor["id"] is not None
    # Both partitions finish, but their entries are trimmed away before the next tick and the
    # periodic sweep is not due: the gap itself must trigger the PostgreSQL sweep.
    finish(conn, run_id, WEB, client=redis_client, stream=stream(resources))
    finish(conn, run_id, APP, client=redis_client, stream=stream(resources))
    redis_client.xadd(stream(resources), {"run_id": "other", "channel": WEB})
    redis_client.xtrim(stream(resources), maxlen=1, approximate=False)
    result = tick(completion_sensor, dg_instance, resources, first.cursor)
    # Both partitions in one downstream run (their range), and billing.
    both = names.downstream_range_key(run_id, [(WEB, None, None), (APP, None, None)])
    assert keys(result) == sorted([both, names.billing_run_key(run_id)])
    [downstream] = [r for r in result.run_requests or [] if r.run_key == both]
    assert covered(downstream) == [partition_key(run_id, WEB), partition_key(run_id, APP)]


def test_lost_stream_is_caught_up_from_postgresql(
    conn: Any,
    dg_instance: dg.DagsterInstance,
    resources: dict[str, Any],
    redis_client: redis_lib.Redis,
) -> None:
    run_id = create_run(conn, dg_instance)
    redis_client.xadd(stream(resources), {"run_id": "other", "channel": WEB})
    first = tick(completion_sensor, dg_instance, resources, None)
    finish(conn, run_id, WEB, client=redis_client, stream=stream(resources))
    redis_client.delete(stream(resources))  # Redis lost everything (no persistence, failover)
    result = tick(completion_sensor, dg_instance, resources, first.cursor)
    assert keys(result) == [names.downstream_run_key(run_id, WEB)]


def test_periodic_sweep_skips_partitions_already_materialised(
    conn: Any, dg_instance: dg.DagsterInstance, resources: dict[str, Any]
) -> None:
    run_id = create_run(conn, dg_instance)
    finish(conn, run_id, WEB)
    dg_instance.report_runless_asset_event(
        dg.AssetMaterialization(names.BRAND_VISIBILITY, partition=str(partition_key(run_id, WEB)))
    )
    finish(conn, run_id, APP)
    result = tick(completion_sensor, dg_instance, resources, None)  # first tick sweeps
    assert names.downstream_run_key(run_id, WEB) not in keys(result)
    assert names.downstream_run_key(run_id, APP) in keys(result)


def test_runs_created_by_the_cli_are_adopted_and_unknown_ids_ignored(
    conn: Any,
    dg_instance: dg.DagsterInstance,
    resources: dict[str, Any],
    redis_client: redis_lib.Redis,
) -> None:
    run_id = create_run(conn)  # `geo-pipeline runs create`: no Dagster partition
    old = create_run(conn)
    conn.execute(
        "UPDATE geo.runs SET created_at = now() - interval '100 days' WHERE run_id = %s", (old,)
    )
    # The first tick sweeps recent runs: the CLI run gets its partitions, one per channel of
    # the run and its run key (not the old run's).
    first = tick(completion_sensor, dg_instance, resources, None)
    assert added(first) == {
        names.RUN_CHANNEL_PARTITIONS: [partition_key(run_id, WEB), partition_key(run_id, APP)],
        names.RUNS_PARTITIONS: [run_id],
    }
    assert not first.run_requests
    finish(conn, run_id, WEB, client=redis_client, stream=stream(resources))
    finish(conn, old, WEB, client=redis_client, stream=stream(resources))
    redis_client.xadd(stream(resources), {"run_id": "no-such-run", "channel": WEB})
    # (build_sensor_context does not apply the add; the daemon would, before the requests.)
    result = tick(completion_sensor, dg_instance, resources, first.cursor)
    assert added(result) == added(first)
    assert keys(result) == [names.downstream_run_key(run_id, WEB)]
    assert [r.partition_key for r in result.run_requests or []] == [partition_key(run_id, WEB)]


def test_a_run_registered_before_the_upgrade_gets_its_channel_partitions(
    conn: Any,
    dg_instance: dg.DagsterInstance,
    resources: dict[str, Any],
    redis_client: redis_lib.Redis,
) -> None:
    """A run whose run key exists from the run x channel days, but no run|channel keys: the
    sensor adds the missing keys (not the run key again) and requests the finished channel."""
    run_id = create_run(conn)
    dg_instance.add_dynamic_partitions(names.RUNS_PARTITIONS, [run_id])
    finish(conn, run_id, WEB, client=redis_client, stream=stream(resources))
    result = tick(completion_sensor, dg_instance, resources, None)
    assert added(result) == {
        names.RUN_CHANNEL_PARTITIONS: [partition_key(run_id, WEB), partition_key(run_id, APP)]
    }
    assert keys(result) == [names.downstream_run_key(run_id, WEB)]


def test_stream_reading_is_paged_and_bounded(redis_client: redis_lib.Redis, redis_ns: str) -> None:
    key = f"{redis_ns}:completions"
    for i in range(25):
        redis_client.xadd(key, {"run_id": f"r{i % 5}", "channel": WEB})
    read = read_completions(redis_client, key, None, page=4, limit=10)
    assert read.entries == 10 and read.gap is None
    rest = read_completions(redis_client, key, read.last_id, page=4, limit=100)
    assert rest.entries == 15 and rest.gap is None
    assert len(read.pairs | rest.pairs) == 5


# --------------------------------------------------------------------------- sampling plans
def test_sampling_plan_sensor_requests_undispatched_partitions_and_adds_missing_ones(
    conn: Any, dg_instance: dg.DagsterInstance, resources: dict[str, Any]
) -> None:
    from geo_pipeline.store import runs as runstore

    with_partition = create_run(conn, dg_instance)
    without_partition = create_run(conn)  # e.g. `runs create --no-dispatch` from the CLI
    result = tick(sampling_plan_sensor, dg_instance, resources, None)
    # One run for the registered run's partitions (a range); the CLI run's partitions are
    # added by this very tick: they are requested on the next one, as a range too.
    assert keys(result) == [names.plan_run_key(with_partition, WEB, APP)]
    assert added(result) == {
        names.RUN_CHANNEL_PARTITIONS: [
            partition_key(without_partition, WEB),
            partition_key(without_partition, APP),
        ],
        names.RUNS_PARTITIONS: [without_partition],
    }
    assert [k for r in result.run_requests or [] for k in covered(r)] == [
        partition_key(with_partition, WEB),
        partition_key(with_partition, APP),
    ]
    for name, added_keys in added(result).items():  # what the daemon does with the result
        dg_instance.add_dynamic_partitions(name, added_keys)
    # Once dispatched, a partition is not requested again, and the cursor remembers it so
    # later ticks do not ask PostgreSQL about it.
    runstore.dispatch(conn, with_partition, WEB)
    again = tick(sampling_plan_sensor, dg_instance, resources, result.cursor)
    assert keys(again) == sorted(
        [names.plan_run_key(with_partition, APP), names.plan_run_key(without_partition, WEB, APP)]
    )
    assert json.loads(again.cursor or "{}")["dispatched"] == [partition_key(with_partition, WEB)]
    # A scheduled run (created by the daily re-sample job) is requested the same way, tagged
    # with its day; cancelled runs are not dispatched.
    scheduled = create_run(conn, dg_instance, run_id="m-20261130", scheduled_for="2026-11-30")
    conn.execute(
        "UPDATE geo.runs SET cancel_requested_at = now() WHERE run_id = %s", (without_partition,)
    )
    third = tick(sampling_plan_sensor, dg_instance, resources, again.cursor)
    assert keys(third) == sorted(
        [names.plan_run_key(with_partition, APP), names.plan_run_key(scheduled, WEB, APP)]
    )
    assert {
        r.tags.get("geo/scheduled_for")
        for r in third.run_requests or []
        if r.tags["geo/run_id"] == scheduled
    } == {"2026-11-30"}


# --------------------------------------------------------------------------- retention
def test_retention_sensor_deletes_old_and_orphaned_run_partitions(
    conn: Any, dg_instance: dg.DagsterInstance, resources: dict[str, Any]
) -> None:
    old = create_run(conn, dg_instance)
    fresh = create_run(conn, dg_instance)
    conn.execute(
        "UPDATE geo.runs SET created_at = now() - interval '100 days' WHERE run_id = %s", (old,)
    )
    dg_instance.add_dynamic_partitions(names.RUNS_PARTITIONS, ["orphan-run"])
    dg_instance.add_dynamic_partitions(
        names.RUN_CHANNEL_PARTITIONS, [partition_key("orphan-pair", WEB), "not-a-pair-key"]
    )
    result = tick(partition_retention_sensor, dg_instance, resources, None)
    deleted: dict[str, list[str]] = {}
    for req in result.dynamic_partitions_requests or []:
        assert isinstance(req, dg.DeleteDynamicPartitionsRequest)
        deleted[req.partitions_def_name] = sorted(req.partition_keys)
    # The old run's channel partitions go with its run key; the fresh run keeps all of its.
    assert deleted == {
        names.RUN_CHANNEL_PARTITIONS: sorted(
            [
                partition_key(old, WEB),
                partition_key(old, APP),
                partition_key("orphan-pair", WEB),
                "not-a-pair-key",
            ]
        ),
        names.RUNS_PARTITIONS: sorted([old, "orphan-run"]),
    }
    assert fresh not in deleted[names.RUNS_PARTITIONS]


def test_trimming_entries_already_read_is_not_a_gap(
    redis_client: redis_lib.Redis, redis_ns: str
) -> None:
    key = f"{redis_ns}:completions"
    for _ in range(5):
        redis_client.xadd(key, {"run_id": "r", "channel": WEB})
    read = read_completions(redis_client, key, None, page=10, limit=10)
    for _ in range(3):
        redis_client.xadd(key, {"run_id": "r2", "channel": WEB})
    redis_client.xtrim(key, maxlen=4, approximate=False)  # drops only what we already read
    after = read_completions(redis_client, key, read.last_id, page=10, limit=10)
    assert after.gap is None and after.entries == 3
    redis_client.xadd(key, {"run_id": "r3", "channel": WEB})
    redis_client.xtrim(key, maxlen=0, approximate=False)  # drops an entry we never read
    lost = read_completions(redis_client, key, after.last_id, page=10, limit=10)
    assert lost.gap is not None and lost.entries == 0
