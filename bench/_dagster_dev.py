"""bench/dagster_launch.py --dev: the issue 36 figures on the shipped instance (dagster.yaml's
queued run coordinator, the daemon, the webserver's code server), through ``geo-pipeline dev``:

- ``dev start-up``: from starting ``geo-pipeline dev`` until its webserver answers
  ``/server_info`` (goal <= 20 s);
- ``click-to-published``: from the launchpad's "Launch Run" (the same GraphQL ``launchRun`` the
  button sends, with the pre-filled example: 2 channels x 2 questions x 2 repeats = 8 samples)
  until brand_visibility is materialised for every partition of the run (goal <= 20 s for a run
  whose collection takes <= 5 s), with the stages in between: the create run done, every
  partition dispatched (sampling_plan), every sample terminal, every partition published, and
  billing.

Stage times are polled every 0.25 s (GraphQL and SQL), so each is late by at most that.

Beside the wall times, which a loaded box stretches, the load-independent counts: the Dagster
runs of the collection run by job (each run is one run-worker process that imports dagster and
the code location), each run's queue wait (created -> started) and duration (started -> ended),
and the CPU seconds the whole ``dev`` process tree spent from the click to publication (read
from /proc: every live descendant plus what exited descendants handed to their parents)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import psycopg

GOAL_CLICK_S = 20.0
GOAL_START_S = 20.0
POLL_S = 0.25


def _graphql(port: int, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/graphql",
        data=json.dumps({"query": query, "variables": variables or {}}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        body = json.loads(resp.read())
    if body.get("errors"):
        raise RuntimeError(f"GraphQL errors: {body['errors']}")
    return dict(body["data"])


def _answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=5) as r:
            return bool(r.status == 200)
    except OSError:
        return False


LOCATIONS = """{ workspaceOrError { ... on Workspace { locationEntries { name
  locationOrLoadError { __typename ... on RepositoryLocation { repositories { name } } } } } } }"""
LAUNCH = """mutation($p: ExecutionParams!) { launchRun(executionParams: $p) { __typename
  ... on LaunchRunSuccess { run { runId } } ... on PythonError { message }
  ... on RunConfigValidationInvalid { errors { message } } } }"""
RUNS = """{ runsOrError(filter: {tags: [{key: "geo/run_id", value: "%s"}]}) {
  ... on Runs { results { runId jobName status startTime endTime creationTime } } } }"""
MATERIALISED = """{ assetNodes(assetKeys: [{path: ["%s"]}]) { assetPartitionStatuses {
  ... on DefaultPartitionStatuses { materializedPartitions } } } }"""


def tree_cpu(root: int) -> float:
    """CPU seconds (user + system) of ``root`` and its descendants, live and reaped, from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry)] = int(fields[1])
        times[int(entry)] = sum(int(f) for f in fields[11:15]) / tick  # utime stime cutime cstime
    tree, todo = set(), [root]
    while todo:
        pid = todo.pop()
        tree.add(pid)
        todo += [c for c, p in parents.items() if p == pid and c not in tree]
    return sum(times.get(p, 0.0) for p in tree)


def _location(port: int) -> tuple[str, str]:
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        for e in _graphql(port, LOCATIONS)["workspaceOrError"]["locationEntries"]:
            loc = e["locationOrLoadError"] or {}
            if loc.get("__typename") == "RepositoryLocation":
                return e["name"], loc["repositories"][0]["name"]
        time.sleep(POLL_S)
    raise RuntimeError("the code location did not load in 600 s")


def _materialised(port: int, asset: str, run_id: str) -> set[str]:
    try:
        nodes = _graphql(port, MATERIALISED % asset)["assetNodes"]
    except (OSError, RuntimeError):
        return set()
    keys = (nodes[0]["assetPartitionStatuses"] or {}).get("materializedPartitions") or []
    return {k for k in keys if k.split("|", 1)[0] == run_id}


def one_launch(
    port: int, db_url: str, location: tuple[str, str], run_id: str, dev_pid: int
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    from geo_pipeline.defs.launchpad import EXAMPLE

    config = {"ops": {"create_run_op": {"config": {"collection": dict(EXAMPLE), "run_id": run_id}}}}
    params = {
        "selector": {
            "repositoryLocationName": location[0],
            "repositoryName": location[1],
            "jobName": "create_collection_run",
        },
        "runConfigData": config,
        "mode": "default",
    }
    cpu0 = tree_cpu(dev_pid)
    t0 = time.monotonic()
    launched = _graphql(port, LAUNCH, {"p": params})["launchRun"]
    if launched["__typename"] != "LaunchRunSuccess":
        raise RuntimeError(f"launch failed: {launched}")
    create_id = launched["run"]["runId"]
    marks: dict[str, float] = {}
    channels: int | None = None
    with psycopg.connect(db_url, autocommit=True) as conn:
        while "billing" not in marks:
            now = time.monotonic() - t0
            if now > 900:
                runs = _graphql(port, RUNS % run_id)["runsOrError"]["results"]
                raise RuntimeError(
                    f"{run_id}: not published after 900 s; stages {marks}; Dagster runs: "
                    + "; ".join(f"{r['jobName']} {r['status']}" for r in runs)
                )
            if "created" not in marks:
                query = '{ runOrError(runId: "' + create_id + '") { ... on Run { status } } }'
                st = _graphql(port, query)["runOrError"].get("status")
                if st == "SUCCESS":
                    marks["created"] = now
                elif st in ("FAILURE", "CANCELED"):
                    raise RuntimeError(f"create_collection_run {create_id}: {st}")
            row = conn.execute(
                "SELECT count(DISTINCT channel), count(*), count(*) FILTER (WHERE "
                "collection_state IN ('completed', 'failed')) FROM geo.samples WHERE run_id = %s",
                (run_id,),
            ).fetchone()
            if row and row[1]:
                channels = int(row[0])
                if row[2] == row[1] and "collected" not in marks:
                    marks["collected"] = now
            if channels:
                for stage, asset in (("dispatched", "sampling_plan"),
                                     ("published", "brand_visibility")):  # fmt: skip
                    if stage not in marks and len(_materialised(port, asset, run_id)) >= channels:
                        marks[stage] = now
                if "published" in marks and "cpu" not in marks:
                    marks["cpu"] = tree_cpu(dev_pid) - cpu0
                if "published" in marks and _materialised(port, "billing_reconciliation", run_id):
                    marks["billing"] = now
            time.sleep(POLL_S)
        runs = _graphql(port, RUNS % run_id)["runsOrError"]["results"]
    query = '{ runOrError(runId: "' + create_id + '") { ... on Run { runId jobName status '
    query += "startTime endTime creationTime } } }"
    runs = [_graphql(port, query)["runOrError"], *runs]
    queued = [
        (r["startTime"] - r["creationTime"]) for r in runs if r["startTime"] and r["creationTime"]
    ]
    per_run = [
        {
            "job": r["jobName"],
            "status": r["status"],
            "created s": f"{r['creationTime'] - runs[0]['creationTime']:.1f}",
            "queue wait s": f"{r['startTime'] - r['creationTime']:.1f}" if r["startTime"] else "-",
            "run s": f"{r['endTime'] - r['startTime']:.1f}"
            if r["startTime"] and r["endTime"]
            else "-",
        }
        for r in sorted(runs, key=lambda r: r["creationTime"] or 0)
    ]
    by_job: dict[str, int] = {}
    for r in runs:
        by_job[r["jobName"]] = by_job.get(r["jobName"], 0) + 1
    return {
        "run": run_id,
        "dagster runs": len(runs),
        "runs by job": ", ".join(f"{j} {n}" for j, n in sorted(by_job.items())),
        "dev tree CPU s to published": f"{marks['cpu']:.1f}",
        "created s": f"{marks.get('created', float('nan')):.1f}",
        "dispatched s": f"{marks['dispatched']:.1f}",
        "collected s": f"{marks['collected']:.1f}",
        "click-to-published s": f"{marks['published']:.1f}",
        "billing s": f"{marks['billing']:.1f}",
        "goal s": f"<= {GOAL_CLICK_S:g}",
        "met": "yes" if marks["published"] <= GOAL_CLICK_S else "NO",
        "queue wait s (median)": f"{sorted(queued)[len(queued) // 2]:.1f}" if queued else "-",
        "queue wait s (sum)": f"{sum(queued):.1f}",
    }, per_run


def bench_dev(
    rounds: int, db_url: str, ns: str
) -> tuple[list[dict[str, Any]], dict[str, Any], list[dict[str, Any]]]:
    """Start dev on the scratch database, launch ``rounds`` runs one after the other."""
    from _machine import REDIS_URL

    from geo_pipeline.ops.demo import free_port
    from geo_pipeline.ops.dev import dagster_database

    tmp = Path(tempfile.mkdtemp(prefix="geo_bench_dev_"))
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GEO_", "DAGSTER_"))}
    env.update(
        GEO_DATABASE_URL=db_url,
        GEO_REDIS_URL=REDIS_URL,
        GEO_REDIS_PREFIX=ns,
        GEO_EVIDENCE_URL=(tmp / "evidence").as_uri(),
    )
    cmd = [sys.executable, "-m", "geo_pipeline.cli.main", "dev", "--state-dir", str(tmp / "s")]
    cmd += ["--port", str(port), "--workers", "2"]
    out = (tmp / "dev.out").open("wb")
    t0 = time.monotonic()
    load0 = os.getloadavg()
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        while not _answers(port):
            if proc.poll() is not None or time.monotonic() - t0 > 900:
                raise RuntimeError(
                    f"dev did not serve (exit {proc.returncode}):\n"
                    + (tmp / "dev.out").read_text(errors="replace")[-3000:]
                )
            time.sleep(POLL_S)
        served = time.monotonic() - t0
        cpu_served = tree_cpu(proc.pid)
        location = _location(port)
        loaded = time.monotonic() - t0
        start = {
            "dev start-up s (UI answers)": f"{served:.1f}",
            "code location loaded s": f"{loaded:.1f}",
            "goal s": f"<= {GOAL_START_S:g}",
            "met": "yes" if served <= GOAL_START_S else "NO",
            "dev tree CPU s to UI": f"{cpu_served:.1f}",
            "load at start": " ".join(f"{x:.1f}" for x in load0),
        }
        rows, per_run = [], []
        for i in range(rounds):
            row, runs = one_launch(port, db_url, location, f"bench-dev-{i}", proc.pid)
            rows.append(row)
            per_run += [{"run": row["run"], **r} for r in runs]
        return rows, start, per_run
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
        out.close()
        admin = db_url.rsplit("/", 1)[0] + "/postgres"
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{dagster_database(db_url)}" WITH (FORCE)')  # type: ignore[arg-type]
