"""The evidence asset of a (run, channel) partition; its figures come from the aggregation
service (store/status.py, R7) and its checks (defs/evidence/checks.py)."""

from collections.abc import Iterator
from typing import Any

import dagster as dg

from geo_pipeline.defs import names
from geo_pipeline.defs.evidence import checks
from geo_pipeline.defs.factory import (
    EVIDENCE,
    each_partition,
    load_run,
    pipeline_asset,
    status_metadata,
)
from geo_pipeline.defs.partitions import parse_partition_key, run_channel_partitions
from geo_pipeline.defs.resources import (
    EvidenceStorageResource,
    PipelineSettingsResource,
    PostgresResource,
)
from geo_pipeline.store import status as statusmod


# --------------------------------------------------------------------------- validated_evidence
@pipeline_asset(
    names.VALIDATED_EVIDENCE,
    domain=EVIDENCE,
    partitions_def=run_channel_partitions,
    deps=[names.COLLECTION_RESULTS],
    pool=names.POOL_DOWNSTREAM,
    kinds={"postgres", "s3"},
    checks=[
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
    ],
)
def validated_evidence(
    context: dg.AssetExecutionContext,
    db: PostgresResource,
    evidence: EvidenceStorageResource,
    settings: PipelineSettingsResource,
) -> Iterator[Any]:
    """The evidence set of one channel of a run that analysts may rely on: answers archived raw
    with a sanitised rendering (R19, R20), judged valid or invalid with a reason (R22; completed
    is not valid), citations with raw and normalised URL (R18), screenshots per policy (R21).

    Validity and evidence state are written by the workers at completion; this asset verifies
    the set and publishes its quality figures. Its blocking checks keep untraceable evidence out
    of the brand analysis.
    """
    yield from each_partition(context, lambda key: evidence_partition(db, evidence, settings, key))


def evidence_partition(
    db: PostgresResource,
    evidence: EvidenceStorageResource,
    settings: PipelineSettingsResource,
    key: str,
) -> dg.MaterializeResult:
    """validated_evidence of one run|channel partition."""
    run_id, channel = parse_partition_key(key)
    with db.connect() as conn:
        load_run(conn, run_id, channel)
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
            **status_metadata(status),
            **publication.as_metadata(),
        },
        check_results=results,
    )
