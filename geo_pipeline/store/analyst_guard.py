"""The analyst guard: what holds an analyst login to the limits PostgreSQL leaves to the login.

PostgreSQL 15 lets every role change ``statement_timeout``, ``default_transaction_read_only``,
``idle_in_transaction_session_timeout`` and ``work_mem`` for its session (``SET``) and for all its
later sessions (``ALTER ROLE <itself> SET ...``); no privilege refuses either. So the limits are not
left to those defaults:

- **read-only** is held by privileges: an analyst has SELECT only, no CREATE anywhere, no
  TEMPORARY on the database (revoked from PUBLIC here), no large-object creation (migration 0031),
  so a ``READ WRITE`` transaction has nothing to write;
- **disk**: ``temp_file_limit`` is a superuser setting, set on the login by the operator; the login
  can neither raise nor reset it;
- **the time limit** is held by this guard, run by the operator: it cancels any analyst statement
  of this database running past the limit and ends transactions left open past it, whatever the
  session set; and it puts back the operator's role defaults a login changed for itself.

It runs as the administrator that grants analyst logins (CREATEROLE to reset role settings, and
``pg_signal_backend`` or superuser to cancel other roles' statements), where the logins live: a
tenant's analyst replica (``guard-analysts --replica``) and the analyst endpoint's standby (issue
35: none logs in to the service's server since migration 0083).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from psycopg import sql

from geo_pipeline.store.db import Conn
from geo_pipeline.store.queries import Q
from geo_pipeline.store.tenancy import ANALYST_SETTINGS, ANALYST_STATEMENT_SECONDS


@dataclass(frozen=True)
class GuardReport:
    cancelled: list[tuple[str, int]] = field(default_factory=list)  # (login, pid)
    terminated: list[tuple[str, int]] = field(default_factory=list)
    settings_restored: list[str] = field(default_factory=list)  # logins


def refuse_temp(conn: Conn) -> None:
    """Take TEMPORARY on this database from PUBLIC (so from every analyst)."""
    with conn.transaction():
        conn.execute(Q("tenancy.guard_refuse_temp"))


def operator_settings() -> list[str]:
    """The role defaults an analyst login has, as pg_db_role_setting stores them."""
    return sorted(f"{k}={v}" for k, v in ANALYST_SETTINGS.items())


def set_login_defaults(conn: Conn, login: str) -> None:
    """Make ``login``'s role defaults exactly the operator's: whatever the login set for itself,
    globally or for this database, is removed."""
    role = sql.Identifier(login)
    with conn.transaction():
        conn.execute(sql.SQL("ALTER ROLE {} RESET ALL").format(role))
        conn.execute(
            sql.SQL("ALTER ROLE {} IN DATABASE {} RESET ALL").format(
                role, sql.Identifier(conn.info.dbname)
            )
        )
        for key, value in ANALYST_SETTINGS.items():
            conn.execute(
                sql.SQL("ALTER ROLE {} SET {} = {}").format(
                    role, sql.Identifier(key), sql.Literal(value)
                )
            )


def enforce(
    conn: Conn,
    *,
    statement_limit_seconds: float = ANALYST_STATEMENT_SECONDS,
    idle_transaction_limit_seconds: float | None = None,
) -> GuardReport:
    """One pass: refuse temp tables, restore role defaults, cancel overrunning statements, end
    transactions idle past the limit (default: the statement limit)."""
    idle = (
        statement_limit_seconds
        if idle_transaction_limit_seconds is None
        else (idle_transaction_limit_seconds)
    )
    recovery = conn.execute(Q("pooler.in_recovery")).fetchone()
    standby = bool(recovery and recovery["in_recovery"])
    restored: list[str] = []
    if not standby:  # a hot standby (the analyst endpoint's server) changes nothing itself
        refuse_temp(conn)
    wanted = operator_settings()
    for row in [] if standby else conn.execute(Q("tenancy.guard_role_settings")).fetchall():
        if sorted(row["global_settings"]) != wanted or row["local_settings"]:
            set_login_defaults(conn, row["login"])
            restored.append(row["login"])
    with conn.transaction():
        cancelled = [
            (r["login"], r["pid"])
            for r in conn.execute(
                Q("tenancy.guard_cancel_overrunning"), {"limit_seconds": statement_limit_seconds}
            )
        ]
        terminated = [
            (r["login"], r["pid"])
            for r in conn.execute(Q("tenancy.guard_end_idle_transactions"), {"limit_seconds": idle})
        ]
    return GuardReport(cancelled=cancelled, terminated=terminated, settings_restored=restored)
