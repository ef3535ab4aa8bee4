"""The code location's shape, pinned: every asset (its dependencies and partition mappings,
partitions, group, pool, retry policy, kinds, owners, tags, code version), every check (blocking,
partitioned), every job (what it selects, its tags and executor), every sensor (what it targets,
how often) and every schedule (its job), as ``definitions_shape.json`` beside this file.

Moving definitions between modules of the defs folder (issue 38) must leave this unchanged; a
deliberate change to the deployed definitions (issue 36) shows up here as a reviewed diff of the
JSON file. To rewrite it after such a change: ``GEO_WRITE_DEFS_SHAPE=1 pytest`` this module.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import dagster as dg

SHAPE_FILE = Path(__file__).with_name("definitions_shape.json")


def _retry(policy: dg.RetryPolicy | None) -> dict[str, Any] | None:
    if policy is None:
        return None
    return {
        "max_retries": policy.max_retries,
        "delay": policy.delay,
        "backoff": policy.backoff.value if policy.backoff else None,
        "jitter": policy.jitter.value if policy.jitter else None,
    }


def shape(defs: dg.Definitions) -> dict[str, Any]:
    """What the definitions deploy, as plain JSON (sorted, so the file diffs cleanly)."""
    repo = defs.get_repository_def()
    graph = repo.asset_graph
    assets: dict[str, Any] = {}
    for key in sorted(graph.get_all_asset_keys(), key=lambda k: k.to_user_string()):
        node = graph.get(key)
        assets[key.to_user_string()] = {
            "deps": {
                parent.to_user_string(): type(graph.get_partition_mapping(key, parent)).__name__
                if node.partitions_def is not None
                else None
                for parent in sorted(node.parent_keys, key=lambda k: k.to_user_string())
            },
            "partitions": getattr(node.partitions_def, "name", None),
            "group": node.group_name,
            "pool": node.pools and sorted(node.pools),
            "retry": _retry(node.assets_def.op.retry_policy),
            "kinds": sorted(node.kinds),
            "owners": sorted(node.owners),
            "tags": dict(sorted(node.tags.items())),
            "code_version": node.code_version,
            "description_starts": (node.description or "").split("\n")[0][:60],
        }
    checks: dict[str, Any] = {}
    for ck in sorted(graph.asset_check_keys, key=lambda k: k.to_user_string()):
        spec = graph.get_check_spec(ck)
        checks[ck.to_user_string()] = {
            "blocking": spec.blocking,
            "partitions": getattr(spec.partitions_def, "name", None),
            "description": spec.description,
        }
    jobs: dict[str, Any] = {}
    for job in sorted(repo.get_all_jobs(), key=lambda j: j.name):
        if job.name.startswith("__"):
            continue  # Dagster's implicit asset job
        selected = job.asset_layer.executable_asset_keys if job.asset_layer else set()
        jobs[job.name] = {
            "assets": sorted(k.to_user_string() for k in selected),
            "tags": dict(sorted(job.tags.items())),
            "executor": job.executor_def.name,
            "ops": sorted(n.name for n in job.graph.nodes) if not selected else [],
        }
    sensors = {
        s.name: {
            "jobs": sorted(t.job_name for t in s.targets),
            "minimum_interval_seconds": s.minimum_interval_seconds,
            "default_status": s.default_status.value,
        }
        for s in sorted(repo.sensor_defs, key=lambda s: s.name)
    }
    schedules = {
        s.name: {
            # Cron and zone come from GEO_RESAMPLE_AT / GEO_RETENTION_AT / GEO_RESAMPLE_TZ.
            "job": s.job_name,
            "default_status": s.default_status.value,
        }
        for s in sorted(repo.schedule_defs, key=lambda s: s.name)
    }
    return {
        "assets": assets,
        "checks": checks,
        "jobs": jobs,
        "sensors": sensors,
        "schedules": schedules,
    }


def test_the_definitions_have_the_reviewed_shape() -> None:
    from geo_pipeline.definitions import defs

    got = json.loads(json.dumps(shape(defs), sort_keys=True, default=str))
    if os.environ.get("GEO_WRITE_DEFS_SHAPE") == "1":
        SHAPE_FILE.write_text(json.dumps(got, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
    assert got == json.loads(SHAPE_FILE.read_text())


def test_the_folder_loader_and_the_package_walker_find_the_same_shape() -> None:
    """A checkout loads the defs folder; an installed wheel walks the package: with definitions in
    subpackages of the defs folder, both must still find every one of them."""
    import geo_pipeline.defs
    from geo_pipeline import definitions

    walked = dg.load_definitions_from_package_module(
        geo_pipeline.defs, resources=definitions.resources_from_env()
    )
    assert shape(walked) == shape(definitions.defs)


def test_ops_return_nothing_for_the_io_manager_to_store() -> None:
    """Issue 36: an op's return value goes through the I/O manager, which pickles it into
    DAGSTER_HOME/storage; our ops' results are metadata (the run id, the planner's table), so
    every op outputs Nothing and writes nothing there."""
    from geo_pipeline.definitions import defs

    repo = defs.get_repository_def()
    stored = sorted(
        f"{job.name}.{node.name}.{out.name}"
        for job in repo.get_all_jobs()
        if not job.asset_layer.executable_asset_keys
        for node in job.graph.nodes
        for out in node.definition.output_defs
        if not out.dagster_type.is_nothing
    )
    assert stored == []
