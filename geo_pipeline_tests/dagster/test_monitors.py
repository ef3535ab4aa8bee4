"""Monitors as a product (issue 37), end to end against real PostgreSQL: the CLI lifecycle
(create, list, show, pause, resume, update, retire), each monitor's own cadence evaluated by the
schedule without side effects, an update used from the next run on (R2), and a failed re-sample
(short balance, a disabled engine) recorded with its reason and shown by `monitors show`."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import dagster as dg
import pytest
import yaml
from click.testing import CliRunner, Result

from geo_pipeline.cli.monitors import monitors_group
from geo_pipeline.defs.collection.monitors import monitor_lifecycle_job, monitor_resampling
from geo_pipeline.defs.collection.resampling import daily_resampling, resample_monitor_job
from geo_pipeline_tests.dagster.conftest import collection_config, fund, op_metadata

SHANGHAI = ZoneInfo("Asia/Shanghai")


@pytest.fixture
def cli(db_url: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("GEO_DATABASE_URL", db_url)
    runner = CliRunner()

    def invoke(*args: str, ok: bool = True) -> Result:
        result = runner.invoke(monitors_group, list(args))
        if ok:
            assert result.exit_code == 0, result.output
        else:
            assert result.exit_code != 0, result.output
            assert "Traceback" not in result.output
        return result

    return invoke


def config_file(tmp_path: Path, name: str, **changes: Any) -> str:
    cfg = collection_config(tenant=changes.pop("tenant", "acme"), monitor=changes.pop("monitor"))
    cfg.update(changes)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg, allow_unicode=True), encoding="utf-8")
    return str(path)


def evaluate(
    schedule: dg.ScheduleDefinition,
    instance: dg.DagsterInstance,
    resources: dict[str, Any],
    when: datetime,
) -> Any:
    with dg.build_schedule_context(
        instance=instance, scheduled_execution_time=when, resources={"db": resources["db"]}
    ) as ctx:
        return schedule(ctx)


def requested(result: Any) -> list[str]:
    return [] if isinstance(result, dg.SkipReason) else [r.run_key for r in result]


def resample(
    instance: dg.DagsterInstance, resources: dict[str, Any], monitor: str, day: str
) -> dg.ExecuteInProcessResult:
    return resample_monitor_job.execute_in_process(
        run_config={
            "ops": {"resample_monitor_op": {"config": {"monitor_id": monitor, "day": day}}}
        },
        instance=instance,
        resources={k: resources[k] for k in ("db", "registry")},
        raise_on_error=False,
    )


def table_counts(conn: Any) -> dict[str, int]:
    tables = ("geo.runs", "geo.monitors", "geo.monitor_events", "geo.monitor_resample_failures",
              "geo.config_snapshots", "geo.ledger_entries")  # fmt: skip
    return {t: conn.execute(f"SELECT count(*) AS n FROM {t}").fetchone()["n"] for t in tables}


def test_lifecycle_cadence_and_snapshots(
    cli: Any, conn: Any, tmp_path: Path, dg_instance: dg.DagsterInstance, resources: dict[str, Any]
) -> None:
    fund(conn)
    # A monitor on the deployment's default cadence, and one on its own (weekdays 07:00 Berlin).
    cli("create", config_file(tmp_path, "d", monitor="acme-default"), "--reason", "launch")
    out = cli(
        "create", config_file(tmp_path, "b", monitor="acme-berlin"),
        "--cron", "0 7 * * 1-5", "--timezone", "Europe/Berlin",
    ).output  # fmt: skip
    assert "0 7 * * 1-5 (Europe/Berlin)" in out
    # The same id again, a config naming no monitor, a cadence that runs twice a day: refused,
    # nothing written.
    before = table_counts(conn)
    assert (
        "already exists"
        in cli("create", config_file(tmp_path, "d2", monitor="acme-default"), ok=False).output
    )
    nomon = tmp_path / "nomon.yaml"
    nomon.write_text(yaml.safe_dump(collection_config()), encoding="utf-8")
    assert "names no monitor" in cli("create", str(nomon), ok=False).output
    twice = cli(
        "create", config_file(tmp_path, "t", monitor="twice"), "--cron", "0 6,18 * * *", ok=False
    )
    assert "at most once a day" in twice.output
    bad = cli("create", config_file(tmp_path, "r", monitor="bad", repeats=0), ok=False)
    # A config's problems reach the person through the CLI's one error handler (cli/main.py).
    assert "repeats: 0 is out of range" in str(bad.exception)
    assert table_counts(conn) == before

    listed = {r["monitor_id"]: r for r in json.loads(cli("list", "--json").output)}
    assert listed["acme-default"]["status"] == "active"
    assert listed["acme-berlin"]["cadence"] == "0 7 * * 1-5 (Europe/Berlin)"

    # Monday 2026-12-07 06:15 UTC = 07:15 Berlin = 14:15 Shanghai. The Berlin monitor is due
    # (its own schedule); the default one is not its schedule's business. Evaluating writes
    # nothing.
    monday = datetime(2026, 12, 7, 6, 15, tzinfo=UTC)
    before = table_counts(conn)
    assert requested(evaluate(monitor_resampling, dg_instance, resources, monday)) == [
        "resample:acme-berlin:2026-12-07"
    ]
    # The default schedule (06:00 Shanghai) asks only for the monitor without a cadence.
    at_six = datetime(2026, 12, 7, 6, 0, tzinfo=SHANGHAI)
    assert requested(evaluate(daily_resampling, dg_instance, resources, at_six)) == [
        "resample:acme-default:2026-12-07"
    ]
    # Saturday: the weekday cadence does not fire.
    saturday = datetime(2026, 12, 5, 6, 15, tzinfo=UTC)
    assert requested(evaluate(monitor_resampling, dg_instance, resources, saturday)) == []
    assert table_counts(conn) == before

    # Pause: neither schedule asks for it; pausing twice is refused with the state.
    cli("pause", "acme-berlin", "--reason", "holiday", "--actor", "dana")
    assert requested(evaluate(monitor_resampling, dg_instance, resources, monday)) == []
    assert "only an active monitor" in cli("pause", "acme-berlin", ok=False).output
    cli("resume", "acme-berlin", "--actor", "dana")
    assert requested(evaluate(monitor_resampling, dg_instance, resources, monday)) == [
        "resample:acme-berlin:2026-12-07"
    ]

    # Today's run, then an update: the run keeps its snapshot (R2), the next run uses the new
    # revision.
    today = datetime.now(SHANGHAI).date()
    first = resample(dg_instance, resources, "acme-default", today.isoformat())
    assert first.success
    run1 = op_metadata(first, "resample_monitor_op")["run_id"]
    snap1 = conn.execute("SELECT snapshot_id FROM geo.runs WHERE run_id = %s", (run1,)).fetchone()
    new_cfg = config_file(
        tmp_path, "d3", monitor="acme-default",
        questions=["best project tool for teams?", "which crm is cheapest?", "top erp for smb?"],
    )  # fmt: skip
    up = json.loads(
        cli(
            "update", "acme-default", "--config", new_cfg, "--reason", "one more question", "--json"
        ).output
    )
    assert up["revision"] == 2
    snap_after = conn.execute(
        "SELECT snapshot_id FROM geo.runs WHERE run_id = %s", (run1,)
    ).fetchone()
    assert snap_after == snap1  # the run already made executes what it froze
    tomorrow = today.fromordinal(today.toordinal() + 1)
    second = resample(dg_instance, resources, "acme-default", tomorrow.isoformat())
    assert second.success
    run2 = op_metadata(second, "resample_monitor_op")["run_id"]
    counts = conn.execute(
        "SELECT run_id, sample_count FROM geo.runs WHERE run_id = ANY(%s) ORDER BY run_id",
        ([run1, run2],),
    ).fetchall()
    assert [r["sample_count"] for r in counts] == [8, 12]  # 2 then 3 questions x 2 channels x 2
    # Another tenant or another id in the new config is refused.
    other = config_file(tmp_path, "o", monitor="acme-default", tenant="globex")
    assert (
        "never moves to another tenant"
        in cli("update", "acme-default", "--config", other, ok=False).output
    )
    # A new cadence, then back to the default.
    cli("update", "acme-default", "--cron", "15 8 * * *", "--timezone", "UTC")
    assert requested(
        evaluate(
            monitor_resampling, dg_instance, resources, datetime(2026, 12, 7, 8, 20, tzinfo=UTC)
        )
    ) == ["resample:acme-default:2026-12-07"]
    cli("update", "acme-default", "--default-cadence")

    shown = json.loads(cli("show", "acme-default", "--json").output)
    assert [e["event"] for e in shown["history"]] == ["created", "updated", "updated", "updated"]
    assert [e["revision"] for e in shown["history"]] == [1, 2, 3, 4]
    assert shown["history"][1]["reason"] == "one more question"
    assert {r["run_id"] for r in shown["runs"]} == {run1, run2}
    assert len({r["snapshot_id"] for r in shown["runs"]}) == 2

    # Retire: final, never asked for again, runs kept, the id never reused.
    cli("retire", "acme-default", "--reason", "contract ended")
    assert "retired" in cli("resume", "acme-default", ok=False).output
    assert "retired" in cli("update", "acme-default", "--cron", "0 9 * * *", ok=False).output
    assert (
        "never reused"
        in cli("create", config_file(tmp_path, "d4", monitor="acme-default"), ok=False).output
    )
    assert requested(evaluate(daily_resampling, dg_instance, resources, at_six)) == []
    assert "acme-default" not in {r["monitor_id"] for r in json.loads(cli("list", "--json").output)}
    assert "acme-default" in {
        r["monitor_id"] for r in json.loads(cli("list", "--all", "--json").output)
    }
    assert (
        conn.execute(
            "SELECT count(*) AS n FROM geo.runs WHERE monitor_id = 'acme-default'"
        ).fetchone()["n"]
        == 2
    )


def test_a_failed_resample_is_recorded_with_its_reason_and_shown(
    cli: Any,
    conn: Any,
    tmp_path: Path,
    dg_instance: dg.DagsterInstance,
    resources: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A tenant whose balance cannot cover the day's quote.
    cli("create", config_file(tmp_path, "p", monitor="poor-daily", tenant="poor"))
    today = datetime.now(SHANGHAI).date().isoformat()
    failed = resample(dg_instance, resources, "poor-daily", today)
    assert not failed.success
    shown = json.loads(cli("show", "poor-daily", "--json").output)
    [f] = shown["failed_resamples"]
    assert f["reason_kind"] == "insufficient_balance" and f["open"]
    assert "insufficient funds" in f["reason"] and str(f["day"]) == today
    text = cli("show", "poor-daily").output
    assert "FAILED RE-SAMPLES: 1 day(s) without a run" in text and "insufficient_balance" in text
    assert json.loads(cli("list", "--json").output)[0]["open_failures"] == 1
    # A retry that fails again counts the try; after a deposit it succeeds and the day is closed.
    assert not resample(dg_instance, resources, "poor-daily", today).success
    fund(conn, "poor")
    assert resample(dg_instance, resources, "poor-daily", today).success
    [f] = json.loads(cli("show", "poor-daily", "--json").output)["failed_resamples"]
    assert (
        f["tries"] == 2
        and not f["open"]
        and f["later_run_id"] == f"poor-daily-{today.replace('-', '')}"
    )
    assert json.loads(cli("list", "--json").output)[0]["open_failures"] == 0


def lifecycle(
    instance: dg.DagsterInstance, resources: dict[str, Any], **config: Any
) -> dg.ExecuteInProcessResult:
    return monitor_lifecycle_job.execute_in_process(
        run_config={"ops": {"monitor_lifecycle_op": {"config": config}}},
        instance=instance,
        resources={k: resources[k] for k in ("db", "registry")},
        raise_on_error=False,
    )


def test_the_launchpad_job_pauses_resumes_changes_cadence_and_retires(
    cli: Any, conn: Any, tmp_path: Path, dg_instance: dg.DagsterInstance, resources: dict[str, Any]
) -> None:
    cli("create", config_file(tmp_path, "l", monitor="from-ui"))
    paused = lifecycle(dg_instance, resources, monitor_id="from-ui", action="pause", reason="audit")
    assert paused.success
    again = lifecycle(dg_instance, resources, monitor_id="from-ui", action="pause")
    assert not again.success
    failure = next(e for e in again.all_events if e.is_step_failure)
    assert "only an active monitor can be paused" in str(
        failure.step_failure_data.user_failure_data.description
    )
    assert lifecycle(dg_instance, resources, monitor_id="from-ui", action="resume").success
    cadence = lifecycle(dg_instance, resources, monitor_id="from-ui", action="set_cadence",
                        cron="0 9 * * 1", timezone="UTC")  # fmt: skip
    assert cadence.success and op_metadata(cadence, "monitor_lifecycle_op")["revision"] == 2
    bad = lifecycle(
        dg_instance, resources, monitor_id="from-ui", action="set_cadence", cron="* * * * *"
    )
    assert not bad.success
    assert lifecycle(dg_instance, resources, monitor_id="from-ui", action="retire").success
    shown = json.loads(cli("show", "from-ui", "--json").output)
    assert [e["event"] for e in shown["history"]] == [
        "created",
        "paused",
        "resumed",
        "updated",
        "retired",
    ]
    assert (
        shown["history"][1]["actor"] == f"dagster:{paused.run_id}"
        and shown["history"][1]["reason"] == "audit"
    )
    assert shown["cron"] == "0 9 * * 1" and shown["status"] == "retired"


def test_a_disabled_engine_is_a_recorded_failed_resample_not_a_crash(
    cli: Any, conn: Any, tmp_path: Path, dg_instance: dg.DagsterInstance,
    resources: dict[str, Any], monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    # A monitor on a real engine, created while its key was set; then the key is removed (a
    # registry / deployment change): the day's re-sample fails with the reason, recorded.
    fund(conn)
    monkeypatch.setenv("GEO_DEEPSEEK_API_KEY", "test-key-not-used")
    path = config_file(
        tmp_path, "api", monitor="api-daily",
        channels=[{"platform": "deepseek_api", "device": "web"}],
    )  # fmt: skip
    cli("create", path)
    monkeypatch.delenv("GEO_DEEPSEEK_API_KEY")
    today = datetime.now(SHANGHAI).date().isoformat()
    failed = resample(dg_instance, resources, "api-daily", today)
    assert not failed.success
    failure = next(e for e in failed.all_events if e.is_step_failure)
    data = failure.step_failure_data.user_failure_data
    assert data is not None, failure.step_failure_data.error  # a Failure with the reason
    assert "GEO_DEEPSEEK_API_KEY" in str(data.description)
    [f] = json.loads(cli("show", "api-daily", "--json").output)["failed_resamples"]
    assert f["reason_kind"] == "disabled_engine" and "GEO_DEEPSEEK_API_KEY" in f["reason"]


def test_an_update_during_the_days_resample_is_not_reverted_by_it(
    cli: Any, conn: Any, tmp_path: Path, dg_instance: dg.DagsterInstance,
    resources: dict[str, Any], monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    # The resample op reads the monitor's config, quotes it, then creates the run. An update
    # committed in between (another person, `monitors update`) must survive: the run freezes
    # what was read, the monitor keeps the new revision's config for the next run (R2).
    import geo_pipeline.defs.collection.resampling as schedules

    fund(conn)
    cli("create", config_file(tmp_path, "r", monitor="raced"))
    newer = config_file(tmp_path, "r2", monitor="raced", repeats=3)
    real = schedules.quoted_plan_for

    def quote_then_someone_updates(*args: Any, **kwargs: Any) -> Any:
        plan = real(*args, **kwargs)
        cli("update", "raced", "--config", newer, "--reason", "meanwhile")
        return plan

    monkeypatch.setattr(schedules, "quoted_plan_for", quote_then_someone_updates)
    today = datetime.now(SHANGHAI).date().isoformat()
    result = resample(dg_instance, resources, "raced", today)
    assert result.success
    run = conn.execute(
        "SELECT sample_count FROM geo.runs WHERE run_id = %s",
        (op_metadata(result, "resample_monitor_op")["run_id"],),
    ).fetchone()
    assert run["sample_count"] == 8  # the run froze the config it read (2 repeats)
    monitor = conn.execute(
        "SELECT revision, config FROM geo.monitors WHERE monitor_id = 'raced'"
    ).fetchone()
    assert monitor["revision"] == 2
    assert monitor["config"]["repeats"] == 3  # the update is still there
