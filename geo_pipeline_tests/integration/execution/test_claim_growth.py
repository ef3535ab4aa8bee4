"""One claim costs the few candidates it returns, not the tenant's whole queue (issue 39).

The worker's fair claim reads execution.claim_candidates once per round. Its arms must each be
a LIMITed ordered scan of the queue index with the claimability (geo.claimable) checked per
row before the LIMIT: planned as a join of every due sample of the (tenant, platform) with its
run and dispatch, then sorted, one claim of a 100,000-sample run read ~425k buffers, so a big run
collected at a crawl. Counted by PostgreSQL (EXPLAIN (ANALYZE, BUFFERS)), never timed: 10x the
queued, dispatched, claimable samples of one run may cost at most 2x the buffers (an index
level, the k rows themselves)."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import dict_row

from geo_pipeline.store import execution as ex
from geo_pipeline.store.queries import Q
from geo_pipeline_tests.integration.execution.helpers import make_run

K = 200  # the worker's claim_batch
PARAMS = {"platforms": ["deepseek"], "k": K, "lookup_platforms": ["deepseek"]}


def _claim_buffers(db: Any) -> tuple[int, int]:
    """(shared buffers, rows) of one claim_candidates read."""
    db.execute("ANALYZE geo.samples")
    row = db.execute(
        "EXPLAIN (ANALYZE, BUFFERS, TIMING OFF, FORMAT JSON) " + Q("execution.claim_candidates"),
        PARAMS,
    ).fetchone()
    db.rollback()
    plan = next(iter(row.values()))[0]["Plan"]
    return plan["Shared Hit Blocks"] + plan["Shared Read Blocks"], plan["Actual Rows"]


def test_one_claim_reads_about_the_same_buffers_of_a_10x_bigger_run(db_url: str, db: Any) -> None:
    make_run(db_url, "r-small", tenant="small", questions=50, repeats=20)  # 1,000 samples
    work = {"small": _claim_buffers(db)}
    # The small run's samples leave the due range: the second read is the big run's alone.
    db.execute(
        "UPDATE geo.samples SET next_attempt_at = now() + interval '1 day' WHERE run_id = 'r-small'"
    )
    db.commit()
    make_run(db_url, "r-big", tenant="big", questions=500, repeats=20)  # 10,000 samples
    work["big"] = _claim_buffers(db)
    print(work)
    (small_buffers, small_rows), (big_buffers, big_rows) = work["small"], work["big"]
    assert small_rows == big_rows > 0, work
    assert big_buffers < 2 * small_buffers, work


def test_an_undispatched_run_ahead_does_not_hide_the_claimable_run_behind_it(
    db_url: str, db: Any
) -> None:
    """The claimability is checked per row before each arm's LIMIT: 1,000 samples of a run not
    yet dispatched, older and of a higher priority than all of a dispatched run's, are read past
    (their cost: each an index entry, a heap row and a run + dispatch lookup, ~3 buffers, in
    each arm whose order puts it ahead: 10,000 held ahead of 1,000 read ~63k buffers, ~0.1 s),
    never returned, and the k candidates are the dispatched run's."""
    make_run(db_url, "r-held", tenant="acme", questions=50, repeats=20, priority=9, dispatch=False)
    free = set(make_run(db_url, "r-free", tenant="acme", questions=15, repeats=20, priority=5))
    db.execute("ANALYZE geo.samples")
    rows = db.execute(Q("execution.claim_candidates"), PARAMS).fetchall()
    db.rollback()
    assert len(rows) == K
    assert {r["sample_id"] for r in rows} <= free


def test_the_claim_is_not_jit_compiled(db_url: str) -> None:
    """The claim's plan is priced per tenant (each arm's LIMITed scan times the tenants with
    room), above jit_above_cost with a few tenants or before geo.tenants is analysed, while it
    reads ~k rows: compiling it (seconds of LLVM optimisation per claim on 2 cores, ~1,000x
    its execution) cost more than the claim itself. claim_fair runs it without JIT; the plan
    PostgreSQL executed (auto_explain, the server's own record) names no JIT section."""
    make_run(db_url, "r-1", tenant="acme", questions=50, repeats=20)
    plans: list[str] = []
    with psycopg.connect(db_url, row_factory=dict_row) as conn:  # type: ignore[arg-type]
        conn.execute("ANALYZE geo.samples")  # as autovacuum does after a run is created
        conn.add_notice_handler(lambda d: plans.append(d.message_primary or ""))
        for stmt in (
            "LOAD 'auto_explain'",
            "SET auto_explain.log_min_duration = 0",
            "SET auto_explain.log_analyze = on",
            "SET auto_explain.log_timing = off",
            "SET client_min_messages = log",
        ):
            conn.execute(stmt)  # type: ignore[arg-type]
        conn.commit()
        claimed = ex.claim_fair(
            conn,  # type: ignore[arg-type]
            owner="worker:test:1",
            platforms=["deepseek"],
            want=K,
            lease_s=30,
            lookup_platforms=["deepseek"],
        )
    assert len(claimed) == K
    [plan] = [p for p in plans if "Due samples of the given platforms" in p]
    assert "samples_queued_tenant_priority" in plan, plan
    assert "JIT:" not in plan, plan
