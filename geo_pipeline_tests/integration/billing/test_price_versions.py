"""Versioned prices against the real database (R4, R23): a quote freezes the version in effect
when its run is created, a charge after a price change follows that frozen version, and a
statement priced on the new list reconciles as a price change, not an unexplained difference.
``geo-pipeline prices import|list`` with field-path errors."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from click.testing import CliRunner

from geo_pipeline.billing import ledger, reconcile
from geo_pipeline.billing import prices as price_lists
from geo_pipeline.billing.ledger import ChargeRequest
from geo_pipeline.cli.prices import prices_group
from geo_pipeline.connectors.base import FeeLine, FeeStatement
from geo_pipeline.domain.catalogue import PriceVersion
from geo_pipeline.domain.config import normalise_and_validate
from geo_pipeline.domain.platforms import PriceList
from geo_pipeline.flows.create_run import create_run, plan_run
from geo_pipeline_tests.integration.billing.helpers import CAPS, make_plan

# doubao's registry (fallback) list: base 6, deep_thinking 10, screenshot 2, 'charged'.
NEW = PriceList(
    "doubao-2026-12",
    "CNY",
    {"standard": 7, "deep_thinking": 7},
    deep_thinking=11,
    screenshot=3,
    retry_fee_rule="free_after_failure",
)


def db_now(db) -> datetime:
    return db.execute("SELECT now() AS t").fetchone()["t"]


def raw_config(tenant="acme"):
    return {
        "tenant": tenant,
        "brand": {"name": "瑞幸"},
        "questions": ["哪家咖啡性价比最高？", "最好喝的拿铁？"],
        "channels": [{"platform": "doubao", "device": "web"}],
        "repeats": 1,
        "max_attempts": 1,
        "screenshot": "optional",
    }


def charge(db, plan, sample, upstream_id):
    db.execute(
        "INSERT INTO geo.upstream_requests (idempotency_key, sample_id, attempt_no, platform,"
        " state, upstream_id, accepted_at) VALUES (%s, %s, 1, %s, 'accepted', %s, now())",
        (f"{sample.sample_id}:1", sample.sample_id, sample.platform, upstream_id),
    )
    db.execute(
        "INSERT INTO geo.attempts (sample_id, attempt_no, fencing_token, worker_id, outcome)"
        " VALUES (%s, 1, 1, 'w1', 'completed')",
        (sample.sample_id,),
    )
    db.commit()
    ledger.post_charge(
        db,
        ChargeRequest(
            plan.config.tenant,
            plan.run_id,
            sample.sample_id,
            1,
            upstream_id,
            sample.platform,
            sample.mode,
            "completed",
            screenshot_used=True,
        ),
    )
    db.commit()


def test_a_charge_after_a_price_change_follows_the_frozen_quote(db):
    ledger.deposit(db, "acme", 100_000, "CNY", "dep-1")
    # Created while only the registry's list is in effect: the quote freezes doubao-2026-10.
    before = plan_run(raw_config(), price_lists.effective_capabilities(db, CAPS), "r-before")
    assert before.quote.price_versions == {"doubao": "doubao-2026-10"}
    create_run(db, before, dispatch=False)
    db.commit()

    done = price_lists.import_price_versions(
        db, [PriceVersion("doubao", db_now(db) - timedelta(seconds=1), NEW, "test")], CAPS
    )
    db.commit()
    assert [d.imported_now for d in done] == [True]

    # A run created now is quoted on the new list, with the new list's retry fee rule.
    after = plan_run(raw_config(), price_lists.effective_capabilities(db, CAPS), "r-after")
    assert after.quote.price_versions == {"doubao": "doubao-2026-12"}
    assert {(q.item, q.unit_price_minor) for q in after.quote.lines} == {
        ("base", 7),
        ("screenshot", 3),
    }
    create_run(db, after, dispatch=False)
    db.commit()
    rules_after = ledger.run_ledger(db, "r-after")["fee_rules"]
    assert [(r["price_version"], r["retry_fee_rule"]) for r in rules_after] == [
        ("doubao-2026-12", "free_after_failure")
    ]

    # The earlier run's charge, posted after the change, follows its frozen version.
    s1, s2 = before.samples
    charge(db, before, s1, "u-new-list")
    charge(db, before, s2, "u-odd")
    entries = [e for e in ledger.run_ledger(db, "r-before")["entries"] if e["kind"] == "charge"]
    assert [(e["amount_minor"], e["price_version"]) for e in entries] == [
        (8, "doubao-2026-10"),
        (8, "doubao-2026-10"),
    ]

    day = db.execute("SELECT (now() AT TIME ZONE 'UTC')::date AS d").fetchone()["d"].isoformat()
    at = datetime.now(UTC)
    reconcile.import_statement(
        db,
        FeeStatement(
            "doubao",
            day,
            "CNY",
            (
                FeeLine("u-new-list", "base", 7, "CNY", "doubao-2026-12", at),
                FeeLine("u-new-list", "screenshot", 3, "CNY", "doubao-2026-12", at),
                # Not what either list charges: stays unexplained.
                FeeLine("u-odd", "base", 7, "CNY", "doubao-2026-12", at),
                FeeLine("u-odd", "screenshot", 4, "CNY", "doubao-2026-12", at),
            ),
        ),
    )
    db.commit()
    s = reconcile.reconcile_run(db, "r-before")
    db.commit()
    rows = {r["upstream_id"]: r for r in reconcile.reconciliation_lines(db, "r-before")}
    assert rows["u-new-list"]["classification"] == "price_change"
    assert rows["u-new-list"]["difference_minor"] == 2
    assert rows["u-new-list"]["detail"]["price_version_ours"] == "doubao-2026-10"
    assert rows["u-new-list"]["detail"]["price_version_theirs"] == "doubao-2026-12"
    assert rows["u-odd"]["classification"] == "amount_mismatch"
    assert s.counts["price_change"] == 1 and s.price_change_difference_minor == 2
    assert s.unexplained_difference_minor == 3


def test_a_statement_without_versions_is_judged_by_the_list_in_effect_that_day(db):
    """Usage and cost APIs name no price version: the version in effect on the day is tried."""
    ledger.deposit(db, "acme", 100_000, "CNY", "dep-1")
    plan = make_plan("r-usage", channels=[{"platform": "doubao", "device": "web"}])
    create_run(db, plan, dispatch=False)
    db.commit()
    price_lists.import_price_versions(db, [PriceVersion("doubao", db_now(db), NEW)], CAPS)
    db.commit()
    charge(db, plan, plan.samples[0], "u1")
    day = db.execute("SELECT (now() AT TIME ZONE 'UTC')::date AS d").fetchone()["d"].isoformat()
    reconcile.import_statement(
        db,
        FeeStatement(
            "doubao",
            day,
            "CNY",
            (FeeLine("u1", "base", 7, "CNY"), FeeLine("u1", "screenshot", 3, "CNY")),
        ),
    )
    s = reconcile.reconcile_run(db, "r-usage")
    assert s.counts["price_change"] == 1 and s.unexplained_difference_minor == 0


def test_published_versions_never_change(db):
    at = datetime(2026, 12, 15, tzinfo=UTC)
    v = PriceVersion("doubao", at, NEW)
    assert [d.imported_now for d in price_lists.import_price_versions(db, [v], CAPS)] == [True]
    assert [d.imported_now for d in price_lists.import_price_versions(db, [v], CAPS)] == [False]
    changed = PriceVersion(
        "doubao", at, PriceList(NEW.version, "CNY", {"standard": 9, "deep_thinking": 9})
    )
    with pytest.raises(ledger.BillingError, match="published versions never change"):
        price_lists.import_price_versions(db, [changed], CAPS)
    clash = PriceVersion(
        "doubao", at, PriceList("doubao-other", "CNY", {"standard": 9, "deep_thinking": 9})
    )
    with pytest.raises(ledger.BillingError, match="doubao-2026-12 already takes effect"):
        price_lists.import_price_versions(db, [clash], CAPS)
    reuse = PriceVersion(
        "doubao", at + timedelta(days=1), PriceList("doubao-2026-10", "CNY", {"standard": 1})
    )
    with pytest.raises(ledger.BillingError, match="registry's fallback list"):
        price_lists.import_price_versions(db, [reuse], CAPS)
    with pytest.raises(Exception, match="geo"):
        db.rollback()
        db.execute("DELETE FROM geo.price_versions")


def test_quote_falls_back_to_the_registry_without_imported_versions(db):
    caps = price_lists.effective_capabilities(db, CAPS)
    assert {p: c.prices for p, c in caps.items()} == {p: c.prices for p, c in CAPS.items()}
    config = normalise_and_validate(raw_config(), caps)
    assert config.targets  # planning works on the effective capabilities unchanged


@pytest.fixture
def cli(db_url, monkeypatch):
    monkeypatch.setenv("GEO_DATABASE_URL", db_url)
    runner = CliRunner()

    def invoke(*args, ok=True):
        result = runner.invoke(prices_group, list(args))
        if ok:
            assert result.exit_code == 0, result.output
        return result

    return invoke


def test_cli_import_and_list(cli, tmp_path):
    good = tmp_path / "prices.yaml"
    good.write_text(
        "source: doubao price page, read 2026-12-01\n"
        "price_lists:\n"
        "  - {platform: doubao, version: doubao-2026-12, effective_from: 2026-01-01,\n"
        "     currency: CNY, base: {standard: 7, deep_thinking: 7}, deep_thinking: 11,\n"
        "     screenshot: 3, retry_fee_rule: free_after_failure}\n",
        encoding="utf-8",
    )
    out = json.loads(cli("import", str(good), "--json").output)
    assert out["imported"] == [
        {
            "platform": "doubao",
            "version": "doubao-2026-12",
            "effective_from": "2026-01-01T00:00:00+00:00",
            "imported_now": True,
        }
    ]
    again = json.loads(cli("import", str(good), "--json").output)
    assert again["imported"][0]["imported_now"] is False

    listed = json.loads(cli("list", "--platform", "doubao", "--json").output)["prices"]
    assert [(r["version"], r["in_effect"], r["source"]) for r in listed] == [
        ("doubao-2026-10", False, "registry (fallback)"),
        ("doubao-2026-12", True, "doubao price page, read 2026-12-01"),
    ]
    table = cli("list").output
    assert "doubao-2026-12" in table and "deepseek-2026-11" in table

    bad = tmp_path / "bad.json"
    bad.write_text(
        json.dumps(
            {
                "price_lists": [
                    {
                        "platform": "doubao",
                        "version": "x",
                        "effective_from": "2026-01-02",
                        "currency": "CNY",
                        "base": {"standard": 7.5},
                    }
                ]
            }
        )
    )
    result = cli("import", str(bad), ok=False)
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "price_lists[0].base.standard: must be a non-negative integer" in result.output
    assert "price_lists[0].base.deep_thinking: missing" in result.output
    unknown = cli("list", "--platform", "nope", ok=False)
    assert unknown.exit_code == 1 and "not registered" in unknown.output


def test_every_path_that_creates_a_run_quotes_the_versions_in_effect(db, cli, tmp_path):
    """`runs create` and the launchpad job quote through the database's price versions, so a
    version imported with `prices import` is what their quote snapshots freeze."""
    from geo_pipeline.cli.runs import plan_from_file
    from geo_pipeline.defs.collection.jobs import plan_from_config
    from geo_pipeline.defs.resources import ConnectorRegistryResource

    prices = tmp_path / "prices.yaml"
    prices.write_text(
        "source: doubao price page, read 2026-12-01\n"
        "price_lists:\n"
        "  - {platform: doubao, version: doubao-2026-12, effective_from: 2026-01-01,\n"
        "     currency: CNY, base: {standard: 7, deep_thinking: 7}, deep_thinking: 11,\n"
        "     screenshot: 3, retry_fee_rule: free_after_failure}\n",
        encoding="utf-8",
    )
    cli("import", str(prices))
    config = tmp_path / "run.yaml"
    config.write_text(json.dumps(raw_config()), encoding="utf-8")
    assert plan_from_file(config, "r-cli", db).quote.price_versions == {"doubao": "doubao-2026-12"}
    launchpad = plan_from_config(raw_config(), ConnectorRegistryResource(path=""), "r-lp", db)
    assert launchpad.quote.price_versions == {"doubao": "doubao-2026-12"}


def test_quoting_at_effective_prices_still_names_the_key_of_a_disabled_engine(db, monkeypatch):
    from geo_pipeline.connectors.registry import load_registry
    from geo_pipeline.domain.catalogue import PlatformDisabled

    monkeypatch.delenv("GEO_QWEN_API_KEY", raising=False)
    caps = price_lists.effective_capabilities(db, load_registry().capabilities())
    with pytest.raises(PlatformDisabled, match="GEO_QWEN_API_KEY"):
        caps["qwen_api"]
    assert "qwen_api" not in caps and "doubao" in caps
