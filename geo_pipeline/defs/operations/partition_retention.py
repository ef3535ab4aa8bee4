"""The expiry of old runs' Dagster partitions: each asset stays well under 100k partitions, while
the business tables keep history on their own policy (D9)."""

import time

import dagster as dg

from geo_pipeline.defs import names
from geo_pipeline.defs.factory import query_rows
from geo_pipeline.defs.partitions import parse_partition_key
from geo_pipeline.defs.resources import PipelineSettingsResource, PostgresResource
from geo_pipeline.store.db import Conn


def expired_partitions(conn: Conn, keys: list[str], days: int, now_ts: float) -> list[str]:
    """Of the given run ids, the runs older than the retention age and the runs PostgreSQL no
    longer has (their business rows were purged by the business retention policy, D9)."""
    if not keys:
        return []
    created = {r["run_id"]: r["created_at"] for r in query_rows(conn, "runs_created", run_ids=keys)}
    horizon = now_ts - days * 86400
    return sorted(k for k in keys if k not in created or created[k].timestamp() < horizon)


@dg.sensor(
    name="partition_retention_sensor",
    minimum_interval_seconds=3600,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Deletes the partitions (collection_runs and collection_run_channels) of runs "
    "older than the retention age; keeps each asset well under 100k partitions. Business "
    "tables keep history on their own policy.",
)
def partition_retention_sensor(
    context: dg.SensorEvaluationContext, db: PostgresResource, settings: PipelineSettingsResource
) -> dg.SensorResult:
    run_keys = list(context.instance.get_dynamic_partitions(names.RUNS_PARTITIONS))
    pair_keys = list(context.instance.get_dynamic_partitions(names.RUN_CHANNEL_PARTITIONS))
    run_of: dict[str, str | None] = {}
    for key in pair_keys:
        try:
            run_of[key] = parse_partition_key(key)[0]
        except ValueError:
            run_of[key] = None  # not a run|channel key: nothing can materialise it
    run_ids = sorted(set(run_keys) | {rid for rid in run_of.values() if rid is not None})
    with db.connect() as conn:
        expired = set(
            expired_partitions(conn, run_ids, settings.partition_retention_days, time.time())
        )
    runs_gone = sorted(k for k in run_keys if k in expired)
    pairs_gone = sorted(k for k, rid in run_of.items() if rid is None or rid in expired)
    if not runs_gone and not pairs_gone:
        return dg.SensorResult(
            skip_reason=f"{len(run_keys)} runs, {len(pair_keys)} run|channel partitions, "
            "none expired"
        )
    context.log.info(
        "deleting the partitions of %d expired runs (%d run|channel keys)",
        len(expired),
        len(pairs_gone),
    )
    # Both kinds in one tick. An expired run is never "recent", so no sensor adds its keys back
    # (the adoption of unregistered runs looks only at recent ones).
    requests = []
    if pairs_gone:
        requests.append(dg.DeleteDynamicPartitionsRequest(names.RUN_CHANNEL_PARTITIONS, pairs_gone))
    if runs_gone:
        requests.append(dg.DeleteDynamicPartitionsRequest(names.RUNS_PARTITIONS, runs_gone))
    return dg.SensorResult(dynamic_partitions_requests=requests)
