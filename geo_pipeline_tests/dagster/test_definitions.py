"""The definitions load, validate, and hold what the design says (docs/design.md section 5)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import dagster as dg

from geo_pipeline.connectors.registry import load_registry
from geo_pipeline.defs import names

ROOT = Path(__file__).resolve().parents[2]


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
    }
    schedule = repo.get_schedule_def("daily_resampling")
    assert schedule.execution_timezone == os.environ.get("GEO_RESAMPLE_TZ", "Asia/Shanghai")


def test_partitions_are_run_by_channel_with_registry_channels() -> None:
    from geo_pipeline.defs.partitions import run_channel_partitions

    dims = {d.name: d.partitions_def for d in run_channel_partitions.partitions_defs}
    assert isinstance(dims["run"], dg.DynamicPartitionsDefinition)
    assert dims["run"].name == names.RUNS_PARTITIONS
    assert dims["channel"].get_partition_keys() == load_registry().channels()


def test_billing_is_partitioned_by_run_only_and_reads_all_channels() -> None:
    from geo_pipeline.definitions import defs

    graph = defs.get_repository_def().asset_graph
    billing = graph.get(names.BILLING_RECONCILIATION)
    assert isinstance(billing.partitions_def, dg.DynamicPartitionsDefinition)
    mapping = graph.get_partition_mapping(names.BILLING_RECONCILIATION, names.COLLECTION_RESULTS)
    assert isinstance(mapping, dg.MultiToSingleDimensionPartitionMapping)


def test_dagster_definitions_validate_cli_passes(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GEO_DATABASE")}
    env["DAGSTER_HOME"] = str(tmp_path)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "dagster",
            "definitions",
            "validate",
            "-w",
            str(ROOT / "workspace.yaml"),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Validation successful" in proc.stderr + proc.stdout
