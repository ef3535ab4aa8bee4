"""The analysis assets of a (run, channel) partition: brand mentions in its valid answers, and
the analyst tables with their interval, charts and per-brand plots (metadata built in
defs/analysis/metadata.py)."""

from collections.abc import Callable, Iterator
from typing import Any

import dagster as dg

from geo_pipeline.analysis import analyse_run, refresh_analytics, ui_api
from geo_pipeline.analysis.trends import brand_trends
from geo_pipeline.defs import names
from geo_pipeline.defs.analysis import checks
from geo_pipeline.defs.analysis.metadata import (
    chart_metadata,
    plain_json,
    rate_plots,
    rounded_rate,
    ui_api_metadata,
    visibility_markdown,
    visibility_table_metadata,
)
from geo_pipeline.defs.charts import chart_url, md_linked_image
from geo_pipeline.defs.factory import (
    ANALYSIS,
    each_partition,
    load_run,
    pipeline_asset,
    status_metadata,
)
from geo_pipeline.defs.markdown import md_svg_image
from geo_pipeline.defs.partitions import parse_partition_key, run_channel_partitions
from geo_pipeline.defs.resources import (
    EvidenceStorageResource,
    PipelineSettingsResource,
    PostgresResource,
)
from geo_pipeline.evidence.charts import store_chart
from geo_pipeline.store import run_platforms
from geo_pipeline.store import status as statusmod
from geo_pipeline.store.queries import Q


# --------------------------------------------------------------------------- brand_analysis
@pipeline_asset(
    names.BRAND_ANALYSIS,
    domain=ANALYSIS,
    partitions_def=run_channel_partitions,
    deps=[names.VALIDATED_EVIDENCE],
    pool=names.POOL_DOWNSTREAM,
    kinds={"postgres"},
    checks=[
        (names.CHECK_VALID_ANSWERS_ANALYSED, "every valid answer analysed (R6)", True),
        (
            names.CHECK_NO_PENDING_AS_NOT_MENTIONED,
            "pending analysis never shown as not mentioned (R6)",
            True,
        ),
    ],
)
def brand_analysis(context: dg.AssetExecutionContext, db: PostgresResource) -> Iterator[Any]:
    """Brand mentions in the valid answers of one channel of a run: whether the brand and each
    competitor are mentioned, how often, where (rank, position) and whether their domains are
    cited. An answer still being analysed is reported as "analysing", never as "not mentioned"
    (R6); ambiguous detections go to review rather than being guessed.
    """
    yield from each_partition(context, lambda key: analysis_partition(db, key))


def analysis_partition(db: PostgresResource, key: str) -> dg.MaterializeResult:
    """brand_analysis of one run|channel partition."""
    run_id, channel = parse_partition_key(key)
    with db.connect() as conn:
        load_run(conn, run_id, channel)
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
            "analysis": plain_json(summary),
            **status_metadata(status),
            **publication.as_metadata(),
        },
        check_results=results,
    )


# --------------------------------------------------------------------------- analyst tables
@pipeline_asset(
    names.BRAND_VISIBILITY,
    domain=ANALYSIS,
    partitions_def=run_channel_partitions,
    deps=[names.BRAND_ANALYSIS],
    pool=names.POOL_DOWNSTREAM,
    kinds={"postgres"},
    checks=[
        (names.CHECK_VISIBILITY_MATCHES, "analyst table agrees with the sample facts (R7)", True),
    ],
)
def brand_visibility(
    context: dg.AssetExecutionContext,
    db: PostgresResource,
    evidence: EvidenceStorageResource,
    settings: PipelineSettingsResource,
) -> Iterator[Any]:
    """What analysts read: visibility of the brand and each competitor on one channel of a run
    — mention rate with its Wilson interval, average rank, citation rate — in the ``analytics``
    tables (docs/analysts.md). Rates count only valid answers whose analysis is accepted;
    samples still being analysed are counted as "analysing", never as "not mentioned" (R6).

    Refreshing rewrites the run's analyst rows in one transaction (delete then insert), so a
    reader sees the old or the new figures, never a mix, and a re-run changes nothing.

    With ``GEO_CHART_URL`` set the charts are stored in the evidence archive and shown by a
    short link the UI renders in place (defs/charts.py); otherwise as ``data:`` URIs.
    """
    # The analyst rows are refreshed per collection run: once for all its partitions in range.
    refreshed: dict[str, dict[str, int]] = {}
    yield from each_partition(
        context, lambda key: visibility_partition(db, evidence, settings, key, refreshed)
    )


def visibility_partition(
    db: PostgresResource,
    evidence: EvidenceStorageResource,
    settings: PipelineSettingsResource,
    key: str,
    refreshed: dict[str, dict[str, int]],
) -> dg.MaterializeResult:
    """brand_visibility of one run|channel partition; ``refreshed``: the rows refreshed per
    run so far in this step (a run's analyst rows are refreshed once)."""
    run_id, channel = parse_partition_key(key)
    with db.connect() as conn:
        load_run(conn, run_id, channel)
        if run_id not in refreshed:
            refreshed[run_id] = refresh_analytics(conn, run_id)
        with conn.cursor() as cur:
            cur.execute(Q("dagster.channel_visibility"), {"run_id": run_id, "channel": channel})
            table = [dict(r) for r in cur.fetchall()]
        status = statusmod.partition_status(conn, run_id, channel)
        publication = statusmod.partition_publication(conn, run_id, channel)
        result = checks.visibility_matches(conn, run_id, channel, table)
        trends, fdr_q = brand_trends(conn, run_id)
        scraped_vs_api = ui_api.sections(conn, run_id, channel)
        access = run_platforms.channel_access(conn, run_id).get(channel, {})
    target = next((r for r in table if r["is_target"]), None)
    return dg.MaterializeResult(
        metadata={
            "run_id": run_id,
            "channel": channel,
            "rows_refreshed": refreshed[run_id],
            "target_brand": target["brand"] if target else None,
            "target_mention_rate": rounded_rate(target, "mention_rate"),
            # THE interval (question-clustered where the run's questions are pooled), its
            # method and the effective n it stands on (docs/analysts.md, one interval).
            "target_mention_rate_lower": rounded_rate(target, "mention_rate_lower"),
            "target_mention_rate_upper": rounded_rate(target, "mention_rate_upper"),
            "target_mention_rate_interval": target.get("mention_rate_interval") if target else None,
            "target_n_effective": rounded_rate(target, "n_effective"),
            "target_citation_rate": rounded_rate(target, "citation_rate"),
            "analysed_answers": int(target["n"]) if target else 0,
            # Scraped vs API apart (issue 31): how the channel was collected, and its fan-out,
            # citation gap and UI-vs-API agreement rows as the analytics views give them.
            "access": access.get("access", "unknown"),
            "engine": access.get("engine", channel.split("__", 1)[0]),
            **ui_api_metadata(scraped_vs_api),
            "visibility": dg.MetadataValue.md(visibility_markdown(table)),
            "visibility_table": visibility_table_metadata(table),
            **rate_plots(table),
            **chart_metadata(
                channel,
                table,
                [r for r in trends if r["channel"] == channel],
                fdr_q,
                image=chart_images(evidence, settings.chart_url),
            ),
            **status_metadata(status),
            **publication.as_metadata(),
        },
        check_results=[result],
    )


def chart_images(evidence: EvidenceStorageResource, base_url: str) -> Callable[[str, str], str]:
    """How brand_visibility's charts become Markdown: stored and linked where charts are served
    (``base_url``, GEO_CHART_URL), else inline ``data:`` URIs."""
    if not base_url:
        return md_svg_image
    archive = evidence.archive()

    def linked(svg: str, alt: str) -> str:
        return md_linked_image(chart_url(base_url, store_chart(archive, svg)), alt)

    return linked
