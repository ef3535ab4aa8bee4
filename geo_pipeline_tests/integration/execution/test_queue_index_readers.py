"""Every reader of the queue finds its rows through an index (migration 0069, issue 39).

A new sample enters one queue index, samples_queued_tenant_priority (queued), beside
samples_running_tenant (running) once claimed: samples_due and samples_queued_tenant_due, which
repeated it, are gone (two fewer index entries per sample a run creates). Each query that
looked queued or in-flight samples up in them must still have an index path: with sequential
scans priced out (enable_seqscan off) the planner takes any index path there is, so a
``Seq Scan on samples`` in the plan means there is none and the query would read the whole
history of samples on every claim, sweep or gauge. Counted by the plan, not timed."""

from __future__ import annotations

import pytest

from geo_pipeline.domain.streams import STREAM_PARAMS
from geo_pipeline.store.queries import Q

PARAMS = {
    **STREAM_PARAMS,
    "platforms": ["deepseek", "qwen"],
    "k": 100,
    "lookup_platforms": ["deepseek"],
    "grace_s": 30,
    "hint_ttl_s": 60,
    "limit": 100,
    "platform": "deepseek",
}

# query -> the queue indexes its plan reads geo.samples through
READERS = {
    "execution.claim_candidates": {"samples_queued_tenant_priority", "samples_queued_accepted"},
    "execution.sweep_unhinted": {"samples_queued_tenant_priority"},
    "ops.backlog_by_platform": {"samples_queued_tenant_priority", "samples_running_tenant"},
    "accounts.wake_waiting": {"samples_queued_tenant_priority"},
}


@pytest.mark.parametrize("name", sorted(READERS))
def test_queue_readers_have_an_index_path(db, name):
    db.execute("SET LOCAL enable_seqscan = off")
    rows = db.execute(f"EXPLAIN (COSTS OFF) {Q(name)}", PARAMS).fetchall()
    plan = "\n".join(r["QUERY PLAN"] for r in rows)
    db.rollback()
    assert "Seq Scan on samples" not in plan, plan
    for index in READERS[name]:
        assert f" {index}" in plan, plan


def test_the_claims_oldest_due_arm_reads_the_queue_index_per_priority(db):
    """Its own (tenant, platform, due) index is gone: the arm reads the priority index once per
    priority (0-9, samples_priority_check), each an ordered (tenant, platform, priority) range."""
    db.execute("SET LOCAL enable_seqscan = off")
    rows = db.execute(f"EXPLAIN (COSTS OFF) {Q('execution.claim_candidates')}", PARAMS).fetchall()
    plan = "\n".join(r["QUERY PLAN"] for r in rows)
    db.rollback()
    assert "generate_series" in plan, plan
    assert "priority = pr.priority" in plan, plan
