"""Partitions: run (dynamic, one key per collection run) x channel (static, ``platform__device``
from the connector registry). Dagster allows two dimensions, so the channel folds platform and
device (docs/design.md section 5); region and mode stay inside a partition.
"""

from __future__ import annotations

import dagster as dg

from geo_pipeline.connectors.registry import load_registry
from geo_pipeline.defs.names import RUNS_PARTITIONS

runs_partitions = dg.DynamicPartitionsDefinition(name=RUNS_PARTITIONS)
channel_partitions = dg.StaticPartitionsDefinition(load_registry().channels())
run_channel_partitions = dg.MultiPartitionsDefinition(
    {"run": runs_partitions, "channel": channel_partitions}
)
# Run-level assets (billing) read every channel of their run.
ALL_CHANNELS_OF_RUN = dg.MultiToSingleDimensionPartitionMapping(partition_dimension_name="run")


def partition_key(run_id: str, channel: str) -> dg.MultiPartitionKey:
    return dg.MultiPartitionKey({"run": run_id, "channel": channel})


def split_key(context: dg.AssetExecutionContext) -> tuple[str, str]:
    """(run_id, channel) of the partition being materialised."""
    key = context.partition_key
    if not isinstance(key, dg.MultiPartitionKey):
        # A plain string key is "channel|run": dimensions are joined sorted by name.
        channel, run_id = str(key).split("|", 1)
        return run_id, channel
    by_dim = key.keys_by_dimension
    return by_dim["run"], by_dim["channel"]


def register_run_partitions(
    instance: dg.DagsterInstance, run_id: str, channels: list[str] | tuple[str, ...]
) -> None:
    """Make the partitions of one collection run exist (call after its rows are committed, so a
    partition never names a run PostgreSQL does not have). Idempotent. Every launch path that
    creates a run (launchpad job, daily re-sample job, the sampling_plan sensor's repair) calls
    this one function."""
    instance.add_dynamic_partitions(RUNS_PARTITIONS, [run_id])


def known_channels() -> frozenset[str]:
    return frozenset(channel_partitions.get_partition_keys())
