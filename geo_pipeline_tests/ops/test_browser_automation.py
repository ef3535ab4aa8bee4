"""The Dagster UI as a data engineer uses it before anything runs (issue #23), in a real browser
against ``geo-pipeline dev``:

- previewing the daily schedule's tick and each sensor's tick from the Automation tab ("Preview
  tick result" -> "Continue") shows what would be requested and writes nothing: PostgreSQL has no
  new collection run and no new ledger entry (no money reserved), Dagster no new dynamic partition
  and no new run;
- the launchpad of ``create_collection_run`` validates the collection config as it is typed: a
  config with mistakes keeps "Launch Run" disabled and names the fields; the pre-filled example is
  valid as it stands.

Screenshots go to test-artifacts/."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from geo_pipeline.ops.dev import dagster_database
from geo_pipeline_tests.ops.conftest import ARTIFACTS
from geo_pipeline_tests.ops.dagster_ui import DevUi, graphql, running_dev
from geo_pipeline_tests.processes import run_ok

pytestmark = [pytest.mark.browser, pytest.mark.timeout(900)]

# A monitored config: `runs create` saves monitor "m-ui" as active, so the daily schedule has a
# monitor to re-sample when its tick is previewed.
MONITORED = """\
tenant: acme
brand: {name: 瑞幸咖啡, aliases: [Luckin]}
competitors: [{name: 星巴克, aliases: [Starbucks]}]
questions: ["国内最好喝的咖啡品牌？"]
channels: [{platform: deepseek, device: web}, {platform: kimi, device: web}]
repeats: 1
monitor: m-ui
"""

# Eleven mistakes of the kind a person makes in the launchpad: misspelt and missing fields,
# words where numbers go, a list where an object goes.
BAD_LAUNCHPAD = """\
ops:
  create_run_op:
    config:
      collection:
        tenant: acme
        brnd: {name: 瑞幸咖啡}
        competitors: 星巴克
        questions: ["q"]
        channels: [{platfrom: deepseek, device: web}]
        repeats: three
        screenshot: maybe
        priority: high
        submit_cap: -x
        max_attempts: [3]
        monitr: m1
      confirm: perhaps
"""

SKIP_WELCOME = 'window.localStorage.setItem("communityNux", "1")'


def _counts(db_url: str) -> dict[str, int]:
    """What a side effect would change: the pipeline's runs and ledger, Dagster's dynamic
    partitions and runs."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        runs = conn.execute("SELECT count(*) FROM geo.runs").fetchone()
        ledger = conn.execute("SELECT count(*) FROM geo.ledger_entries").fetchone()
    dagster_url = db_url.rsplit("/", 1)[0] + "/" + dagster_database(db_url)
    with psycopg.connect(dagster_url, autocommit=True) as conn:
        partitions = conn.execute("SELECT count(*) FROM dynamic_partitions").fetchone()
        dagster_runs = conn.execute("SELECT count(*) FROM runs").fetchone()
    assert runs and ledger and partitions and dagster_runs
    return {
        "geo.runs": runs[0],
        "geo.ledger_entries": ledger[0],
        "dagster dynamic partitions": partitions[0],
        "dagster runs": dagster_runs[0],
    }


@pytest.fixture
def dev_ui(db_url, redis_url, redis_ns, tmp_path) -> Iterator[DevUi]:
    """``geo-pipeline dev`` with one worker (its port, the environment its export line names)."""
    with running_dev(db_url, redis_url, redis_ns, tmp_path) as ui:
        yield ui


def _in_flight(db_url: str) -> dict[str, int]:
    """What the daemon is still doing: ticks being evaluated and runs not yet ended, from
    Dagster's own storage."""
    dagster_url = db_url.rsplit("/", 1)[0] + "/" + dagster_database(db_url)
    with psycopg.connect(dagster_url, autocommit=True) as conn:
        ticks = conn.execute("SELECT count(*) FROM job_ticks WHERE status = 'STARTED'").fetchone()
        runs = conn.execute(
            "SELECT count(*) FROM runs WHERE status NOT IN ('SUCCESS', 'FAILURE', 'CANCELED')"
        ).fetchone()
    assert ticks and runs
    return {"ticks being evaluated": ticks[0], "runs not ended": runs[0]}


REPOSITORY = '{repositoryLocationName: "geo_pipeline", repositoryName: "__repository__"}'


def _stop_automation(port: int) -> list[str]:
    """Stop every sensor and schedule of the code location (the daemon's own ticks would
    otherwise create partitions and runs while the previews are judged); returns their names."""
    sensors = graphql(
        port,
        f"{{ sensorsOrError(repositorySelector: {REPOSITORY}) {{ ... on Sensors "
        "{ results { id name } } } }",
    )["sensorsOrError"]["results"]
    schedules = graphql(
        port,
        f"{{ schedulesOrError(repositorySelector: {REPOSITORY}) {{ ... on Schedules "
        "{ results { id name } } } }",
    )["schedulesOrError"]["results"]
    for s in sensors:
        graphql(port, f'mutation {{ stopSensor(id: "{s["id"]}") {{ __typename }} }}')
    for s in schedules:
        graphql(port, f'mutation {{ stopRunningSchedule(id: "{s["id"]}") {{ __typename }} }}')
    return sorted(s["name"] for s in sensors + schedules)


def _preview_tick(page: Any, url: str, shot: str) -> str:
    """Open an automation's page, preview one tick and return the dialog's text."""
    page.goto(url, wait_until="networkidle")
    page.get_by_role("button", name="Preview tick result").first.click(timeout=120_000)
    page.get_by_role("button", name="Continue").click(timeout=60_000)
    # The dialog shows its result with a "Try again" button once the evaluation has answered.
    page.get_by_role("button", name="Try again").wait_for(timeout=180_000)
    dialog = page.get_by_role("dialog").last
    text = str(dialog.inner_text())
    page.screenshot(path=str(ARTIFACTS / shot), full_page=True)
    page.get_by_role("button", name="Close").last.click()
    return text


def test_previewing_the_schedule_and_sensors_writes_nothing(dev_ui, db_url, tmp_path, browser_page):
    port, env = dev_ui.port, dev_ui.env
    stopped = _stop_automation(port)
    assert {"daily_resampling", "sampling_plan_sensor", "completion_sensor"} <= set(stopped)
    # A tick the daemon had already started (and any run it launched) ends before anything is
    # counted: waited for in Dagster's storage while dev's processes move, not for a flat 20 s
    # (a tick's evaluation on a loaded box can take longer, and its writes would then land
    # between the counts, as if a preview had made them).
    dev_ui.wait_for(
        lambda: not any(_in_flight(db_url).values()), 120, "the daemon's ticks and runs to end"
    )
    cli = [sys.executable, "-m", "geo_pipeline.cli.main"]
    config = tmp_path / "monitored.yaml"
    config.write_text(MONITORED, encoding="utf-8")
    deposit = [*cli, "billing", "deposit", "--tenant", "acme", "--amount", "100000"]
    run_ok(deposit, env=env)
    # --no-dispatch: the run stays as created, so the sensors have something to request.
    create = [*cli, "runs", "create", str(config), "--no-dispatch"]
    run_ok(create, env=env)

    page = browser_page
    page.add_init_script(SKIP_WELCOME)
    base = f"http://127.0.0.1:{port}/locations/geo_pipeline"
    before = _counts(db_url)
    schedule = _preview_tick(
        page, f"{base}/schedules/daily_resampling", "dagster-schedule-preview.png"
    )
    for sensor in ("sampling_plan_sensor", "completion_sensor"):
        _preview_tick(page, f"{base}/sensors/{sensor}", f"dagster-{sensor}-preview.png")
    after = _counts(db_url)
    assert after == before, f"a preview wrote: before {before}, after {after}"
    # The preview still shows what the tick would launch: one re-sample of the active monitor.
    assert "1 run request" in schedule, schedule


def test_launchpad_rejects_a_bad_config_before_launch(dev_ui, browser_page):
    port = dev_ui.port
    page = browser_page
    page.add_init_script(SKIP_WELCOME)
    page.goto(
        f"http://127.0.0.1:{port}/locations/geo_pipeline/jobs/create_collection_run/playground",
        wait_until="networkidle",
    )
    launch = page.get_by_role("button", name="Launch Run")
    launch.wait_for(timeout=120_000)
    # The pre-filled example is a valid config as it stands.
    page.wait_for_function(
        "() => [...document.querySelectorAll('button')].some("
        "b => b.innerText.trim() === 'Launch Run' && !b.disabled)",
        timeout=60_000,
    )
    page.screenshot(path=str(ARTIFACTS / "dagster-launchpad-example.png"), full_page=True)

    page.locator(".CodeMirror").first.click()
    page.keyboard.press("Control+A")
    page.keyboard.press("Delete")
    page.keyboard.insert_text(BAD_LAUNCHPAD)
    page.wait_for_function(
        "() => [...document.querySelectorAll('button')].some("
        "b => b.innerText.trim() === 'Launch Run' && b.disabled)",
        timeout=60_000,
    )
    body = str(page.locator("body").inner_text())
    page.screenshot(path=str(ARTIFACTS / "dagster-launchpad-errors.png"), full_page=True)
    # Dagster's config type system names the offending fields before anything runs.
    for field in ("brnd", "brand", "repeats", "confirm"):
        assert field in body.split("ERRORS", 1)[-1], f"{field!r} not named in the errors: {body}"
    assert Path(ARTIFACTS / "dagster-launchpad-errors.png").exists()
