"""The launchpad job (create a run from the collection config) and the daily re-sampling
schedule, evaluated with build_schedule_context against real PostgreSQL."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import dagster as dg
import pytest

from geo_pipeline.defs import names
from geo_pipeline.defs.collection.jobs import create_collection_run
from geo_pipeline.defs.collection.resampling import (
    build_daily_resampling,
    cron_for,
    daily_resampling,
    resample_monitor_job,
    resample_run_key,
)
from geo_pipeline.defs.collection.sensors import sampling_plan_sensor
from geo_pipeline_tests.clock import clear_of_midnight
from geo_pipeline_tests.dagster.conftest import (
    CHANNELS,
    collection_config,
    create_run,
    fund,
    op_metadata,
)

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
def test_job_creates_the_run_and_its_partitions_and_dispatches_them(
    conn: Any, dg_instance: dg.DagsterInstance, resources: dict[str, Any]
) -> None:
    fund(conn)
    result = launch(collection_config(), dg_instance, resources, run_id="r-launchpad-1")
    assert result.success
    assert op_metadata(result, "create_run_op")["run_id"] == "r-launchpad-1"
    run = conn.execute(
        "SELECT sample_count, confirmed_at FROM geo.runs WHERE run_id = 'r-launchpad-1'"
    ).fetchone()
    assert run["sample_count"] == 8 and run["confirmed_at"] is not None
    outbox = conn.execute("SELECT count(*) AS n FROM geo.outbox").fetchone()
    # Dispatched in the same run (a collect hint per batch: one batch per channel here), each
    # partition's sampling_plan materialised by it: no sampling_plan_job run to wait for
    # (issue 36).
    assert outbox["n"] == len(CHANNELS)
    assert dg_instance.get_dynamic_partitions(names.RUNS_PARTITIONS) == ["r-launchpad-1"]
    keys = {f"r-launchpad-1|{ch}" for ch in CHANNELS}
    assert dg_instance.get_materialized_partitions(names.SAMPLING_PLAN) == keys
    # Launching the same config with the same run id again changes nothing.
    assert launch(collection_config(), dg_instance, resources, run_id="r-launchpad-1").success
    assert conn.execute("SELECT count(*) AS n FROM geo.samples").fetchone()["n"] == 8
    assert conn.execute("SELECT count(*) AS n FROM geo.outbox").fetchone()["n"] == len(CHANNELS)


def test_the_plan_sensor_ticking_while_the_launch_runs_asks_for_nothing(
    conn: Any,
    dg_instance: dg.DagsterInstance,
    resources: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The sampling_plan sensor ticks every 5 s while create_collection_run works: at the first
    moment the run is visible (committed, its partitions about to be added) it must already be
    dispatched, or the sensor asks a sampling_plan_job for it (a fourth Dagster run per launch,
    seen in bench/dagster_launch.py --dev on a loaded box; issue 36)."""
    from geo_pipeline.defs.collection import jobs

    seen: list[dg.SensorResult] = []
    register = jobs.register_run_partitions

    def tick_then_register(instance: dg.DagsterInstance, run_id: str, channels: Any) -> None:
        with dg.build_sensor_context(instance=instance, resources=resources) as ctx:
            result = sampling_plan_sensor(ctx)
        assert isinstance(result, dg.SensorResult)
        seen.append(result)
        register(instance, run_id, channels)

    monkeypatch.setattr(jobs, "register_run_partitions", tick_then_register)
    fund(conn)
    assert launch(collection_config(), dg_instance, resources, run_id="r-launchpad-2").success
    [result] = seen
    assert not result.run_requests and not result.dynamic_partitions_requests, result
    reason = result.skip_reason.skip_message if result.skip_reason else ""
    assert (reason or "").startswith("nothing to dispatch"), reason


def test_what_dagster_config_cannot_see_fails_in_the_op_with_every_field_path(
    conn: Any, dg_instance: dg.DagsterInstance, resources: dict[str, Any]
) -> None:
    # Well typed (Dagster's config check passes), wrong for the domain: a tenant pattern, a range,
    # a mode the platform does not offer. (Unknown fields, wrong types and values outside the
    # closed sets are refused before the run starts: test_launchpad.py.)
    cfg = collection_config()
    cfg["tenant"] = "Not A Tenant!"
    cfg["repeats"] = 0
    cfg["channels"][1]["modes"] = ["web_search"]  # a mode, but not one qwen offers
    result = launch(cfg, dg_instance, resources)
    assert not result.success
    text = failure_text(result)
    for path in ("tenant:", "repeats:", "channels[1].modes"):
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
) -> list[dg.RunRequest] | dg.SkipReason:
    # Closed here, not whenever it is collected: the context enters the instance, and an exit
    # out of order would leave a closed instance current for later tests.
    with dg.build_schedule_context(
        instance=instance,
        scheduled_execution_time=when,
        resources={k: resources[k] for k in ("db", "registry")},
    ) as ctx:
        return schedule(ctx)  # type: ignore[no-any-return]


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


# Every table a run's creation writes to (snapshot, quote, reservation, samples, batches).
WRITTEN_BY_A_RUN = (
    "geo.runs",
    "geo.config_snapshots",
    "geo.quote_snapshots",
    "geo.quote_lines",
    "geo.samples",
    "geo.batches",
    "geo.ledger_entries",
    "geo.outbox",
    "geo.monitors",
)


def row_counts(conn: Any) -> dict[str, int]:
    return {
        t: conn.execute(f"SELECT count(*) AS n FROM {t}").fetchone()["n"] for t in WRITTEN_BY_A_RUN
    }


def test_schedule_evaluation_only_reads_and_asks_for_one_resample_run_per_active_monitor(
    conn: Any, dg_instance: dg.DagsterInstance, resources: dict[str, Any]
) -> None:
    add_monitors(conn)
    before = row_counts(conn)
    # 23:30 UTC on the 29th is 07:30 on the 30th in Shanghai: the runs stand for the 30th. A past
    # day, as in a test-evaluation from the UI: evaluating writes nothing either way.
    when = datetime(2026, 11, 29, 23, 30, tzinfo=UTC)
    requests = evaluate(dg_instance, resources, when)
    assert isinstance(requests, list), requests
    assert row_counts(conn) == before  # no run, snapshot, quote, reservation ...
    assert dg_instance.get_dynamic_partitions(names.RUNS_PARTITIONS) == []  # ... nor partition
    # The broken monitor is asked for too: its own run fails with the reason (below).
    monitors = ["broken", "cli-acme", "daily-acme"]
    assert [r.run_key for r in requests] == [
        resample_run_key(m, date(2026, 11, 30)) for m in monitors
    ]
    assert [r.run_key for r in requests] == [f"resample:{m}:2026-11-30" for m in monitors]
    for r, m in zip(requests, monitors, strict=True):
        assert r.job_name in (None, resample_monitor_job.name)
        assert r.run_config["ops"]["resample_monitor_op"]["config"] == {
            "monitor_id": m,
            "day": "2026-11-30",
        }
        assert r.tags["geo/monitor_id"] == m
        assert r.tags["geo/scheduled_for"] == "2026-11-30"
        assert r.tags["geo/run_id"] == f"{m}-20261130"
    # The next day is a new run key per monitor (R5: a next-day re-sample is a new run).
    nxt = evaluate(dg_instance, resources, datetime(2026, 12, 1, 6, 0, tzinfo=SHANGHAI))
    assert isinstance(nxt, list)
    assert [r.run_key for r in nxt] == [f"resample:{m}:2026-12-01" for m in monitors]
    assert row_counts(conn) == before


def test_schedule_without_active_monitors_skips(
    conn: Any, dg_instance: dg.DagsterInstance, resources: dict[str, Any]
) -> None:
    result = evaluate(dg_instance, resources, datetime.now(UTC))
    assert isinstance(result, dg.SkipReason)
    assert "no active monitor" in str(result.skip_message)


def resample(
    instance: dg.DagsterInstance,
    resources: dict[str, Any],
    monitor_id: str,
    day: date | str,
    **extra: Any,
) -> dg.ExecuteInProcessResult:
    day = day.isoformat() if isinstance(day, date) else day
    return resample_monitor_job.execute_in_process(
        run_config={
            "ops": {
                "resample_monitor_op": {"config": {"monitor_id": monitor_id, "day": day, **extra}}
            }
        },
        instance=instance,
        resources={k: resources[k] for k in ("db", "registry")},
        raise_on_error=False,
    )


def test_resample_job_creates_the_days_run_once_and_the_plan_sensor_requests_it(
    conn: Any, dg_instance: dg.DagsterInstance, resources: dict[str, Any]
) -> None:
    add_monitors(conn)
    clear_of_midnight(SHANGHAI)  # `today` is the job's today too (yesterday is still on time)
    today = datetime.now(SHANGHAI).date()
    expected = f"daily-acme-{today:%Y%m%d}"
    first = resample(dg_instance, resources, "daily-acme", today)
    assert first.success
    assert op_metadata(first, "resample_monitor_op")["run_id"] == expected
    row = conn.execute(
        "SELECT monitor_id, scheduled_for, confirmed_at FROM geo.runs WHERE run_id = %s",
        (expected,),
    ).fetchone()
    assert row["monitor_id"] == "daily-acme" and row["scheduled_for"] == today
    assert row["confirmed_at"] is not None  # the quote's maximum is reserved
    assert expected in dg_instance.get_dynamic_partitions(names.RUNS_PARTITIONS)
    # Again for the same day (a re-executed run): found by (monitor, day), nothing new.
    before = row_counts(conn)
    assert resample(dg_instance, resources, "daily-acme", today).success
    assert row_counts(conn) == before
    # The plan sensor requests the new run's partitions, as for a launchpad run.
    with dg.build_sensor_context(instance=dg_instance, resources=resources) as ctx:
        result = sampling_plan_sensor(ctx)
    requested = {r.run_key for r in result.run_requests or [] if r.tags["geo/run_id"] == expected}
    assert requested == {names.plan_run_key(expected, *sorted(CHANNELS))}  # one run, a range


def test_a_broken_monitor_fails_its_own_resample_run_with_the_reason(
    conn: Any, dg_instance: dg.DagsterInstance, resources: dict[str, Any]
) -> None:
    add_monitors(conn)
    clear_of_midnight(SHANGHAI)  # `today` is the job's today too (yesterday is still on time)
    today = datetime.now(SHANGHAI).date()
    broken = resample(dg_instance, resources, "broken", today)
    assert not broken.success
    assert "repeats" in failure_text(broken) and "broken" in failure_text(broken)
    assert resample(dg_instance, resources, "cli-acme", today).success
    paused = resample(dg_instance, resources, "paused", today)
    assert not paused.success and "not active" in failure_text(paused)
    days = conn.execute(
        "SELECT monitor_id FROM geo.runs WHERE scheduled_for IS NOT NULL ORDER BY 1"
    ).fetchall()
    assert [r["monitor_id"] for r in days] == ["cli-acme"]


def test_resample_job_refuses_a_past_day_unless_backfill(
    conn: Any, dg_instance: dg.DagsterInstance, resources: dict[str, Any]
) -> None:
    add_monitors(conn)
    clear_of_midnight(SHANGHAI)  # `today` is the job's today too (yesterday is still on time)
    today = datetime.now(SHANGHAI).date()
    before = row_counts(conn)
    old = resample(dg_instance, resources, "daily-acme", today - timedelta(days=2))
    assert not old.success
    assert "backfill" in failure_text(old)
    assert row_counts(conn) == before
    # Yesterday is still on time (a daemon that caught up late, a zone boundary).
    assert resample(dg_instance, resources, "daily-acme", today - timedelta(days=1)).success
    # A deliberate backfill is allowed.
    back = resample(dg_instance, resources, "daily-acme", today - timedelta(days=5), backfill=True)
    assert back.success, failure_text(back)
    nonsense = resample(dg_instance, resources, "daily-acme", "30/11/2026")
    assert not nonsense.success and "YYYY-MM-DD" in failure_text(nonsense)


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
