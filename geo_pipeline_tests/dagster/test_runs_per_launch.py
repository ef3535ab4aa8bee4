"""How many Dagster runs one launch costs (issue 36, latency): each run is a queued run worker
that imports the code location, so the count is most of click-to-published. One run per
collection run and stage, whatever the number of channels: create 1 (which also materialises
the sampling plans: it dispatches), downstream 1, billing 1. Every partition is still
materialised, and every check judged, per partition."""

from __future__ import annotations

from typing import Any

import dagster as dg
import pytest
import redis as redis_lib

from geo_pipeline.definitions import ASSETS
from geo_pipeline.defs import names
from geo_pipeline.defs.collection.jobs import create_collection_run
from geo_pipeline.defs.collection.sensors import completion_sensor, sampling_plan_sensor
from geo_pipeline.defs.jobs import billing_job, partition_downstream_job, sampling_plan_job
from geo_pipeline.defs.partitions import partition_key
from geo_pipeline_tests.dagster.conftest import collection_config, finish, fund, op_metadata

KIMI = {"platform": "kimi", "device": "web", "regions": ["cn"], "modes": ["standard"]}


def launch(defs: dg.Definitions, req: dg.RunRequest, instance: dg.DagsterInstance) -> Any:
    """What the daemon does with a run request: run the named job with the request's partition
    (or partition range, in its tags)."""
    assert req.job_name is not None
    return defs.resolve_job_def(req.job_name).execute_in_process(
        partition_key=req.partition_key, instance=instance, tags=req.tags, raise_on_error=False
    )


@pytest.mark.parametrize("extra_channels", [[], [KIMI]], ids=["2-channels", "3-channels"])
def test_a_launch_costs_three_dagster_runs_whatever_its_channels(
    extra_channels: list[dict[str, Any]],
    conn: Any,
    dg_instance: dg.DagsterInstance,
    resources: dict[str, Any],
    redis_client: redis_lib.Redis,
) -> None:
    defs = dg.Definitions(
        assets=ASSETS,
        jobs=[create_collection_run, sampling_plan_job, partition_downstream_job, billing_job],
        sensors=[completion_sensor, sampling_plan_sensor],
        resources=resources,
    )

    def tick(sensor: Any, cursor: str | None = None) -> dg.SensorResult:
        with dg.build_sensor_context(
            instance=dg_instance, cursor=cursor, resources=resources, definitions=defs
        ) as ctx:
            result = sensor(ctx)
        assert isinstance(result, dg.SensorResult)
        return result

    config = collection_config()
    config["channels"] += extra_channels
    fund(conn)
    created = defs.resolve_job_def("create_collection_run").execute_in_process(
        run_config={"ops": {"create_run_op": {"config": {"collection": config}}}},
        instance=dg_instance,
    )
    assert created.success
    run_id = op_metadata(created, "create_run_op")["run_id"]
    channels = [f"{c['platform']}__{c['device']}" for c in config["channels"]]
    keys = {partition_key(run_id, ch) for ch in channels}

    cursor = tick(completion_sensor).cursor  # nothing finished yet
    # The launch dispatched every partition: the sampling_plan sensor has nothing to ask.
    assert dg_instance.get_materialized_partitions(names.SAMPLING_PLAN) == keys
    assert not tick(sampling_plan_sensor).run_requests
    evaluations: list[dg.AssetCheckEvaluation] = list(created.get_asset_check_evaluations())
    # What the workers do: every sample of every channel terminal, each with its stream entry.
    for ch in channels:
        finish(conn, run_id, ch, client=redis_client, stream=resources["redis"].completions_stream)
    for req in tick(completion_sensor, cursor).run_requests or []:
        result = launch(defs, req, dg_instance)
        evaluations += result.get_asset_check_evaluations()
        assert result.success, [(e.check_name, e.metadata) for e in evaluations if not e.passed]

    runs = dg_instance.get_runs()
    by_job: dict[str, int] = {}
    for run in runs:
        by_job[run.job_name] = by_job.get(run.job_name, 0) + 1
    assert by_job == {
        "create_collection_run": 1,
        "partition_downstream_job": 1,
        "billing_job": 1,
    }, f"{len(channels)} channels: {by_job}"
    # Fewer runs, the same partitions: every one materialised, with its own metadata.
    for asset in (names.SAMPLING_PLAN, *names.PARTITION_DOWNSTREAM):
        assert dg_instance.get_materialized_partitions(asset) == keys, asset
        for key in keys:
            [record] = dg_instance.fetch_materializations(
                dg.AssetRecordsFilter(asset_key=asset, asset_partitions=[key]), limit=1
            ).records
            mat = record.asset_materialization
            assert mat is not None and mat.metadata["channel"].value == key.split("|")[1], asset
    assert dg_instance.get_materialized_partitions(names.BILLING_RECONCILIATION) == {run_id}
    # Every check judged once per partition, and the evaluation names that partition.
    judged: dict[str, set[str]] = {}
    for e in evaluations:
        if e.asset_key == names.BILLING_RECONCILIATION:
            continue
        assert e.partition is not None and e.metadata["partition"].value == e.partition  # type: ignore[attr-defined]
        judged.setdefault(e.check_name, set()).add(e.partition)
        assert e.passed or e.severity != dg.AssetCheckSeverity.ERROR, (e.check_name, e.metadata)
        if e.asset_key == names.SAMPLING_PLAN:  # judged the launch's own materialisation
            target = e.target_materialization_data
            assert target is not None and target.run_id == created.run_id, e.check_name
    for check in (
        names.CHECK_PLAN_VOLUME,
        names.CHECK_PLAN_IDENTITIES,
        names.CHECK_PLAN_BATCHES,
        names.CHECK_NO_NON_TERMINAL,
        names.CHECK_FIELD_COMPLETENESS,
        names.CHECK_VALID_ANSWERS_ANALYSED,
        names.CHECK_VISIBILITY_MATCHES,
    ):
        assert judged[check] == keys, check
