"""Building real runs for billing tests: the same path as ``geo-pipeline runs create``."""

from __future__ import annotations

from typing import Any

from geo_pipeline.connectors.registry import load_registry
from geo_pipeline.domain.config import normalise_and_validate
from geo_pipeline.domain.plan import Plan, build_plan, quote
from geo_pipeline.flows.create_run import create_run

CAPS = load_registry().capabilities()
PRICES = {p: c.prices for p, c in CAPS.items()}


def make_plan(
    run_id: str,
    *,
    tenant: str = "acme",
    questions: int = 2,
    repeats: int = 1,
    channels: list[dict[str, Any]] | None = None,
    max_attempts: int = 3,
    screenshot: str = "optional",
) -> Plan:
    raw = {
        "tenant": tenant,
        "brand": {"name": "瑞幸"},
        "questions": [f"第{i}个问题：哪家咖啡性价比最高？" for i in range(questions)],
        "channels": channels or [{"platform": "doubao", "device": "web"}],
        "repeats": repeats,
        "max_attempts": max_attempts,
        "screenshot": screenshot,
    }
    config = normalise_and_validate(raw, CAPS)
    return build_plan(config, quote(config, PRICES), run_id)


def create(conn, run_id: str, *, confirm: bool = True, **plan_kw: Any) -> Plan:
    plan = make_plan(run_id, **plan_kw)
    create_run(conn, plan, confirm=confirm, dispatch=False)
    conn.commit()
    return plan
