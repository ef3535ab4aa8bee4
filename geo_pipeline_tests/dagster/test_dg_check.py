"""`dg check defs` and `dg list defs` (dagster-dg-cli, [tool.dg] in pyproject.toml) work from the
repository root in an environment that holds none of the deployment's variables: no GEO_* and no
DAGSTER_PG_* (loading the definitions resolves no secret; resources take them as EnvVars when a
run or tick starts). `make test` runs the same check before pytest.

No DAGSTER_HOME either: Dagster's CLI then reads the root's dagster.yaml, which is the deployed
configuration (deploy/dagster/dagster.yaml, PostgreSQL from DAGSTER_PG_*) without its storage.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from geo_pipeline_tests.dagster.test_definitions import (
    EXPECTED_ASSETS,
    EXPECTED_CHECKS,
    EXPECTED_JOBS,
    EXPECTED_RESOURCES,
    EXPECTED_SCHEDULES,
    EXPECTED_SENSORS,
)

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def clean_env(home: Path) -> dict[str, str]:
    """Only what a shell in a fresh checkout has: PATH (the project's virtualenv first) and HOME.
    Nothing of os.environ leaks in, so no GEO_*, DAGSTER_PG_* or DAGSTER_HOME either."""
    home.mkdir(parents=True, exist_ok=True)
    return {
        "PATH": f"{BIN}{os.pathsep}/usr/local/bin{os.pathsep}/usr/bin{os.pathsep}/bin",
        "HOME": str(home),
        "VIRTUAL_ENV": str(BIN.parent),
        "LANG": "C.UTF-8",
    }


def dg(args: list[str], home: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "dg"), *args],
        cwd=ROOT,
        env=clean_env(home),
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )


def test_dg_check_defs_passes_without_deployment_variables(tmp_path: Path) -> None:
    proc = dg(["check", "defs"], tmp_path / "home")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert "All definitions loaded successfully." in proc.stdout, proc.stdout[-2000:]


def test_dg_list_defs_lists_the_code_location(tmp_path: Path) -> None:
    proc = dg(["list", "defs", "--json"], tmp_path / "home")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    listed = json.loads(proc.stdout)
    assert {a["asset_key"] for a in listed["assets"]} == EXPECTED_ASSETS
    assert {f"{c['asset_key']}:{c['name']}" for c in listed["asset_checks"]} == EXPECTED_CHECKS
    assert {j["name"] for j in listed["jobs"]} - {"__ASSET_JOB"} == EXPECTED_JOBS
    assert {s["name"] for s in listed["sensors"]} == EXPECTED_SENSORS
    assert {s["name"] for s in listed["schedules"]} == EXPECTED_SCHEDULES
    assert {r["name"] for r in listed["resources"]} >= EXPECTED_RESOURCES
