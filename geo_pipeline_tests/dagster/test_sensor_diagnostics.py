"""What the sensors tell a data engineer (issue 36 item 6): every skipped tick says why, naming
the partitions that wait and on what; the completion sensor's cursor holds readable times."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import dagster as dg

from geo_pipeline.defs import names
from geo_pipeline.defs.collection.assets import sampling_plan
from geo_pipeline.defs.collection.sensors import completion_sensor, sampling_plan_sensor
from geo_pipeline.defs.jobs import sampling_plan_job
from geo_pipeline.defs.partitions import partition_key
from geo_pipeline_tests.dagster.conftest import create_run
from geo_pipeline_tests.dagster.test_sensors import keys, tick

WEB, APP = "deepseek__web", "qwen__app"
STARTING = dg.DagsterRunStatus.STARTING


def skip_message(result: dg.SensorResult) -> str:
    return result.skip_reason.skip_message or "" if result.skip_reason else ""


def test_a_partition_waiting_on_a_launched_run_is_named_in_the_skip_reason(
    conn: Any, dg_instance: dg.DagsterInstance, resources: dict[str, Any]
) -> None:
    """The trial: a partition waited 6 minutes behind a run stuck in "Starting" while the tick
    said nothing. Now the tick skips with the partition, the run and its status."""
    run_id = create_run(conn, dg_instance)
    first = tick(sampling_plan_sensor, dg_instance, resources, None)
    # One run for both partitions (their range).
    assert keys(first) == [names.plan_run_key(run_id, WEB, APP)]
    # The daemon launched the request; the run has not started yet (a busy queue).
    job = dg.Definitions(
        assets=[sampling_plan], jobs=[sampling_plan_job], resources=resources
    ).resolve_job_def(sampling_plan_job.name)
    launched = {}
    for req in first.run_requests or []:
        run = dg_instance.create_run_for_job(
            job_def=job, tags={**req.tags, "dagster/run_key": req.run_key}, status=STARTING
        )
        for ch in (WEB, APP):
            launched[partition_key(run_id, ch)] = run
    second = tick(sampling_plan_sensor, dg_instance, resources, first.cursor)
    assert not second.run_requests
    reason = skip_message(second)
    assert "2 partitions wait on runs already launched" in reason, reason
    web = partition_key(run_id, WEB)
    assert f"{web} (STARTING, run {launched[web].run_id[:8]})" in reason, reason


def test_nothing_to_dispatch_says_what_was_looked_at(
    conn: Any, dg_instance: dg.DagsterInstance, resources: dict[str, Any]
) -> None:
    from geo_pipeline.store import runs as runstore

    run_id = create_run(conn, dg_instance)
    runstore.dispatch(conn, run_id)
    result = tick(sampling_plan_sensor, dg_instance, resources, None)
    assert not result.run_requests
    assert "nothing to dispatch" in skip_message(result)
    assert "2 partitions of 1 recent run" in skip_message(result), skip_message(result)


def test_the_completion_cursor_holds_readable_times_and_reads_old_ones(
    dg_instance: dg.DagsterInstance, resources: dict[str, Any]
) -> None:
    first = tick(completion_sensor, dg_instance, resources, None)
    data = json.loads(first.cursor or "{}")
    for field in ("swept", "deadlines"):
        assert isinstance(data[field], str), data
        assert datetime.fromisoformat(data[field]).tzinfo is not None
    # A cursor written before (unix seconds) is still read: the next tick is not a fresh start.
    old = json.dumps({"id": data["id"], "swept": 1.0, "deadlines": 2.0})
    again = tick(completion_sensor, dg_instance, resources, old)
    assert isinstance(json.loads(again.cursor or "{}")["swept"], str)
    assert skip_message(again).startswith("0 entries read"), skip_message(again)
