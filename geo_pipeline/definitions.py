"""The one Dagster entry point (workspace.yaml loads this module).

Resources are built from environment variables here and nowhere else (D2): GEO_DATABASE_URL,
GEO_REDIS_URL, GEO_REDIS_PREFIX, GEO_EVIDENCE_URL, GEO_CONNECTORS_FILE. Optional tuning:
GEO_PARTITION_RETENTION_DAYS, GEO_RESAMPLE_AT, GEO_RESAMPLE_TZ, GEO_RETENTION_AT,
GEO_RETENTION_DRY_RUN, GEO_RETENTION_DATABASE_URL (see geo_pipeline.defs).
"""

from __future__ import annotations

import dagster as dg
from dagster_aws.s3 import S3Resource

from geo_pipeline.defs.alerts import operations_alerts
from geo_pipeline.defs.assets import (
    billing_reconciliation,
    brand_analysis,
    brand_visibility,
    collection_results,
    sampling_plan,
    validated_evidence,
)
from geo_pipeline.defs.jobs import (
    billing_job,
    create_collection_run,
    partition_downstream_job,
    sampling_plan_job,
)
from geo_pipeline.defs.resources import (
    ConnectorRegistryResource,
    EvidenceStorageResource,
    PipelineSettingsResource,
    PostgresResource,
    RedisResource,
)
from geo_pipeline.defs.retention import daily_retention, retention_job, retention_pass
from geo_pipeline.defs.schedules import daily_resampling
from geo_pipeline.defs.sensors import (
    completion_sensor,
    partition_retention_sensor,
    sampling_plan_sensor,
)
from geo_pipeline.settings import configure_domain, settings


def evidence_from_env() -> EvidenceStorageResource:
    """GEO_EVIDENCE_URL; an s3:// location goes through dagster_aws's S3Resource (endpoint from
    GEO_S3_ENDPOINT for SeaweedFS / MinIO / OSS; keys from the standard AWS variables)."""
    env = settings()
    url = env.evidence_url or ""
    if not url.startswith("s3://"):
        return EvidenceStorageResource(url=url)
    s3 = S3Resource(endpoint_url=env.s3_endpoint_url, region_name=env.aws_region)
    return EvidenceStorageResource(url=url, s3=s3)


def resources_from_env() -> dict[str, dg.ConfigurableResource]:
    """Secrets and URLs resolve when a run or tick starts (EnvVar), so loading the definitions
    never needs them and never prints them."""
    env = settings()
    return {
        "db": PostgresResource(url=dg.EnvVar("GEO_DATABASE_URL")),
        # Retention expires history, which the service role may not: an owner login when set.
        "retention_db": PostgresResource(
            url=dg.EnvVar(
                "GEO_RETENTION_DATABASE_URL"
                if env.retention_database_url
                else "GEO_DATABASE_URL"
            )
        ),
        "redis": RedisResource(
            url=dg.EnvVar("GEO_REDIS_URL"), prefix=env.redis_prefix or "geo"
        ),
        "evidence": evidence_from_env(),
        "registry": ConnectorRegistryResource(path=env.connectors_file or ""),
        "settings": PipelineSettingsResource(
            partition_retention_days=env.partition_retention_days,
            max_excluded_share=env.max_excluded_share,
        ),
    }


configure_domain()  # the code server's process: hand the domain its deployment settings

ASSETS = [
    sampling_plan,
    collection_results,
    validated_evidence,
    brand_analysis,
    brand_visibility,
    billing_reconciliation,
    retention_pass,
]

defs = dg.Definitions(
    assets=ASSETS,
    jobs=[
        create_collection_run,
        sampling_plan_job,
        partition_downstream_job,
        billing_job,
        retention_job,
    ],
    sensors=[
        completion_sensor,
        sampling_plan_sensor,
        partition_retention_sensor,
        operations_alerts,
    ],
    schedules=[daily_resampling, daily_retention],
    resources=resources_from_env(),
)
