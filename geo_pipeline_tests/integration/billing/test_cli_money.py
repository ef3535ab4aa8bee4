"""Money explained at the CLI: reconciling a run none of whose fee statements are in says so
and how to get them, instead of a table of "pending" lines and "unexplained difference: 0";
amounts show major units beside minor ones."""

from __future__ import annotations

from click.testing import CliRunner

from geo_pipeline.billing import ledger
from geo_pipeline.billing.ledger import ChargeRequest
from geo_pipeline.cli.billing import billing_group
from geo_pipeline_tests.integration.billing.helpers import create


def test_reconcile_without_statements_says_it_has_none(db, db_url, monkeypatch):
    monkeypatch.setenv("GEO_DATABASE_URL", db_url)
    ledger.deposit(db, "acme", 10_000, "CNY", "dep-1")
    plan = create(db, "rn1", questions=1)
    s = plan.samples[0]
    db.execute(
        "INSERT INTO geo.upstream_requests (idempotency_key, sample_id, attempt_no, platform,"
        " state, upstream_id, accepted_at) VALUES (%s, %s, 1, 'doubao', 'accepted', 'up-1', now())",
        (f"{s.sample_id}:1", s.sample_id),
    )
    db.commit()
    ledger.post_charge(
        db, ChargeRequest("acme", "rn1", s.sample_id, 1, "up-1", "doubao", "standard", "completed")
    )
    res = CliRunner().invoke(billing_group, ["reconcile", "rn1"])
    assert res.exit_code == 0, res.output
    out = res.output
    assert "no fee statement" in out and "--statements-from-simulator" in out, out
    assert "unexplained difference" not in out, out
    assert "CNY" in out and "minor units" in out


def test_the_ledger_shows_major_units_beside_minor_ones(db, db_url, monkeypatch):
    monkeypatch.setenv("GEO_DATABASE_URL", db_url)
    monkeypatch.setenv("COLUMNS", "200")
    ledger.deposit(db, "acme", 10_000, "CNY", "dep-2")
    plan = create(db, "rn2", questions=1)
    db.commit()
    res = CliRunner().invoke(billing_group, ["ledger", "rn2"])
    assert res.exit_code == 0, res.output
    row = db.execute(
        "SELECT amount_minor FROM geo.ledger_entries WHERE run_id = 'rn2' AND kind = 'reserve'"
    ).fetchone()
    reserved = int(row["amount_minor"])
    major = f"{reserved / 100:.2f}"
    assert major in res.output, res.output  # an entry's amount in yuan beside its fen
    assert "totals" in res.output and "minor units" in res.output
    assert plan.samples
