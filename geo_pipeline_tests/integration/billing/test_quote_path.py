"""One quote path (issue #34): after `prices import`, `runs plan`, the launchpad's planner job
and `runs create` quote the same config at the same price versions, so what `runs plan` shows
is what `runs create` freezes; and `runs plan` prints no run id that `runs create` would not
use."""

from __future__ import annotations

import json
import re

from click.testing import CliRunner

from geo_pipeline.billing import ledger
from geo_pipeline.cli.main import cli as root
from geo_pipeline.defs.collection.jobs import plan_from_config
from geo_pipeline.defs.resources import ConnectorRegistryResource

PRICES = (
    "source: kimi price page, read 2026-12-01\n"
    "price_lists:\n"
    "  - {platform: kimi, version: kimi-2026-12, effective_from: 2026-01-01,\n"
    "     currency: CNY, base: {standard: 50, web_search: 50}, web_search: 20,\n"
    "     screenshot: 5, retry_fee_rule: free}\n"
)
RAW = {
    "tenant": "acme",
    "brand": {"name": "瑞幸"},
    "questions": ["哪家咖啡性价比最高？", "最好喝的拿铁？"],
    "channels": [{"platform": "kimi", "device": "web"}],
    "repeats": 2,
    "max_attempts": 1,
    "screenshot": "off",
}


def test_plan_quotes_what_create_freezes(db, db_url, monkeypatch, tmp_path):
    monkeypatch.setenv("GEO_DATABASE_URL", db_url)
    runner = CliRunner()

    def cli(*args: str) -> str:
        result = runner.invoke(root, list(args))
        assert result.exit_code == 0, result.output
        return result.output

    prices = tmp_path / "prices.yaml"
    prices.write_text(PRICES, encoding="utf-8")
    cli("prices", "import", str(prices))
    config = tmp_path / "run.yaml"
    config.write_text(json.dumps(RAW), encoding="utf-8")
    ledger.deposit(db, "acme", 1_000_000, "CNY", "dep-quote")
    db.commit()

    planned = json.loads(cli("runs", "plan", str(config), "--json"))
    launchpad = plan_from_config(RAW, ConnectorRegistryResource(path=""), None, db)
    db.rollback()
    created = json.loads(cli("runs", "create", str(config), "--json", "--no-dispatch"))
    frozen = db.execute(
        "SELECT q.estimated_max_minor, q.price_versions FROM geo.runs r"
        " JOIN geo.quote_snapshots q USING (quote_id) WHERE r.run_id = %s",
        (created["run_id"],),
    ).fetchone()
    assert frozen["price_versions"] == {"kimi": "kimi-2026-12"}
    assert planned["quote"]["price_versions"] == {"kimi": "kimi-2026-12"}
    assert launchpad.quote.price_versions == {"kimi": "kimi-2026-12"}
    assert (
        planned["quote"]["estimated_max_minor"]
        == launchpad.quote.estimated_max.amount_minor
        == frozen["estimated_max_minor"]
    )

    # No run id that is not the run's: without --run-id the plan names none.
    assert planned["run_id"] is None
    text = cli("runs", "plan", str(config))
    assert not re.search(r"\br\d{8}-[0-9a-f]{8}\b", text), text
    assert "run id: assigned by `geo-pipeline runs create`" in text
    given = json.loads(cli("runs", "plan", str(config), "--run-id", "r-mine", "--json"))
    assert given["run_id"] == "r-mine"
