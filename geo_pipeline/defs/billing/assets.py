"""The billing asset: one partition per collection run (it reads every channel of the run)."""

import dagster as dg

from geo_pipeline.billing.ledger import run_ledger
from geo_pipeline.defs import names
from geo_pipeline.defs.billing import checks
from geo_pipeline.defs.factory import BILLING, for_partition, pipeline_asset, tag_run
from geo_pipeline.defs.partitions import ALL_CHANNELS_OF_RUN, runs_partitions
from geo_pipeline.defs.resources import (
    ConnectorRegistryResource,
    PipelineSettingsResource,
    PostgresResource,
)
from geo_pipeline.flows.settle import settle_run
from geo_pipeline.store import runs as runstore
from geo_pipeline.store import status as statusmod


# --------------------------------------------------------------------------- billing
@pipeline_asset(
    names.BILLING_RECONCILIATION,
    domain=BILLING,
    partitions_def=runs_partitions,
    deps=[dg.AssetDep(names.COLLECTION_RESULTS, partition_mapping=ALL_CHANNELS_OF_RUN)],
    pool=names.POOL_BILLING,
    kinds={"postgres"},
    checks=[
        (
            names.CHECK_ZERO_UNEXPLAINED,
            "ledger and fee statements agree, or differ only as explained (R23); a difference "
            "is a business signal (WARN, the reconciliation alert), not a broken invariant",
            False,
        ),
        (names.CHECK_NO_DUPLICATE_CHARGE, "no upstream task charged twice (R24, R25)", True),
    ],
)
def billing_reconciliation(
    context: dg.AssetExecutionContext,
    db: PostgresResource,
    registry: ConnectorRegistryResource,
    settings: PipelineSettingsResource,
) -> dg.MaterializeResult:
    """Our ledger of one collection run against the platforms' fee statements (R23, R24): each
    upstream task matched, mismatched, missing on either side or pending (statement not in yet),
    with completed, failed and to-be-verified fees apart, in integer minor units.

    Partitioned by run only: it reads every channel of the run (all-channels partition mapping).
    First it fetches, through each platform's connector, the fee statements of the days the
    run's fees fall on (imported once, by content digest); a statement not yet published leaves
    its lines pending, which is explained by timing, not a difference. Re-materialising replaces
    the run's reconciliation lines (one transaction), so later statements are picked up then.
    """
    run_id = context.partition_key
    tag_run(context, run_id)
    with db.connect() as conn:
        try:
            runstore.get_run(conn, run_id)
        except runstore.RunNotFound:
            raise dg.Failure(
                description=f"collection run {run_id!r} is not in PostgreSQL",
                allow_retries=False,
            ) from None
        status = statusmod.run_status(conn, run_id)
        # Past the deadline the run is reconciled with what is terminal; its open samples'
        # fees stay "to verify" and a later run of this asset picks them up.
        channels = runstore.run_config(conn, run_id).channels
        publication = statusmod.run_publications(conn, {run_id: channels})[run_id]
        settled = settle_run(
            conn, run_id, registry=registry.load() if settings.import_fee_statements else None
        )
        summary, closed = settled.summary, settled.closed
        totals = run_ledger(conn, run_id)["totals"] or {}
        unexplained = checks.zero_unexplained(conn, run_id)
        results = [
            dg.AssetCheckResult(
                check_name=unexplained.check_name,
                asset_key=names.BILLING_RECONCILIATION,
                passed=bool(unexplained.passed and summary.clean),
                severity=unexplained.severity,
                metadata={
                    **unexplained.metadata,
                    "summary_unexplained_difference_minor": summary.unexplained_difference_minor,
                },
            ),
            checks.no_duplicate_charge(conn, run_id),
        ]
    d = summary.as_dict()
    return dg.MaterializeResult(
        metadata={
            "run_id": run_id,
            "currency": d["currency"],
            "lines": d["lines"],
            "classifications": d["counts"],
            "ours_total_minor": d["ours_total_minor"],
            "theirs_total_minor": d["theirs_total_minor"],
            "pending_ours_minor": d["pending_ours_minor"],
            "unexplained_difference_minor": d["unexplained_difference_minor"],
            "ours_by_fee_class": d["ours_by_fee_class"],
            "ledger_totals_minor": {
                k: int(v) for k, v in totals.items() if isinstance(v, int) and k.endswith("_minor")
            },
            "released_now_minor": closed.released.amount_minor
            if closed and closed.closed_now
            else 0,
            "overall": status.overall,
            "samples": publication.samples,
            **publication.as_metadata(),
            "close_refused": settled.close_refused,
            "statements_imported": [
                f"{i.platform} {i.statement_date}: {i.lines} lines" for i in settled.imported
            ],
            "statements_unavailable": list(settled.unavailable),
        },
        check_results=for_partition(context, results),
    )
