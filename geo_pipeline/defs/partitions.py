"""Partitions: one dynamic key per (run, channel) that a run really has, ``<run_id>|<channel>``
(channel = ``platform__device``, docs/design.md section 5), and one dynamic key per run for the
run-level assets (billing). Region and mode stay inside a partition.

Why not run x channel (a MultiPartitionsDefinition with the registry's channels as the static
dimension): a run on 4 of the 8 channels then shows 4 partitions "Missing" forever. Here a run's
partitions are exactly its channels, added when the run is created.

A key is readable in the UI and parses back without ambiguity: a run id never contains ``|``
(``partition_key`` refuses one), a channel is ``platform__device``; Dagster forbids only
``...`` and control characters in a key. The longest run id (57 characters, a monitor's daily
run) gives keys well under Dagster's limits.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import dagster as dg

from geo_pipeline.defs.names import RUN_CHANNEL_PARTITIONS, RUNS_PARTITIONS

SEPARATOR = "|"

runs_partitions = dg.DynamicPartitionsDefinition(name=RUNS_PARTITIONS)
run_channel_partitions = dg.DynamicPartitionsDefinition(name=RUN_CHANNEL_PARTITIONS)
# Billing (one partition per run) reads every channel of its run. Dagster has no mapping from a
# run to "the keys starting with run|", and no custom mappings, so the dependency maps to all
# collection_results partitions; it only informs the UI's lineage. What actually runs billing is
# the completion sensor, which requests the billing partition of a run once every channel of
# that run is publishable (defs/collection/sensors.py).
ALL_CHANNELS_OF_RUN = dg.AllPartitionMapping()


def partition_key(run_id: str, channel: str) -> str:
    """The (run, channel) partition key, ``<run_id>|<channel>``."""
    for what, value in (("run id", run_id), ("channel", channel)):
        if not value or SEPARATOR in value:
            raise ValueError(
                f"{what} {value!r} may not contain {SEPARATOR!r} or be empty: it is part of the "
                "partition key <run_id>|<platform>__<device>"
            )
    return f"{run_id}{SEPARATOR}{channel}"


def parse_partition_key(key: str) -> tuple[str, str]:
    """(run_id, channel) of a ``<run_id>|<channel>`` partition key."""
    run_id, sep, channel = str(key).partition(SEPARATOR)
    if not sep or not run_id or not channel or SEPARATOR in channel:
        raise ValueError(
            f"{key!r} is not a run|channel partition key (expected <run_id>|<platform>__<device>)"
        )
    return run_id, channel


# Dagster's run tags of a run over a range of partitions (dagster._core.storage.tags
# ASSET_PARTITION_RANGE_START_TAG / _END_TAG; ``RunRequest.partition_key_range`` reads them):
# one run materialises every key from start to end, in the partitions definition's order.
RANGE_START_TAG = "dagster/asset_partition_range_start"
RANGE_END_TAG = "dagster/asset_partition_range_end"


def adjacent_ranges(keys: Iterable[str], order: Sequence[str]) -> list[list[str]]:
    """The keys as ranges Dagster can run in one go: runs of keys that are adjacent in
    ``order`` (the dynamic partitions' keys as the instance lists them, the order a range is
    resolved in), so a range never covers a key that was not asked for. A run's keys are added
    in one call (``register_run_partitions``), so they are normally one range; a key not in
    ``order`` (added by this very tick) is a range of its own."""
    position = {k: i for i, k in enumerate(order)}
    known = sorted((k for k in set(keys) if k in position), key=position.__getitem__)
    out: list[list[str]] = []
    for key in known:
        if out and position[out[-1][-1]] == position[key] - 1:
            out[-1].append(key)
        else:
            out.append([key])
    return out + [[k] for k in sorted(set(keys)) if k not in position]


def range_request(keys: Sequence[str], **kwargs: Any) -> dg.RunRequest:
    """A run request over adjacent partition keys (``adjacent_ranges``): a single key as a
    partition key, several as Dagster's partition range tags."""
    if len(keys) == 1:
        return dg.RunRequest(partition_key=keys[0], **kwargs)
    tags = {**kwargs.pop("tags", {}), RANGE_START_TAG: keys[0], RANGE_END_TAG: keys[-1]}
    return dg.RunRequest(tags=tags, **kwargs)


def run_partition_keys(runs: Mapping[str, Iterable[str]]) -> tuple[list[str], list[str]]:
    """(run keys, run|channel keys) of the given runs and their channels, sorted."""
    return sorted(runs), sorted(partition_key(rid, ch) for rid, chs in runs.items() for ch in chs)


def add_requests(
    runs: Mapping[str, Iterable[str]],
    existing_runs: Iterable[str] = (),
    existing_pairs: Iterable[str] = (),
) -> list[dg.AddDynamicPartitionsRequest]:
    """What a sensor returns to make these runs' partitions exist (only the missing keys): the
    run|channel keys before the run key, as ``register_run_partitions`` adds them."""
    run_keys, pair_keys = run_partition_keys(runs)
    pairs = [k for k in pair_keys if k not in set(existing_pairs)]
    run_ids = [k for k in run_keys if k not in set(existing_runs)]
    out = []
    if pairs:
        out.append(dg.AddDynamicPartitionsRequest(RUN_CHANNEL_PARTITIONS, pairs))
    if run_ids:
        out.append(dg.AddDynamicPartitionsRequest(RUNS_PARTITIONS, run_ids))
    return out


def existing_partitions(
    instance: dg.DagsterInstance, run_ids: Iterable[str], pair_keys: Iterable[str | None]
) -> tuple[set[str], set[str]]:
    """(run keys, run|channel keys) among the given ones that exist (None keys are skipped):
    membership queries for these keys only, one per 1,000, never a listing of every key (a
    sensor ticking every 5 s beside 90 days of partitions would read them all each time). No
    keys of a kind: no query for it."""
    out: list[set[str]] = []
    for name, keys in ((RUNS_PARTITIONS, run_ids), (RUN_CHANNEL_PARTITIONS, pair_keys)):
        wanted = sorted({k for k in keys if k is not None})
        out.append(set(instance.get_existing_dynamic_partitions(name, wanted)) if wanted else set())
    return out[0], out[1]


def newest_order(instance: dg.DagsterInstance, name: str, wanted: Iterable[str]) -> list[str]:
    """The newest keys of a dynamic partitions definition, in the instance's order, back to the
    oldest of ``wanted`` (all of them when one is missing): a contiguous suffix of the order a
    range is resolved in, so ``adjacent_ranges`` over it is exact. Read newest first in pages
    (the first twice the wanted keys), so a tick about new runs reads what was registered since
    them, not the whole history."""
    missing = set(wanted)
    if not missing:
        return []
    newest_first: list[str] = []
    cursor: str | None = None
    limit = max(64, 2 * len(missing))
    while missing:
        page = instance.get_paginated_dynamic_partitions(name, limit, False, cursor)
        newest_first.extend(page.results)
        missing.difference_update(page.results)
        if not page.has_more:
            break
        cursor, limit = page.cursor, limit * 2
    return newest_first[::-1]


def register_run_partitions(
    instance: dg.DagsterInstance, run_id: str, channels: Sequence[str]
) -> None:
    """Make the partitions of one collection run exist (call after its rows are committed, so a
    partition never names a run PostgreSQL does not have): one key per channel of the run, then
    the run's own key. The run key comes last because the sensors treat a run whose key exists
    as registered; a crash in between leaves it unregistered, and the sensors add what is
    missing. Idempotent. Every launch path that creates a run calls this function (a sensor,
    which may not write, returns ``add_requests`` instead)."""
    _, pairs = run_partition_keys({run_id: channels})
    instance.add_dynamic_partitions(RUN_CHANNEL_PARTITIONS, pairs)
    instance.add_dynamic_partitions(RUNS_PARTITIONS, [run_id])


@dataclass(frozen=True)
class Migration:
    keys_added: int  # run|channel and run keys that did not exist yet
    materialisations_recorded: int  # old materialisations recorded under their new key


def legacy_key(run_id: str, channel: str) -> str:
    """The key a (run, channel) partition had under the run x channel multi-partitions: Dagster
    joins a multi-partition key's dimensions sorted by name, so ``<channel>|<run_id>``."""
    return f"{channel}{SEPARATOR}{run_id}"


def migrate_partitions(
    instance: dg.DagsterInstance,
    runs: Iterable[tuple[str, Sequence[str]]],
    assets: Sequence[dg.AssetKey] = (),
) -> Migration:
    """Upgrade from the run x channel multi-partitions, for existing runs given as (run_id,
    channels) — e.g. every run PostgreSQL still has:

    - add the run|channel keys (and any missing run key);
    - for each of ``assets`` (the run|channel-partitioned ones), a partition materialised under
      its old key ``<channel>|<run_id>`` is recorded as materialised under its new key (a
      runless materialisation whose metadata names the old key and the Dagster run that did
      it), so the partition view and the completion sensor see what was already published
      instead of showing it missing. The old materialisations stay in the event log as they are.

    Idempotent: a key that exists, or a new key already materialised, is left alone."""
    wanted = {rid: list(chs) for rid, chs in runs}
    run_keys, pair_keys = run_partition_keys(wanted)
    have_pairs = set(instance.get_dynamic_partitions(RUN_CHANNEL_PARTITIONS))
    have_runs = set(instance.get_dynamic_partitions(RUNS_PARTITIONS))
    new_pairs = [k for k in pair_keys if k not in have_pairs]
    new_runs = [k for k in run_keys if k not in have_runs]
    if new_pairs:
        instance.add_dynamic_partitions(RUN_CHANNEL_PARTITIONS, new_pairs)
    if new_runs:
        instance.add_dynamic_partitions(RUNS_PARTITIONS, new_runs)
    recorded = 0
    for asset in assets:
        done = instance.get_materialized_partitions(asset)
        for rid, chs in sorted(wanted.items()):
            for ch in chs:
                old, new = legacy_key(rid, ch), partition_key(rid, ch)
                if old not in done or new in done:
                    continue
                [last] = instance.fetch_materializations(
                    dg.AssetRecordsFilter(asset_key=asset, asset_partitions=[old]), limit=1
                ).records
                instance.report_runless_asset_event(
                    dg.AssetMaterialization(
                        asset,
                        partition=new,
                        description="carried over from the run x channel partitions",
                        metadata={
                            "migrated_from_partition": old,
                            "migrated_from_dagster_run": last.run_id,
                            "run_id": rid,
                            "channel": ch,
                        },
                    )
                )
                recorded += 1
    return Migration(len(new_pairs) + len(new_runs), recorded)
