"""The launchpad job (create a run from the collection config) and the daily re-sampling
schedule, evaluated with build_schedule_context against real PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import dagster as dg
import pytest

from geo_pipeline.defs import names
from geo_pipeline.defs.jobs import create_collection_run
from geo_pipeline.defs.schedules import build_daily_resampling, cron_for, daily_resampling
from geo_pipeline_tests.dagster.conftest import collection_config, create_run, fund

SHANGHAI = ZoneInfo("Asia/Shanghai")


def launch(
    config: dict[str, Any], instance: dg.DagsterInstance, resources: dict[str, Any], **extra: Any
) -> dg.ExecuteInProcessResult:
    return create_collection_run.execute_in_process(
        run_config={"ops": {"create_run_op": {"config": {"collection": config, **extra}}}},
        instance=instance,
        resources={k: resources[k] for k in ("db", "registry")},
        raise_on_error=False,
    )


def failure_text(result: dg.ExecuteInProcessResult) -> str:
    failure = next(e for e in result.all_events if e.is_step_failure)
    data = failure.step_failure_data.user_failure_data
    return str(data.description if data else failure.step_failure_data.error)


# --------------------------------------------------------------------------- the launchpad job
def test_job_creates_the_run_and_its_partition_without_dispatching(
    conn: Any, dg_instance: dg.DagsterInstance, resources: dict[str, Any]
) -> None:
    fund(conn)
    result = launch(collection_config(), dg_instance, resources, run_id="r-launchpad-1")
    assert result.success
    assert result.output_for_node("create_run_op") == "r-launchpad-1"
    run = conn.execute(
        "SELECT sample_count, confirmed_at FROM geo.runs WHERE run_id = 'r-launchpad-1'"
    ).fetchone()
    assert run["sample_count"] == 8 and run["confirmed_at"] is not None
    outbox = conn.execute("SELECT count(*) AS n FROM geo.outbox").fetchone()
    assert outbox["n"] == 0  # the sampling_plan partitions dispatch, per channel
    assert dg_instance.get_dynamic_partitions(names.RUNS_PARTITIONS) == ["r-launchpad-1"]
    # Launching the same config with the same run id again changes nothing.
    assert launch(collection_config(), dg_instance, resources, run_id="r-launchpad-1").success
    assert conn.execute("SELECT count(*) AS n FROM geo.samples").fetchone()["n"] == 8


def test_invalid_config_fails_with_every_field_path(
    conn: Any, dg_instance: dg.DagsterInstance, resources: dict[str, Any]
) -> None:
    cfg = collection_config()
    cfg["tenant"] = "Not A Tenant!"
    cfg["repeats"] = 0
    cfg["channels"][0]["modes"] = ["telepathy"]
    cfg["colour"] = "blue"
    result = launch(cfg, dg_instance, resources)
    assert not result.success
    text = failure_text(result)
    assert "colour: unknown field" in text
    # Model errors come first (pydantic); fix the unknown field to see the semantic ones.
    del cfg["colour"]
    text = failure_text(launch(cfg, dg_instance, resources))
    for path in ("tenant:", "repeats:", "channels[0].modes"):
        assert path in text, text
    assert conn.execute("SELECT count(*) AS n FROM geo.runs").fetchone()["n"] == 0
    assert dg_instance.get_dynamic_partitions(names.RUNS_PARTITIONS) == []


def test_unfunded_run_is_refused_and_nothing_is_written(
    conn: Any, dg_instance: dg.DagsterInstance, resources: dict[str, Any]
) -> None:
    result = launch(collection_config(tenant="poor"), dg_instance, resources)
    assert not result.success
    assert "poor" in failure_text(result)
    assert conn.execute("SELECT count(*) AS n FROM geo.runs").fetchone()["n"] == 0
    assert dg_instance.get_dynamic_partitions(names.RUNS_PARTITIONS) == []


# --------------------------------------------------------------------------- the schedule
def evaluate(
    instance: dg.DagsterInstance,
    resources: dict[str, Any],
    when: datetime,
    schedule: dg.ScheduleDefinition = daily_resampling,
) -> list[dg.RunRequest]:
    ctx = dg.build_schedule_context(
        instance=instance,
        scheduled_execution_time=when,
        resources={k: resources[k] for k in ("db", "registry")},
    )
    result = schedule(ctx)
    assert isinstance(result, list), result
    return result


def add_monitors(conn: Any) -> None:
    # One monitor saved from the launchpad form (raw config), one saved by the CLI (canonical
    # snapshot), one paused, one whose saved config no longer validates.
    raw = collection_config(monitor="daily-acme")
    create_run(conn, config=raw, run_id="seed-1", monitor_id="daily-acme", monitor_config=raw)
    create_run(
        conn, config=collection_config(monitor="cli-acme"), run_id="seed-2", monitor_id="cli-acme"
    )
    create_run(
        conn, config=collection_config(monitor="paused"), run_id="seed-3", monitor_id="paused"
    )
    conn.execute("UPDATE geo.monitors SET active = false WHERE monitor_id = 'paused'")
    bad = collection_config(monitor="broken")
    create_run(conn, config=bad, run_id="seed-4", monitor_id="broken", monitor_config=bad)
    conn.execute(
        "UPDATE geo.monitors SET config = jsonb_set(config, '{repeats}', '0') "
        "WHERE monitor_id = 'broken'"
    )


def test_schedule_creates_one_run_per_active_monitor_per_day(
    conn: Any, dg_instance: dg.DagsterInstance, resources: dict[str, Any]
) -> None:
    add_monitors(conn)
    # 23:30 UTC on the 29th is 07:30 on the 30th in Shanghai: the run stands for the 30th.
    when = datetime(2026, 11, 29, 23, 30, tzinfo=UTC)
    requests = evaluate(dg_instance, resources, when)
    expected_runs = ["cli-acme-20261130", "daily-acme-20261130"]
    assert sorted({r.tags["geo/run_id"] for r in requests}) == expected_runs
    assert sorted(r.run_key for r in requests if r.run_key) == sorted(
        names.plan_run_key(r, ch) for r in expected_runs for ch in ("deepseek__web", "qwen__app")
    )
    assert set(dg_instance.get_dynamic_partitions(names.RUNS_PARTITIONS)) == set(expected_runs)
    rows = conn.execute(
        "SELECT run_id, monitor_id, scheduled_for FROM geo.runs WHERE scheduled_for IS NOT NULL "
        "ORDER BY run_id"
    ).fetchall()
    assert [(r["run_id"], str(r["scheduled_for"])) for r in rows] == [
        ("cli-acme-20261130", "2026-11-30"),
        ("daily-acme-20261130", "2026-11-30"),
    ]
    # A second tick for the same day (daemon retry): same runs, same run keys, nothing new.
    again = evaluate(dg_instance, resources, when)
    assert sorted(r.run_key for r in again if r.run_key) == sorted(
        r.run_key for r in requests if r.run_key
    )
    assert (
        conn.execute(
            "SELECT count(*) AS n FROM geo.runs WHERE scheduled_for IS NOT NULL"
        ).fetchone()["n"]
        == 2
    )
    # The next day is a new run id per monitor (R5: a next-day re-sample is a new run).
    nxt = evaluate(dg_instance, resources, datetime(2026, 12, 1, 6, 0, tzinfo=SHANGHAI))
    assert sorted({r.tags["geo/run_id"] for r in nxt}) == [
        "cli-acme-20261201",
        "daily-acme-20261201",
    ]


def test_schedule_time_and_zone_are_configurable() -> None:
    assert cron_for("06:00") == "0 6 * * *"
    assert cron_for("23:45") == "45 23 * * *"
    with pytest.raises(ValueError, match="HH:MM"):
        cron_for("6am")
    with pytest.raises(ValueError, match="hour 0-23"):
        cron_for("24:00")
    sched = build_daily_resampling("07:15", "Europe/Berlin")
    assert sched.cron_schedule == "15 7 * * *"
    assert sched.execution_timezone == "Europe/Berlin"
    assert daily_resampling.execution_timezone == "Asia/Shanghai"
