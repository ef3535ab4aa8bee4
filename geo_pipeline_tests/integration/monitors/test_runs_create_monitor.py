"""`runs create` with `monitor:` and a monitor of the lifecycle (issue 37): a run's config that
differs from the monitor's saved one is a new revision with an event in the monitor's history
(who, why, the config), never a silent overwrite; the same config writes nothing to the monitor;
a retired monitor takes no run; a monitor a run creates has its 'created' event."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml
from click.testing import CliRunner, Result
from psycopg.rows import dict_row

from geo_pipeline.billing import ledger
from geo_pipeline.cli.main import cli

CONFIG: dict[str, Any] = {
    "tenant": "acme",
    "monitor": "acme-daily",
    "brand": {"name": "Acme", "aliases": ["阿克米"], "domains": ["acme.example"]},
    "competitors": [{"name": "Globex", "domains": ["globex.example"]}],
    "questions": ["best project tool for teams?", "which crm is cheapest?"],
    "channels": [{"platform": "deepseek", "device": "web", "regions": ["cn"],
                  "modes": ["standard"]}],
    "repeats": 2,
}  # fmt: skip


@pytest.fixture
def conn(db_url: str) -> Iterator[psycopg.Connection[dict[str, Any]]]:
    with psycopg.connect(db_url, row_factory=dict_row, autocommit=True) as c:  # type: ignore[arg-type]
        yield c


@pytest.fixture
def invoke(db_url: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("GEO_DATABASE_URL", db_url)
    monkeypatch.setenv("GEO_ACTOR", "dana")
    runner = CliRunner()

    def run(*args: str, ok: bool = True) -> Result:
        res = runner.invoke(cli, list(args))
        assert (res.exit_code == 0) == ok, (args, res.exit_code, res.output, res.exception)
        return res

    return run


def write(tmp_path: Path, name: str, **changes: Any) -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({**CONFIG, **changes}, allow_unicode=True), encoding="utf-8")
    return str(path)


def monitor_row(conn: Any) -> dict[str, Any]:
    row = conn.execute(
        "SELECT config, revision FROM geo.monitors WHERE monitor_id = 'acme-daily'"
    ).fetchone()
    return dict(row)


def events(conn: Any) -> list[dict[str, Any]]:
    return [
        dict(r)
        for r in conn.execute(
            "SELECT event, revision, config, actor, reason FROM geo.monitor_events "
            "WHERE monitor_id = 'acme-daily' ORDER BY event_id"
        ).fetchall()
    ]


def test_a_run_with_another_config_is_a_revision_with_its_event(
    invoke: Any, conn: Any, tmp_path: Path
) -> None:
    ledger.deposit(conn, "acme", 10_000_000, "CNY", f"deposit:acme:{uuid.uuid4().hex}")
    invoke("monitors", "create", write(tmp_path, "v1"), "--reason", "launch")
    assert monitor_row(conn)["revision"] == 1

    # The same config: the run belongs to the monitor, the monitor is not written.
    same = invoke("runs", "create", write(tmp_path, "v1"), "--no-dispatch").output.strip()
    assert monitor_row(conn)["revision"] == 1 and len(events(conn)) == 1

    # Another config (a third question): a new revision, with its event naming who and the run.
    v2 = write(tmp_path, "v2", questions=[*CONFIG["questions"], "cheapest crm for a shop?"])
    rid = invoke("runs", "create", v2, "--no-dispatch").output.strip()
    assert rid != same
    saved = monitor_row(conn)
    assert saved["revision"] == 2
    assert len(saved["config"]["questions"]) == 3
    last = events(conn)[-1]
    assert (last["event"], last["revision"], last["actor"]) == ("updated", 2, "dana")
    assert rid in last["reason"] and last["config"] == saved["config"]
    shown = json.loads(invoke("monitors", "show", "acme-daily", "--json").output)
    assert [e["event"] for e in shown["history"]] == ["created", "updated"]
    # The saved config is the one the person wrote (editable: `questions import` works on it).
    invoke("questions", "import", str(_csv(tmp_path)), "--monitor", "acme-daily", "--dry-run")


def _csv(tmp_path: Path) -> Path:
    path = tmp_path / "q.csv"
    path.write_text("question,topic\nwhich crm is cheapest?,crm\n", encoding="utf-8")
    return path


def test_a_retired_monitor_takes_no_run(invoke: Any, conn: Any, tmp_path: Path) -> None:
    ledger.deposit(conn, "acme", 10_000_000, "CNY", f"deposit:acme:{uuid.uuid4().hex}")
    invoke("monitors", "create", write(tmp_path, "v1"))
    invoke("monitors", "retire", "acme-daily", "--reason", "contract ended")
    before = (monitor_row(conn), events(conn))
    res = invoke("runs", "create", write(tmp_path, "v1"), "--no-dispatch", ok=False)
    assert "retired" in res.output and "Traceback" not in res.output
    assert (monitor_row(conn), events(conn)) == before
    assert conn.execute("SELECT count(*) AS n FROM geo.runs").fetchone()["n"] == 0


def test_a_monitor_a_run_creates_has_its_created_event(
    invoke: Any, conn: Any, tmp_path: Path
) -> None:
    ledger.deposit(conn, "acme", 10_000_000, "CNY", f"deposit:acme:{uuid.uuid4().hex}")
    rid = invoke("runs", "create", write(tmp_path, "v1"), "--no-dispatch").output.strip()
    [created] = events(conn)
    assert (created["event"], created["revision"], created["actor"]) == ("created", 1, "dana")
    assert rid in created["reason"]
    assert monitor_row(conn)["config"]["questions"] == CONFIG["questions"]
