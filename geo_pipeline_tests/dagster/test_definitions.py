"""The definitions load, validate, and hold what the design says (docs/design.md section 5)."""

from __future__ import annotations

import os

import dagster as dg
import pytest

from geo_pipeline.connectors.registry import load_registry
from geo_pipeline.defs import names


def test_definitions_load_and_hold_every_asset_check_job_sensor_and_schedule() -> None:
    from geo_pipeline.definitions import defs

    dg.Definitions.validate_loadable(defs)
    repo = defs.get_repository_def()
    keys = set(repo.asset_graph.get_all_asset_keys())
    assert {
        names.SAMPLING_PLAN,
        names.COLLECTION_RESULTS,
        names.VALIDATED_EVIDENCE,
        names.BRAND_ANALYSIS,
        names.BRAND_VISIBILITY,
        names.BILLING_RECONCILIATION,
    } <= keys
    checks = {k.name for k in repo.asset_graph.asset_check_keys}
    assert {
        names.CHECK_PLAN_VOLUME,
        names.CHECK_NO_NON_TERMINAL,
        names.CHECK_CITATION_TRACEABILITY,
        names.CHECK_VALID_ANSWERS_ANALYSED,
        names.CHECK_ZERO_UNEXPLAINED,
        names.CHECK_NO_DUPLICATE_CHARGE,
    } <= checks
    assert {j.name for j in repo.get_all_jobs()} >= {
        "create_collection_run",
        "sampling_plan_job",
        "partition_downstream_job",
        "billing_job",
    }
    assert {s.name for s in repo.sensor_defs} == {
        "completion_sensor",
        "sampling_plan_sensor",
        "partition_retention_sensor",
        "operations_alerts",
        "tenant_alerts",
    }
    schedule = repo.get_schedule_def("daily_resampling")
    assert schedule.execution_timezone == os.environ.get("GEO_RESAMPLE_TZ", "Asia/Shanghai")


def test_per_channel_assets_are_partitioned_by_run_channel_keys() -> None:
    """One dynamic ``<run_id>|<channel>`` partition per channel a run really has (helper
    partitions module); the per-channel assets all use it."""
    from geo_pipeline.definitions import defs
    from geo_pipeline.defs.partitions import partition_key, run_channel_partitions

    graph = defs.get_repository_def().asset_graph
    for key in (
        names.SAMPLING_PLAN,
        names.COLLECTION_RESULTS,
        names.VALIDATED_EVIDENCE,
        names.BRAND_ANALYSIS,
        names.BRAND_VISIBILITY,
    ):
        assert graph.get(key).partitions_def == run_channel_partitions, key
    assert isinstance(run_channel_partitions, dg.DynamicPartitionsDefinition)
    assert run_channel_partitions.name == names.RUN_CHANNEL_PARTITIONS
    channel = load_registry().channels()[0]
    assert partition_key("r-1", channel) == f"r-1|{channel}"


def test_billing_is_partitioned_by_run_only_and_reads_all_channels() -> None:
    from geo_pipeline.definitions import defs

    graph = defs.get_repository_def().asset_graph
    billing = graph.get(names.BILLING_RECONCILIATION)
    assert isinstance(billing.partitions_def, dg.DynamicPartitionsDefinition)
    assert billing.partitions_def.name == names.RUNS_PARTITIONS
    mapping = graph.get_partition_mapping(names.BILLING_RECONCILIATION, names.COLLECTION_RESULTS)
    # A run key has no mapping to "the keys starting with run|": billing depends on all of them.
    assert isinstance(mapping, dg.AllPartitionMapping)


# What the code location holds, by name. geo_pipeline.definitions loads it from the defs folder,
# so a definition added to (or dropped from) geo_pipeline/defs changes what is deployed: these
# lists are the review point. test_dg_check.py compares `dg list defs` with the same lists.
EXPECTED_ASSETS = {
    "sampling_plan",
    "collection_results",
    "validated_evidence",
    "brand_analysis",
    "brand_visibility",
    "billing_reconciliation",
    "retention_pass",
}
EXPECTED_CHECKS = {
    "sampling_plan:batches_within_cap",
    "sampling_plan:plan_volume_matches_snapshot",
    "sampling_plan:sample_identities_unique",
    "collection_results:accepted_samples_have_acceptance_record",
    "collection_results:excluded_share_within_limit",
    "collection_results:no_duplicate_completion",
    "collection_results:no_non_terminal_sample",
    "validated_evidence:archived_objects_match_digests",
    "validated_evidence:citation_traceability",
    "validated_evidence:field_completeness",
    "validated_evidence:sample_uniqueness",
    "validated_evidence:screenshot_missing_rate",
    "validated_evidence:validity_rate",
    "brand_analysis:every_valid_answer_analysed",
    "brand_analysis:no_pending_reported_as_not_mentioned",
    "brand_visibility:visibility_rows_match_analysis",
    "billing_reconciliation:no_duplicate_charge",
    "billing_reconciliation:zero_unexplained_difference",
}
EXPECTED_JOBS = {
    "create_collection_run",
    "plan_collection_run",
    "sampling_plan_job",
    "partition_downstream_job",
    "billing_job",
    "retention_job",
    "resample_monitor_job",
    "monitor_lifecycle_job",
}
EXPECTED_SENSORS = {
    "completion_sensor",
    "sampling_plan_sensor",
    "partition_retention_sensor",
    "operations_alerts",
    "tenant_alerts",
}
EXPECTED_SCHEDULES = {"daily_resampling", "daily_retention", "monitor_resampling"}
EXPECTED_RESOURCES = {"db", "retention_db", "redis", "evidence", "registry", "settings"}


def held_names(defs: dg.Definitions) -> dict[str, set[str]]:
    repo = defs.get_repository_def()
    graph = repo.asset_graph
    return {
        "assets": {k.to_user_string() for k in graph.get_all_asset_keys()},
        "checks": {f"{k.asset_key.to_user_string()}:{k.name}" for k in graph.asset_check_keys},
        # __ASSET_JOB is Dagster's implicit job over every asset, not one of ours.
        "jobs": {j.name for j in repo.get_all_jobs() if not j.name.startswith("__")},
        "sensors": {s.name for s in repo.sensor_defs},
        "schedules": {s.name for s in repo.schedule_defs},
        "resources": set(defs.resources or {}),
    }


def test_definitions_hold_exactly_the_expected_definitions() -> None:
    from geo_pipeline.definitions import defs

    assert held_names(defs) == {
        "assets": EXPECTED_ASSETS,
        "checks": EXPECTED_CHECKS,
        "jobs": EXPECTED_JOBS,
        "sensors": EXPECTED_SENSORS,
        "schedules": EXPECTED_SCHEDULES,
        "resources": EXPECTED_RESOURCES,
    }


def test_defs_folder_counts_an_object_imported_twice_once() -> None:
    """load_from_defs_folder collects every module's definitions, so a job that a sensor module
    imports is listed by both modules: it must be the same object (Dagster then keeps one), and
    no name may stand for two different objects."""
    from geo_pipeline import definitions
    from geo_pipeline.defs import jobs
    from geo_pipeline.defs.collection import sensors

    loaded = dg.load_from_defs_folder(path_within_project=definitions.DEFS_FOLDER)
    by_name: dict[str, set[int]] = {}
    for group in (loaded.assets, loaded.jobs, loaded.sensors, loaded.schedules):
        for obj in group or ():
            name = getattr(obj, "name", None) or ",".join(
                k.to_user_string() for k in getattr(obj, "keys", ())
            )
            by_name.setdefault(name, set()).add(id(obj))
    assert {n: ids for n, ids in by_name.items() if len(ids) > 1} == {}
    # The duplicate listing does happen (sensors.py imports the jobs it targets) ...
    assert sensors.billing_job is jobs.billing_job
    assert sum(1 for j in loaded.jobs or () if getattr(j, "name", "") == "billing_job") >= 2
    # ... and the repository holds each once, with the resources merged in.
    repo = definitions.defs.get_repository_def()
    assert [j.name for j in repo.get_all_jobs()].count("billing_job") == 1
    assert definitions.ASSETS and {a.key.to_user_string() for a in definitions.ASSETS} == (
        EXPECTED_ASSETS
    )


def test_an_installed_wheel_without_a_project_file_loads_the_same_definitions(tmp_path) -> None:
    """A checkout finds [tool.dg] in pyproject.toml; a wheel has no project file, and the same
    package is collected by load_definitions_from_package_module instead: both hold the same definitions."""
    from geo_pipeline import definitions

    found = definitions.dg_project_file()
    assert found is not None and found.name == "pyproject.toml"
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'other'\n")  # no [tool.dg]
    assert definitions.dg_project_file(tmp_path / "site-packages" / "geo_pipeline") is None

    # The served definitions collect the package's modules (no component in the folder); the
    # folder loader, which a component would need, must find the same.
    walked = definitions.defs
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(definitions, "has_components", lambda: True)
        folder = definitions.load_definitions()
    assert {k.to_user_string() for k in folder.resolve_asset_graph().get_all_asset_keys()} == {
        k.to_user_string() for k in walked.resolve_asset_graph().get_all_asset_keys()
    }
    for kind in ("jobs", "sensors", "schedules"):
        mine = {x.name for x in getattr(folder, kind) or ()}
        theirs = {x.name for x in getattr(walked, kind) or ()}
        assert mine == theirs, kind


def test_loading_the_code_location_does_not_import_dagster_aws() -> None:
    """Every process that loads the code location (both code servers, the worker of every run)
    pays for its imports (issue 36): dagster_aws (its component types, which pull Dagster's
    test utilities) is imported only for an s3:// evidence archive."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("GEO_")}
    probe = "import sys, geo_pipeline.definitions; print(sorted(m for m in sys.modules if m.startswith('dagster_aws'))[:3])"
    done = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == "[]", done.stdout + done.stderr
    env["GEO_EVIDENCE_URL"] = "s3://bucket/evidence"
    probe = "import geo_pipeline.definitions as d; print(type(d.defs.resources['evidence'].s3).__name__)"
    done = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.stdout.strip() == "S3Resource", done.stdout + done.stderr
