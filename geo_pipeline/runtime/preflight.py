"""Pre-flight (STYLE.md point 9): before a process or the demo does anything with a side
effect (a deposit, a run, a claimed lease), check every service it needs and say which one is
missing, at which (redacted, D2) address, and how to fix it. A service found down later is a
runtime failure; a service that was never there is a start-up refusal.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from geo_pipeline.store import db as dbmod
from geo_pipeline.store import migrate


class PreflightError(RuntimeError):
    """A service a command needs is unreachable or not ready; the message says what to do."""


@dataclass(frozen=True)
class Services:
    """Where a process is connected, safe to print: passwords redacted."""

    database: str
    redis: str | None
    namespace: str | None
    schema_version: int

    def as_fields(self) -> dict[str, Any]:
        out: dict[str, Any] = {"database": self.database, "schema_version": self.schema_version}
        if self.redis is not None:
            out["redis"] = self.redis
            out["namespace"] = self.namespace
        return out


def check_database(url: str | None = None) -> tuple[str, int]:
    """Connect and require a migrated schema; returns (redacted URL, schema version)."""
    try:
        target = dbmod.database_url(url)
        shown = dbmod.redact(target)
        with dbmod.connect(target) as conn:
            version = migrate.require_current(conn, f"the database at {shown}")
    except dbmod.DatabaseUnavailable as exc:
        raise PreflightError(f"{exc}; check GEO_DATABASE_URL") from None
    except migrate.SchemaNotReady as exc:
        raise PreflightError(str(exc)) from None
    return shown, version


def check_redis(url: str) -> str:
    """PING the server; returns the redacted URL."""
    import redis as redis_lib

    shown = dbmod.redact(url)
    try:
        client = redis_lib.Redis.from_url(url, socket_connect_timeout=3, socket_timeout=3)
        try:
            client.ping()
        finally:
            client.close()
    except (redis_lib.exceptions.RedisError, OSError, ValueError) as exc:
        raise PreflightError(
            f"Redis is unreachable at {shown} ({exc}); check GEO_REDIS_URL, or start one "
            "(`redis-server`)"
        ) from None
    return shown


def check(
    *, database_url: str | None = None, redis_url: str | None = None, namespace: str | None = None
) -> Services:
    """Check PostgreSQL (and Redis when given) before any side effect; raises PreflightError
    naming the first service that is not ready."""
    database, version = check_database(database_url)
    redis = check_redis(redis_url) if redis_url is not None else None
    return Services(database, redis, namespace, version)
