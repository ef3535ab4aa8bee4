"""Shared by the growth tests (issue #39): runs of a given size and the assertion that the work
PostgreSQL did grew at most linearly between two sizes 10x apart. Work, not time: rows and index
entries read, buffers requested and statements sent (geo_pipeline.store.work), the same on a
fast machine and a slow one."""

from __future__ import annotations

import math
from typing import Any

from geo_pipeline.billing import ledger, reconcile
from geo_pipeline.connectors.base import FeeLine, FeeStatement
from geo_pipeline.connectors.registry import load_registry
from geo_pipeline.domain.config import normalise_and_validate
from geo_pipeline.domain.plan import Plan, build_plan, quote
from geo_pipeline.flows.create_run import create_run
from geo_pipeline.store.work import Work

CAPS = load_registry().capabilities()
PRICES = {p: c.prices for p, c in CAPS.items()}
# 10x the data may cost at most 10^1.1 (about 12.6x) the work: linear, with room for the
# logarithms of index descents; a per-batch rescan of the run is 100x.
MAX_EXPONENT = 1.1


def plan_of(questions: int, run_id: str, tenant: str = "growth") -> Plan:
    """bench/plan.py's shape: 20 channel settings (targets) over 6 channels, 10 repeats, cap
    100: 200 samples per question, one batch per 100 samples."""
    raw = {
        "tenant": tenant,
        "brand": {"name": "瑞幸咖啡", "aliases": ["Luckin"]},
        "questions": [f"question {i}: which coffee chain is best value?" for i in range(questions)],
        "channels": [
            {
                "platform": "deepseek",
                "device": d,
                "regions": ["cn", "global"],
                "modes": ["standard", "deep_thinking", "web_search"],
            }
            for d in ("web", "app")
        ]
        + [
            {"platform": "doubao", "device": d, "modes": ["standard", "deep_thinking"]}
            for d in ("web", "app")
        ]
        + [
            {"platform": "kimi", "device": "web", "modes": ["standard", "web_search"]},
            {"platform": "qwen", "device": "web", "modes": ["standard", "deep_thinking"]},
        ],
        "repeats": 10,
        "submit_cap": 100,
    }
    n = normalise_and_validate(raw, CAPS)
    return build_plan(n, quote(n, PRICES), run_id)


def exponent(small: int, large: int, size_ratio: float) -> float:
    return math.log(max(large, 1) / max(small, 1)) / math.log(size_ratio)


def assert_linear(what: str, small: Work, large: Work) -> None:
    for field in ("rows_read", "buffers", "statements"):
        a, b = getattr(small, field), getattr(large, field)
        assert a > 0, f"{what}: the meter counted no {field} (a broken meter passes any bound)"
        slope = exponent(a, b, 10)
        assert slope <= MAX_EXPONENT, (
            f"{what}: {field} grew {b / max(a, 1):.1f}x for 10x the size "
            f"({a:,} -> {b:,}, exponent {slope:.2f} > {MAX_EXPONENT})"
        )


def charged_run(db: Any, questions: int, run_id: str, tenant: str = "growth") -> Plan:
    """A run of 200 x ``questions`` samples (plan_of), created undispatched; each sample's task
    accepted upstream (geo.upstream_requests) and charged once (ledger.post_charges), and each
    platform's statement of the day imported with the amounts we charged (all matched)."""
    plan = plan_of(questions, run_id, tenant)
    create_run(db, plan, dispatch=False)
    db.execute(
        "INSERT INTO geo.upstream_requests (idempotency_key, sample_id, attempt_no, platform,"
        " state, upstream_id, accepted_at) SELECT sample_id || ':1', sample_id, 1, platform,"
        " 'accepted', 'u-' || sample_id, now() FROM geo.samples WHERE run_id = %s",
        (run_id,),
    )
    ledger.post_charges(
        db,
        [
            ledger.ChargeRequest(
                tenant, run_id, s.sample_id, 1, f"u-{s.sample_id}", s.platform, s.mode, "completed"
            )
            for s in plan.samples
        ],
    )
    db.commit()
    charged = db.execute(
        "SELECT upstream_id, details->>'platform' AS platform, details->'items' AS items,"
        " currency, (created_at AT TIME ZONE 'UTC')::date AS day FROM geo.ledger_entries"
        " WHERE run_id = %s AND kind = 'charge' ORDER BY entry_id",
        (run_id,),
    ).fetchall()
    by_platform: dict[str, list[FeeLine]] = {}
    for r in charged:
        for item, amount in sorted((r["items"] or {}).items()):
            line = FeeLine(r["upstream_id"], item, int(amount), r["currency"].strip())
            by_platform.setdefault(r["platform"], []).append(line)
    day, currency = charged[0]["day"].isoformat(), charged[0]["currency"].strip()
    for platform, lines in sorted(by_platform.items()):
        reconcile.import_statement(db, FeeStatement(platform, day, currency, tuple(lines)))
    db.commit()
    return plan
