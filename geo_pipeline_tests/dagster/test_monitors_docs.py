"""The walkthrough of docs/monitors.md, as a newcomer would type it (issue 37 "done when"): the
CSV and YAML blocks of the doc, `monitors create --questions`, pause and resume, a failed
re-sample for a short balance shown by `monitors show` and sent to the tenant's webhook."""

from __future__ import annotations

import re
import shlex
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import dagster as dg
import pytest
from click.testing import CliRunner

from geo_pipeline.cli.main import cli
from geo_pipeline.defs.operations.tenant_alerts import tenant_alerts
from geo_pipeline.defs.resources import PostgresResource
from geo_pipeline_tests.dagster.test_monitors import resample
from geo_pipeline_tests.dagster.test_tenant_alerts import hooks  # noqa: F401

DOC = Path(__file__).resolve().parents[2] / "docs" / "monitors.md"


def block(lang: str, text: str) -> str:
    found = re.search(rf"```{lang}\n(.*?)```", text, re.S)
    assert found, f"no {lang} block in {DOC.name}"
    return found.group(1)


def commands(text: str, prefix: str) -> list[list[str]]:
    """The doc's bash lines starting with ``prefix`` (continuations joined, comments cut)."""
    joined = re.sub(r"\\\n\s*", " ", text)
    out = []
    for line in joined.splitlines():
        line = line.split("  #")[0].strip()
        if line.startswith(prefix):
            out.append(shlex.split(line)[1:])
    return out


def test_the_doc_walkthrough(
    db_url: str, tmp_path: Path, dg_instance: dg.DagsterInstance, resources: dict[str, Any],
    hooks: Any, monkeypatch: pytest.MonkeyPatch,  # noqa: F811
) -> None:  # fmt: skip
    text = DOC.read_text(encoding="utf-8")
    (tmp_path / "questions.csv").write_text(block("csv", text), encoding="utf-8")
    (tmp_path / "monitor.yaml").write_text(block("yaml", text), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GEO_DATABASE_URL", db_url)
    runner = CliRunner()

    def run(argv: list[str]) -> str:
        res = runner.invoke(cli, argv)
        assert res.exit_code == 0, (argv, res.output, res.exception)
        return res.output

    first = commands(text, "geo-pipeline monitors")
    create = next(c for c in first if c[:2] == ["monitors", "create"])
    assert "--questions" in create
    out = run(create)
    assert "monitor acme-daily created" in out
    shown = run(["monitors", "show", "acme-daily", "--json"])
    assert '"cron": "0 7 * * 1-5"' in shown
    for argv in first:
        if argv[:2] in (["monitors", "pause"], ["monitors", "resume"]):
            run(argv)
    assert '"status": "active"' in run(["monitors", "show", "acme-daily", "--json"])

    # acme has no money: today's re-sample fails, shown and sent to the tenant's webhook.
    add = next(
        c for c in first if c[:3] == ["monitors", "recipients", "add"] and "--webhook-env" in c
    )
    run(add)
    monkeypatch.setenv("GEO_ALERT_WEBHOOK_ACME", hooks["acme"][0])
    today = datetime.now(ZoneInfo("Asia/Shanghai")).date().isoformat()
    assert not resample(dg_instance, resources, "acme-daily", today).success
    assert "FAILED RE-SAMPLES: 1 day(s) without a run" in run(["monitors", "show", "acme-daily"])
    ctx = dg.build_sensor_context(resources={"db": PostgresResource(url=db_url)})
    tenant_alerts(ctx)
    [post] = hooks["acme"][1]
    assert (
        "monitor acme-daily: no run for" in post["text"] and "insufficient_balance" in post["text"]
    )
