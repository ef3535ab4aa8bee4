"""Issue #23: only a run's own channels exist as partitions; asset checks are partitioned like
their asset, so a failed partition stays failed after another passes; every launch path (the
UI's implicit asset job included) is limited by the pools and tagged with the geo run; and
brand_visibility's mention rates are numeric metadata the UI plots over time."""

from __future__ import annotations

from typing import Any

import dagster as dg
import pytest
from dagster._core.event_api import PartitionKeyFilter
from dagster._core.storage.asset_check_execution_record import (
    AssetCheckExecutionRecordStatus,
    AssetCheckExecutionResolvedStatus,
)

from geo_pipeline.defs import names, partitions
from geo_pipeline.defs.analysis.assets import brand_analysis, brand_visibility
from geo_pipeline.defs.billing.assets import billing_reconciliation
from geo_pipeline.defs.collection.assets import collection_results, sampling_plan
from geo_pipeline.defs.evidence.assets import validated_evidence
from geo_pipeline.defs.partitions import partition_key, register_run_partitions
from geo_pipeline.defs.resources import PipelineSettingsResource
from geo_pipeline_tests.dagster.conftest import CHANNELS, create_run, finish, sample_ids

WEB, APP = CHANNELS
PIPELINE_ASSETS = [
    sampling_plan,
    collection_results,
    validated_evidence,
    brand_analysis,
    brand_visibility,
    billing_reconciliation,
]


# --------------------------------------------------------------------------- 1. partitions
def test_a_run_has_exactly_its_own_channels_as_partitions(
    dg_instance: dg.DagsterInstance,
) -> None:
    register_run_partitions(dg_instance, "r-two-channels", [WEB, APP])
    run_channel_partitions = partitions.run_channel_partitions
    keys = run_channel_partitions.get_partition_keys(dynamic_partitions_store=dg_instance)
    # Not the 8 registry channels: nothing stays "Missing" forever.
    assert keys == [partition_key("r-two-channels", WEB), partition_key("r-two-channels", APP)]
    assert dg_instance.get_dynamic_partitions(names.RUNS_PARTITIONS) == ["r-two-channels"]
    for asset in PIPELINE_ASSETS[:-1]:
        assert asset.partitions_def == run_channel_partitions, asset.key


def test_partition_keys_are_readable_parseable_and_valid_for_the_longest_run_id(
    dg_instance: dg.DagsterInstance,
) -> None:
    run_id = "m" * 48 + "-20261202"  # a monitor's daily run id: the longest there is (57)
    parse_partition_key = partitions.parse_partition_key
    key = partition_key(run_id, WEB)
    assert key == f"{run_id}|{WEB}"
    assert parse_partition_key(key) == (run_id, WEB)
    dg_instance.add_dynamic_partitions(names.RUN_CHANNEL_PARTITIONS, [key])  # Dagster accepts it
    with pytest.raises(ValueError, match=r"not a run\|channel partition key"):
        parse_partition_key("no-separator")
    with pytest.raises(ValueError, match="may not contain"):
        partition_key("bad|run", WEB)


def test_migration_adds_the_new_keys_of_existing_runs_once(
    dg_instance: dg.DagsterInstance,
) -> None:
    # Before the upgrade: run keys only, and materialisations under the old multi-partition
    # keys "<channel>|<run>" (how Dagster spelled a run x channel key).
    dg_instance.add_dynamic_partitions(names.RUNS_PARTITIONS, ["r-old-1", "r-old-2"])
    old_key = str(dg.MultiPartitionKey({"run": "r-old-2", "channel": APP}))
    assert old_key == f"{APP}|r-old-2"
    dg_instance.report_runless_asset_event(
        dg.AssetMaterialization(names.BRAND_VISIBILITY, partition=old_key)
    )
    runs = [("r-old-1", [WEB]), ("r-old-2", [WEB, APP])]
    first = partitions.migrate_partitions(dg_instance, runs, [names.BRAND_VISIBILITY])
    assert (first.keys_added, first.materialisations_recorded) == (3, 1)
    again = partitions.migrate_partitions(dg_instance, runs, [names.BRAND_VISIBILITY])
    assert (again.keys_added, again.materialisations_recorded) == (0, 0)  # idempotent
    assert sorted(dg_instance.get_dynamic_partitions(names.RUN_CHANNEL_PARTITIONS)) == sorted(
        [
            partition_key("r-old-1", WEB),
            partition_key("r-old-2", WEB),
            partition_key("r-old-2", APP),
        ]
    )
    assert sorted(dg_instance.get_dynamic_partitions(names.RUNS_PARTITIONS)) == [
        "r-old-1",
        "r-old-2",
    ]
    # The published partition shows as materialised under its new key, saying where from.
    assert dg_instance.get_materialized_partitions(names.BRAND_VISIBILITY) == {
        old_key,
        partition_key("r-old-2", APP),
    }
    [record] = dg_instance.fetch_materializations(
        dg.AssetRecordsFilter(
            asset_key=names.BRAND_VISIBILITY, asset_partitions=[partition_key("r-old-2", APP)]
        ),
        limit=1,
    ).records
    meta = record.asset_materialization.metadata  # type: ignore[union-attr]
    assert meta["migrated_from_partition"].value == old_key


def test_billing_reads_every_channel_of_its_run_through_an_explicit_mapping() -> None:
    dep = billing_reconciliation.get_partition_mapping(names.COLLECTION_RESULTS)
    assert isinstance(dep, dg.AllPartitionMapping)
    assert billing_reconciliation.partitions_def == dg.DynamicPartitionsDefinition(
        name=names.RUNS_PARTITIONS
    )


# --------------------------------------------------------------------------- 2. checks
def test_a_failed_partition_check_stays_failed_after_another_partition_passes(
    conn: Any, dg_instance: dg.DagsterInstance, resources: dict[str, Any]
) -> None:
    run_id = create_run(conn, dg_instance)
    web, app = partition_key(run_id, WEB), partition_key(run_id, APP)
    # A WEB sample's identity no longer matches its id: WEB's identity check fails (blocking).
    # Then APP passes. (The database refuses such a row since migration 0033; its check is
    # dropped here so the asset check has something to find, as in test_assets.)
    conn.execute("ALTER TABLE geo.samples DROP CONSTRAINT sample_id_is_identity_hash")
    conn.execute(
        "UPDATE geo.samples SET repeat_index = repeat_index + 10 WHERE sample_id = %s",
        (sample_ids(conn, run_id, WEB)[0],),
    )
    failed = dg.materialize(
        [sampling_plan], partition_key=web, instance=dg_instance, resources=resources,
        raise_on_error=False,
    )  # fmt: skip
    assert not failed.success
    passed = dg.materialize(
        [sampling_plan], partition_key=app, instance=dg_instance, resources=resources
    )
    assert passed.success
    check = dg.AssetCheckKey(names.SAMPLING_PLAN, names.CHECK_PLAN_IDENTITIES)
    assert sampling_plan.check_specs_by_output_name  # the spec is partitioned like its asset
    for spec in sampling_plan.check_specs:
        assert spec.partitions_def == sampling_plan.partitions_def, spec.name
    # Every evaluation carries its partition.
    evaluations = [*failed.get_asset_check_evaluations(), *passed.get_asset_check_evaluations()]
    assert {e.partition for e in evaluations} == {web, app}
    storage = dg_instance.event_log_storage
    latest = {
        p: storage.get_latest_asset_check_execution_by_key(
            [check], partition_filter=PartitionKeyFilter(key=p)
        )[check].status
        for p in (web, app)
    }
    assert latest == {
        web: AssetCheckExecutionRecordStatus.FAILED,
        app: AssetCheckExecutionRecordStatus.SUCCEEDED,
    }
    # What the UI shows (GraphQL partitionStatuses reads AssetCheckState): WEB red, APP green.
    with dg.partition_loading_context(dynamic_partitions_store=dg_instance):
        state = storage.get_asset_check_state([(check, sampling_plan.partitions_def)])[check]
    failed_keys = state.subsets[AssetCheckExecutionResolvedStatus.FAILED].subset_value
    succeeded_keys = state.subsets[AssetCheckExecutionResolvedStatus.SUCCEEDED].subset_value
    assert set(failed_keys.get_partition_keys()) == {web}  # type: ignore[union-attr]
    assert set(succeeded_keys.get_partition_keys()) == {app}  # type: ignore[union-attr]


def test_every_check_is_partitioned_like_its_asset() -> None:
    for asset in PIPELINE_ASSETS:
        specs = list(asset.check_specs)
        assert specs, asset.key
        for spec in specs:
            assert spec.partitions_def == asset.partitions_def, (asset.key, spec.name)


# --------------------------------------------------------------------------- 3. launch paths
def test_every_pipeline_asset_runs_in_its_database_pool() -> None:
    from geo_pipeline.defs.pools import POOL_LIMITS

    assert {a.key: a.op.pool for a in PIPELINE_ASSETS} == {
        names.SAMPLING_PLAN: names.POOL_PLAN,
        names.COLLECTION_RESULTS: names.POOL_DOWNSTREAM,
        names.VALIDATED_EVIDENCE: names.POOL_DOWNSTREAM,
        names.BRAND_ANALYSIS: names.POOL_DOWNSTREAM,
        names.BRAND_VISIBILITY: names.POOL_DOWNSTREAM,
        names.BILLING_RECONCILIATION: names.POOL_BILLING,
    }
    assert POOL_LIMITS == {names.POOL_PLAN: 4, names.POOL_DOWNSTREAM: 6, names.POOL_BILLING: 2}


def test_pool_limits_are_applied_to_the_instance_once(dg_instance: dg.DagsterInstance) -> None:
    from geo_pipeline.defs.pools import POOL_LIMITS, apply_pool_limits

    assert apply_pool_limits(dg_instance) == POOL_LIMITS
    assert apply_pool_limits(dg_instance) == {}  # already set: nothing changes
    storage = dg_instance.event_log_storage
    assert {p: storage.get_concurrency_info(p).slot_count for p in POOL_LIMITS} == POOL_LIMITS


def test_a_materialisation_from_the_ui_gets_the_geo_run_tags(
    conn: Any, dg_instance: dg.DagsterInstance, resources: dict[str, Any]
) -> None:
    """The UI's "Materialize" runs the implicit asset job: no job tags, so the assets tag the
    run themselves and `runs --tag geo/run_id=...` finds it."""
    run_id = create_run(conn, dg_instance)
    resources = {**resources, "settings": PipelineSettingsResource(import_fee_statements=False)}
    defs = dg.Definitions(assets=PIPELINE_ASSETS, resources=resources)
    job = defs.resolve_implicit_global_asset_job_def()
    key = partition_key(run_id, WEB)
    result = job.execute_in_process(
        partition_key=key,
        instance=dg_instance,
        asset_selection=[names.SAMPLING_PLAN],
    )
    assert result.success
    tags = dg_instance.get_run_by_id(result.run_id).tags  # type: ignore[union-attr]
    assert tags["geo/run_id"] == run_id and tags["geo/channel"] == WEB
    found = dg_instance.get_run_records(dg.RunsFilter(tags={"geo/run_id": run_id}))
    assert [r.dagster_run.run_id for r in found] == [result.run_id]
    # Billing (partitioned by run) gets the run id.
    billing = job.execute_in_process(
        partition_key=run_id,
        instance=dg_instance,
        asset_selection=[names.BILLING_RECONCILIATION],
        raise_on_error=False,
    )
    tags = dg_instance.get_run_by_id(billing.run_id).tags  # type: ignore[union-attr]
    assert tags["geo/run_id"] == run_id and "geo/channel" not in tags


def test_tags_a_launcher_set_are_kept(
    conn: Any, dg_instance: dg.DagsterInstance, resources: dict[str, Any]
) -> None:
    run_id = create_run(conn, dg_instance)
    result = dg.materialize(
        [sampling_plan],
        partition_key=partition_key(run_id, WEB),
        instance=dg_instance,
        resources=resources,
        tags={"geo/run_id": run_id, "geo/channel": WEB, "geo/scheduled_for": "2026-12-02"},
    )
    tags = dg_instance.get_run_by_id(result.run_id).tags  # type: ignore[union-attr]
    assert tags["geo/scheduled_for"] == "2026-12-02" and tags["geo/channel"] == WEB


# --------------------------------------------------------------------------- 4. plots
def test_brand_visibility_emits_plottable_mention_rates_per_brand(
    conn: Any, dg_instance: dg.DagsterInstance, resources: dict[str, Any]
) -> None:
    run_id = create_run(conn, dg_instance)
    finish(conn, run_id, WEB)
    result = dg.materialize(
        [collection_results, validated_evidence, brand_analysis, brand_visibility],
        partition_key=partition_key(run_id, WEB),
        instance=dg_instance,
        resources=resources,
    )
    [event] = [
        e
        for e in result.get_asset_materialization_events()
        if e.asset_key == names.BRAND_VISIBILITY
    ]
    meta = event.materialization.metadata
    floats: dict[str, float] = {}
    for brand in ("acme", "globex"):
        for prefix in ("mention_rate", "mention_rate_lower", "mention_rate_upper"):
            value = meta[f"{prefix}/{brand}"]
            assert isinstance(value, dg.FloatMetadataValue), (prefix, brand, value)
            assert value.value is not None
            floats[f"{prefix}/{brand}"] = value.value
        assert (
            floats[f"mention_rate_lower/{brand}"]
            <= floats[f"mention_rate/{brand}"]
            <= floats[f"mention_rate_upper/{brand}"]
        )
    assert floats["mention_rate/acme"] == 1.0
    assert isinstance(meta["visibility_table"], dg.TableMetadataValue)  # kept


def test_metadata_keys_of_brands_are_stable_safe_and_distinct() -> None:
    from geo_pipeline.defs.analysis.metadata import brand_metadata_keys

    assert brand_metadata_keys(["Acme", "阿克米 Co/Ltd"]) == {
        "Acme": "acme",
        "阿克米 Co/Ltd": "阿克米_co_ltd",
    }
    keys = brand_metadata_keys(["ACME", "Acme", "a.b", "a b"])
    assert len(set(keys.values())) == 4  # a collision gets a digest suffix, never a clash
    assert all("/" not in k and " " not in k and "." not in k for k in keys.values())
    assert brand_metadata_keys(["a b", "a.b", "Acme", "ACME"]) == keys  # whatever the order
