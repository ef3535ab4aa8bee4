"""Daily retention (D9) as a Dagster asset, its job and its schedule.

The ``retention_pass`` asset is one pass of geo_pipeline.flows.retention over every tenant, each
on its own windows (``geo.tenants.retention_days`` / ``log_retention_days``), plus the Redis
streams trimmed to what their consumer groups still need. Its materialisation metadata says
what was removed, or in a dry run what would be: launch it from the UI with ``dry_run: true``
to see the next pass before it happens. The schedule runs it daily at GEO_RETENTION_AT (HH:MM,
default 03:00) in GEO_RESAMPLE_TZ; GEO_RETENTION_DRY_RUN=1 makes the scheduled pass a dry run
(e.g. for the first days of a new deployment).

The pass connects through the ``retention_db`` resource: GEO_RETENTION_DATABASE_URL (a geo_owner
login, since expiring raw text and the transition log is more than the processes' role may do),
else GEO_DATABASE_URL, in which case those two steps are reported as refused.
"""

from collections import defaultdict
from datetime import timedelta
from typing import Any
from zoneinfo import ZoneInfo

import dagster as dg

from geo_pipeline.defs import names
from geo_pipeline.defs.factory import CODE_VERSION, OPERATIONS, OWNERS, domain_tags
from geo_pipeline.defs.jobs import DEFAULT_TZ, cron_for
from geo_pipeline.defs.resources import (
    ConnectorRegistryResource,
    EvidenceStorageResource,
    PostgresResource,
    RedisResource,
)
from geo_pipeline.flows.retention import RetentionReport, TableWindows, apply_retention
from geo_pipeline.flows.retention import database_now as db_now
from geo_pipeline.settings import Settings, settings
from geo_pipeline.streams.keys import COMPLETIONS, DEAD, collect_stream, screenshot_stream
from geo_pipeline.streams.trim import trim_streams

RETENTION_AT_ENV = "GEO_RETENTION_AT"
RETENTION_DRY_RUN_ENV = "GEO_RETENTION_DRY_RUN"


class RetentionConfig(dg.Config):
    dry_run: bool = False
    max_runs: int = 500  # per pass, so a tick's run stays short; the next day continues
    outbox_keep_hours: float = 24.0
    dead_letter_settled_hours: float = 24.0
    dead_letter_days: float = 30.0
    stream_keep_hours: float = 24.0  # completion and dead-letter streams


def _per_tenant(report: RetentionReport) -> str:
    rows: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for r in report.runs:
        t = rows[r.tenant_id]
        t["runs"] += 1
        t["objects"] += len(r.object_keys)
        t["bytes"] += r.bytes
        t["answers"] += r.answers
        t["attempts"] += r.attempts
        t["transitions"] += r.transitions
    cols = ["runs", "objects", "bytes", "answers", "attempts", "transitions"]
    lines = ["| tenant | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for tenant, t in sorted(rows.items()):
        lines.append(f"| {tenant} | " + " | ".join(str(t[c]) for c in cols) + " |")
    return "\n".join(lines) if rows else "nothing past its window"


def _streams(
    redis: RedisResource, registry: ConnectorRegistryResource, keep_s: float, dry_run: bool
) -> dict[str, Any]:
    platforms = list(registry.load().entries)
    grouped = [f"{redis.prefix}:{collect_stream(p)}" for p in platforms]
    grouped += [f"{redis.prefix}:{screenshot_stream(p)}" for p in platforms]
    windowed = [f"{redis.prefix}:{COMPLETIONS}", f"{redis.prefix}:{DEAD}"]
    client = redis.client()
    try:
        before = {k: int(client.xlen(k)) for k in grouped + windowed}
        if dry_run:
            return {"entries": sum(before.values()), "removed": 0}
        results = trim_streams(client, grouped, [(k, keep_s) for k in windowed])
        return {
            "entries": sum(before.values()),
            "removed": sum(r.removed for r in results),
            "memory_bytes": int(client.info("memory").get("used_memory", 0)),
        }
    finally:
        client.close()


@dg.asset(
    key=names.RETENTION_PASS,
    group_name=OPERATIONS,
    owners=OWNERS,
    tags=domain_tags(OPERATIONS),
    code_version=CODE_VERSION,
    description="One retention pass (D9): raw evidence and raw answer text past each tenant's "
    "window, the execution log past its window, published outbox rows, settled dead letters, "
    "and the Redis streams trimmed; aggregates, analysis and the ledger kept.",
)
def retention_pass(
    context: dg.AssetExecutionContext,
    config: RetentionConfig,
    retention_db: PostgresResource,
    evidence: EvidenceStorageResource,
    redis: RedisResource,
    registry: ConnectorRegistryResource,
) -> dg.MaterializeResult:
    """What the pass removed, or in a dry run would remove, is the materialisation's metadata:
    the Dagster UI shows the next pass before anyone deletes anything."""
    windows = TableWindows(
        outbox_keep=timedelta(hours=config.outbox_keep_hours),
        dead_settled_keep=timedelta(hours=config.dead_letter_settled_hours),
        dead_letter_keep=timedelta(days=config.dead_letter_days),
    )
    with retention_db.connect() as conn:
        report = apply_retention(
            conn,
            evidence.archive(),
            db_now(conn),
            dry_run=config.dry_run,
            limit=config.max_runs,
            windows=windows,
        )
    streams = _streams(redis, registry, config.stream_keep_hours * 3600, config.dry_run)
    context.log.info(
        "retention %s: %d runs, %d objects, %d raw texts, %d attempts, %d transitions, "
        "%d outbox rows, %d dead letters, %d stream entries",
        "dry run" if config.dry_run else "applied",
        len(report.runs),
        report.objects,
        report.answers,
        report.attempts,
        report.transitions,
        report.outbox,
        report.dead_letters,
        streams["removed"],
    )
    metadata: dict[str, Any] = {
        "dry_run": config.dry_run,
        "reference_time": report.now.isoformat(),
        "runs": len(report.runs),
        "evidence_objects": report.objects,
        "evidence_bytes": report.bytes,
        "raw_answer_texts": report.answers,
        "attempts": report.attempts,
        "state_transitions": report.transitions,
        "published_outbox_rows": report.outbox,
        "dead_letters": report.dead_letters,
        "stream_entries_before": streams["entries"],
        "stream_entries_trimmed": streams["removed"],
        "refused": dg.MetadataValue.json(report.refused),
        "per_tenant": dg.MetadataValue.md(_per_tenant(report)),
        "first_runs": dg.MetadataValue.json([r.run_id for r in report.runs[:50]]),
    }
    for note in report.refused:
        context.log.warning("retention: %s", note)
    if "memory_bytes" in streams:
        metadata["redis_used_memory_bytes"] = streams["memory_bytes"]
    return dg.MaterializeResult(metadata=metadata)


retention_job = dg.define_asset_job(
    "retention_job",
    selection=[names.RETENTION_PASS],
    description="One retention pass; launch with dry_run: true to preview it.",
    executor_def=dg.in_process_executor,  # one step: a process of its own buys nothing
)


def _dry_run_from_env() -> bool:
    return Settings.flag(settings().retention_dry_run)


def build_daily_retention(at: str | None = None, tz: str | None = None) -> dg.ScheduleDefinition:
    at = at or settings().retention_at
    tz = tz or settings().resample_tz or DEFAULT_TZ
    ZoneInfo(tz)  # an unknown zone fails at load time, not at the first tick

    @dg.schedule(
        name="daily_retention",
        cron_schedule=cron_for(at, RETENTION_AT_ENV),
        execution_timezone=tz,
        job=retention_job,
        default_status=dg.DefaultScheduleStatus.RUNNING,
        description=f"Every day at {at} ({tz}): one retention pass over every tenant.",
    )
    def daily_retention(context: dg.ScheduleEvaluationContext) -> dg.RunRequest:
        day = context.scheduled_execution_time.astimezone(ZoneInfo(tz)).date()
        dry = _dry_run_from_env()
        return dg.RunRequest(
            run_key=f"retention:{day}",
            run_config={"ops": {"retention_pass": {"config": {"dry_run": dry}}}},
            tags={"geo/retention_day": str(day), "geo/dry_run": str(dry).lower()},
        )

    return daily_retention


daily_retention = build_daily_retention()
