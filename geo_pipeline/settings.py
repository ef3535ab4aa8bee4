"""The one module that reads the process environment (D2: every credential and setting comes from
environment variables, none from code). Everything else receives values: a part asks
``settings()`` for a typed field, or is handed the value by the shell that started it.

Each field is the variable ``GEO_<FIELD>`` (``GEO_DATABASE_URL`` → ``database_url``); an empty
variable counts as unset, so a compose file can pass ``GEO_X=`` through without meaning "". A
value of the wrong type (``GEO_S3_MAX_IN_FLIGHT=many``) is an error naming the variable, raised
where the settings are read, not a silent default.

``settings()`` reads the environment each time it is called: processes read it at start-up and
hand the values down, and tests change variables between calls. Variables whose *names* come
from data (a platform's API key variable in the connector registry, ``${VAR}`` in the registry)
are read through ``variable(name)``; child processes get a copy through ``environment()``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Literal

from pydantic import AliasChoices, Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from geo_pipeline.domain import urls

_TRUE = ("1", "true", "yes", "on")


class SettingsError(ValueError):
    """A variable holds a value of the wrong type; the message names it and what is allowed."""


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="GEO_", env_ignore_empty=True, extra="ignore", frozen=True
    )

    # Services. Unset: 127.0.0.1, then embedded ones (runtime/services.py).
    database_url: str | None = None
    test_database_url: str | None = None  # the tests' and benchmarks' server (an admin URL)
    retention_database_url: str | None = None  # the owner login that may expire history
    force_embedded: str = ""  # "1": ignore local services, start embedded ones (the demo)
    redis_url: str | None = None
    redis_prefix: str | None = None
    sql_dir: str | None = None
    connectors_file: str | None = None  # the connector registry; unset: the bundled one
    http_transport: str = "aiohttp"  # "httpcore": httpx's own transport

    # Evidence storage.
    evidence_url: str | None = None  # s3://bucket/prefix or file:///dir; unset: a local dir
    evidence_fsync: str | None = None  # object (default) | none
    # How the worker writes an answer's evidence: "warc" (WARC records, one object per
    # completion batch per tenant and run; issue 33) or "bundle" (one object per answer, the
    # format before; bundles already written stay readable either way).
    evidence_format: Literal["bundle", "warc"] = "warc"
    # The largest WARC record (a response, a text, a screenshot) a worker writes; a larger one
    # is refused with its size and this cap (evidence.recording.prepare_warc_evidence).
    evidence_record_max_bytes: int = Field(default=64 * 1024 * 1024, ge=1)
    s3_endpoint_url: str | None = None
    # Where `geo-pipeline dagster charts` serves the charts stored in the evidence archive, as
    # the Dagster UI's browser reaches it (e.g. http://127.0.0.1:3001); unset: charts are data:
    # URIs in the asset metadata (geo_pipeline/defs/charts.py).
    chart_url: str | None = None
    s3_addressing_style: str | None = None
    s3_client: str | None = None  # obstore (default) | boto3
    s3_max_in_flight: int | None = Field(default=None, ge=1)
    weed_bin: str | None = None
    pgbouncer_bin: str | None = None  # the analyst endpoint's pooler (runtime/analyst_pooler.py)
    aws_region: str | None = Field(
        default=None, validation_alias=AliasChoices("AWS_REGION", "AWS_DEFAULT_REGION")
    )

    # Observability and alerts.
    metrics_addr: str = "127.0.0.1"
    # The long-running processes' log level; "debug" adds e.g. one line per sweeper pass (the
    # chaos soak measures the sweep cadence from them).
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    alert_webhook_url: str | None = None
    alert_smtp_host: str | None = None
    alert_smtp_port: int = 25
    alert_smtp_user: str | None = None
    alert_smtp_password: str | None = None
    alert_smtp_starttls: str = ""
    alert_email_from: str | None = None
    alert_email_to: str | None = None
    alert_dead_letters: int = 10
    alert_uncertain: int = 50
    alert_stuck_grace_s: int = 900
    alert_recent_days: int = 7

    # The Dagster shell: schedules, retention, partitions, publication.
    resample_at: str = "06:00"
    resample_tz: str | None = None
    retention_at: str = "03:00"
    retention_dry_run: str = ""
    partition_retention_days: int = Field(default=90, ge=1)
    max_excluded_share: float = Field(default=0.1, ge=0.0, le=1.0)
    dagster_pg_url: str | None = None

    # Citations: extra tracking parameters and a replacement rules file (domain/urls.py).
    url_tracking_params: str | None = None
    url_tracking_rules: str | None = None

    # Operators and the fault suite.
    actor: str | None = None  # who resolves reviews (default: the OS user)
    crash_at: str | None = None
    crash_after: int = Field(default=1, ge=1)

    # The browser lane (issue #32). An account's lease: renewed every third of it while a
    # capture runs; a dead worker's account is free again this long after its last renewal.
    browser_account_lease_s: float = Field(default=60.0, gt=0)
    # No account sends inside this daily window ("HH:MM-HH:MM", over midnight allowed) of
    # browser_quiet_tz; unset: none. A registry entry's options.quiet_hours / quiet_tz win.
    browser_quiet_hours: str | None = None
    browser_quiet_tz: str = "Asia/Shanghai"

    # A tenant's analyst replica (issue #35; `geo-pipeline tenants analyst-replica`): the
    # operator's (superuser) URL of the replica's database, one PostgreSQL server per tenant, and
    # the connection string that server uses to reach the primary (a role with REPLICATION and
    # SELECT on the tenant tables; unset: the database URL). The primary needs wal_level=logical.
    analyst_replica_url: str | None = None
    analyst_publisher_url: str | None = None

    @staticmethod
    def flag(value: str) -> bool:
        return value.strip().lower() in _TRUE


_cache: dict[tuple[tuple[str, str], ...], Settings] = {}


def settings() -> Settings:
    """The environment's settings as they are now (see the module docstring). Parsing costs
    milliseconds, so the result is kept per distinct set of ``GEO_*``/``AWS_*`` variables."""
    key = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith(("GEO_", "AWS_"))))
    found = _cache.get(key)
    if found is not None:
        return found
    try:
        found = Settings()
    except ValidationError as exc:
        problems = "; ".join(
            f"{_variable_of(err['loc'])}={str(err.get('input'))[:40]!r}: {err['msg']}"
            for err in exc.errors()
        )
        raise SettingsError(f"bad environment setting: {problems}") from None
    if len(_cache) > 64:  # tests change variables often; a process keeps one set
        _cache.clear()
    _cache[key] = found
    return found


def _variable_of(loc: tuple[object, ...]) -> str:
    name = str(loc[0]) if loc else "?"
    return name if name.isupper() else f"GEO_{name.upper()}"


def configure_domain() -> None:
    """Hand the pure domain the values a deployment chose (each process's entry point calls
    this once: the CLI, the Dagster definitions)."""
    env = settings()
    urls.configure(env.url_tracking_params, env.url_tracking_rules)


def variable(name: str) -> str | None:
    """A variable whose name comes from data (a platform's key variable, ``${VAR}`` in the
    connector registry); empty counts as unset."""
    return os.environ.get(name) or None


def environment() -> dict[str, str]:
    """A copy of the environment, for the child processes a shell starts."""
    return dict(os.environ)


def export(values: Mapping[str, str]) -> None:
    """Set variables for this process and the children it starts (the demo's wiring)."""
    os.environ.update(values)
