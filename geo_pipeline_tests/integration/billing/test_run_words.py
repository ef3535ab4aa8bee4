"""`runs show` keeps the promise of its help (issue #34): status with its reason, batches, the
quote, the money (major units with currency) and whether the run is settled; `runs plan` shows
money in major units with the minor units beside them."""

from __future__ import annotations

import json

from click.testing import CliRunner

from geo_pipeline.billing import ledger
from geo_pipeline.cli.main import cli as root
from geo_pipeline_tests.integration.billing.helpers import create


def test_runs_show_has_status_reason_batches_quote_money_and_settled_state(db, db_url, monkeypatch):
    monkeypatch.setenv("GEO_DATABASE_URL", db_url)
    ledger.deposit(db, "acme", 100_000, "CNY", "dep-words")
    plan = create(db, "r-words", questions=2)
    est = plan.quote.estimated_max.amount_minor
    out = CliRunner().invoke(root, ["runs", "show", "r-words"])
    assert out.exit_code == 0, out.output
    text = out.output
    assert "status in_progress: 2 of 2 still collecting on doubao__web" in text, text
    assert "batches" in text and "quote" in text
    major = f"{est // 100}.{est % 100:02d} CNY"
    assert f"estimated max {major} ({est} minor units)" in text, text
    assert f"reserved {major}" in text and "charged 0.00 CNY" in text, text
    assert "settled: no" in text, text
    shown = json.loads(CliRunner().invoke(root, ["runs", "show", "r-words", "--json"]).output)
    assert shown["money"]["reserved_minor"] == est and shown["money"]["closed_at"] is None
    assert shown["status_text"] == "in_progress: 2 of 2 still collecting on doubao__web"


def test_runs_plan_money_in_major_units(db, db_url, monkeypatch, tmp_path):
    monkeypatch.setenv("GEO_DATABASE_URL", db_url)
    config = tmp_path / "run.yaml"
    config.write_text(
        json.dumps(
            {
                "tenant": "acme",
                "brand": {"name": "瑞幸"},
                "questions": ["哪家咖啡性价比最高？"],
                "channels": [{"platform": "doubao", "device": "web"}],
                "repeats": 1,
            }
        ),
        encoding="utf-8",
    )
    out = CliRunner().invoke(root, ["runs", "plan", str(config)])
    assert out.exit_code == 0, out.output
    assert "minor units)" in out.output and " CNY (" in out.output
    assert "CNY (minor units)" not in out.output, out.output
