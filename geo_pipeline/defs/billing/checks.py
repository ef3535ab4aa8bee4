"""The checks of billing_reconciliation (R23, R24, R25), as functions of (connection, run)."""

from __future__ import annotations

from decimal import Decimal

import dagster as dg

from geo_pipeline.defs import names
from geo_pipeline.defs.factory import EXAMPLES, WARN, check_result, query_rows
from geo_pipeline.domain.billing import EXPLAINED, round_minor
from geo_pipeline.store.db import Conn


def zero_unexplained(conn: Conn, run_id: str) -> dg.AssetCheckResult:
    """R23: our ledger and the platform's statement agree, line by line, or the difference is
    explained by THE predicate ``domain.billing.EXPLAINED`` (the summary, the gauge and the alert
    apply the same one: pending, price change, day total, usage cost).

    An unexplained difference is a business signal, a WARN that blocks nothing (billing is a
    leaf): the operations alert's ``reconciliation`` incident is what tells on-call (issue 36).
    """
    rows = query_rows(conn, "unexplained_lines", run_id=run_id, explained=list(EXPLAINED))
    # THE rounding (domain.billing.round_minor): the exact per-line differences summed, rounded
    # once, as the summary, the JSON and the gauge do; never a sum of per-line roundings.
    diff = round_minor(sum((Decimal(r["difference_exact_minor"]) for r in rows), Decimal(0)))
    return check_result(
        names.CHECK_ZERO_UNEXPLAINED,
        names.BILLING_RECONCILIATION,
        not rows,
        WARN,
        unexplained_lines=len(rows),
        unexplained_difference_minor=diff,
        examples=[
            f"{r['upstream_id']}: {r['classification']} ours={r['ours_minor']} "
            f"theirs={r['theirs_minor']} {r['currency']}"
            for r in rows[:EXAMPLES]
        ],
    )


def no_duplicate_charge(conn: Conn, run_id: str) -> dg.AssetCheckResult:
    """R24, R25: one upstream task (one attempt) is charged at most once."""
    rows = query_rows(conn, "duplicate_charges", run_id=run_id)
    return check_result(
        names.CHECK_NO_DUPLICATE_CHARGE,
        names.BILLING_RECONCILIATION,
        not rows,
        duplicated=len(rows),
        examples=[
            f"{r['charged_for']}: {r['charges']} charges, {r['amount_minor']}"
            for r in rows[:EXAMPLES]
        ],
    )
