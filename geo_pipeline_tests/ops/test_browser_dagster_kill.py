"""Issue 36, a working day in the Dagster UI of ``geo-pipeline dev``: ``kill -9`` of the worker
while it holds a sample of a run. The supervisor starts it again; the webserver and the daemon are
the same processes throughout (no stopped UI); every partition of the run publishes and every
Dagster run of it succeeds, the ones in flight at the kill included; the run reconciles with no
unexplained line (the false ``missing_theirs`` alarm of a simulator that forgot its statements);
and brand_visibility's chart is an image in the partition's materialisation view, no click.

Sized for CI: one run of 2 channels x 2 questions x 2 repeats (8 samples) on one worker. Waits
follow progress (sample states, Dagster runs, materialised partitions), never a flat sleep."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from geo_pipeline.defs.partitions import partition_key
from geo_pipeline_tests.ops.conftest import ARTIFACTS
from geo_pipeline_tests.ops.dagster_ui import answers, graphql, running_dev
from geo_pipeline_tests.processes import run_ok

# Seen passing in 215 s at load average 5.7-10 on the shared 2-core box (issue 36), so it runs
# in CI. The waits follow progress; the timeout is only a safety net for a hung stack.
pytestmark = [pytest.mark.browser, pytest.mark.timeout(1500)]

CHANNELS = ("deepseek__web", "kimi__web")
DOWNSTREAM = ("collection_results", "validated_evidence", "brand_analysis", "brand_visibility")
CONFIG = """\
tenant: acme
brand: {name: 瑞幸咖啡, aliases: [Luckin]}
competitors: [{name: 星巴克, aliases: [Starbucks]}]
questions: ["国内最好喝的咖啡品牌？", "Best coffee chain in China?"]
channels:
  - {platform: deepseek, device: web}
  - {platform: kimi, device: web}
repeats: 2
"""
# The longest the stack may legitimately show no progress: a queued run whose code server does
# not answer goes back in the queue 3 times 60 s apart (dagster.yaml run_coordinator
# max_user_code_failure_retries), run monitoring fails a run stuck before its first step after
# 300 s (run_monitoring.start_timeout_seconds), and the sweeper takes over a dead worker's lease
# after 30 s (worker --lease-s): 3 x 60 + 300 + 30 = 510 s, rounded up.
STALL_S = 600.0
SAMPLES_SQL = """
SELECT count(*) AS total,
       count(*) FILTER (WHERE collection_state IN ('completed', 'failed')) AS terminal,
       count(*) FILTER (WHERE lease_owner LIKE %(owner)s AND lease_until > now()) AS held,
       array_agg(sample_id) FILTER (WHERE lease_owner LIKE %(owner)s) AS held_ids,
       string_agg(DISTINCT collection_state || '/' || submission_state, ',') AS states
FROM geo.samples WHERE run_id = %(run_id)s"""
RUNS_QUERY = """{ runsOrError(filter: {tags: [{key: "geo/run_id", value: "%s"}]}) {
  ... on Runs { results { runId jobName status tags { key value }
    stats { ... on RunStatsSnapshot { stepsFailed } } } } } }"""


def _partition(run: dict[str, Any]) -> tuple[str, str]:
    tags = {t["key"]: t["value"] for t in run["tags"]}
    # A run covers one partition, or a range of one collection run's partitions.
    ranged = (
        f"{tags.get('dagster/asset_partition_range_start')}..."
        f"{tags.get('dagster/asset_partition_range_end')}"
    )
    return run["jobName"], tags.get("dagster/partition", ranged)


def _runs(port: int, run_id: str) -> list[dict[str, Any]] | None:
    """The Dagster runs tagged with our run (None while the webserver is too busy to answer)."""
    try:
        return list(graphql(port, RUNS_QUERY % run_id)["runsOrError"]["results"])
    except (OSError, KeyError, TypeError, ValueError):
        return None


def _materialised(port: int) -> dict[str, int] | None:
    try:
        data = graphql(
            port, "{ assetNodes { assetKey { path } partitionStats { numMaterialized } } }"
        )
    except (OSError, KeyError, TypeError, ValueError):
        return None
    return {
        "/".join(n["assetKey"]["path"]): (n["partitionStats"] or {}).get("numMaterialized", 0)
        for n in data["assetNodes"]
    }


def _processes(state: Path) -> dict[str, int]:
    try:
        data = json.loads((state / "processes.json").read_text())
    except (OSError, ValueError):
        return {}
    return {name: int(p["pid"]) for name, p in data["processes"].items()}


class Progress:
    """Waits on the stack's progress: the run's sample states, its Dagster runs and the
    materialised partitions. Fails when none of them moved for STALL_S, with all three."""

    def __init__(self, ui: Any, conn: Any, run_id: str, owner: str) -> None:
        self.ui, self.conn, self.run_id, self.owner = ui, conn, run_id, owner
        self.last: dict[str, Any] = {}

    def snapshot(self) -> dict[str, Any]:
        samples = self.conn.execute(
            SAMPLES_SQL, {"run_id": self.run_id, "owner": self.owner}
        ).fetchone()
        runs = _runs(self.ui.port, self.run_id)
        mat = _materialised(self.ui.port)
        snap = {
            "samples": dict(samples),
            "runs": sorted((r["jobName"], r["status"]) for r in runs)
            if runs is not None
            else self.last.get("runs"),
            "materialised": mat if mat is not None else self.last.get("materialised"),
        }
        self.last = snap
        return snap

    def wait(self, done: Any, what: str, poll_s: float = 2.0) -> dict[str, Any]:
        moved, seen = time.monotonic(), None
        while True:
            assert self.ui.proc.poll() is None, (
                f"geo-pipeline dev exited ({self.ui.proc.returncode}) waiting for {what}; its "
                f"output (stdout and stderr):\n{self.ui.out.read_text(errors='replace')[-4000:]}"
            )
            snap = self.snapshot()
            if done(snap):
                return snap
            fingerprint = json.dumps({k: v for k, v in snap.items()}, default=str, sort_keys=True)
            if fingerprint != seen:
                seen, moved = fingerprint, time.monotonic()
            elif time.monotonic() - moved > STALL_S:
                pytest.fail(
                    f"no progress for {STALL_S:.0f}s waiting for {what}: {snap}\n"
                    f"supervisor.log:\n{_supervisor_log(self.ui)}\ngeo-pipeline dev's output "
                    f"(stdout and stderr):\n{self.ui.out.read_text(errors='replace')[-4000:]}"
                )
            time.sleep(poll_s)


def _supervisor_log(ui: Any) -> str:
    path = Path(ui.env["DAGSTER_HOME"]).parent / "logs" / "supervisor.log"
    return path.read_text(encoding="utf-8") if path.exists() else "(none)"


def _published(snap: dict[str, Any]) -> bool:
    mat, runs = snap["materialised"] or {}, snap["runs"] or []
    return (
        all(mat.get(a, 0) >= len(CHANNELS) for a in DOWNSTREAM)
        and mat.get("billing_reconciliation", 0) >= 1
        and bool(runs)
        and all(status in ("SUCCESS", "FAILURE", "CANCELED") for _, status in runs)
    )


def test_a_killed_worker_restarts_and_every_partition_publishes_with_no_alarm(
    db_url, redis_url, redis_ns, tmp_path, browser_page
):
    with running_dev(db_url, redis_url, redis_ns, tmp_path, workers=1) as ui:
        state = ui.state
        ui.wait_for(lambda: "dagster-webserver" in _processes(state), 120, "processes.json")
        before = _processes(state)
        cli = [sys.executable, "-m", "geo_pipeline.cli.main"]
        run_ok([*cli, "billing", "deposit", "--tenant", "acme", "--amount", "100000"], env=ui.env)
        run_id = f"kill-{os.getpid()}"
        config = tmp_path / "config.yaml"
        config.write_text(CONFIG, encoding="utf-8")
        # The run as the launchpad made it before it dispatched (issue 36): samples created,
        # nothing dispatched; the sampling_plan sensor asks for its Dagster run.
        run_ok(
            [*cli, "runs", "create", str(config), "--run-id", run_id, "--no-dispatch"], env=ui.env
        )
        run_ok(
            [
                sys.executable,
                "-c",
                "import sys, dagster as dg; "
                "from geo_pipeline.defs.partitions import register_run_partitions; "
                "register_run_partitions(dg.DagsterInstance.get(), sys.argv[1], sys.argv[2:])",
                run_id,
                *CHANNELS,
            ],
            env=ui.env,
        )
        worker = before["worker-1"]
        owner = f"worker:%:{worker}"
        with psycopg.connect(db_url, row_factory=dict_row, autocommit=True) as conn:
            progress = Progress(ui, conn, run_id, owner)
            # The moment: the worker holds a lease on a sample of the run (polled fast: a sample
            # is held for about a second). Everything terminal first would be no test at all.
            # Progress until then: the samples' states (every poll) or the Dagster runs that
            # dispatch them (every 2 s: their statuses move while the samples wait).
            moved = asked = time.monotonic()
            last: Any = None
            while True:
                row = conn.execute(SAMPLES_SQL, {"run_id": run_id, "owner": owner}).fetchone()
                if row["held"]:
                    break
                assert not (row["total"] and row["terminal"] == row["total"]), (
                    f"every sample finished before the worker was seen holding one: {row}"
                )
                now = time.monotonic()
                if now - asked > 2:
                    asked, runs = now, _runs(ui.port, run_id)
                    seen = (dict(row), sorted((r["jobName"], r["status"]) for r in runs or []))
                    if seen != last:
                        last, moved = seen, now
                if now - moved > STALL_S:
                    pytest.fail(f"nothing of {run_id} moved for {STALL_S:.0f}s: {last}")
                time.sleep(0.05)
            held = list(row["held_ids"] or [])
            in_flight = [r for r in _runs(ui.port, run_id) or [] if r["status"] != "SUCCESS"]
            os.kill(worker, signal.SIGKILL)

            restarted = progress.wait(
                lambda s: _processes(state).get("worker-1", worker) != worker,
                "the supervisor to restart worker-1",
                poll_s=0.5,
            )
            final = progress.wait(_published, "every partition and billing to publish")

            # No step of any Dagster run of the run failed, and every job and partition, those
            # in flight at the kill included, ended in a successful run. A run that failed
            # before its first step (the code server not up in time on a loaded machine) is
            # asked again by the sensors (docs/dagster.md, "When a downstream run fails").
            runs = _runs(ui.port, run_id) or []
            assert all((r["stats"] or {}).get("stepsFailed") == 0 for r in runs), runs
            succeeded = {_partition(r) for r in runs if r["status"] == "SUCCESS"}
            assert {_partition(r) for r in runs} <= succeeded, runs
            assert all(_partition(r) in succeeded for r in in_flight), (in_flight, runs)
            # The samples the dead worker held were finished by its successor (R12 look-up).
            states = conn.execute(
                "SELECT sample_id, collection_state, submission_state "
                "FROM geo.samples WHERE sample_id = ANY(%s)",
                (held,),
            ).fetchall()
            assert held and all(s["collection_state"] in ("completed", "failed") for s in states)
            # No false alarm: every reconciliation line of the run is explained.
            from geo_pipeline.domain.billing import is_explained

            lines = conn.execute(
                "SELECT classification, count(*) AS n, sum(difference_minor) AS diff "
                "FROM geo.reconciliation_lines WHERE run_id = %s GROUP BY 1",
                (run_id,),
            ).fetchall()
            assert lines and all(is_explained(r["classification"]) for r in lines), lines

        # No stopped UI: the webserver and the daemon are the processes they were, never
        # restarted, and the UI answers; only worker-1 was started again.
        after = _processes(state)
        for name in ("dagster-webserver", "dagster-daemon"):
            assert after[name] == before[name], (name, before, after)
            assert f"{name} (pid" not in _supervisor_log(ui), _supervisor_log(ui)
        assert f"worker-1 (pid {worker}) exited with code -9" in _supervisor_log(ui)
        assert answers(ui.port)

        # The chart in the partition's materialisation view, without a click.
        page = browser_page
        key = partition_key(run_id, CHANNELS[0])
        page.goto(
            f"http://127.0.0.1:{ui.port}/assets/brand_visibility?view=partitions&partition={key}",
            wait_until="networkidle",
        )
        _dismiss_welcome(page)
        chart = page.locator(f'img[alt^="Mention rate per brand on {CHANNELS[0]}"]').first
        chart.wait_for(state="visible", timeout=180_000)
        chart.scroll_into_view_if_needed()
        page.wait_for_function(
            "img => img.complete && img.naturalWidth > 0", arg=chart.element_handle()
        )
        chart.screenshot(path=str(ARTIFACTS / "dagster-chart-inline.png"))
        page.screenshot(path=str(ARTIFACTS / "dagster-materialisation-chart.png"), full_page=True)
        print(
            f"killed worker-1 (pid {worker}) holding {len(held)} sample(s); in flight: "
            f"{[(r['jobName'], r['status']) for r in in_flight]}; restarted: "
            f"{restarted['samples']}; published: {final['materialised']}; lines: "
            f"{[dict(r) for r in lines]}"
        )


def _dismiss_welcome(page: Any) -> None:
    skip = page.get_by_role("button", name="Skip")
    try:
        skip.wait_for(timeout=5_000)
        skip.click()
    except Exception:
        pass  # not shown on this visit
