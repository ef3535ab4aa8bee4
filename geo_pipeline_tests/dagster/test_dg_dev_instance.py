"""`geo-pipeline dev` runs Dagster with the repository's dagster.yaml (what is deployed), its
DAGSTER_PG_* filled from the stack's PostgreSQL, against the real test server."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest
import yaml

from geo_pipeline.defs import names
from geo_pipeline.ops import dev
from geo_pipeline.ops.demo import Stack
from geo_pipeline_tests.fixtures.postgres import drop_database, with_database

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def stack(pg_admin_url: str, tmp_path: Path) -> Iterator[Stack]:
    name = f"geo_dev_{uuid.uuid4().hex[:10]}"
    url = with_database(pg_admin_url, name)
    yield Stack(
        state_dir=tmp_path / "state",
        database_url=url,
        redis_url="",
        evidence_url="",
        sources={},
        env={},
    )
    drop_database(pg_admin_url, dev.dagster_database(url))


def test_dev_instance_is_the_repositorys_dagster_yaml(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    workspace, env = dev.prepare_instance(stack)
    assert workspace == ROOT / "workspace.yaml"
    home = Path(env["DAGSTER_HOME"])
    written = yaml.safe_load((home / "dagster.yaml").read_text(encoding="utf-8"))
    repo = yaml.safe_load(
        (ROOT / "deploy" / "dagster" / "dagster.yaml").read_text(encoding="utf-8")
    )
    _, port = dev.dagster_pg_env(stack.database_url)
    repo["storage"]["postgres"]["postgres_db"]["port"] = port  # the one field dev may change
    assert written == repo
    if port == 5432:
        assert (home / "dagster.yaml").read_bytes() == (
            ROOT / "deploy" / "dagster" / "dagster.yaml"
        ).read_bytes()
    # No credential in the file: the password (if any) stays in the environment.
    assert env["DAGSTER_PG_DB"] == dev.dagster_database(stack.database_url)
    if env["DAGSTER_PG_PASSWORD"]:
        assert env["DAGSTER_PG_PASSWORD"] not in (home / "dagster.yaml").read_text()
    assert stack.env["DAGSTER_HOME"] == str(home)

    for key, value in env.items():
        monkeypatch.setenv(key, value)
    from dagster._core.run_coordinator import QueuedRunCoordinator
    from dagster_postgres import PostgresRunStorage

    with dg.DagsterInstance.get() as instance:
        assert isinstance(instance.run_storage, PostgresRunStorage)
        coordinator = instance.run_coordinator
        assert isinstance(coordinator, QueuedRunCoordinator)
        config = coordinator.inst_data.config_dict  # type: ignore[union-attr]
        assert {k: config.get(k) for k in repo["run_coordinator"]["config"]} == (
            repo["run_coordinator"]["config"]
        )
        for section in ("concurrency", "sensors", "schedules"):
            assert instance.get_settings(section) == repo.get(section, {}), section
        assert instance.get_settings("run_retries") == repo["run_retries"]
        assert instance.get_settings("run_monitoring") == repo["run_monitoring"]
        # The storage really is the stack's server, in the dev database.
        instance.add_dynamic_partitions(names.RUNS_PARTITIONS, ["r-dev-1"])
    with dg.DagsterInstance.get() as again:
        assert again.get_dynamic_partitions(names.RUNS_PARTITIONS) == ["r-dev-1"]


def test_a_socket_directory_server_goes_through_pghost() -> None:
    env, port = dev.dagster_pg_env("postgresql://postgres@/geo?host=/tmp/pg-sock")
    assert env == {
        "DAGSTER_PG_USERNAME": "postgres",
        "DAGSTER_PG_PASSWORD": "",
        "DAGSTER_PG_HOST": "",
        "DAGSTER_PG_DB": "geo_dagster",
        "PGHOST": "/tmp/pg-sock",
    }
    assert port == 5432
    tcp, tcp_port = dev.dagster_pg_env("postgresql://geo:s%40cret@db.example:6543/geo")
    assert tcp["DAGSTER_PG_HOST"] == "db.example" and "PGHOST" not in tcp
    assert tcp["DAGSTER_PG_PASSWORD"] == "s@cret" and tcp_port == 6543


def test_a_server_on_another_port_changes_only_the_port(tmp_path: Path) -> None:
    dev.write_instance_yaml(tmp_path, 6543)
    written = yaml.safe_load((tmp_path / "dagster.yaml").read_text(encoding="utf-8"))
    repo = yaml.safe_load(
        (ROOT / "deploy" / "dagster" / "dagster.yaml").read_text(encoding="utf-8")
    )
    assert written["storage"]["postgres"]["postgres_db"]["port"] == 6543
    repo["storage"]["postgres"]["postgres_db"]["port"] = 6543
    assert written == repo


def test_an_instance_file_without_postgres_db_is_refused(tmp_path: Path) -> None:
    source = tmp_path / "dagster.yaml"
    source.write_text("storage:\n  postgres:\n    postgres_url: x\n", encoding="utf-8")
    with pytest.raises(dev.DevInstanceError, match=r"storage\.postgres\.postgres_db"):
        dev.write_instance_yaml(tmp_path / "out", 5432, source)


def test_the_export_line_variables_reach_the_instance_and_mask_the_password() -> None:
    env, _ = dev.dagster_pg_env("postgresql://geo:s3cret@/geo?host=/tmp/pg-sock")
    exported = dev.export_env({"DAGSTER_HOME": "/x", "OTHER": "y", **env})
    assert exported == {
        "DAGSTER_HOME": "/x",
        "DAGSTER_PG_USERNAME": "geo",
        "DAGSTER_PG_PASSWORD": "***",
        "DAGSTER_PG_HOST": "",
        "DAGSTER_PG_DB": "geo_dagster",
        "PGHOST": "/tmp/pg-sock",
    }
