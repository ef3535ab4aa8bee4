"""The pipeline's assets. One partition = one collection run x one channel (principle 4): a
Dagster run covers a partition, workers execute its samples. Every number about sample states in
the metadata comes from the one aggregation service (store/status.py, R7).
"""

import hashlib
import re
from collections import Counter
from collections.abc import Iterable
from typing import Any

import dagster as dg

from geo_pipeline.analysis import analyse_run, refresh_analytics
from geo_pipeline.analysis.charts import rate_bars_svg, trend_charts
from geo_pipeline.analysis.trends import brand_trends
from geo_pipeline.billing.ledger import run_ledger
from geo_pipeline.defs import checks, names
from geo_pipeline.defs.markdown import md_svg_image, md_text
from geo_pipeline.defs.partitions import (
    ALL_CHANNELS_OF_RUN,
    run_channel_partitions,
    runs_partitions,
    split_key,
)
from geo_pipeline.defs.resources import (
    ConnectorRegistryResource,
    EvidenceStorageResource,
    PipelineSettingsResource,
    PostgresResource,
)
from geo_pipeline.domain.config import NormalisedConfig
from geo_pipeline.domain.states import AggregateStatus
from geo_pipeline.flows.settle import settle_run
from geo_pipeline.store import runs as runstore
from geo_pipeline.store import status as statusmod
from geo_pipeline.store.db import Conn
from geo_pipeline.store.queries import Q

GROUP = "geo"

# Every asset here talks to services (PostgreSQL; validated_evidence also object storage,
# billing_reconciliation the platforms' statement endpoints). A transient failure of one (a
# restart, a full pool, a timeout) is retried inside the run: 3 more tries, about 2, 4 and 8 s
# apart (jittered so partitions failing together do not retry together). Every write is
# idempotent, so a retried step changes nothing twice. Business failures (a run PostgreSQL
# does not have, a partition still collecting) raise ``dg.Failure(allow_retries=False)``;
# failed blocking checks are never retried by a policy. What fails the run anyway is left to
# run retries and the completion sensor (docs/dagster.md, "When a downstream run fails").
SERVICE_RETRY = dg.RetryPolicy(
    max_retries=3, delay=2, backoff=dg.Backoff.EXPONENTIAL, jitter=dg.Jitter.PLUS_MINUS
)


def _status_metadata(status: AggregateStatus) -> dict[str, Any]:
    """Flattened aggregate status (from the aggregation service) for asset metadata."""
    d = status.as_dict()
    col = status.counts.collection
    total = status.counts.total
    meta: dict[str, Any] = {
        "overall": d["overall"],
        "samples": total,
        "uncertain": d["uncertain"],
        "analysing": d["analysing"],
        "completed_rate": round(col.get("completed", 0) / total, 4) if total else 0.0,
    }
    for layer in ("submission", "collection", "evidence", "analysis"):
        meta[f"{layer}_states"] = d[layer]
    if d["failure_reasons"]:
        meta["failure_reasons"] = d["failure_reasons"]
    if d["evidence_reasons"]:
        meta["evidence_reasons"] = d["evidence_reasons"]
    return meta


def _load_run(conn: Conn, run_id: str, channel: str) -> tuple[dict[str, Any], NormalisedConfig]:
    try:
        run = runstore.get_run(conn, run_id)
    except runstore.RunNotFound:
        raise dg.Failure(
            description=f"collection run {run_id!r} is not in PostgreSQL; its partition should "
            "not exist (create runs with the create_collection_run job or `geo-pipeline runs "
            "create`)",
            allow_retries=False,
        ) from None
    config = runstore.run_config(conn, run_id)
    if channel not in config.channels:
        raise dg.Failure(
            description=f"channel {channel} is not part of run {run_id}; its channels are "
            f"{', '.join(config.channels)}. Materialise only those partitions.",
            allow_retries=False,
        )
    return run, config


def _checks(
    asset: dg.AssetKey,
    partitions_def: dg.PartitionsDefinition,
    *spec_args: tuple[str, str, bool],
) -> list[dg.AssetCheckSpec]:
    return [
        checks.spec(asset, name, desc, blocking, partitions_def)
        for name, desc, blocking in spec_args
    ]


# Tags that find every Dagster run of a collection run (`dagster run list`, the UI's run
# filter). Sensors and schedules set them on their requests; a run launched any other way —
# "Materialize" in the UI runs the implicit asset job, which has no geo tags — gets them here.
RUN_ID_TAG = "geo/run_id"
CHANNEL_TAG = "geo/channel"


def _tag_run(context: dg.AssetExecutionContext, run_id: str, channel: str | None = None) -> None:
    """Add the geo tags the Dagster run lacks; a tag its launcher set is kept as it is."""
    wanted = {RUN_ID_TAG: run_id, **({CHANNEL_TAG: channel} if channel else {})}
    missing = {k: v for k, v in wanted.items() if k not in context.run.tags}
    if missing:
        context.instance.add_run_tags(context.run.run_id, missing)


# --------------------------------------------------------------------------- sampling_plan
@dg.asset(
    key=names.SAMPLING_PLAN,
    partitions_def=run_channel_partitions,
    group_name=GROUP,
    retry_policy=SERVICE_RETRY,
    pool=names.POOL_PLAN,
    kinds={"postgres"},
    check_specs=_checks(
        names.SAMPLING_PLAN,
        run_channel_partitions,
        (names.CHECK_PLAN_VOLUME, "Q x T x R samples of the snapshot for this channel (R3)", True),
        (names.CHECK_PLAN_IDENTITIES, "identities unique, ids derived from them (R5)", True),
        (names.CHECK_PLAN_BATCHES, "batches within the submit and platform caps (R3)", True),
    ),
)
def sampling_plan(context: dg.AssetExecutionContext, db: PostgresResource) -> dg.MaterializeResult:
    """The sampling plan of one channel of a collection run: the Q x T x R samples expanded from
    the run's frozen config snapshot (R2, R3, R5), and their collect hints in the outbox.

    The run and all its samples are written in one transaction when the run is created; this
    asset checks the partition's share of the plan and then dispatches it. Dispatch is
    idempotent (a sample gets one collect hint, ever), so re-materialising never duplicates
    work. A plan that fails a check is not dispatched: no engine is asked, nothing is charged.
    """
    run_id, channel = split_key(context)
    _tag_run(context, run_id, channel)
    with db.connect() as conn:
        run, config = _load_run(conn, run_id, channel)
        rows = checks.partition_samples(conn, run_id, channel)  # one read for three checks
        results = [
            checks.plan_volume(conn, config, run_id, channel, rows),
            checks.plan_identities(conn, run_id, channel, rows),
            checks.plan_batches(conn, config, run_id, channel, rows),
        ]
        cancelled = run["cancel_requested_at"] is not None
        dispatched_now = 0
        if all(r.passed for r in results) and not cancelled:
            dispatched_now = runstore.dispatch(conn, run_id, channel)
        with conn.cursor() as cur:
            cur.execute(Q("dagster.dispatched_count"), {"run_id": run_id, "channel": channel})
            row = cur.fetchone()
        dispatched = int(row["n"]) if row else 0
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
            **_status_metadata(status),
        },
        check_results=results,
    )


# --------------------------------------------------------------------------- collection_results
@dg.asset(
    key=names.COLLECTION_RESULTS,
    partitions_def=run_channel_partitions,
    deps=[names.SAMPLING_PLAN],
    group_name=GROUP,
    retry_policy=SERVICE_RETRY,
    pool=names.POOL_DOWNSTREAM,
    kinds={"postgres"},
    check_specs=_checks(
        names.COLLECTION_RESULTS,
        run_channel_partitions,
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
    ),
)
def collection_results(
    context: dg.AssetExecutionContext, db: PostgresResource, settings: PipelineSettingsResource
) -> dg.MaterializeResult:
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
    run_id, channel = split_key(context)
    _tag_run(context, run_id, channel)
    with db.connect() as conn:
        _load_run(conn, run_id, channel)
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
                metadata={**_status_metadata(status), **publication.as_metadata()},
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
            **_status_metadata(status),
            **publication.as_metadata(),
        },
        check_results=results,
    )


# --------------------------------------------------------------------------- validated_evidence
@dg.asset(
    key=names.VALIDATED_EVIDENCE,
    partitions_def=run_channel_partitions,
    deps=[names.COLLECTION_RESULTS],
    group_name=GROUP,
    retry_policy=SERVICE_RETRY,
    pool=names.POOL_DOWNSTREAM,
    kinds={"postgres", "s3"},
    check_specs=_checks(
        names.VALIDATED_EVIDENCE,
        run_channel_partitions,
        (names.CHECK_FIELD_COMPLETENESS, "answers complete for archived evidence (R22)", True),
        (names.CHECK_SAMPLE_UNIQUENESS, "no identity or upstream answer counted twice (R5)", True),
        (names.CHECK_VALIDITY_RATE, "share of valid answers above the minimum (R22)", False),
        (
            names.CHECK_CITATION_TRACEABILITY,
            "citations keep both URLs and an archived answer (R18, R22)",
            True,
        ),
        (names.CHECK_SCREENSHOT_MISSING, "screenshots present per the policy (R6, R21)", False),
        (names.CHECK_OBJECTS_READABLE, "archived objects exist with their digests (R20)", True),
    ),
)
def validated_evidence(
    context: dg.AssetExecutionContext,
    db: PostgresResource,
    evidence: EvidenceStorageResource,
    settings: PipelineSettingsResource,
) -> dg.MaterializeResult:
    """The evidence set of one channel of a run that analysts may rely on: answers archived raw
    with a sanitised rendering (R19, R20), judged valid or invalid with a reason (R22; completed
    is not valid), citations with raw and normalised URL (R18), screenshots per policy (R21).

    Validity and evidence state are written by the workers at completion; this asset verifies
    the set and publishes its quality figures. Its blocking checks keep untraceable evidence out
    of the brand analysis.
    """
    run_id, channel = split_key(context)
    _tag_run(context, run_id, channel)
    with db.connect() as conn:
        _load_run(conn, run_id, channel)
        status = statusmod.partition_status(conn, run_id, channel)
        publication = statusmod.partition_publication(conn, run_id, channel)
        archive = evidence.archive()
        validity, counts = checks.validity_rate(conn, run_id, channel, settings.min_validity_rate)
        results = [
            checks.field_completeness(conn, run_id, channel),
            checks.sample_uniqueness(conn, run_id, channel),
            validity,
            checks.citation_traceability(conn, run_id, channel),
            checks.screenshot_missing(
                conn, run_id, channel, settings.max_optional_screenshot_missing_rate
            ),
            checks.objects_readable(
                conn, archive, run_id, channel, settings.evidence_objects_verified
            ),
        ]
    ev = status.counts.evidence
    completed = status.counts.collection.get("completed", 0)
    missing = ev.get("partial", 0) + ev.get("failed", 0)
    return dg.MaterializeResult(
        metadata={
            "run_id": run_id,
            "channel": channel,
            "answers": counts["answers"],
            "valid_answers": counts["valid"],
            "evidence_missing_rate": round(missing / completed, 4) if completed else 0.0,
            # Where the partition's objects live (tenant/run/sample/revision keys, R20); a
            # location, not a permission: downloads go through the evidence package.
            "evidence_archive": archive.location,
            **_status_metadata(status),
            **publication.as_metadata(),
        },
        check_results=results,
    )


# --------------------------------------------------------------------------- brand_analysis
@dg.asset(
    key=names.BRAND_ANALYSIS,
    partitions_def=run_channel_partitions,
    deps=[names.VALIDATED_EVIDENCE],
    group_name=GROUP,
    retry_policy=SERVICE_RETRY,
    pool=names.POOL_DOWNSTREAM,
    kinds={"postgres"},
    check_specs=_checks(
        names.BRAND_ANALYSIS,
        run_channel_partitions,
        (names.CHECK_VALID_ANSWERS_ANALYSED, "every valid answer analysed (R6)", True),
        (
            names.CHECK_NO_PENDING_AS_NOT_MENTIONED,
            "pending analysis never shown as not mentioned (R6)",
            True,
        ),
    ),
)
def brand_analysis(context: dg.AssetExecutionContext, db: PostgresResource) -> dg.MaterializeResult:
    """Brand mentions in the valid answers of one channel of a run: whether the brand and each
    competitor are mentioned, how often, where (rank, position) and whether their domains are
    cited. An answer still being analysed is reported as "analysing", never as "not mentioned"
    (R6); ambiguous detections go to review rather than being guessed.
    """
    run_id, channel = split_key(context)
    _tag_run(context, run_id, channel)
    with db.connect() as conn:
        _load_run(conn, run_id, channel)
        # The analyst tables are refreshed by brand_visibility, once per partition run.
        summary = analyse_run(conn, run_id, channel=channel, refresh=False)
        status = statusmod.partition_status(conn, run_id, channel)
        publication = statusmod.partition_publication(conn, run_id, channel)
        results = [
            checks.valid_answers_analysed(conn, run_id, channel),
            checks.pending_not_reported_as_not_mentioned(conn, run_id, channel),
        ]
    return dg.MaterializeResult(
        metadata={
            "run_id": run_id,
            "channel": channel,
            "analysis": _jsonable(summary),
            **_status_metadata(status),
            **publication.as_metadata(),
        },
        check_results=results,
    )


def _jsonable(value: Any) -> Any:
    """Summaries may be dataclasses or mappings; metadata wants plain JSON."""
    if hasattr(value, "as_dict"):
        return value.as_dict()
    if hasattr(value, "__dataclass_fields__"):
        from dataclasses import asdict

        return asdict(value)
    return value


# --------------------------------------------------------------------------- billing
@dg.asset(
    key=names.BILLING_RECONCILIATION,
    partitions_def=runs_partitions,
    deps=[dg.AssetDep(names.COLLECTION_RESULTS, partition_mapping=ALL_CHANNELS_OF_RUN)],
    group_name=GROUP,
    retry_policy=SERVICE_RETRY,
    pool=names.POOL_BILLING,
    kinds={"postgres"},
    check_specs=_checks(
        names.BILLING_RECONCILIATION,
        runs_partitions,
        (
            names.CHECK_ZERO_UNEXPLAINED,
            "ledger and fee statements agree or are pending (R23)",
            True,
        ),
        (names.CHECK_NO_DUPLICATE_CHARGE, "no upstream task charged twice (R24, R25)", True),
    ),
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
    _tag_run(context, run_id)
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
        check_results=results,
    )


# --------------------------------------------------------------------------- analyst tables
@dg.asset(
    key=names.BRAND_VISIBILITY,
    partitions_def=run_channel_partitions,
    deps=[names.BRAND_ANALYSIS],
    group_name=GROUP,
    retry_policy=SERVICE_RETRY,
    pool=names.POOL_DOWNSTREAM,
    kinds={"postgres"},
    check_specs=_checks(
        names.BRAND_VISIBILITY,
        run_channel_partitions,
        (names.CHECK_VISIBILITY_MATCHES, "analyst table agrees with the sample facts (R7)", True),
    ),
)
def brand_visibility(
    context: dg.AssetExecutionContext, db: PostgresResource
) -> dg.MaterializeResult:
    """What analysts read: visibility of the brand and each competitor on one channel of a run
    — mention rate with its Wilson interval, average rank, citation rate — in the ``analytics``
    tables (docs/analysts.md). Rates count only valid answers whose analysis is accepted;
    samples still being analysed are counted as "analysing", never as "not mentioned" (R6).

    Refreshing rewrites the run's analyst rows in one transaction (delete then insert), so a
    reader sees the old or the new figures, never a mix, and a re-run changes nothing.
    """
    run_id, channel = split_key(context)
    _tag_run(context, run_id, channel)
    with db.connect() as conn:
        _load_run(conn, run_id, channel)
        refreshed = refresh_analytics(conn, run_id)
        with conn.cursor() as cur:
            cur.execute(Q("dagster.channel_visibility"), {"run_id": run_id, "channel": channel})
            table = [dict(r) for r in cur.fetchall()]
        status = statusmod.partition_status(conn, run_id, channel)
        publication = statusmod.partition_publication(conn, run_id, channel)
        result = checks.visibility_matches(conn, run_id, channel, table)
        trends, fdr_q = brand_trends(conn, run_id)
    target = next((r for r in table if r["is_target"]), None)
    return dg.MaterializeResult(
        metadata={
            "run_id": run_id,
            "channel": channel,
            "rows_refreshed": refreshed,
            "target_brand": target["brand"] if target else None,
            "target_mention_rate": _rate(target, "mention_rate"),
            # THE interval (question-clustered where the run's questions are pooled), its
            # method and the effective n it stands on (docs/analysts.md, one interval).
            "target_mention_rate_lower": _rate(target, "mention_rate_lower"),
            "target_mention_rate_upper": _rate(target, "mention_rate_upper"),
            "target_mention_rate_interval": target.get("mention_rate_interval") if target else None,
            "target_n_effective": _rate(target, "n_effective"),
            "target_citation_rate": _rate(target, "citation_rate"),
            "analysed_answers": int(target["n"]) if target else 0,
            "visibility": dg.MetadataValue.md(_markdown(table)),
            "visibility_table": _table(table),
            **_rate_plots(table),
            **_charts(channel, table, [r for r in trends if r["channel"] == channel], fdr_q),
            **_status_metadata(status),
            **publication.as_metadata(),
        },
        check_results=[result],
    )


def _rate(row: dict[str, Any] | None, col: str) -> float | None:
    value = row.get(col) if row else None
    return None if value is None else round(float(value), 4)


def brand_metadata_keys(brands: Iterable[str]) -> dict[str, str]:
    """A metadata key part per brand, stable from one materialisation to the next (the UI plots
    a key across materialisations): lower case, letters and digits kept (CJK included), any
    other run of characters one ``_``. Brands that would share a part all get a digest suffix,
    so no two brands plot as one and the keys do not depend on the brands' order."""
    base = {b: "_".join(re.findall(r"[^\W_]+", b.casefold())) or "brand" for b in set(brands)}
    clashes = Counter(base.values())
    return {
        b: k if clashes[k] == 1 else f"{k}_{hashlib.sha256(b.encode()).hexdigest()[:8]}"
        for b, k in base.items()
    }


# The per-brand figures the UI's "Plots" tab draws over a partition's materialisations: the
# rate and THE 95 % interval (question-clustered where pooled), as every report shows them.
PLOTTED_RATES = ("mention_rate", "mention_rate_lower", "mention_rate_upper")


def _rate_plots(table: list[dict[str, Any]]) -> dict[str, dg.FloatMetadataValue]:
    """``mention_rate/<brand>`` with its 95 % bounds (question-clustered where pooled), floats;
    a brand without an analysed answer has no rate and no point (never a 0 that would read as
    "not mentioned")."""
    keys = brand_metadata_keys(str(r["brand"]) for r in table)
    out: dict[str, dg.FloatMetadataValue] = {}
    for r in table:
        for prefix in PLOTTED_RATES:
            value = _rate(r, prefix)
            if value is not None:
                out[f"{prefix}/{keys[str(r['brand'])]}"] = dg.MetadataValue.float(value)
    return out


def _charts(
    channel: str,
    table: list[dict[str, Any]],
    trends: list[dict[str, Any]],
    fdr_q: float | None,
) -> dict[str, dg.MarkdownMetadataValue]:
    """The run report's charts as Markdown images (inline SVG, every text escaped, nothing
    executable): ``mention_rate_chart``, each brand's mention rate on the channel with its 95 %
    interval (question-clustered where pooled, as the table has it); and, for a monitor's
    run, ``mention_rate_trend_chart``, the channel's rates over days with the flagged changes
    marked (``trends``: this channel's rows of :func:`brand_trends`)."""

    def bound(r: dict[str, Any], side: str) -> float | None:
        value = r.get(f"mention_rate_{side}")
        return None if value is None else float(value)

    bars = rate_bars_svg(
        (
            {
                "channel": channel,
                "brand": r["brand"],
                "rate": None if r["mention_rate"] is None else float(r["mention_rate"]),
                "lower": bound(r, "lower"),
                "upper": bound(r, "upper"),
                "n": r["n"],
            }
            for r in table
        ),
        title=f"Mention rate on {channel}",
    )
    out = {
        "mention_rate_chart": dg.MetadataValue.md(
            md_svg_image(bars, f"Mention rate per brand on {channel} with 95 % intervals")
        )
    }
    if trends:
        [(_, svg)] = trend_charts(trends, fdr_q)  # one channel's rows: one chart
        out["mention_rate_trend_chart"] = dg.MetadataValue.md(
            md_svg_image(svg, f"Mention rate per brand by day on {channel}, flagged changes marked")
        )
    return out


VISIBILITY_COLUMNS = (
    ("brand", "string", "tracked brand"),
    ("target", "bool", "the monitored brand"),
    ("n", "int", "analysed valid answers"),
    ("mentions", "int", "answers mentioning the brand"),
    ("mention_rate", "float", "mentions / n"),
    ("lower_95", "float", "95 % lower bound: question-clustered where questions are pooled"),
    ("upper_95", "float", "95 % upper bound: question-clustered where questions are pooled"),
    ("interval", "string", "the method of lower_95 / upper_95"),
    ("n_effective", "float", "n / design effect"),
    ("wilson_lower", "float", "Wilson 95 % lower bound (answers as independent)"),
    ("wilson_upper", "float", "Wilson 95 % upper bound (answers as independent)"),
    ("avg_rank", "float", "average position among tracked brands"),
    ("analysing", "int", "answers still being analysed (never 'not mentioned')"),
)


def _table(table: list[dict[str, Any]]) -> dg.TableMetadataValue:
    """The per-brand results as typed table metadata (sortable in the UI)."""
    records = [
        dg.TableRecord(
            {
                "brand": str(r["brand"]),
                "target": bool(r["is_target"]),
                "n": int(r["n"]),
                "mentions": int(r["mentions"]),
                "mention_rate": _rate(r, "mention_rate"),
                "lower_95": _rate(r, "mention_rate_lower"),
                "upper_95": _rate(r, "mention_rate_upper"),
                "interval": str(r.get("mention_rate_interval") or ""),
                "n_effective": _rate(r, "n_effective"),
                "wilson_lower": _rate(r, "mention_rate_wilson_lower"),
                "wilson_upper": _rate(r, "mention_rate_wilson_upper"),
                "avg_rank": _rate(r, "avg_rank"),
                "analysing": int(r["analysing_samples"]),
            }
        )
        for r in table
    ]
    schema = dg.TableSchema(
        columns=[
            dg.TableColumn(name, type_, description=desc)
            for name, type_, desc in VISIBILITY_COLUMNS
        ]
    )
    return dg.MetadataValue.table(records, schema=schema)


def _markdown(table: list[dict[str, Any]]) -> str:
    head = (
        "| brand | target | n | mentions | mention rate (95% interval) | interval | n effective "
        "| avg rank | analysing | of which collecting |"
    )
    lines = [head, "|---|---|---|---|---|---|---|---|---|---|"]
    for r in table:
        rate = (
            f"{r['mention_rate']:.2f} ({r['mention_rate_lower']:.2f}-{r['mention_rate_upper']:.2f})"
            if r["mention_rate"] is not None and r["mention_rate_lower"] is not None
            else "-"
        )
        method = md_text(str(r.get("mention_rate_interval") or "-"))
        n_eff = f"{r['n_effective']:.1f}" if r.get("n_effective") is not None else "-"
        rank = f"{r['avg_rank']:.1f}" if r["avg_rank"] is not None else "-"
        lines.append(
            f"| {md_text(r['brand'])} | {'yes' if r['is_target'] else ''} | {r['n']} "
            f"| {r['mentions']} "
            f"| {rate} | {method} | {n_eff} | {rank} | {r['analysing_samples']} "
            f"| {r['collecting_samples']} |"
        )
    return "\n".join(lines)
