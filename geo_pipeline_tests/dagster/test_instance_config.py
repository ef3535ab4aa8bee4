"""dagster.yaml: dagster-postgres storage from environment variables (psycopg2 driver), the
QueuedRunCoordinator with its run limits and the concurrency pools, loaded against the real
PostgreSQL server."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import dagster as dg
import pytest
import yaml

from geo_pipeline.defs.jobs import QUEUE_TAG
from geo_pipeline_tests.fixtures.postgres import create_database, drop_database

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def dagster_home(
    pg_admin_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    name = f"geo_dagster_{uuid.uuid4().hex[:10]}"
    create_database(pg_admin_url, name)
    parts = urlsplit(pg_admin_url)
    if not parts.hostname or parts.hostname.startswith("/"):
        pytest.skip("the test server listens on a socket directory; dagster.yaml uses TCP")
    text = (ROOT / "deploy" / "dagster" / "dagster.yaml").read_text(encoding="utf-8")
    assert "port: 5432" in text
    # The file names the standard port; a test server elsewhere gets it substituted.
    (tmp_path / "dagster.yaml").write_text(
        text.replace("port: 5432", f"port: {parts.port or 5432}"), encoding="utf-8"
    )
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    monkeypatch.setenv("DAGSTER_PG_USERNAME", parts.username or "postgres")
    monkeypatch.setenv("DAGSTER_PG_PASSWORD", parts.password or "")
    monkeypatch.setenv("DAGSTER_PG_HOST", parts.hostname)
    monkeypatch.setenv("DAGSTER_PG_DB", name)
    yield tmp_path
    drop_database(pg_admin_url, name)


def test_instance_uses_postgres_storage_and_a_limited_run_queue(dagster_home: Path) -> None:
    from dagster._core.instance.config import PoolGranularity
    from dagster._core.run_coordinator import QueuedRunCoordinator
    from dagster_postgres import PostgresEventLogStorage, PostgresRunStorage

    from geo_pipeline.defs.pools import POOL_LIMITS, apply_pool_limits

    with dg.DagsterInstance.get() as instance:
        assert isinstance(instance.run_storage, PostgresRunStorage)
        assert isinstance(instance.event_log_storage, PostgresEventLogStorage)
        assert isinstance(instance.run_coordinator, QueuedRunCoordinator)
        concurrency = instance.get_concurrency_config()
        queue = concurrency.run_queue_config
        assert queue is not None and queue.max_concurrent_runs == 8
        limits = {(lim["key"], lim["value"]): lim["limit"] for lim in queue.tag_concurrency_limits}
        assert limits == {(QUEUE_TAG, "plan"): 4, (QUEUE_TAG, "downstream"): 6,
                          (QUEUE_TAG, "billing"): 2, (QUEUE_TAG, "resample"): 2}  # fmt: skip
        # Pools hold the same limits on every launch path (the UI's included), per step.
        pools = concurrency.pool_config
        assert pools.pool_granularity == PoolGranularity.OP
        assert pools.default_pool_limit == min(POOL_LIMITS.values())
        assert apply_pool_limits(instance) == POOL_LIMITS
        assert {
            p: instance.event_log_storage.get_concurrency_info(p).slot_count for p in POOL_LIMITS
        } == POOL_LIMITS
        # The dynamic partitions live in that storage and survive a new instance.
        instance.add_dynamic_partitions("collection_runs", ["r-yaml-1"])
    with dg.DagsterInstance.get() as again:
        assert again.get_dynamic_partitions("collection_runs") == ["r-yaml-1"]


def test_failed_runs_are_retried_within_bounds(dagster_home: Path) -> None:
    """Run retries on (bounded; not for step failures, which the assets' retry policies own),
    a run stuck before its first step is failed so it can be retried, a code server that does
    not answer at dequeue puts the run back in the queue; the dev instance does the same."""
    from geo_pipeline.definitions import defs
    from geo_pipeline.defs.jobs import MAX_RETRIES_TAG, RUN_RETRIES
    from geo_pipeline.ops.dev import instance_config

    with dg.DagsterInstance.get() as instance:
        assert instance.run_retries_enabled
        assert instance.run_retries_max_retries == RUN_RETRIES == 2
        assert not instance.run_retries_retry_on_asset_or_op_failure
        assert instance.run_monitoring_enabled
        assert instance.run_monitoring_start_timeout_seconds == 300
        from dagster._core.run_coordinator import QueuedRunCoordinator

        coordinator = instance.run_coordinator
        assert isinstance(coordinator, QueuedRunCoordinator)
        config = coordinator.inst_data.config_dict  # type: ignore[union-attr]
        assert config["max_user_code_failure_retries"] == 3
        assert config["user_code_failure_retry_delay"] == 60
        dev = instance_config()
        assert dev["run_retries"] == instance.get_settings("run_retries")
        assert dev["run_monitoring"] == instance.get_settings("run_monitoring")
        dev_queue = dev["run_coordinator"]["config"]
        assert {k: dev_queue[k] for k in ("max_user_code_failure_retries",
                                          "user_code_failure_retry_delay")} == {
            "max_user_code_failure_retries": 3, "user_code_failure_retry_delay": 60}  # fmt: skip
    for name in ("sampling_plan_job", "partition_downstream_job", "billing_job"):
        assert defs.resolve_job_def(name).tags[MAX_RETRIES_TAG] == str(RUN_RETRIES), name
    # A retried create_collection_run would plan under a new run id and reserve twice.
    assert defs.resolve_job_def("create_collection_run").tags[MAX_RETRIES_TAG] == "0"


def test_the_roots_instance_file_is_the_deployed_one_without_storage() -> None:
    """`dg check defs` / `dg dev` from the repository root read ./dagster.yaml (no DAGSTER_HOME):
    the same queue, pools, retries and monitoring as a deployment, minus the PostgreSQL storage
    that needs DAGSTER_PG_*."""
    root = yaml.safe_load((ROOT / "dagster.yaml").read_text(encoding="utf-8"))
    deployed = yaml.safe_load(
        (ROOT / "deploy" / "dagster" / "dagster.yaml").read_text(encoding="utf-8")
    )
    assert "storage" in deployed and "storage" not in root
    assert root == {k: v for k, v in deployed.items() if k != "storage"}
