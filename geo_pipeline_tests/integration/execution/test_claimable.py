"""geo.claimable, the one statement of which samples may be claimed, costs nothing over writing
it inline: the planner inlines it into each query that uses it. A change that stops that
(VOLATILE, STRICT, SECURITY DEFINER, plpgsql, a second statement) would run it once per
candidate row inside the claim's index scans."""

from __future__ import annotations

import pytest

from geo_pipeline.domain.streams import STREAM_PARAMS
from geo_pipeline.store.queries import Q

PARAMS = {
    **STREAM_PARAMS,
    "platforms": ["deepseek", "qwen"],
    "k": 100,
    "lookup_platforms": ["deepseek"],
    "ids": ["s" + "0" * 24],
    "owner": "worker:test:1",
    "lease_s": 30,
    "grace_s": 30,
    "hint_ttl_s": 60,
    "limit": 100,
}


@pytest.mark.parametrize(
    "name", ["execution.claim_candidates", "execution.claim", "execution.sweep_unhinted"]
)
def test_claimable_is_inlined(db, name):
    assert "geo.claimable(" in Q(name)
    rows = db.execute(f"EXPLAIN (VERBOSE, COSTS OFF) {Q(name)}", PARAMS).fetchall()
    plan = "\n".join(r["QUERY PLAN"] for r in rows)
    assert "Function Scan on geo.claimable" not in plan, plan
    assert "geo.run_dispatches" in plan, plan  # its body is part of the caller's plan
