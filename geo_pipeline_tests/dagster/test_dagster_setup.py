"""``geo-pipeline dagster setup`` against a real instance (DAGSTER_HOME) and PostgreSQL: the pool
limits that hold for every launch path are written into Dagster's storage, and every run the
database has gets its run|channel partitions; a second call changes nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import dagster as dg
from click.testing import CliRunner

from geo_pipeline.cli.main import cli
from geo_pipeline.defs import names
from geo_pipeline.defs.partitions import partition_key
from geo_pipeline.defs.pools import POOL_LIMITS
from geo_pipeline_tests.dagster.conftest import CHANNELS, create_run


def _setup(db_url: str, home: Path, monkeypatch: Any) -> dict[str, Any]:
    monkeypatch.setenv("GEO_DATABASE_URL", db_url)
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    result = CliRunner().invoke(cli, ["dagster", "setup", "--json"])
    assert result.exit_code == 0, result.output
    return dict(json.loads(result.output))


def test_setup_writes_pool_limits_and_every_runs_partitions_once(
    db: Any, db_url: str, tmp_path: Path, monkeypatch: Any
) -> None:
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    run_id = create_run(db)  # created by the CLI's path: no partition in Dagster yet

    first = _setup(db_url, home, monkeypatch)
    assert first["pools_changed"] == POOL_LIMITS
    assert first["runs"] >= 1 and first["partition_keys_added"] >= len(CHANNELS) + 1

    with dg.DagsterInstance.from_config(str(home)) as instance:
        keys = set(instance.get_dynamic_partitions(names.RUN_CHANNEL_PARTITIONS))
        assert {partition_key(run_id, ch) for ch in CHANNELS} <= keys
        assert run_id in instance.get_dynamic_partitions(names.RUNS_PARTITIONS)
        storage = instance.event_log_storage
        for pool, limit in POOL_LIMITS.items():
            assert storage.get_concurrency_info(pool).slot_count == limit

    again = _setup(db_url, home, monkeypatch)
    assert again["pools_changed"] == {} and again["partition_keys_added"] == 0


def test_setup_names_what_is_missing_instead_of_a_traceback(
    db_url: str, tmp_path: Path, monkeypatch: Any
) -> None:
    monkeypatch.setenv("GEO_DATABASE_URL", db_url)
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    out = CliRunner().invoke(cli, ["dagster", "setup"])
    assert out.exit_code != 0 and "DAGSTER_HOME" in out.output and "Traceback" not in out.output
    # The deployed instance file without its variables: each unset one is named.
    home = tmp_path / "home"
    home.mkdir()
    deployed = Path(__file__).resolve().parents[2] / "deploy" / "dagster" / "dagster.yaml"
    (home / "dagster.yaml").write_text(deployed.read_text(encoding="utf-8"), encoding="utf-8")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    for var in ("DAGSTER_PG_USERNAME", "DAGSTER_PG_PASSWORD", "DAGSTER_PG_HOST", "DAGSTER_PG_DB"):
        monkeypatch.delenv(var, raising=False)
    out = CliRunner().invoke(cli, ["dagster", "setup"])
    assert out.exit_code != 0 and "DAGSTER_PG_HOST" in out.output, out.output
