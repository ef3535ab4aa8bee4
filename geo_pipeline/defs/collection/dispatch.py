"""The sampling_plan of a run the launchpad just created, in the launchpad's own Dagster run
(issue 36, latency): every Dagster run is a queued run worker that imports the code location
(seconds), and the sampling_plan_sensor ticks every 5 s at best, so asking a sampling_plan_job
for the new partitions cost ~7 s of an 8-sample run's click-to-published. The op does what the
asset's step does for each partition (``plan_partition``: the dispatch gate, the plan checks)
and reports it as the asset's materialisation of that partition with its check evaluations, so
the UI, the sensors and the completion sensor see the same records as after a
sampling_plan_job. The sampling_plan_sensor still dispatches what this did not reach (a crash
after the run's commit, a run created by the CLI or the daily re-sample job).
"""

from collections.abc import Iterator, Sequence

import dagster as dg

from geo_pipeline.defs import names
from geo_pipeline.defs.collection.assets import plan_partition, sampling_plan
from geo_pipeline.defs.factory import TargetMaterialization
from geo_pipeline.defs.partitions import partition_key
from geo_pipeline.defs.resources import PostgresResource

PlanEvent = dg.AssetMaterialization | dg.AssetCheckEvaluation


def dispatch_new_partitions(
    context: dg.OpExecutionContext,
    db: PostgresResource,
    run_id: str,
    channels: Sequence[str],
    dispatched_at_creation: bool,
) -> Iterator[PlanEvent]:
    """Materialise sampling_plan of the run's partitions from an op (each through the dispatch
    gate: idempotent, so a run its creating transaction dispatched is not queued twice); yields
    the materialisations, then each partition's plan check evaluations linked to them. Raises a
    Failure after every partition was judged if a blocking check failed (as the asset's step
    fails): nothing of that partition was dispatched."""
    keys = [partition_key(run_id, channel) for channel in channels]
    results = {key: plan_partition(context, db, key, dispatched_at_creation) for key in keys}
    for key, result in results.items():
        yield dg.AssetMaterialization(
            asset_key=names.SAMPLING_PLAN, partition=key, metadata=dict(result.metadata or {})
        )
    # Resumed after the materialisations above were stored: each evaluation names the one it
    # judged, as the asset's step links them (defs/factory.py, each_partition).
    blocking = {spec.key.name: spec.blocking for spec in sampling_plan.check_specs}
    failed: list[str] = []
    for key, result in results.items():
        target = _materialisation(context, key)
        for check in result.check_results or ():
            name = check.check_name or ""
            yield dg.AssetCheckEvaluation(
                asset_key=names.SAMPLING_PLAN,
                check_name=name,
                passed=check.passed,
                metadata={**check.metadata, "partition": dg.MetadataValue.text(key)},
                severity=check.severity,
                description=check.description,
                blocking=blocking.get(name, False),
                partition=key,
                target_materialization_data=target,
            )
            if not check.passed and blocking.get(name, False):
                failed.append(f"{key}: {name}")
    if failed:
        raise dg.Failure(
            description="the run was created but not dispatched: a blocking plan check failed "
            f"({', '.join(failed)})",
            metadata={"failed checks": failed},
            allow_retries=False,
        )


def _materialisation(context: dg.OpExecutionContext, key: str) -> TargetMaterialization | None:
    """This run's materialisation of sampling_plan for partition ``key``."""
    records = context.instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=names.SAMPLING_PLAN, asset_partitions=[key]), limit=1
    ).records
    if not records or records[0].run_id != context.run_id:
        return None
    r = records[0]
    return TargetMaterialization(run_id=r.run_id, storage_id=r.storage_id, timestamp=r.timestamp)
