"""Concurrency pools: how many steps of each kind may work on PostgreSQL at once (D8).

Every pipeline asset names its pool (``pool=`` through defs/factory.py), so the limit holds on every
launch path: sensor and schedule runs, a "Materialize" click in the UI (the implicit asset job,
which carries no job tags), ``dagster asset materialize`` and in-process runs. dagster.yaml sets
op granularity (a step holds a slot while it runs) and a conservative default for a pool without
a limit; Dagster keeps per-pool limits in the instance's storage, not in dagster.yaml, so
``apply_pool_limits`` writes these (the same numbers as the run queue's tag limits).
"""

from __future__ import annotations

import dagster as dg

from geo_pipeline.defs.names import POOL_BILLING, POOL_DOWNSTREAM, POOL_PLAN

POOL_LIMITS: dict[str, int] = {
    POOL_PLAN: 4,  # sampling plans dispatch outbox rows
    POOL_DOWNSTREAM: 6,  # collection_results .. brand_visibility, one step at a time per run
    POOL_BILLING: 2,  # reconciliation rewrites a run's lines in one transaction
}


def apply_pool_limits(instance: dg.DagsterInstance) -> dict[str, int]:
    """Set each pool's limit in the instance (what ``dagster instance concurrency set`` does).
    Idempotent: returns only the pools whose limit changed."""
    storage = instance.event_log_storage
    changed: dict[str, int] = {}
    for pool, limit in POOL_LIMITS.items():
        if pool in storage.get_concurrency_keys():
            info = storage.get_concurrency_info(pool)
            if info.slot_count == limit and not info.using_default_limit:
                continue
        storage.set_concurrency_slots(pool, limit)
        changed[pool] = limit
    return changed
