"""Names shared by assets, checks, sensors, schedules and tests: one spelling each (STYLE.md 6)."""

from __future__ import annotations

from collections.abc import Sequence

import dagster as dg

from geo_pipeline.domain.streams import COMPLETIONS

RUNS_PARTITIONS = "collection_runs"  # the dynamic partitions: one key per collection run
# One key per (run, channel) of a run: "<run_id>|<platform>__<device>" (defs/partitions.py).
RUN_CHANNEL_PARTITIONS = "collection_run_channels"

# Concurrency pools (dagster.yaml `concurrency:`; limits in defs/pools.py): they bound the
# assets' concurrent PostgreSQL work on every launch path, the UI's "Materialize" included.
POOL_PLAN = "geo_plan"
POOL_DOWNSTREAM = "geo_downstream"
POOL_BILLING = "geo_billing"

SAMPLING_PLAN = dg.AssetKey("sampling_plan")
COLLECTION_RESULTS = dg.AssetKey("collection_results")
VALIDATED_EVIDENCE = dg.AssetKey("validated_evidence")
BRAND_ANALYSIS = dg.AssetKey("brand_analysis")
BRAND_VISIBILITY = dg.AssetKey("brand_visibility")
BILLING_RECONCILIATION = dg.AssetKey("billing_reconciliation")
RETENTION_PASS = dg.AssetKey("retention_pass")  # operations: one daily retention pass (D9)

# What finished (run, channel) partitions trigger, in one Dagster run per collection run.
PARTITION_DOWNSTREAM = (COLLECTION_RESULTS, VALIDATED_EVIDENCE, BRAND_ANALYSIS, BRAND_VISIBILITY)
# What one finished run triggers (partitioned by run only).
RUN_DOWNSTREAM = (BILLING_RECONCILIATION,)

# Check names, per asset.
CHECK_PLAN_VOLUME = "plan_volume_matches_snapshot"
CHECK_PLAN_IDENTITIES = "sample_identities_unique"
CHECK_PLAN_BATCHES = "batches_within_cap"
CHECK_NO_NON_TERMINAL = "no_non_terminal_sample"
CHECK_EXCLUDED_SHARE = "excluded_share_within_limit"
CHECK_ACCEPTANCE_RECORDED = "accepted_samples_have_acceptance_record"
CHECK_NO_DUPLICATE_COMPLETION = "no_duplicate_completion"
CHECK_FIELD_COMPLETENESS = "field_completeness"
CHECK_SAMPLE_UNIQUENESS = "sample_uniqueness"
CHECK_VALIDITY_RATE = "validity_rate"
CHECK_CITATION_TRACEABILITY = "citation_traceability"
CHECK_SCREENSHOT_MISSING = "screenshot_missing_rate"
CHECK_OBJECTS_READABLE = "archived_objects_match_digests"
CHECK_VALID_ANSWERS_ANALYSED = "every_valid_answer_analysed"
CHECK_NO_PENDING_AS_NOT_MENTIONED = "no_pending_reported_as_not_mentioned"
CHECK_VISIBILITY_MATCHES = "visibility_rows_match_analysis"
CHECK_ZERO_UNEXPLAINED = "zero_unexplained_difference"
CHECK_NO_DUPLICATE_CHARGE = "no_duplicate_charge"

COMPLETIONS_STREAM = COMPLETIONS  # <GEO_REDIS_PREFIX>:completions, written by the workers


def plan_run_key(run_id: str, *channels: str) -> str:
    """The run key of the sampling plans of these channels of a run, in one Dagster run."""
    return f"sampling_plan:{run_id}:{CHANNEL_JOIN.join(channels)}"


# Between the channels of a run key covering several partitions of a run (one Dagster run per
# run and stage, issue 36): a channel is ``platform__device``, never with ``+``.
CHANNEL_JOIN = "+"


def _published(terminal: int | None, samples: int | None) -> str:
    """The suffix of a publication before every sample is terminal: one key per terminal count,
    so a deadline publication and each later change are requested once each (terminal counts
    only grow), and the complete publication keeps the plain key."""
    if terminal is None or samples is None or terminal >= samples:
        return ""
    return f":deadline:{terminal}-of-{samples}"


def downstream_run_key(
    run_id: str, channel: str, *, terminal: int | None = None, samples: int | None = None
) -> str:
    return f"downstream:{run_id}:{channel}{_published(terminal, samples)}"


def downstream_range_key(
    run_id: str, channels: Sequence[tuple[str, int | None, int | None]]
) -> str:
    """The run key of the downstream assets of several channels of a run in one Dagster run:
    each (channel, terminal, samples) as ``downstream_run_key`` spells it, so a range of one is
    that key, and each real change of any of its partitions is requested once."""
    parts = [downstream_part(ch, terminal, samples) for ch, terminal, samples in channels]
    return f"downstream:{run_id}:{CHANNEL_JOIN.join(parts)}"


def downstream_part(channel: str, terminal: int | None, samples: int | None) -> str:
    """One partition's share of a downstream run key: its channel and publication state."""
    return f"{channel}{_published(terminal, samples)}"


def billing_run_key(run_id: str, *, terminal: int | None = None, samples: int | None = None) -> str:
    return f"billing:{run_id}{_published(terminal, samples)}"
