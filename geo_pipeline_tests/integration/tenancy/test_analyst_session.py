"""What an analyst role can do around the data on the service's server (issue #35), held by
privileges: nothing to write (no temp table, no large object, even read-write), no other
session or lock to see or take; role names that do not name the tenant.

No analyst logs in here any more (migration 0083; test_cli_tenants.py): the sessions are a
throwaway login that is a member of the NOLOGIN analyst role and starts as it. What a login's
session could do to its own limits (statement_timeout = 0, ALTER ROLE itself, idle transactions)
is the analyst endpoint's business now: test_analyst_pooler.py (the pooler's query_timeout, the
standby refusing ALTER ROLE and every write) and test_analyst_replica.py (the replica's guard).

Each test gets its own database with two tenants (no runs: these tests are about the session,
not the rows; row isolation is test_isolation.py's).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from geo_pipeline.store import analyst_guard, tenancy
from geo_pipeline_tests.integration.tenancy.helpers import analyst_role, analyst_session, drop_role


@dataclass(frozen=True)
class Pair:
    admin_url: str
    a: str
    b: str
    a_login: str
    b_login: str
    a_url: str
    b_url: str


@pytest.fixture
def pair(db_url: str) -> Iterator[Pair]:
    suffix = uuid.uuid4().hex[:8]
    a, b = f"acme-{suffix}", f"globex-{suffix}"
    logins: list[str] = []
    try:
        with psycopg.connect(db_url, row_factory=dict_row) as conn:  # type: ignore[arg-type]
            c: Any = conn
            for t in (a, b):
                tenancy.create_tenant(c, t)
            c.commit()
            analyst_guard.refuse_temp(c)  # what the guard does on every pass
            c.commit()
        for t in (a, b):
            logins.append(analyst_role(db_url, t))
        with ExitStack() as stack:
            a_url, b_url = (stack.enter_context(analyst_session(db_url, r)) for r in logins)
            yield Pair(
                admin_url=db_url,
                a=a,
                b=b,
                a_login=logins[0],
                b_login=logins[1],
                a_url=a_url,
                b_url=b_url,
            )
    finally:
        for login in logins:
            drop_role(db_url, login)


def _connect(url: str, **kw: Any) -> psycopg.Connection[Any]:
    return psycopg.connect(url, row_factory=dict_row, autocommit=True, **kw)  # type: ignore[arg-type]


def _show(conn: psycopg.Connection[Any], name: str) -> str:
    row = conn.execute(f"SHOW {name}").fetchone()
    assert row is not None
    return str(row[name])


# ------------------------------------------------------------------ read-only: nothing to write
WRITES = {
    "temp table": "CREATE TEMP TABLE scratch AS SELECT g FROM generate_series(1, 1000) g",
    "lo_from_bytea": "SELECT lo_from_bytea(0, '\\x00'::bytea)",
    "lo_create": "SELECT lo_create(0)",
    "lo_creat": "SELECT lo_creat(-1)",
    "table in public": "CREATE TABLE public.scratch (x int)",
}


@pytest.mark.parametrize("read_write", [False, True], ids=["default-session", "read-write"])
def test_an_analyst_session_can_write_nothing_even_read_write(pair: Pair, read_write: bool):
    refused: dict[str, str] = {}
    allowed: list[str] = []
    with _connect(pair.b_url) as conn:
        if read_write:
            conn.execute("SET default_transaction_read_only = off")
            conn.execute("SET statement_timeout = 0")
        for what, stmt in WRITES.items():
            try:
                with conn.transaction():
                    if read_write:
                        conn.execute("SET TRANSACTION READ WRITE")
                    conn.execute(stmt)
                allowed.append(what)
            except psycopg.Error as exc:
                refused[what] = type(exc).__name__
    assert allowed == [], f"an analyst could still: {allowed}"
    if read_write:  # refused for want of privilege, not because the session was read-only
        assert set(refused.values()) == {"InsufficientPrivilege"}, refused
    with _connect(pair.admin_url) as admin:
        row = admin.execute(
            "SELECT count(*) AS n FROM pg_largeobject_metadata m JOIN pg_roles r "
            "ON r.oid = m.lomowner WHERE r.rolname = %s",
            (pair.b_login,),
        ).fetchone()
    assert row is not None and row["n"] == 0


def test_the_service_can_still_make_temp_tables(pair: Pair):
    with _connect(pair.admin_url) as conn:
        conn.execute("SET ROLE geo_service")
        conn.execute("CREATE TEMP TABLE svc_scratch (x int)")


# ------------------------------------------------------------------ names that reveal tenants
def test_generated_login_names_do_not_name_the_tenant(pair: Pair):
    for tenant, login in ((pair.a, pair.a_login), (pair.b, pair.b_login)):
        for part in tenant.split("-"):
            assert part not in login, (tenant, login)
    with _connect(pair.b_url) as conn:
        names = [r["rolname"] for r in conn.execute("SELECT rolname FROM pg_roles")]
        settings = [
            str(r["c"]) for r in conn.execute("SELECT setconfig::text AS c FROM pg_db_role_setting")
        ]
    # Roles are the whole server's (other databases' tests make theirs): look for these tenants.
    revealing = [n for n in names + settings for t in (pair.a, pair.b) if t.split("-")[0] in n]
    assert not [n for n in revealing if any(t.split("-")[1] in n for t in (pair.a, pair.b))]
    assert pair.a_login in names  # the login is listed, under a name that says nothing


@pytest.mark.parametrize("login", ["ana_acme", "acme", "x_acme_1"])
def test_a_login_name_containing_the_tenant_is_refused(db_url: str, login: str):
    with psycopg.connect(db_url, row_factory=dict_row) as conn:  # type: ignore[arg-type]
        c: Any = conn
        tenancy.create_tenant(c, "acme")
        c.commit()
        try:
            with pytest.raises(tenancy.TenancyError, match="names the tenant"):
                tenancy.grant_analyst(c, "acme", login)
        finally:
            drop_role(db_url, login)


# ------------------------------------------------------------------ side channels
def _probe(url: str) -> dict[str, Any]:
    """What tenant B's analyst can learn about the sessions and locks of its own database: each
    probe's rows, or the class of the error refusing it."""
    probes = {
        "sessions": "SELECT usename, application_name FROM pg_stat_activity "
        "WHERE datname = current_database() AND usename <> current_user ORDER BY 1, 2",
        "backends": "SELECT pg_stat_get_backend_userid(b)::regrole::text AS who "
        "FROM pg_stat_get_backend_idset() b WHERE pg_stat_get_backend_userid(b) <> "
        "current_user::regrole ORDER BY 1",
        # the service's per-tenant advisory locks (billing: hashtext of the tenant id)
        "locks": "SELECT locktype, objid FROM pg_locks WHERE database = "
        "(SELECT oid FROM pg_database WHERE datname = current_database()) "
        "AND locktype = 'advisory' ORDER BY 2",
    }
    seen: dict[str, Any] = {}
    with _connect(url) as conn:
        for name, query in probes.items():
            try:
                seen[name] = conn.execute(query).fetchall()
            except psycopg.Error as exc:
                seen[name] = type(exc).__name__
    return seen


def test_another_tenants_sessions_and_locks_are_not_visible(pair: Pair):
    without = _probe(pair.b_url)
    ready = threading.Event()
    done = threading.Event()

    def tenant_a_busy() -> None:
        with (
            _connect(pair.a_url, application_name=f"{pair.a}-dashboard") as analyst,
            _connect(pair.admin_url) as service,
        ):
            service.execute("BEGIN")
            service.execute("SET LOCAL ROLE geo_service")
            service.execute(
                "SELECT pg_advisory_xact_lock(hashtext('geo.billing.tenant:' || %s))", (pair.a,)
            )
            analyst.execute("SELECT 1")  # connected and idle, under its application name
            ready.set()
            done.wait(timeout=300)
            service.execute("ROLLBACK")

    t = threading.Thread(target=tenant_a_busy, daemon=True)
    t.start()
    try:
        assert ready.wait(timeout=300)
        with_a = _probe(pair.b_url)
    finally:
        done.set()
        t.join(timeout=300)
    assert with_a == without, f"B's analyst sees A: {with_a} (without A: {without})"
    assert set(with_a.values()) == {"InsufficientPrivilege"}, with_a


def test_an_analyst_cannot_take_the_services_advisory_locks(pair: Pair):
    """The service serialises billing per tenant with pg_advisory_xact_lock(hashtext(
    'geo.billing.tenant:' || tenant)); a session-level lock on that key, held by an idle analyst
    session (which no time limit ends), would stop another tenant's billing for good."""
    key = f"hashtext('geo.billing.tenant:' || '{pair.a}')"
    refused: dict[str, str] = {}
    with _connect(pair.b_url) as conn:
        for fn in ("pg_advisory_lock", "pg_try_advisory_lock", "pg_advisory_lock_shared"):
            try:
                conn.execute(f"SELECT {fn}({key})")
                refused[fn] = "taken"
            except psycopg.Error as exc:
                refused[fn] = type(exc).__name__
    assert set(refused.values()) == {"InsufficientPrivilege"}, refused
    with _connect(pair.admin_url) as service:  # the service still can
        service.execute("SET ROLE geo_service")
        service.execute(f"SELECT pg_advisory_lock({key}), pg_advisory_unlock({key})")
