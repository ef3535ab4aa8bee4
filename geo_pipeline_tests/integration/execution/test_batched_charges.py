"""``ledger.post_charges`` (the completion batch's charges) posts exactly what ``post_charge``
posts one by one: same kinds, amounts, items, free decisions, replays and overruns (R15, R24)."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import dict_row

from geo_pipeline.billing import ledger
from geo_pipeline_tests.integration.execution.helpers import fetch, make_run


def _charges(run_id: str, ids: list[str]) -> list[ledger.ChargeRequest]:
    out = []
    for n, sid in enumerate(ids):
        platform = "kimi" if n % 2 else "deepseek"
        mode = "web_search" if platform == "kimi" else "deep_thinking"
        for attempt, outcome in ((1, "failed"), (2, "completed")):
            out.append(
                ledger.ChargeRequest(
                    tenant_id="acme",
                    run_id=run_id,
                    sample_id=sid,
                    attempt_no=attempt,
                    upstream_id=f"u-{sid}-{attempt}",
                    platform=platform,
                    mode=mode,
                    upstream_outcome=outcome,
                    deep_thinking_used=platform == "deepseek",
                    web_search_used=platform == "kimi",
                )
            )
    return out


def _entries(db_url: str, run_id: str) -> list[tuple[Any, ...]]:
    rows = fetch(
        db_url,
        "SELECT kind, amount_minor, attempt_no, details - 'platform' AS d FROM geo.ledger_entries "
        "WHERE run_id = %s AND kind IN ('charge', 'adjustment') ORDER BY entry_id",
        (run_id,),
    )
    return [(r["kind"], r["amount_minor"], r["attempt_no"], str(r["d"])) for r in rows]


def test_post_charges_matches_post_charge_one_by_one(db_url):
    chans = [
        {"platform": "deepseek", "device": "web", "modes": ["deep_thinking"]},
        {"platform": "kimi", "device": "web", "modes": ["web_search"]},
    ]
    a = make_run(db_url, "r-one", questions=2, channels=chans)
    b = make_run(db_url, "r-batch", questions=2, channels=chans)
    with psycopg.connect(db_url, row_factory=dict_row) as conn:
        c: Any = conn
        one = [ledger.post_charge(c, ch) for ch in _charges("r-one", a)]
        # Sequential attempts of one sample go in separate batches, as in the worker.
        first = [ch for ch in _charges("r-batch", b) if ch.attempt_no == 1]
        second = [ch for ch in _charges("r-batch", b) if ch.attempt_no == 2]
        batch = ledger.post_charges(c, first) + ledger.post_charges(c, second)
        replay = ledger.post_charges(c, first)
        conn.commit()
    assert [x is None for x in one[0::2] + one[1::2]] == [x is None for x in batch]
    assert replay == [None] * len(first)
    ea, eb = _entries(db_url, "r-one"), _entries(db_url, "r-batch")
    assert sorted(ea) == sorted(eb) and len(ea) == 2 * len(a)
    assert any(amount > 0 for _, amount, _, _ in eb) and any(amount == 0 for _, amount, _, _ in eb)
