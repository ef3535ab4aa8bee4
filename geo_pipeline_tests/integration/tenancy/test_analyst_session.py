"""What an analyst login can do to the session around the data (issue #35), on the real server:
read-only and the time limit are held by privileges and by the guard, not by defaults the login
can change; no disk to fill; login names that do not name the tenant.

Each test gets its own database with two tenants (no runs: these tests are about the session,
not the rows; row isolation is test_isolation.py's).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from geo_pipeline.cli.main import main
from geo_pipeline.store import analyst_guard, tenancy
from geo_pipeline_tests.integration.tenancy.helpers import drop_role, with_user


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
            ga = tenancy.grant_analyst(c, a)
            logins.append(ga.login)
            gb = tenancy.grant_analyst(c, b)
            logins.append(gb.login)
        yield Pair(
            admin_url=db_url,
            a=a,
            b=b,
            a_login=ga.login,
            b_login=gb.login,
            a_url=with_user(db_url, ga.login),
            b_url=with_user(db_url, gb.login),
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


def test_temp_file_limit_is_set_and_the_login_cannot_raise_or_drop_it(pair: Pair):
    limit = tenancy.ANALYST_SETTINGS["temp_file_limit"]
    with _connect(pair.b_url) as conn:
        conn.execute("SET default_transaction_read_only = off")
        before = _show(conn, "temp_file_limit")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SET temp_file_limit = -1")
        conn.execute(f'ALTER ROLE "{pair.b_login}" RESET ALL')
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(f'ALTER ROLE "{pair.b_login}" SET temp_file_limit = -1')
    with _connect(pair.b_url) as conn:
        after = _show(conn, "temp_file_limit")
    assert before == after == limit


# ------------------------------------------------------------------ persistent escapes
def _role_settings(admin_url: str, login: str) -> set[tuple[int, str]]:
    with _connect(admin_url) as conn:
        rows = conn.execute(
            "SELECT s.setdatabase::bigint AS db, unnest(s.setconfig) AS kv "
            "FROM pg_db_role_setting s WHERE s.setrole = %s::regrole",
            (login,),
        ).fetchall()
    return {(int(r["db"]), str(r["kv"])) for r in rows}


def test_settings_a_login_gives_itself_are_undone_by_the_guard(pair: Pair):
    operator = _role_settings(pair.admin_url, pair.b_login)
    with _connect(pair.b_url) as conn:
        # PostgreSQL lets every role set its own defaults; nothing refuses these.
        conn.execute("SET default_transaction_read_only = off")
        conn.execute(f'ALTER ROLE "{pair.b_login}" SET statement_timeout = 0')
        conn.execute(f'ALTER ROLE "{pair.b_login}" SET default_transaction_read_only = off')
        conn.execute(
            f'ALTER ROLE "{pair.b_login}" IN DATABASE "{conn.info.dbname}" SET work_mem = "2GB"'
        )
    with _connect(pair.b_url) as conn:
        assert _show(conn, "statement_timeout") == "0"  # the escape works until the guard runs
    with _connect(pair.admin_url) as admin:
        report = analyst_guard.enforce(admin)
    assert report.settings_restored == [pair.b_login]
    assert _role_settings(pair.admin_url, pair.b_login) == operator
    with _connect(pair.b_url) as conn:
        ms = conn.execute(
            "SELECT setting FROM pg_settings WHERE name = 'statement_timeout'"
        ).fetchone()
        assert ms is not None and int(ms["setting"]) == tenancy.ANALYST_STATEMENT_SECONDS * 1000
        assert _show(conn, "default_transaction_read_only") == "on"
        assert _show(conn, "work_mem") != "2GB"
    with _connect(pair.admin_url) as admin:  # a second pass finds nothing to do
        assert analyst_guard.enforce(admin).settings_restored == []


def _wait_active(admin_url: str, login: str) -> dict[str, Any]:
    """The analyst's statement as the server sees it, once it runs (waits on the server's own
    state, not on a clock)."""
    with _connect(admin_url) as conn:
        for _ in range(10_000):
            row = conn.execute(
                "SELECT pid, (clock_timestamp() - query_start) AS running FROM pg_stat_activity "
                "WHERE usename = %s AND state = 'active' AND query LIKE '%%pg_sleep%%'",
                (login,),
            ).fetchone()
            if row is not None:
                return dict(row)
            conn.execute("SELECT pg_sleep(0.01)")
    raise AssertionError(f"{login}'s statement never became active")


def test_a_statement_past_the_limit_is_cancelled_though_the_login_removed_its_timeout(
    pair: Pair,
):
    outcome: dict[str, Any] = {}

    def analyst() -> None:
        with _connect(pair.b_url) as conn:
            conn.execute("SET statement_timeout = 0")
            try:
                conn.execute("SELECT pg_sleep(600)")
                outcome["result"] = "finished"
            except psycopg.Error as exc:
                outcome["result"] = type(exc).__name__
            # the session itself survives a cancel and can go on
            outcome["after"] = conn.execute("SELECT 1 AS one").fetchone()

    t = threading.Thread(target=analyst, daemon=True)
    t.start()
    seen = _wait_active(pair.admin_url, pair.b_login)
    with _connect(pair.admin_url) as admin:
        # Under the limit (an hour more than it has run): left alone.
        spare = analyst_guard.enforce(
            admin, statement_limit_seconds=seen["running"].total_seconds() + 3600
        )
        assert spare.cancelled == []
        report = analyst_guard.enforce(admin, statement_limit_seconds=0)
    t.join(timeout=120)
    assert not t.is_alive()
    assert report.cancelled == [(pair.b_login, seen["pid"])]
    assert outcome == {"result": "QueryCanceled", "after": {"one": 1}}


def test_a_transaction_left_open_past_the_limit_is_ended(pair: Pair):
    with _connect(pair.b_url) as conn:
        conn.execute("SET idle_in_transaction_session_timeout = 0")
        conn.execute("BEGIN")
        conn.execute("SELECT count(*) FROM geo.runs")  # holds a lock and a snapshot
        with _connect(pair.admin_url) as admin:
            report = analyst_guard.enforce(admin, statement_limit_seconds=0)
        assert [login for login, _ in report.terminated] == [pair.b_login]
        with pytest.raises(psycopg.OperationalError):
            conn.execute("SELECT 1")


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


def test_the_guard_command_restores_a_login_and_says_so(
    pair: Pair, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    with _connect(pair.a_url) as conn:
        conn.execute("SET default_transaction_read_only = off")
        conn.execute(f'ALTER ROLE "{pair.a_login}" SET statement_timeout = 0')
    monkeypatch.setenv("GEO_DATABASE_URL", pair.admin_url)
    capsys.readouterr()
    assert main(["tenants", "guard-analysts"]) == 0
    assert f"restored the operator's role defaults of {pair.a_login}" in capsys.readouterr().out
    assert main(["tenants", "guard-analysts"]) == 0
    assert capsys.readouterr().out == ""


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
