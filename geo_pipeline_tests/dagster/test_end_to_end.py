"""End to end through Dagster with real processes: the launchpad job creates a run, the
sampling-plan sensor requests its partitions, the plan jobs dispatch, a real relay and worker
collect against the platform simulator (HTTP), the completion sensor reads the real stream and
requests the downstream runs, and every asset and check materialises for every partition —
billing reconciled against the simulator's own fee statements."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import dagster as dg
import pytest

from geo_pipeline.definitions import ASSETS
from geo_pipeline.defs import names
from geo_pipeline.defs.collection.jobs import create_collection_run
from geo_pipeline.defs.collection.sensors import completion_sensor, sampling_plan_sensor
from geo_pipeline.defs.jobs import billing_job, partition_downstream_job, sampling_plan_job
from geo_pipeline.defs.partitions import partition_key
from geo_pipeline.defs.resources import EvidenceStorageResource
from geo_pipeline_tests.dagster.conftest import CHANNELS, collection_config, fund, op_metadata
from geo_pipeline_tests.faults.harness import Cluster, start_simulator

ERROR = dg.AssetCheckSeverity.ERROR


@pytest.fixture
def cluster(
    db_url: str, redis_url: str, redis_ns: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Cluster]:
    sim, sim_url = start_simulator()
    # The registry (read at materialisation time) points the connectors at this simulator, so
    # billing_reconciliation fetches the fee statements from it.
    monkeypatch.setenv("GEO_SIMULATOR_URL", sim_url)
    c = Cluster(db_url, redis_url, redis_ns, sim_url, tmp_path)
    try:
        yield c
    finally:
        c.shutdown()
        sim.kill()
        sim.wait(timeout=10)
        if sim.stdout:
            sim.stdout.close()


def launch(defs: dg.Definitions, req: dg.RunRequest, instance: dg.DagsterInstance) -> Any:
    """What the daemon does with a run request: run the named job for the partition."""
    assert req.job_name is not None
    job = defs.resolve_job_def(req.job_name)
    return job.execute_in_process(
        partition_key=req.partition_key, instance=instance, tags=req.tags, raise_on_error=False
    )


def test_run_created_in_dagster_is_collected_and_every_downstream_asset_materialises(
    conn: Any,
    tmp_path: Any,
    cluster: Cluster,
    dg_instance: dg.DagsterInstance,
    resources: dict[str, Any],
) -> None:
    # The worker archives into the cluster's directory; validated_evidence re-reads from it.
    resources = {
        **resources,
        "evidence": EvidenceStorageResource(url=(tmp_path / "evidence").as_uri()),
    }
    defs = dg.Definitions(
        assets=ASSETS,
        jobs=[create_collection_run, sampling_plan_job, partition_downstream_job, billing_job],
        sensors=[completion_sensor, sampling_plan_sensor],
        resources=resources,
    )

    def tick(sensor: Any, cursor: str | None = None) -> dg.SensorResult:
        with dg.build_sensor_context(
            instance=dg_instance, cursor=cursor, resources=resources, definitions=defs
        ) as ctx:
            result = sensor(ctx)
        assert isinstance(result, dg.SensorResult)
        return result

    fund(conn)
    created = defs.resolve_job_def("create_collection_run").execute_in_process(
        run_config={"ops": {"create_run_op": {"config": {"collection": collection_config()}}}},
        instance=dg_instance,
    )
    assert created.success
    run_id = op_metadata(created, "create_run_op")["run_id"]

    completion_cursor = tick(completion_sensor).cursor  # nothing finished yet
    # The launch dispatched its partitions itself (issue 36): no sampling_plan run to ask for.
    assert not tick(sampling_plan_sensor).run_requests

    cluster.relay()
    cluster.worker(platforms=("deepseek", "qwen"), lease_s=10)
    cluster.wait(cluster.all_terminal, 120, "every sample terminal")
    # The sensor follows the completion stream between its PostgreSQL sweeps: let the relay
    # publish the last completion events first (it may lag the commits by a moment).
    cluster.wait(lambda: _unpublished(conn) == 0, 60, "completion events published")

    downstream = tick(completion_sensor, completion_cursor).run_requests or []
    assert sorted(r.run_key for r in downstream) == sorted(
        [
            names.downstream_range_key(run_id, [(ch, None, None) for ch in CHANNELS]),
            names.billing_run_key(run_id),
        ]
    )
    evaluations: list[dg.AssetCheckEvaluation] = []
    for req in downstream:
        result = launch(defs, req, dg_instance)
        evaluations += result.get_asset_check_evaluations()
        assert result.success, [(e.check_name, e.metadata) for e in evaluations if not e.passed]

    for asset in (*names.PARTITION_DOWNSTREAM, names.SAMPLING_PLAN):
        assert dg_instance.get_materialized_partitions(asset) == {
            str(partition_key(run_id, ch)) for ch in CHANNELS
        }, asset
    assert dg_instance.get_materialized_partitions(names.BILLING_RECONCILIATION) == {run_id}
    # Every check ran for every partition; no ERROR check failed (WARN checks — validity rate,
    # optional screenshots — describe the simulated engines, not our data).
    per_check: dict[str, int] = {}
    for e in evaluations:
        per_check[e.check_name] = per_check.get(e.check_name, 0) + 1
        assert e.passed or e.severity != ERROR, (e.check_name, e.metadata)
    assert per_check[names.CHECK_NO_NON_TERMINAL] == len(CHANNELS)
    assert per_check[names.CHECK_VISIBILITY_MATCHES] == len(CHANNELS)
    assert per_check[names.CHECK_NO_DUPLICATE_CHARGE] == 1
    readable = [e for e in evaluations if e.check_name == names.CHECK_OBJECTS_READABLE]
    assert all(e.passed for e in readable)
    assert sum(e.metadata["verified"].value for e in readable) > 0  # type: ignore[attr-defined]
    # Billing fetched the simulator's statements and matched them: nothing left unexplained.
    billing = dg_instance.get_latest_materialization_event(names.BILLING_RECONCILIATION)
    assert billing is not None and billing.asset_materialization is not None
    meta = {k: v.value for k, v in billing.asset_materialization.metadata.items()}
    assert meta["statements_imported"] and not meta["statements_unavailable"], meta
    assert meta["classifications"]["matched"] > 0, meta
    assert meta["unexplained_difference_minor"] == 0
    # Nothing is requested twice: the next tick repeats only run keys already used.
    again = tick(completion_sensor, None).run_requests or []
    assert {r.run_key for r in again} <= {r.run_key for r in downstream}


def _unpublished(conn: Any) -> int:
    conn.rollback()  # a fresh snapshot each poll
    row = conn.execute("SELECT count(*) AS n FROM geo.outbox WHERE published_at IS NULL").fetchone()
    return int(row["n"])
