"""Typed resources, fed by environment variables (D2: credentials only from the environment).

One place decides the environment: ``geo_pipeline.definitions`` builds these from ``EnvVar``s;
tests build them from their fixtures' URLs.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit

import dagster as dg
import redis as redis_lib
from pydantic import Field

from geo_pipeline.connectors.registry import load_registry
from geo_pipeline.defs.names import COMPLETIONS_STREAM
from geo_pipeline.domain.catalogue import Registry
from geo_pipeline.evidence import Archive, archive_from_s3_resource, archive_from_url
from geo_pipeline.store.db import Conn, connect


class PostgresResource(dg.ConfigurableResource):
    """The system's PostgreSQL (the truth). ``url`` comes from GEO_DATABASE_URL."""

    url: str = Field(description="PostgreSQL URL (GEO_DATABASE_URL)")

    @contextmanager
    def connect(self) -> Iterator[Conn]:
        """A connection (dict rows) in autocommit mode, closed on exit. Writers open their own
        ``conn.transaction()`` blocks; with autocommit those are real transactions rather than
        savepoints of an implicit one that closing the connection would roll back."""
        conn = connect(self.url, autocommit=True)
        try:
            yield conn
        finally:
            conn.close()


class RedisResource(dg.ConfigurableResource):
    """Redis, which carries hints only (principle 1). Keys live under ``prefix``
    (GEO_REDIS_PREFIX, default ``geo``)."""

    url: str = Field(description="Redis URL (GEO_REDIS_URL)")
    prefix: str = Field(default="geo", description="key prefix (GEO_REDIS_PREFIX)")

    def client(self) -> redis_lib.Redis:
        # Bounded: a sensor tick or an asset step holds at most a couple of connections (D8).
        return redis_lib.Redis.from_url(
            self.url, decode_responses=True, socket_timeout=20, max_connections=4
        )

    @property
    def completions_stream(self) -> str:
        return f"{self.prefix}:{COMPLETIONS_STREAM}"


class EvidenceStorageResource(dg.ConfigurableResource):
    """Where archived evidence lives (R20): ``s3://bucket/prefix`` (S3, SeaweedFS, MinIO, OSS)
    or ``file:///dir`` (the directory backend), from GEO_EVIDENCE_URL; empty = the evidence
    package's default directory. With ``s3`` set (a ``dagster_aws.s3.S3Resource``) an s3:// URL
    is served through that resource's client; otherwise the evidence package builds its own
    client from GEO_S3_* / AWS_* variables."""

    url: str = Field(default="", description="evidence location (GEO_EVIDENCE_URL)")
    # A dagster_aws.s3.S3Resource, typed by its base class: importing dagster_aws costs every
    # process that loads the code location (code servers, each run's worker) ~1.3 s of CPU, so
    # only a deployment whose evidence is on s3:// imports it (definitions.evidence_from_env).
    s3: dg.ConfigurableResource | None = None

    def archive(self) -> Archive:
        parts = urlsplit(self.url)
        if self.s3 is not None and parts.scheme == "s3":
            return archive_from_s3_resource(self.s3, parts.netloc, parts.path.lstrip("/"))
        return archive_from_url(self.url or None)


class ConnectorRegistryResource(dg.ConfigurableResource):
    """The connector registry: platforms, capabilities and prices (GEO_CONNECTORS_FILE, else the
    bundled registry)."""

    path: str = Field(
        default="", description="registry file (GEO_CONNECTORS_FILE); empty = bundled"
    )

    def load(self) -> Registry:
        return load_registry(self.path or None)


class PipelineSettingsResource(dg.ConfigurableResource):
    """Thresholds and windows of the Dagster layer. Rates are shares in [0, 1], not money."""

    min_validity_rate: float = 0.5  # below: warn that the engine answered badly (R22)
    max_optional_screenshot_missing_rate: float = 0.2  # 'optional' policy tolerance (R6, R21)
    partition_retention_days: int = 90  # older run partitions are deleted (D9)
    sweep_interval_seconds: int = 300  # completion sensor's PostgreSQL catch-up scan
    recent_run_days: int = 7  # how far back the catch-up scan and plan sensor look
    stream_page: int = 5000  # XRANGE COUNT per round trip
    max_entries_per_tick: int = 200_000  # bounded work per tick (a tick has 60 s)
    evidence_objects_verified: int = 20  # objects per partition re-read and digest-checked
    import_fee_statements: bool = True  # billing fetches the statements it needs first
    # Past its run's publish deadline a partition publishes what is terminal; its collection
    # results fail a blocking check when more than this share of its samples is excluded.
    max_excluded_share: float = 0.1
    # Where `geo-pipeline dagster charts` serves the stored charts (GEO_CHART_URL); empty: the
    # charts are data: URIs, which the UI shows behind "[Show Markdown]" (defs/charts.py).
    chart_url: str = ""
