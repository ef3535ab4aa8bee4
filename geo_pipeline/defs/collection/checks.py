"""The checks of the collection assets, as functions of (connection, partition) so each can be
run and tested on its own. Every check names the rule it enforces; a failing check lists
examples (at most ``EXAMPLES`` ids) so an operator can look at the rows.

Blocking checks (``blocking=True`` on the spec) stop the downstream assets of the same Dagster
run: numbers that cannot be trusted must not reach analysts.
"""

from __future__ import annotations

import dagster as dg

from geo_pipeline.defs import names
from geo_pipeline.defs.factory import EXAMPLES, check_result, query_rows
from geo_pipeline.domain.states import AggregateStatus, Publication
from geo_pipeline.flows import create_run as plan_checks
from geo_pipeline.store.db import Conn


# --------------------------------------------------------------------------- sampling_plan
def plan_result(c: plan_checks.PlanCheck) -> dg.AssetCheckResult:
    """A plan check of flows.create_run (R3, R5; the dispatch gate runs them) as the
    sampling_plan asset's check result."""
    return check_result(c.name, names.SAMPLING_PLAN, c.passed, **c.metadata)


# --------------------------------------------------------------------------- collection_results
def no_non_terminal(status: AggregateStatus, publication: Publication) -> dg.AssetCheckResult:
    """R7: the partition is complete only when every sample is terminal; past the run's publish
    deadline an open sample is allowed only as an excluded one, recorded with its reason (both
    from the aggregation service, never counted here)."""
    col = status.counts.collection
    open_ = col.get("queued", 0) + col.get("running", 0)
    explained = publication.basis == "deadline" and publication.excluded >= open_
    return check_result(
        names.CHECK_NO_NON_TERMINAL,
        names.COLLECTION_RESULTS,
        (open_ == 0 and status.terminal) or explained,
        non_terminal=open_,
        excluded_on_deadline=publication.excluded if publication.basis == "deadline" else 0,
        overall=status.overall,
    )


def excluded_share(publication: Publication, maximum: float) -> dg.AssetCheckResult:
    """A partition published on its deadline leaves its open samples out; above ``maximum`` of
    them the numbers no longer describe the engine's day, and nothing downstream publishes."""
    return check_result(
        names.CHECK_EXCLUDED_SHARE,
        names.COLLECTION_RESULTS,
        publication.excluded_share <= maximum,
        samples=publication.samples,
        excluded=publication.excluded,
        excluded_share=round(publication.excluded_share, 4),
        maximum=maximum,
        excluded_reasons=dict(sorted(publication.excluded_reasons.items())),
    )


def acceptance_recorded(conn: Conn, run_id: str, channel: str) -> dg.AssetCheckResult:
    """R9, R12: every accepted sample has the acceptance record of the request that was
    accepted (same upstream id), so fees and answers trace to one request."""
    rows = query_rows(conn, "accepted_without_record", run_id=run_id, channel=channel)
    return check_result(
        names.CHECK_ACCEPTANCE_RECORDED,
        names.COLLECTION_RESULTS,
        not rows,
        missing=len(rows),
        examples=[r["sample_id"] for r in rows[:EXAMPLES]],
    )


def no_duplicate_completion(conn: Conn, run_id: str, channel: str) -> dg.AssetCheckResult:
    """R5, R25: a sample reaches 'completed' once; a redelivered completion changes nothing."""
    rows = query_rows(conn, "duplicate_completions", run_id=run_id, channel=channel)
    return check_result(
        names.CHECK_NO_DUPLICATE_COMPLETION,
        names.COLLECTION_RESULTS,
        not rows,
        duplicated=len(rows),
        examples=[r["sample_id"] for r in rows[:EXAMPLES]],
    )
