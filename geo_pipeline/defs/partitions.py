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


def known_channels() -> frozenset[str]:
    return frozenset(channel_partitions.get_partition_keys())
