"""Reconciliation against fee statements (R23, R24): every discrepancy kind, idempotent imports
and rewrites, superseding statements, and refunds that settle a difference."""

from __future__ import annotations

from datetime import UTC, datetime

from prometheus_client import REGISTRY

from geo_pipeline.billing import ledger, reconcile
from geo_pipeline.billing.ledger import ChargeRequest
from geo_pipeline.connectors.base import FeeLine, FeeStatement
from geo_pipeline_tests.integration.billing.helpers import create

CHANNELS = [
    {"platform": "doubao", "device": "web"},  # charged: base 6, screenshot 2
    {"platform": "deepseek", "device": "web"},  # free_after_failure: base 8, screenshot 3
]


def today(db) -> str:
    return db.execute("SELECT (now() AT TIME ZONE 'UTC')::date AS d").fetchone()["d"].isoformat()


def accepted(db, sample, attempt, upstream_id, outcome=None):
    """What the execution core records when upstream accepts (and, later, finishes) a task."""
    db.execute(
        "INSERT INTO geo.upstream_requests (idempotency_key, sample_id, attempt_no, platform,"
        " state, upstream_id, accepted_at) VALUES (%s, %s, %s, %s, 'accepted', %s, now())",
        (f"{sample.sample_id}:{attempt}", sample.sample_id, attempt, sample.platform, upstream_id),
    )
    if outcome:
        db.execute(
            "INSERT INTO geo.attempts (sample_id, attempt_no, fencing_token, worker_id, outcome)"
            " VALUES (%s, %s, 1, 'w1', %s)",
            (sample.sample_id, attempt, outcome),
        )
    db.commit()


def post(db, plan, sample, attempt, upstream_id, outcome="completed", **used):
    accepted(db, sample, attempt, upstream_id, outcome)
    return ledger.post_charge(
        db,
        ChargeRequest(
            plan.config.tenant,
            plan.run_id,
            sample.sample_id,
            attempt,
            upstream_id,
            sample.platform,
            sample.mode,
            outcome,
            **used,
        ),
    )


def statement(platform, day, *lines, currency="CNY"):
    at = datetime.now(UTC)
    return FeeStatement(
        platform=platform,
        statement_date=day,
        currency=currency,
        lines=tuple(
            FeeLine(u, item, amount, cur, "v", at)
            for (u, item, amount, *rest) in lines
            for cur in [rest[0] if rest else currency]
        ),
    )


def by_id(db, run_id):
    return {r["upstream_id"]: r for r in reconcile.reconciliation_lines(db, run_id)}


def test_every_discrepancy_kind(db):
    ledger.deposit(db, "acme", 100_000, "CNY", "dep-1")
    plan = create(db, "rr", questions=4, channels=CHANNELS)
    d = [s for s in plan.samples if s.platform == "doubao"]
    k = [s for s in plan.samples if s.platform == "deepseek"]
    post(db, plan, d[0], 1, "u-match", screenshot_used=True)  # 8
    post(db, plan, d[1], 1, "u-mismatch", screenshot_used=True)  # 8
    post(db, plan, d[2], 1, "u-missing-theirs")  # 6
    accepted(db, d[3], 1, "u-missing-ours", outcome="completed")  # finished, never charged
    accepted(db, d[0], 2, "u-in-flight")  # accepted, not finished
    assert post(db, plan, k[0], 1, "k-free", outcome="failed") is None  # free by rule
    post(db, plan, k[1], 1, "k-later")  # 8, deepseek statement not imported yet
    db.commit()
    day = today(db)
    first = reconcile.import_statement(
        db,
        statement(
            "doubao",
            day,
            ("u-match", "base", 6),
            ("u-match", "screenshot", 2),
            ("u-mismatch", "base", 6),
            ("u-mismatch", "screenshot", 3),
            ("u-missing-ours", "base", 6),
            ("unknown-task", "base", 6),  # of no run of ours: not attributed to this run
        ),
    )
    assert first.imported_now and first.lines == 6
    stray = reconcile.unattributed_statement_lines(db, "doubao", day)
    assert [(r["upstream_id"], r["amount_minor"]) for r in stray] == [("unknown-task", 6)]
    assert reconcile.unattributed_statement_lines(db, "deepseek") == []

    s = reconcile.reconcile_run(db, "rr")
    rows = by_id(db, "rr")
    got = {u: (r["classification"], r["ours_minor"], r["theirs_minor"]) for u, r in rows.items()}
    assert got == {
        "u-match": ("matched", 8, 8),
        "u-mismatch": ("amount_mismatch", 8, 9),
        "u-missing-theirs": ("missing_theirs", 6, 0),
        "u-missing-ours": ("missing_ours", 0, 6),
        "u-in-flight": ("pending", 0, 0),
        "k-free": ("pending", 0, 0),
        "k-later": ("pending", 8, 0),
    }
    assert rows["u-mismatch"]["difference_minor"] == 1
    assert rows["u-mismatch"]["detail"]["theirs_items"] == {"base": 6, "screenshot": 3}
    assert rows["u-in-flight"]["fee_class"] == "to_verify"
    assert rows["u-match"]["fee_class"] == "completed"
    assert rows["u-missing-ours"]["sample_id"] == d[3].sample_id
    assert s.counts == {
        "matched": 1,
        "amount_mismatch": 1,
        "missing_ours": 1,
        "missing_theirs": 1,
        "pending": 3,
    }
    assert s.unexplained_difference_minor == 1 - 6 + 6
    gauge = REGISTRY.get_sample_value("geo_reconciliation_difference_minor", {"currency": "CNY"})
    # R26: exported for monitoring as the sum of |theirs - ours| (1 + 6 + 6): the signed sum, 1,
    # hid a missing charge and a missing statement line that cancelled (issue #34).
    assert gauge == 13
    assert s.pending_ours_minor == 8
    assert not s.clean

    # The deepseek statement arrives: the free failed attempt is not on it (consistent), the
    # completed one is.
    reconcile.import_statement(db, statement("deepseek", day, ("k-later", "base", 8)))
    s2 = reconcile.reconcile_run(db, "rr")
    rows = by_id(db, "rr")
    assert (rows["k-free"]["classification"], rows["k-free"]["fee_class"]) == ("matched", "failed")
    assert rows["k-later"]["classification"] == "matched"
    assert s2.counts["pending"] == 1 and s2.ours_by_fee_class["failed"] == 0
    assert s2.ours_by_fee_class["completed"] == 8 + 8 + 6 + 8
    # Reconciling again rewrites, never adds.
    s3 = reconcile.reconcile_run(db, "rr")
    assert s3 == s2 and len(reconcile.reconciliation_lines(db, "rr")) == 7

    # A refund settles what they never billed; a re-issued statement corrects their side.
    ledger.refund(db, "rr", "u-missing-theirs", 6, "not on doubao statement", "rf-1")
    fixed = statement(
        "doubao",
        day,
        ("u-match", "base", 6),
        ("u-match", "screenshot", 2),
        ("u-mismatch", "base", 6),
        ("u-mismatch", "screenshot", 2),
        ("u-missing-ours", "base", 6),
    )
    assert reconcile.import_statement(db, fixed).imported_now
    assert not reconcile.import_statement(db, fixed).imported_now  # same content: no-op
    s4 = reconcile.reconcile_run(db, "rr")
    rows = by_id(db, "rr")
    assert rows["u-missing-theirs"]["classification"] == "matched"
    assert rows["u-mismatch"]["classification"] == "matched"
    assert s4.counts["missing_ours"] == 1 and s4.unexplained_difference_minor == 6
    n = db.execute("SELECT count(*) AS n FROM geo.fee_statements").fetchone()["n"]
    assert n == 3


def test_other_currency_lines_are_never_added(db):
    ledger.deposit(db, "acme", 100_000, "CNY", "dep-1")
    plan = create(db, "rx", questions=1)
    post(db, plan, plan.samples[0], 1, "u1")
    reconcile.import_statement(
        db, statement("doubao", today(db), ("u1", "base", 6), ("u1", "base", 1, "USD"))
    )
    reconcile.reconcile_run(db, "rx")
    row = by_id(db, "rx")["u1"]
    assert (row["classification"], row["theirs_minor"]) == ("amount_mismatch", 6)
    assert row["detail"]["other_currency_lines"] == ["base=1 USD"]


class StatementSource:
    """The connector's statement edge only (the simulator connector is another part)."""

    platform = "doubao"

    def __init__(self, stmt):
        self.stmt = stmt
        self.asked = []

    async def fee_statement(self, statement_date):
        self.asked.append(statement_date)
        return self.stmt


def test_fetch_and_import_uses_the_connector(db):
    ledger.deposit(db, "acme", 100_000, "CNY", "dep-1")
    plan = create(db, "ri", questions=1)
    post(db, plan, plan.samples[0], 1, "u1")
    day = today(db)
    assert reconcile.statement_days_needed(db, "ri") == {"doubao": [day]}
    src = StatementSource(statement("doubao", day, ("u1", "base", 6)))
    result = reconcile.fetch_and_import(db, src, day)  # type: ignore[arg-type]
    assert src.asked == [day] and result.imported_now
    assert reconcile.reconcile_run(db, "ri").clean


def test_run_without_upstream_tasks_reconciles_empty(db):
    ledger.deposit(db, "acme", 100_000, "CNY", "dep-1")
    create(db, "rj", questions=1)
    # no upstream tasks at all: an empty, clean reconciliation
    s = reconcile.reconcile_run(db, "rj")
    assert s.lines == 0 and s.clean and s.unexplained_difference_minor == 0
    assert reconcile.reconciliation_lines(db, "rj") == []
