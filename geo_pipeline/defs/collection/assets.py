"""The collection assets. One partition = one collection run x one channel (principle 4): a
Dagster run covers a collection run's partitions (a range, each materialised and checked on its
own: ``each_partition``), workers execute their samples. Every number about sample states in
the metadata comes from the one aggregation service (store/status.py, R7).
"""

from collections.abc import Iterator
from typing import Any

import dagster as dg

from geo_pipeline.defs import names
from geo_pipeline.defs.collection import checks
from geo_pipeline.defs.factory import (
    COLLECTION,
    each_partition,
    load_run,
    pipeline_asset,
    status_metadata,
)
from geo_pipeline.defs.partitions import parse_partition_key, run_channel_partitions
from geo_pipeline.defs.resources import PipelineSettingsResource, PostgresResource
from geo_pipeline.flows.create_run import dispatch_gate
from geo_pipeline.store import status as statusmod
from geo_pipeline.store.queries import Q


# --------------------------------------------------------------------------- sampling_plan
@pipeline_asset(
    names.SAMPLING_PLAN,
    domain=COLLECTION,
    partitions_def=run_channel_partitions,
    pool=names.POOL_PLAN,
    kinds={"postgres"},
    checks=[
        (names.CHECK_PLAN_VOLUME, "Q x T x R samples of the snapshot for this channel (R3)", True),
        (names.CHECK_PLAN_IDENTITIES, "identities unique, ids derived from them (R5)", True),
        (names.CHECK_PLAN_BATCHES, "batches within the submit and platform caps (R3)", True),
    ],
)
def sampling_plan(context: dg.AssetExecutionContext, db: PostgresResource) -> Iterator[Any]:
    """The sampling plan of one channel of a collection run: the Q x T x R samples expanded from
    the run's frozen config snapshot (R2, R3, R5), and their collect hints in the outbox.

    The run and all its samples are written in one transaction when the run is created; this
    asset checks the partition's share of the plan and then dispatches it, through the one
    dispatch gate: a run that is not confirmed (no reservation) or cancelled, or whose plan
    fails a check, is not dispatched (``dispatch_refused`` says why): no engine is asked,
    nothing is charged. Dispatch is idempotent (a sample gets one collect hint, ever), so
    re-materialising never duplicates work.
    """
    yield from each_partition(context, lambda key: plan_partition(context, db, key))


def plan_partition(
    context: dg.AssetExecutionContext | dg.OpExecutionContext,
    db: PostgresResource,
    key: str,
    dispatched_at_creation: bool = False,
) -> dg.MaterializeResult:
    """sampling_plan of one run|channel partition: in its asset's step, or in the launchpad's
    create_collection_run right after the run is created (defs/collection/dispatch.py).
    ``dispatched_at_creation``: the run was dispatched in the transaction that created it a
    moment ago, so what the partition has queued was queued now."""
    run_id, channel = parse_partition_key(key)
    with db.connect() as conn:
        run, config = load_run(conn, run_id, channel)
        # THE dispatch gate (flows.create_run.dispatch_gate, also behind `runs create` and
        # `billing confirm`): confirmed, not cancelled, every plan check passed. Its checks are
        # this asset's blocking checks.
        gate = dispatch_gate(conn, run_id, channel)
        results = [checks.plan_result(c) for c in gate.checks]
        cancelled = run["cancel_requested_at"] is not None
        dispatched_now = gate.queued
        with conn.cursor() as cur:
            cur.execute(Q("dagster.dispatched_count"), {"run_id": run_id, "channel": channel})
            row = cur.fetchone()
        dispatched = int(row["n"]) if row else 0
        if dispatched_at_creation and gate.refused is None:
            dispatched_now = dispatched
        status = statusmod.partition_status(conn, run_id, channel)
    context.log.info(
        "run %s channel %s: %d samples, %d collect hints queued now",
        run_id,
        channel,
        status.counts.total,
        dispatched_now,
    )
    return dg.MaterializeResult(
        metadata={
            "run_id": run_id,
            "channel": channel,
            "tenant": config.tenant,
            "snapshot_id": config.snapshot_id,
            "questions": len(config.questions),
            "targets_on_channel": sum(1 for t in config.targets if t.channel == channel),
            "repeats": config.repeats,
            "dispatched_now": dispatched_now,
            "dispatched_total": dispatched,
            "cancelled": cancelled,
            **({"dispatch_refused": gate.refused} if gate.refused else {}),
            **status_metadata(status),
        },
        check_results=results,
    )


# --------------------------------------------------------------------------- collection_results
@pipeline_asset(
    names.COLLECTION_RESULTS,
    domain=COLLECTION,
    partitions_def=run_channel_partitions,
    deps=[names.SAMPLING_PLAN],
    pool=names.POOL_DOWNSTREAM,
    kinds={"postgres"},
    checks=[
        (
            names.CHECK_NO_NON_TERMINAL,
            "every sample terminal, or excluded with its reason past the deadline (R7)",
            True,
        ),
        (
            names.CHECK_EXCLUDED_SHARE,
            "share of samples excluded at the publish deadline within the limit",
            True,
        ),
        (
            names.CHECK_ACCEPTANCE_RECORDED,
            "accepted samples have their acceptance record (R9)",
            True,
        ),
        (names.CHECK_NO_DUPLICATE_COMPLETION, "no sample completed twice (R5, R25)", True),
    ],
)
def collection_results(
    context: dg.AssetExecutionContext, db: PostgresResource, settings: PipelineSettingsResource
) -> Iterator[Any]:
    """What the engines answered for one channel of a run, once collection is over: every
    sample is completed or failed (R7), or the run's publish deadline has passed. Partial
    success is a normal outcome — the metadata says how many completed, failed (with reasons)
    and are still uncertain.

    Past the deadline the partition publishes the terminal samples; the open ones are excluded,
    counted by reason here and listed sample by sample in ``analytics.excluded_samples``, and
    every asset downstream counts only what is terminal. A late completion makes the completion
    sensor request the partition again. Before the deadline, materialising a partition that is
    still collecting fails with the counts rather than publishing a number that will change.
    """
    yield from each_partition(context, lambda key: results_partition(context, db, settings, key))


def results_partition(
    context: dg.AssetExecutionContext,
    db: PostgresResource,
    settings: PipelineSettingsResource,
    key: str,
) -> dg.MaterializeResult:
    """collection_results of one run|channel partition."""
    run_id, channel = parse_partition_key(key)
    with db.connect() as conn:
        load_run(conn, run_id, channel)
        status = statusmod.partition_status(conn, run_id, channel)
        publication = statusmod.partition_publication(conn, run_id, channel)
        if not publication.publishable:
            col = status.counts.collection
            raise dg.Failure(
                description=f"run {run_id} channel {channel} is still collecting: "
                f"{col.get('queued', 0)} queued and {col.get('running', 0)} running of "
                f"{status.counts.total}; collection_results is materialised when every sample "
                f"is terminal or at the run's publish deadline ({publication.deadline_at}); "
                "the completion sensor requests it then",
                metadata={**status_metadata(status), **publication.as_metadata()},
                allow_retries=False,  # waiting seconds does not finish samples
            )
        # What this materialisation publishes, and each sample it leaves out, on record.
        publication = statusmod.record_publication(conn, run_id, channel, context.run.run_id)
        results = [
            checks.no_non_terminal(status, publication),
            checks.excluded_share(publication, settings.max_excluded_share),
            checks.acceptance_recorded(conn, run_id, channel),
            checks.no_duplicate_completion(conn, run_id, channel),
        ]
    if publication.excluded:
        context.log.warning(
            "run %s channel %s published on its deadline without %d of %d samples: %s",
            run_id,
            channel,
            publication.excluded,
            publication.samples,
            dict(publication.excluded_reasons),
        )
    return dg.MaterializeResult(
        metadata={
            "run_id": run_id,
            "channel": channel,
            "publication_id": publication.publication_id,
            **status_metadata(status),
            **publication.as_metadata(),
        },
        check_results=results,
    )
