"""Tenants, their analyst logins and their per-platform submit caps.

An analyst login is a PostgreSQL role of its own, a member of ``geo_analyst``, bound to exactly one
tenant by a row of ``geo.analyst_logins``; the row-level security policies of migration 0017 read
that binding through ``current_user``, so nothing the session sets can change what it sees. The
password is generated here, shown once, and sent to the server only as a SCRAM verifier computed
client-side (libpq's PQencryptPasswordConn): the clear text never reaches the server or its logs.

Logins are made on a tenant's **analyst replica** only (issue 35; store/analyst_replica.py), which
analysts reach through the analyst endpoint (a hot standby of it behind PgBouncer: the server
refuses ``ALTER ROLE`` and every write, the pooler holds the time and connection limits). On the
service's own server a login could ``ALTER ROLE`` itself and read the shared catalogue, so
``grant_analyst`` refuses there, and migration 0083 made the logins it used to make there NOLOGIN.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import quote

import psycopg
from psycopg import sql

from geo_pipeline.store.db import Conn
from geo_pipeline.store.queries import Q

ANALYST_GROUP = "geo_analyst"
SERVICE_ROLE = "geo_service"
OWNER_ROLE = "geo_owner"
# Same rule as the CHECK on geo.analyst_logins.login: a plain lower-case identifier, so the name
# needs no quoting anywhere (psql, a BI tool's form, a connection string).
_LOGIN = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_RESERVED = {OWNER_ROLE, SERVICE_ROLE, ANALYST_GROUP, "postgres", "public"}
_TENANT = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
# Sessions of an analyst login (on its replica): read-only, and a runaway query stops. The first
# two are only defaults; what holds at the endpoint is the hot standby (no ALTER ROLE, no write)
# and PgBouncer's query_timeout (runtime/analyst_pooler.py), and on the replica itself the analyst
# guard (store/analyst_guard.py). temp_file_limit is a superuser setting: the login can neither
# raise nor reset it.
ANALYST_STATEMENT_SECONDS = 300
ANALYST_SETTINGS = {
    "default_transaction_read_only": "on",
    "statement_timeout": f"{ANALYST_STATEMENT_SECONDS}s",
    "idle_in_transaction_session_timeout": f"{ANALYST_STATEMENT_SECONDS}s",
    "temp_file_limit": "1GB",
}
ANALYST_CONNECTION_LIMIT = 10


class TenancyError(ValueError):
    """A request about tenants or logins that cannot be done as asked; the message says why and
    what to do instead."""


@dataclass(frozen=True)
class AnalystGrant:
    login: str
    tenant_id: str
    password: str  # shown to the operator once; PostgreSQL keeps only the SCRAM verifier
    dbname: str
    host: str | None
    port: int | None
    rotated: bool

    def connection_string(self) -> str:
        pw = quote(self.password, safe="")
        if not self.host or self.host.startswith("/"):
            # A Unix socket directory goes in the query string (libpq's URI rules).
            where = f"?host={quote(self.host, safe='/')}" if self.host else ""
            return f"postgresql://{self.login}:{pw}@/{self.dbname}{where}"
        port = f":{self.port}" if self.port else ""
        return f"postgresql://{self.login}:{pw}@{self.host}{port}/{self.dbname}"

    def at(self, host: str | None, port: int | None) -> AnalystGrant:
        """The same login reached elsewhere (the analyst endpoint in front of its replica)."""
        return replace(self, host=host, port=port)


def check_login_name(login: str) -> None:
    if not _LOGIN.match(login) or login.startswith("pg_") or login in _RESERVED:
        raise TenancyError(
            f"login name {login!r} is not allowed: use lower-case letters, digits and '_' "
            "(at most 63, not starting with a digit or 'pg_'), and not one of "
            f"{', '.join(sorted(_RESERVED))}"
        )


def create_tenant(
    conn: Conn,
    tenant_id: str,
    *,
    name: str | None = None,
    currency: str = "CNY",
    max_in_flight: int = 500,
) -> bool:
    """Create the tenant; False when it already exists (nothing is changed then)."""
    if not _TENANT.match(tenant_id):
        raise TenancyError(
            f"tenant id {tenant_id!r} is not allowed: lower-case letters, digits, '_' and '-', "
            "starting with a letter or digit, at most 63"
        )
    if not re.fullmatch(r"[A-Z]{3}", currency):
        raise TenancyError(f"currency {currency!r} must be three capital letters (ISO 4217)")
    row = conn.execute(
        Q("tenancy.create_tenant"),
        {
            "tenant_id": tenant_id,
            "name": name or tenant_id,
            "currency": currency,
            "max_in_flight": max_in_flight,
        },
    ).fetchone()
    return row is not None


def _require_tenant(conn: Conn, tenant_id: str) -> None:
    if conn.execute(Q("tenancy.get_tenant"), {"tenant_id": tenant_id}).fetchone() is None:
        raise TenancyError(
            f"tenant {tenant_id!r} does not exist; create it first: "
            f"geo-pipeline tenants create {tenant_id}"
        )


def _verifier(conn: Conn, login: str, password: str) -> str:
    return conn.pgconn.encrypt_password(
        password.encode(), login.encode(), b"scram-sha-256"
    ).decode()


def _role_ddl(conn: Conn, statement: sql.Composed) -> None:
    with conn.transaction():
        conn.execute(statement)


@contextmanager
def _as_admin(conn: Conn) -> Iterator[None]:
    """Managing logins needs the administrator; anyone else gets told so, not a traceback."""
    try:
        yield
    except psycopg.errors.InsufficientPrivilege as exc:
        raise TenancyError(
            f"connected as {conn.info.user!r}, which may not manage logins "
            f"({exc.diag.message_primary}); connect as the database administrator (a role with "
            "CREATEROLE, admin of geo_analyst), not as geo_service or an analyst"
        ) from exc


def opaque_login() -> str:
    """A login name that says nothing of its tenant: every role name of the server is visible to
    every login (pg_roles, pg_auth_members), so a name like ``ana_acme`` would tell the other
    tenants' analysts who else is a customer. The binding lives in geo.analyst_logins, whose
    policy shows a login its own row only."""
    return "ana_" + secrets.token_hex(6)


def check_login_reveals_nothing(login: str, tenant_id: str) -> None:
    parts = {tenant_id.replace("-", "_"), *re.split(r"[-_]", tenant_id)}
    named = sorted(p for p in parts if len(p) >= 3 and p in login)
    if named:
        raise TenancyError(
            f"login name {login!r} names the tenant ({', '.join(named)}): every login can list "
            "every role name of the server, so it would tell other tenants' analysts that "
            f"{tenant_id!r} is a customer; leave out --login to get an opaque name"
        )


def require_analyst_replica(conn: Conn, tenant_id: str) -> None:
    """Refuse to make or change an analyst login anywhere but a tenant's analyst replica (a
    database that subscribes to the service's publication): on the service's server a login can
    ``ALTER ROLE`` itself and learn of other tenants from the catalogue (issue 35)."""
    row = conn.execute(Q("tenancy.is_analyst_replica")).fetchone()
    if row is None or not row["is_replica"]:
        raise TenancyError(
            f"no analyst logs in to the service's server (database {conn.info.dbname!r} is not "
            "an analyst replica): there a login could ALTER ROLE itself and read other tenants' "
            "sizes from the catalogue. Give the tenant its replica and login with "
            f"`geo-pipeline tenants analyst-replica create {tenant_id}` "
            "(GEO_ANALYST_REPLICA_URL), serve it with `geo-pipeline tenants analyst-replica "
            f"endpoint`, and add or rotate logins there: `tenants grant-analyst {tenant_id} "
            "--replica` (docs/analysts.md, 'The analyst endpoint')"
        )


def grant_analyst(
    conn: Conn, tenant_id: str, login: str | None = None, *, rotate: bool = False
) -> AnalystGrant:
    """Create the login ``login`` (default: an opaque generated name) bound to ``tenant_id`` with
    a new password (or, with ``rotate``, give an existing login of this tenant a new password),
    on the tenant's analyst replica ``conn`` (refused on any other database: nothing is written
    then). Commits."""
    if login is None:
        if rotate:
            raise TenancyError("--rotate needs --login: the login whose password to replace")
        login = opaque_login()
    check_login_name(login)
    if not rotate:
        check_login_reveals_nothing(login, tenant_id)
    with _as_admin(conn), conn.transaction():
        require_analyst_replica(conn, tenant_id)
        _require_tenant(conn, tenant_id)
        facts = conn.execute(Q("tenancy.role_facts"), {"login": login}).fetchone()
        password = secrets.token_urlsafe(24)
        verifier = sql.Literal(_verifier(conn, login, password))
        role = sql.Identifier(login)
        if facts is not None:
            bound = facts["bound_tenant"]
            if bound is not None and bound != tenant_id:
                raise TenancyError(
                    f"login {login!r} is an analyst of tenant {bound!r}, not {tenant_id!r}; "
                    "one login reads one tenant: choose another login name"
                )
            if bound is None:
                raise TenancyError(
                    f"a role named {login!r} already exists in this PostgreSQL server (roles are "
                    "shared by every database of a server) and is no analyst of this database; "
                    "choose another login name"
                )
            if not rotate:
                raise TenancyError(
                    f"login {login!r} is already an analyst of tenant {tenant_id!r}; pass "
                    "--rotate to give it a new password (the old one stops working)"
                )
            _role_ddl(conn, sql.SQL("ALTER ROLE {} PASSWORD {}").format(role, verifier))
        else:
            _role_ddl(
                conn,
                sql.SQL("CREATE ROLE {} LOGIN PASSWORD {} CONNECTION LIMIT {} IN ROLE {}").format(
                    role,
                    verifier,
                    sql.Literal(ANALYST_CONNECTION_LIMIT),
                    sql.Identifier(ANALYST_GROUP),
                ),
            )
            for key, value in ANALYST_SETTINGS.items():
                _role_ddl(
                    conn,
                    sql.SQL("ALTER ROLE {} SET {} = {}").format(
                        role, sql.Identifier(key), sql.Literal(value)
                    ),
                )
            conn.execute(Q("tenancy.bind_login"), {"login": login, "tenant_id": tenant_id})
            # No temp tables for analysts (a database privilege: PUBLIC has it by default).
            conn.execute(Q("tenancy.guard_refuse_temp"))
        where = conn.execute(Q("tenancy.connection_facts")).fetchone()
    assert where is not None
    return AnalystGrant(
        login=login,
        tenant_id=tenant_id,
        password=password,
        dbname=str(where["dbname"]),
        host=conn.info.host,
        port=conn.info.port,
        rotated=facts is not None,
    )


def revoke_analyst(conn: Conn, tenant_id: str, login: str) -> int:
    """Unbind and drop the analyst login; end its open sessions. Returns the sessions ended."""
    check_login_name(login)
    with _as_admin(conn), conn.transaction():
        facts = conn.execute(Q("tenancy.role_facts"), {"login": login}).fetchone()
        bound = facts["bound_tenant"] if facts else None
        if bound != tenant_id:
            logins = [r["login"] for r in analyst_logins(conn, tenant_id)]
            raise TenancyError(
                f"login {login!r} is not an analyst of tenant {tenant_id!r}"
                + (f" (it belongs to {bound!r})" if bound else "")
                + f"; the tenant's logins: {', '.join(logins) or 'none'}"
            )
        # Unbinding alone already empties every query of an open session (the policies read
        # the binding each time); dropping the role stops new sessions.
        conn.execute(Q("tenancy.unbind_login"), {"login": login, "tenant_id": tenant_id})
        _role_ddl(conn, sql.SQL("DROP ROLE {}").format(sql.Identifier(login)))
    try:
        row = conn.execute(Q("tenancy.end_sessions"), {"login": login}).fetchone()
        conn.commit()
    except psycopg.errors.InsufficientPrivilege:
        conn.rollback()
        return 0
    return int(row["ended"]) if row else 0


def analyst_logins(conn: Conn, tenant_id: str | None = None) -> list[dict[str, Any]]:
    return [dict(r) for r in conn.execute(Q("tenancy.analyst_logins"), {"tenant_id": tenant_id})]


def list_tenants(conn: Conn) -> list[dict[str, Any]]:
    return [dict(r) for r in conn.execute(Q("tenancy.list_tenants"))]


# --------------------------------------------------------------------------- submit caps (R10)
@dataclass(frozen=True)
class PlatformLimit:
    submits_per_second: float
    burst: int


def set_platform_limit(
    conn: Conn, tenant_id: str, platform: str, submits_per_second: float, burst: int | None = None
) -> PlatformLimit:
    if not (0 < submits_per_second <= 100_000):  # also refuses NaN
        raise TenancyError(
            f"submits per second must be above 0 and at most 100000, not {submits_per_second}"
        )
    limit = PlatformLimit(submits_per_second, burst or max(1, int(submits_per_second)))
    if limit.burst < 1:
        raise TenancyError(f"burst must be at least 1, not {limit.burst}")
    with conn.transaction():
        _require_tenant(conn, tenant_id)
        conn.execute(
            Q("tenancy.set_platform_limit"),
            {
                "tenant_id": tenant_id,
                "platform": platform,
                "submits_per_second": limit.submits_per_second,
                "burst": limit.burst,
            },
        )
    return limit


def clear_platform_limit(conn: Conn, tenant_id: str, platform: str) -> bool:
    with conn.transaction():
        row = conn.execute(
            Q("tenancy.clear_platform_limit"), {"tenant_id": tenant_id, "platform": platform}
        ).fetchone()
    return row is not None


def platform_limits(conn: Conn, platforms: list[str]) -> dict[tuple[str, str], PlatformLimit]:
    """(tenant, platform) -> the tenant's submit cap there, for the given platforms."""
    rows = conn.execute(Q("tenancy.platform_limits"), {"platforms": platforms}).fetchall()
    return {
        (r["tenant_id"], r["platform"]): PlatformLimit(float(r["submits_per_second"]), r["burst"])
        for r in rows
    }
