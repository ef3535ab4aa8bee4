"""The one Dagster entry point: workspace.yaml, the Helm chart's code server and `dg` ([tool.dg] in
pyproject.toml) load this module's ``defs``.

Everything but the resources comes from the defs folder (``dg.load_from_defs_folder``): each
module of ``geo_pipeline.defs`` contributes the assets (with their checks), jobs, sensors and
schedules it holds at module level, so a new job or sensor there is deployed without being listed
here. An object imported into a second module (a job a sensor targets) is the same object and
counts once; two different objects under one name fail the load.

Resources are built from environment variables here and nowhere else (D2): GEO_DATABASE_URL,
GEO_REDIS_URL, GEO_REDIS_PREFIX, GEO_EVIDENCE_URL, GEO_CONNECTORS_FILE. Optional tuning:
GEO_PARTITION_RETENTION_DAYS, GEO_RESAMPLE_AT, GEO_RESAMPLE_TZ, GEO_RETENTION_AT,
GEO_RETENTION_DRY_RUN, GEO_RETENTION_DATABASE_URL (see geo_pipeline.defs). Secrets and URLs are
``EnvVar``s, so loading the definitions (`dg check defs`) needs none of them.
"""

from __future__ import annotations

import tomllib
import warnings
from pathlib import Path

import dagster as dg

import geo_pipeline.defs
from geo_pipeline.defs.resources import (
    ConnectorRegistryResource,
    EvidenceStorageResource,
    PipelineSettingsResource,
    PostgresResource,
    RedisResource,
)
from geo_pipeline.settings import configure_domain, settings


def evidence_from_env() -> EvidenceStorageResource:
    """GEO_EVIDENCE_URL; an s3:// location goes through dagster_aws's S3Resource (endpoint from
    GEO_S3_ENDPOINT for SeaweedFS / MinIO / OSS; keys from the standard AWS variables)."""
    env = settings()
    url = env.evidence_url or ""
    if not url.startswith("s3://"):
        return EvidenceStorageResource(url=url)
    # Here, not at the top: only an s3:// archive needs dagster_aws (1.3 s CPU to import).
    from dagster_aws.s3 import S3Resource

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
                "GEO_RETENTION_DATABASE_URL" if env.retention_database_url else "GEO_DATABASE_URL"
            )
        ),
        "redis": RedisResource(url=dg.EnvVar("GEO_REDIS_URL"), prefix=env.redis_prefix or "geo"),
        "evidence": evidence_from_env(),
        "registry": ConnectorRegistryResource(path=env.connectors_file or ""),
        "settings": PipelineSettingsResource(
            partition_retention_days=env.partition_retention_days,
            max_excluded_share=env.max_excluded_share,
            chart_url=env.chart_url or "",
        ),
    }


configure_domain()  # the code server's process: hand the domain its deployment settings

# The defs folder, found from the package itself (pyproject.toml's [tool.dg] names the module).
DEFS_FOLDER = Path(geo_pipeline.defs.__file__).parent


def dg_project_file(start: Path = DEFS_FOLDER) -> Path | None:
    """The nearest dg.toml, or pyproject.toml with a [tool.dg] table, at or above ``start``."""
    for folder in (start, *start.parents):
        if (folder / "dg.toml").is_file():
            return folder / "dg.toml"
        pyproject = folder / "pyproject.toml"
        if pyproject.is_file():
            with pyproject.open("rb") as fh:
                if "dg" in tomllib.load(fh).get("tool", {}):
                    return pyproject
    return None


def has_components(folder: Path = DEFS_FOLDER) -> bool:
    """Whether the defs folder holds a Dagster component (a ``defs.yaml`` anywhere in it)."""
    return any(folder.rglob("defs.yaml"))


def load_definitions() -> dg.Definitions:
    """The defs folder's definitions, with the resources.

    The folder holds plain modules only, so they are collected by
    ``load_definitions_from_package_module`` (every module's module-level definitions, what the
    folder loader does for plain modules). ``dg.load_from_defs_folder`` -- taken when the folder
    holds a component (a ``defs.yaml``) and the project's [tool.dg] is found -- first imports
    every installed plugin's component types (dagster_aws's among them): ~1 s of CPU in every
    process that loads the code location, i.e. both code servers and the worker of every run
    (issue 36). A test keeps the two loaders' definitions equal."""
    resources = resources_from_env()
    if dg_project_file() is None or not has_components():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", dg.PreviewWarning)  # preview since 1.10, still here
            return dg.load_definitions_from_package_module(geo_pipeline.defs, resources=resources)
    return dg.Definitions.merge(
        dg.load_from_defs_folder(path_within_project=DEFS_FOLDER),
        dg.Definitions(resources=resources),
    )


defs = load_definitions()

# The assets (with their checks) as objects, for tests that build Definitions of their own.
ASSETS: list[dg.AssetsDefinition] = [
    a for a in defs.assets or () if isinstance(a, dg.AssetsDefinition)
]
